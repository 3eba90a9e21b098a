"""
Compatibility with config files written for the original RETURNN (without depending on it).

:func:`returnn_import_hook` makes ``import returnn.config`` etc. resolve to returnn_lite modules while a config
executes. The engine should also wrap calls of config-defined functions (e.g. ``get_network(epoch)``) in it
when those functions import from ``returnn`` at call time.
"""

from .import_hook import MODULE_ALIASES, ReturnnAliasFinder, returnn_import_hook

__all__ = ["returnn_import_hook", "ReturnnAliasFinder", "MODULE_ALIASES"]
