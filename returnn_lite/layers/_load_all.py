"""Imports every layer family module, so that all layer classes are registered."""

import importlib
import pkgutil

from . import __path__ as _layers_path

for _mod in sorted(m.name for m in pkgutil.iter_modules(_layers_path)):
    if not _mod.startswith("_"):
        importlib.import_module("%s.%s" % (__package__, _mod))
