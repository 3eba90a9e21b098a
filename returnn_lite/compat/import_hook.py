"""
A temporary import hook so that config files written for the original RETURNN can do
``from returnn.config import get_global_config`` or ``from returnn.tf.util.data import Dim, batch_dim``.

The hook is active only inside :func:`returnn_import_hook` (used by ``Config.load_file``). It never leaves a
``returnn`` package behind in ``sys.modules``: that would shadow a real installation for the rest of the process.
If a real ``returnn`` was imported before, its ``sys.modules`` entries are set aside while the hook is active
and put back afterwards.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import types

__all__ = ["returnn_import_hook", "ReturnnAliasFinder", "MODULE_ALIASES"]

# original module name -> returnn_lite module providing the equivalents
MODULE_ALIASES = {
    "returnn.config": "returnn_lite.config",
    "returnn.util.basic": "returnn_lite.compat.util_basic",
    "returnn.tf.util.data": "returnn_lite.compat.tensor",
    "returnn.tensor": "returnn_lite.compat.tensor",
}
# empty parent packages, needed so that "import returnn.tf.util.data" can walk down to the alias
_PARENT_PACKAGES = {"returnn", "returnn.util", "returnn.tf", "returnn.tf.util"}


def _is_returnn_name(name):
    return name == "returnn" or name.startswith("returnn.")


class _ForwardingLoader(importlib.abc.Loader):
    """Creates a fresh module whose attributes are looked up lazily in the target module."""

    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        return None  # default module creation

    def exec_module(self, module):
        target = self.target

        def __getattr__(name):  # noqa: N807 (module-level __getattr__, PEP 562)
            if name.startswith("__") and name != "__all__":
                raise AttributeError(name)
            real = importlib.import_module(target)
            try:
                return getattr(real, name)
            except AttributeError:
                raise AttributeError(
                    "%s.%s: returnn_lite has no equivalent (looked in %s)" % (module.__name__, name, target)
                ) from None

        def __dir__():  # noqa: N807
            return dir(importlib.import_module(target))

        module.__getattr__ = __getattr__
        module.__dir__ = __dir__
        module.__returnn_lite_alias_of__ = target


class _PackageLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__returnn_lite_alias_of__ = None  # marks the stand-in package


class ReturnnAliasFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder answering every ``returnn`` / ``returnn.*`` import with a returnn_lite stand-in."""

    def find_spec(self, fullname, path=None, target=None):
        if not _is_returnn_name(fullname):
            return None
        if fullname in _PARENT_PACKAGES:
            return importlib.util.spec_from_loader(fullname, _PackageLoader(), is_package=True)
        if fullname in MODULE_ALIASES:
            return importlib.util.spec_from_loader(fullname, _ForwardingLoader(MODULE_ALIASES[fullname]))
        raise ModuleNotFoundError(
            "No module named %r: config files run with returnn_lite, which maps only %s"
            % (fullname, ", ".join(sorted(MODULE_ALIASES))),
            name=fullname)


_finder = ReturnnAliasFinder()
_depth = 0  # nesting level (a config may load another config)
_saved_modules = {}


def _returnn_module_names():
    return [name for name in sys.modules if _is_returnn_name(name)]


@contextlib.contextmanager
def returnn_import_hook():
    """While active, ``import returnn.<...>`` resolves to returnn_lite's equivalents (see :data:`MODULE_ALIASES`)."""
    global _depth, _saved_modules
    if _depth == 0:
        # Set aside any real returnn modules so the stand-ins are used, and restore them afterwards.
        _saved_modules = {name: sys.modules.pop(name) for name in _returnn_module_names()}
        sys.meta_path.insert(0, _finder)
    _depth += 1
    try:
        yield _finder
    finally:
        _depth -= 1
        if _depth == 0:
            if _finder in sys.meta_path:
                sys.meta_path.remove(_finder)
            for name in _returnn_module_names():
                module = sys.modules[name]
                if isinstance(module, types.ModuleType) and hasattr(module, "__returnn_lite_alias_of__"):
                    del sys.modules[name]
            sys.modules.update(_saved_modules)
            _saved_modules = {}
