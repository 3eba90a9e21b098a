"""
Dataset classes by name, and :func:`init_dataset`, which builds a dataset from config-style options.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys

from ..registry import Registry
from ..util import did_you_mean
from .basic import Dataset, DatasetError

__all__ = ["init_dataset", "get_dataset_class", "register_dataset_class", "dataset_class_names", "check_dataset_opts",
           "SPRINT_DATASETS"]

# Built-in classes by module, imported on the first lookup: this module imports no dataset module, so dataset
# modules (e.g. meta.py, which builds its sub-datasets) can import it at the top without an import cycle.
_BUILTIN = {
    "generating": ("Task12AXDataset", "TaskEpisodicCopyDataset", "TaskXmlModelingDataset",
                   "TaskNumberBaseConvertDataset", "CopyTaskDataset", "DummyDataset"),
    "static": ("StaticDataset",),
    "hdf": ("HDFDataset",),
    "meta": ("MetaDataset",),
    "audio": ("OggZipDataset", "LibriSpeechCorpus"),
    "text": ("LmDataset", "TranslationDataset"),
    "timit": ("TimitDataset", "NltkTimitDataset"),
    "synthetic_speech": ("SyntheticSpeechDataset",),
}


def _load_builtin():
    for module_name, names in _BUILTIN.items():
        module = importlib.import_module("%s.%s" % (__package__, module_name))
        for name in names:
            if name not in _registry:  # a class registered by the user under this name wins
                _registry.register(name, getattr(module, name))


_registry = Registry("dataset class", lazy_load=_load_builtin)

# Datasets of the original that need RASR (Sprint): refused when the config is loaded.
SPRINT_DATASETS = ("ExternSprintDataset", "SprintDataset", "SprintCacheDataset", "SprintDatasetBase")


def register_dataset_class(cls, name=None):
    """Make ``cls`` available to ``{"class": name}`` (default: the class name)."""
    return _registry.register(name or cls.__name__, cls)


def dataset_class_names():
    return _registry.names()


def check_dataset_class_name(name, option="class"):
    """Raise :class:`DatasetError` for Sprint datasets (they need RASR) and unknown names."""
    if name in SPRINT_DATASETS:
        raise DatasetError("%s %r needs RASR/Sprint (the 'sprintExecPath'/'sprintConfigStr' feature extraction of "
                           "the original), which returnn_lite does not support; convert the features and "
                           "alignments to HDF (HDFDataset) or use OggZipDataset" % (option, name))
    if name not in _registry:
        known = dataset_class_names()
        raise DatasetError("unknown dataset class %r.%s Known dataset classes: %s"
                           % (name, did_you_mean(str(name), known), ", ".join(known)))


def get_dataset_class(name):
    check_dataset_class_name(name)
    return _registry.get(name)


def check_dataset_opts(opts, what="dataset"):
    """
    Checks done when the config is loaded, before any dataset is built: Sprint datasets (also inside a
    MetaDataset / CombinedDataset ``datasets`` dict) give one clear error naming the config option.
    """
    if isinstance(opts, dict):
        name = opts.get("class")
        if isinstance(name, str):
            check_dataset_class_name(name, option="%s class" % what)
        for sub_name, sub in (opts.get("datasets") or {}).items() if isinstance(opts.get("datasets"), dict) else ():
            check_dataset_opts(sub, what="%s datasets[%r]" % (what, sub_name))
    elif isinstance(opts, str) and opts.strip() in SPRINT_DATASETS:
        check_dataset_class_name(opts.strip(), option=what)


def _from_config_expr(expr):
    """``"config:<expr>"``: evaluate in the global config's namespace (e.g. a name or a function call)."""
    # A global config exists only once returnn_lite.config is loaded; looking it up there (instead of importing
    # it) keeps the datasets out of the config's import graph.
    config_module = sys.modules.get("returnn_lite.config")
    config = config_module.get_global_config(raise_exception=False) if config_module is not None else None
    if config is None:
        raise DatasetError("dataset %r refers to the config, but no global config is set" % ("config:" + expr))
    namespace = config.typed_dict
    if expr in namespace or config.has(expr):
        return config.typed_value(expr)
    try:
        return eval(expr, namespace)  # config code is trusted like the config file itself
    except Exception as exc:
        raise DatasetError("dataset 'config:%s': cannot evaluate in the config: %s: %s"
                           % (expr, type(exc).__name__, exc)) from exc


def _opts_from_string(text):
    text = text.strip()
    if text.startswith("config:"):
        return _from_config_expr(text[len("config:"):])
    if text.startswith("{"):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError) as exc:
            raise DatasetError("dataset string %r is not a valid dict literal: %s" % (text, exc)) from None
    m = re.match(r"^(?:[A-Za-z_]\w*::)?([A-Za-z_]\w*)\((.*)\)$", text, re.DOTALL)
    if m:  # the old form "GeneratingDataset::Task12AXDataset(num_seqs=1000)" (module:: optional)
        try:
            call = ast.parse("f(%s)" % m.group(2), mode="eval").body
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
            if call.args or None in kwargs:
                raise ValueError("only keyword arguments are supported")
        except (ValueError, SyntaxError) as exc:
            raise DatasetError("dataset string %r: cannot parse the arguments: %s" % (text, exc)) from None
        return dict(kwargs, **{"class": get_dataset_class(m.group(1))})
    if text in dataset_class_names() or text in SPRINT_DATASETS or re.match(r"^[A-Za-z_]\w*$", text):
        return {"class": get_dataset_class(text)}  # unknown names: error with suggestions
    files = [f for f in text.split(",") if f]
    if files and all(f.endswith((".hdf", ".h5", ".hdf5")) or os.path.isfile(f) for f in files):
        return {"class": "HDFDataset", "files": files}
    raise DatasetError("cannot make a dataset from %r: expected a dataset class name, 'config:<name>', a dict "
                       "literal or HDF file names. Known dataset classes: %s" % (text, ", ".join(dataset_class_names())))


def init_dataset(opts, extra_kwargs=None, default_kwargs=None):
    """
    :param dict|str|Dataset|callable opts: ``{"class": "Task12AXDataset", ...}``, a class name, ``"config:..."``,
      HDF file name(s) (comma-separated), a dataset instance, or a function returning any of these
    :param dict|None extra_kwargs: override options
    :param dict|None default_kwargs: options used where ``opts`` does not set them
    :return: the dataset, with ``init_seq_order`` not yet called
    """
    for _ in range(10):  # resolve strings / callables (e.g. "config:get_dataset" -> function -> dict)
        if isinstance(opts, Dataset):
            return opts
        if isinstance(opts, str):
            opts = _opts_from_string(opts)
        elif callable(opts) and not isinstance(opts, type):
            opts = opts()
        else:
            break
    if not isinstance(opts, dict):
        raise DatasetError("dataset options must be a dict (or class name / 'config:...'), got %r" % (opts,))
    kwargs = dict(default_kwargs or {})
    kwargs.update(opts)
    kwargs.update(extra_kwargs or {})
    class_name = kwargs.pop("class", None)
    if class_name is None:
        raise DatasetError("dataset options need a 'class' entry, got keys %s. Known dataset classes: %s"
                           % (sorted(opts), ", ".join(dataset_class_names())))
    cls = class_name if isinstance(class_name, type) else get_dataset_class(class_name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise DatasetError("%s(%s): %s" % (cls.__name__, ", ".join(sorted(kwargs)), exc)) from exc
