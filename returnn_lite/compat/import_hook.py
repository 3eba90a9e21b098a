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

from .legacy import KNOWN_MODULES, get_standin_module, is_legacy_module_name

__all__ = ["returnn_import_hook", "ReturnnAliasFinder", "MODULE_ALIASES"]

# original module name -> returnn_lite modules providing the equivalents (see .legacy)
MODULE_ALIASES = {name: ", ".join(spec[0]) for name, spec in KNOWN_MODULES.items()}


def _is_returnn_name(name):
    return is_legacy_module_name(name)


class _StandInLoader(importlib.abc.Loader):
    """Hands out the stand-in module object of :mod:`.legacy` (raising ImportError for unknown names)."""

    def create_module(self, spec):
        return get_standin_module(spec.name)

    def exec_module(self, module):
        pass


class ReturnnAliasFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder answering the original's module names (``returnn.*``, ``TFUtil``, ...) with stand-ins."""

    def find_spec(self, fullname, path=None, target=None):
        if not _is_returnn_name(fullname):
            return None
        get_standin_module(fullname)  # unknown names: ImportError naming the module
        return importlib.util.spec_from_loader(fullname, _StandInLoader(), is_package=True)


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
