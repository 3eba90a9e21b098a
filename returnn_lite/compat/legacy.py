"""
The original's module names, old and new, as seen by config code.

Configs import from the original under its package names (``from returnn.tf.util.basic import where_bc``) and,
in older setups, under the module names from before the ``returnn`` package (``from Pretrain import
WrapEpochValue``, ``from TFUtil import where_bc``, ``import Util``). Each such module is answered by a stand-in
module object that looks names up in returnn_lite's equivalents; a name without an equivalent fails with one
line naming the module and the name.

The mapping is active wherever config code runs, with no global state: a config file executes with
:func:`config_builtins` as its ``__builtins__``, whose ``__import__`` answers these names (and gives
``import tensorflow as tf`` the TF 2 ``tf`` with TF1 names of :mod:`returnn_lite.compat.tf1`). Functions
defined in the config keep these builtins, so their imports resolve the same way when they run later
(SpecAugment ``transform`` functions during network construction, ``eval`` layer functions, ``get_network``).
The stand-ins are never put into ``sys.modules`` (except by :func:`returnn_import_hook`, temporarily).
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
import types

__all__ = ["get_standin_module", "is_legacy_module_name", "config_builtins", "config_import", "KNOWN_MODULES"]


def _import_error(name):
    def func(*args, **kwargs):
        raise ImportError("config code calls %s, which returnn_lite does not provide" % name)

    func.__name__ = name.rsplit(".", 1)[-1]
    return func


def _lazy_tf_compat():
    import tensorflow as tf

    return {"v1": tf.compat.v1, "v2": tf.compat.v2}


def _tf_version_tuple():
    """The TF version as a tuple of ints, e.g. ``(2, 21, 0)`` (as the original's TFUtil gives it)."""
    import tensorflow as tf

    return tuple(int(part) for part in tf.__version__.split("-")[0].split(".") if part.isdigit())


def _log_extras():
    return {"log": _Log()}


class _LogStream:
    def write(self, text):
        sys.stdout.write(text)

    def flush(self):
        sys.stdout.flush()


class _Log:
    """Minimal stand-in for the original's ``log`` object: ``log.v1`` ... ``log.v5`` are writable streams."""

    def __init__(self):
        for i in range(6):
            setattr(self, "v%i" % i, _LogStream())
        self.verbose = [True] * 6

    def initialize(self, *args, **kwargs):
        pass


# stand-in module name -> (returnn_lite modules to look names up in, in order; extra names (dict or callable))
_LAYERS = (["returnn_lite.layers", "returnn_lite.layers.base"], lambda: _layer_class_names())
_DATASETS = (["returnn_lite.datasets", "returnn_lite.datasets.registry"], lambda: _dataset_class_names())
_TF_UTIL = (["returnn_lite.tf_util", "returnn_lite.compat.tensor", "returnn_lite.data", "returnn_lite.util"],
            lambda: {"tf_version_tuple": _tf_version_tuple})
_UTIL = (["returnn_lite.compat.util_basic", "returnn_lite.util"], lambda: {"unicode": str, "long": int})
_NETWORK = (["returnn_lite.network", "returnn_lite.extern_data"], None)
_PRETRAIN = (["returnn_lite.pretrain"], None)
_HYPER = (["returnn_lite.compat.hyper_param"], None)
_CONFIG = (["returnn_lite.config"], None)
_TENSOR = (["returnn_lite.compat.tensor", "returnn_lite.data"], None)
_ENGINE = (["returnn_lite.engine"], None)
_LOG = ([], _log_extras)
_TF_COMPAT = ([], _lazy_tf_compat)
_PACKAGE = ([], None)
_IMPORT = ([], lambda: {"import_": _import_error("returnn.import_.import_ (fetching code from git repositories)")})
_HOROVOD = ([], lambda: {"get_ctx": lambda config=None: None})  # no Horovod context (as without Horovod)
_NATIVE_OP = (["returnn_lite.native_op"], None)

KNOWN_MODULES = {
    # new names
    "returnn": ([], lambda: {"__version__": "1.0+returnn_lite", "__long_version__": "1.0+returnn_lite"}),
    "returnn.config": _CONFIG,
    "returnn.util": _PACKAGE, "returnn.util.basic": _UTIL,
    "returnn.log": _LOG,
    "returnn.pretrain": _PRETRAIN,
    "returnn.import_": _IMPORT,
    "returnn.datasets": _DATASETS, "returnn.datasets.basic": _DATASETS, "returnn.datasets.generating": _DATASETS,
    "returnn.datasets.hdf": _DATASETS, "returnn.datasets.meta": _DATASETS, "returnn.datasets.lm": _DATASETS,
    "returnn.datasets.cached2": _DATASETS, "returnn.datasets.util": _PACKAGE,
    "returnn.datasets.util.vocabulary": _DATASETS,
    "returnn.tensor": _TENSOR,
    "returnn.tf": _PACKAGE, "returnn.tf.util": _PACKAGE,
    "returnn.tf.util.basic": _TF_UTIL, "returnn.tf.util.data": _TENSOR,
    "returnn.tf.compat": _TF_COMPAT,
    "returnn.tf.network": _NETWORK,
    "returnn.tf.engine": _ENGINE,
    "returnn.tf.hyper_param_tuning": _HYPER,
    "returnn.tf.layers": _LAYERS, "returnn.tf.layers.basic": _LAYERS, "returnn.tf.layers.base": _LAYERS,
    "returnn.tf.layers.rec": _LAYERS, "returnn.tf.layers.signal_processing": _LAYERS,
    "returnn.tf.layers.segmental_model": _LAYERS, "returnn.tf.layers.variable": _LAYERS,
    # old names (before the returnn package)
    "Config": _CONFIG, "Util": _UTIL, "Log": _LOG, "Pretrain": _PRETRAIN, "HyperParamTuning": _HYPER,
    "TFUtil": _TF_UTIL, "TFCompat": _TF_COMPAT, "TFNetwork": _NETWORK, "TFEngine": _ENGINE,
    "TFNetworkLayer": _LAYERS, "TFNetworkRecLayer": _LAYERS, "TFNetworkSigProcLayer": _LAYERS,
    "TFNetworkSegModLayer": _LAYERS,
    "Dataset": _DATASETS, "GeneratingDataset": _DATASETS, "HDFDataset": _DATASETS, "MetaDataset": _DATASETS,
    "LmDataset": _DATASETS, "CachedDataset2": _DATASETS,
    "returnn.tf.horovod": _HOROVOD, "returnn.native_op": _NATIVE_OP, "returnn.tf.native_op": _NATIVE_OP,
}

# The original's old (pre-package) module names and the package modules they became; the original answers each
# both as a top-level module (``import TFUtil``) and inside the package (``import returnn.TFUtil``).
OLD_TO_NEW_MODULE = {
    "BundleFile": "datasets.bundle_file", "CachedDataset": "datasets.cached", "CachedDataset2": "datasets.cached2",
    "Config": "config", "Dataset": "datasets.basic", "DebugHelpers": "util.debug_helpers", "Debug": "util.debug",
    "EngineBase": "engine.base", "EngineBatch": "engine.batch", "Fsa": "util.fsa",
    "GeneratingDataset": "datasets.generating", "HDFDataset": "datasets.hdf",
    "HyperParamTuning": "tf.hyper_param_tuning", "LearningRateControl": "learning_rate_control",
    "LmDataset": "datasets.lm", "Log": "log", "MetaDataset": "datasets.meta", "NativeOp": "native_op",
    "NormalizationData": "datasets.normalization_data", "NumpyDumpDataset": "datasets.numpy_dump",
    "Pretrain": "pretrain", "RawWavDataset": "datasets.raw_wav", "SprintCache": "sprint.cache",
    "SprintControl": "sprint.control", "SprintDataset": "datasets.sprint", "SprintErrorSignals": "sprint.error_signals",
    "SprintExternInterface": "sprint.extern_interface", "SprintInterface": "sprint.interface",
    "StereoDataset": "datasets.stereo", "TaskSystem": "util.task_system", "TFCompat": "tf.compat",
    "TFDataPipeline": "tf.data_pipeline", "TFDistributed": "tf.distributed", "TFEngine": "tf.engine",
    "TFHorovod": "tf.horovod", "TFKenLM": "tf.util.ken_lm", "TFNativeOp": "tf.native_op", "TFNetwork": "tf.network",
    "TFNetworkLayer": "tf.layers.basic", "TFNetworkRecLayer": "tf.layers.rec",
    "TFNetworkSegModLayer": "tf.layers.segmental_model", "TFNetworkSigProcLayer": "tf.layers.signal_processing",
    "TFSprint": "tf.sprint", "TFUpdater": "tf.updater", "TFUtil": "tf.util.basic", "Util": "util.basic",
}


def _add_old_names():
    for old, new in OLD_TO_NEW_MODULE.items():
        spec = KNOWN_MODULES.get("returnn." + new)
        for name in (old, "returnn." + old):
            if spec is not None:
                KNOWN_MODULES[name] = spec
            else:  # no equivalent: the import fails with one line naming the module
                _UNPROVIDED[name] = "returnn." + new


_UNPROVIDED = {}  # the original's module names returnn_lite has no equivalent of -> the original's new name
_add_old_names()
_OLD_TOP_LEVEL = {name for name in KNOWN_MODULES if "." not in name and name != "returnn"}


def _layer_class_names():
    """Layer classes by their Python class name (``LinearLayer``), as the original's layer modules export them."""
    import returnn_lite.layers._load_all  # noqa: F401 (registers all layer classes)
    from returnn_lite.layers import base

    extras = {"_ConcatInputLayer": base.ConcatInputLayer,
              "get_concat_sources_data_template": base.concat_sources_template,
              "auto_register_layer_classes": _auto_register_layer_classes,
              "register_layer_class": base.register_layer_class}
    for name in base.get_layer_class_names():
        cls = base.get_layer_class(name)
        extras.setdefault(cls.__name__, cls)
    return extras


def _auto_register_layer_classes(vars_values):
    """
    As the original's: registers the layer classes (LayerBase subclasses with a layer_class) among vars_values
    (a list, a module, or the file name of a Python module, which is imported) for use in net dicts.
    """
    import importlib.util
    import inspect
    import os

    from returnn_lite.layers import base

    if isinstance(vars_values, str):
        if not os.path.isfile(vars_values):
            raise FileNotFoundError("auto_register_layer_classes: no such module file %r" % vars_values)
        name = os.path.splitext(os.path.basename(vars_values))[0]
        spec = importlib.util.spec_from_file_location(name, vars_values)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        vars_values = module
    if inspect.ismodule(vars_values):
        vars_values = list(vars(vars_values).values())
    for v in vars_values:
        if isinstance(v, type) and issubclass(v, base.LayerBase) and getattr(v, "layer_class", None) and (
                v.layer_class not in base.get_layer_class_names() or base.get_layer_class(v.layer_class) is not v):
            base.register_layer_class(v)


def _dataset_class_names():
    from returnn_lite.datasets import registry

    extras = {}
    for name in registry.dataset_class_names():
        try:
            extras[name] = registry.get_dataset_class(name)
        except Exception:  # noqa: BLE001 (optional dataset classes)
            continue
    try:
        vocab = importlib.import_module("returnn_lite.datasets.vocabulary")
        for key in ("Vocabulary", "BytePairEncoding", "CharacterTargets", "Utf8ByteTargets"):
            if hasattr(vocab, key):
                extras[key] = getattr(vocab, key)
    except ImportError:
        pass
    return extras


def is_legacy_module_name(name):
    return name in KNOWN_MODULES or name in _UNPROVIDED or name == "returnn" or name.startswith("returnn.")


class StandInModule(types.ModuleType):
    """Answers attribute lookups from returnn_lite's equivalents of one of the original's modules."""

    def __init__(self, name):
        super().__init__(name, "returnn_lite stand-in for the original's module %r" % name)
        sources, extras = KNOWN_MODULES[name]
        self.__dict__["_sources"] = list(sources)
        self.__dict__["_extras_spec"] = extras
        self.__dict__["_extras"] = None
        self.__dict__["__returnn_lite_alias_of__"] = ", ".join(sources) or None

    def _get_extras(self):
        d = self.__dict__
        if d["_extras"] is None:
            spec = d["_extras_spec"]
            d["_extras"] = dict(spec() if callable(spec) else (spec or {}))
        return d["_extras"]

    def __getattr__(self, attr):
        if attr.startswith("__") and attr not in ("__version__", "__long_version__"):
            raise AttributeError(attr)
        child = self.__name__ + "." + attr
        if child in KNOWN_MODULES or _mirrored_module(child) is not None:
            return get_standin_module(child)
        extras = self._get_extras()
        if attr in extras:
            return extras[attr]
        for src in self.__dict__["_sources"]:
            mod = importlib.import_module(src)
            try:
                return getattr(mod, attr)
            except AttributeError:
                continue
        raise AttributeError(
            "%s.%s: the config uses %r from the original's module %r, which returnn_lite does not provide"
            % (self.__name__, attr, attr, self.__name__))

    def __dir__(self):
        names = set(self._get_extras())
        for src in self.__dict__["_sources"]:
            names |= {n for n in dir(importlib.import_module(src)) if not n.startswith("__")}
        return sorted(names)

    def __repr__(self):
        return "<module %r (returnn_lite stand-in)>" % self.__name__


_standins = {}


# new-style packages whose modules returnn_lite mirrors under the same names (returnn.frontend -> returnn_lite.frontend)
_MIRRORED_PACKAGES = ("returnn.frontend", "returnn.tensor", "returnn.torch", "returnn.tf.frontend_layers")


def _mirrored_module(name):
    if not any(name == p or name.startswith(p + ".") for p in _MIRRORED_PACKAGES):
        return None
    candidate = "returnn_lite" + name[len("returnn"):]
    try:
        found = importlib.util.find_spec(candidate) is not None
    except (ImportError, ValueError):
        found = False
    return candidate if found else None


def get_standin_module(name):
    """The stand-in for the original's module ``name``; ImportError naming it if there is no equivalent."""
    if name not in KNOWN_MODULES or (name == "returnn.tensor" and len(KNOWN_MODULES[name][0]) < 3):
        mirrored = _mirrored_module(name)
        if mirrored is not None:
            sources = list(KNOWN_MODULES[name][0]) if name in KNOWN_MODULES else []
            KNOWN_MODULES[name] = (sources + [mirrored], None)
    if name in _UNPROVIDED:
        raise ImportError("the config imports the original's module %r (%s), which returnn_lite does not provide"
                          % (name, _UNPROVIDED[name]), name=name)
    if name not in KNOWN_MODULES:
        raise ImportError(
            "the config imports the original's module %r, which returnn_lite does not provide "
            "(it provides: %s)" % (name, ", ".join(sorted(n for n in KNOWN_MODULES if "." in n or n == "returnn"))),
            name=name)
    mod = _standins.get(name)
    if mod is None:
        mod = _standins[name] = StandInModule(name)
    return mod


def config_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 (mirrors __import__)
    """``__import__`` for config code: the original's module names map to stand-ins, tensorflow to the shim."""
    if level == 0:
        if name == "os" or (name.startswith("os.") and not fromlist):
            return _get_os_proxy()
        if name == "tensorflow":
            from .tf1 import get_tf1_shim

            return get_tf1_shim()
        if is_legacy_module_name(name):
            mod = get_standin_module(name)
            if fromlist:
                for item in fromlist:
                    if item == "*":
                        continue
                    try:
                        getattr(mod, item)
                    except AttributeError as exc:
                        raise ImportError("from %s import %s: %s" % (name, item, exc), name=name) from None
                return mod
            return get_standin_module(name.split(".", 1)[0])
    return builtins.__import__(name, globals, locals, fromlist, level)


class _OsProxy(types.ModuleType):
    """``os`` for config code: ``os.getlogin()`` falls back to the user name where there is no login terminal
    (containers, batch jobs), where configs use it for their model paths."""

    def __getattr__(self, attr):
        import os

        return getattr(os, attr)

    @staticmethod
    def getlogin():
        import getpass
        import os

        try:
            return os.getlogin()
        except OSError:
            try:
                return getpass.getuser()
            except Exception:  # noqa: BLE001 (no passwd entry)
                return os.environ.get("USER") or "unknown"


_os_proxy = None


def _get_os_proxy():
    global _os_proxy
    if _os_proxy is None:
        _os_proxy = _OsProxy("os")
    return _os_proxy


_builtins = None


def config_builtins():
    """The ``__builtins__`` dict config code runs with (the real builtins, with :func:`config_import`)."""
    global _builtins
    if _builtins is None:
        _builtins = dict(vars(builtins))
        _builtins["__import__"] = config_import
    return _builtins
