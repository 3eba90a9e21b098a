"""Imports every loss module, so that all loss classes are registered."""

import importlib
import pkgutil

from . import __path__ as _losses_path

for _mod in sorted(m.name for m in pkgutil.iter_modules(_losses_path)):
    if not _mod.startswith("_"):
        importlib.import_module("%s.%s" % (__package__, _mod))
