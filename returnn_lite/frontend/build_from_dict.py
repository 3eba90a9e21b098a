"""rf.build_from_dict / rf.build_dict: modules (or functions) from ``{"class": "rf.Linear", ...}`` dicts."""

from __future__ import annotations

import functools
import importlib
import sys
from types import BuiltinFunctionType, FunctionType

__all__ = ["build_from_dict", "build_dict"]


def build_from_dict(d, *args, **kwargs):
    """
    ``cls(*args, **opts, **kwargs)`` for ``d = {"class": name, **opts}``; name is ``"rf.X"`` or a full module path.
    A function as "class" is returned as it is, or as a partial when there are options.
    """
    if not isinstance(d, dict) or "class" not in d:
        raise ValueError("build_from_dict: expected a dict with a 'class' key, got %r" % (d,))
    opts = dict(d)
    cls = _get_cls(opts.pop("class"))
    if isinstance(cls, (FunctionType, BuiltinFunctionType, functools.partial)):
        return functools.partial(cls, *args, **opts, **kwargs) if (args or kwargs or opts) else cls
    if not isinstance(cls, type):
        raise ValueError("build_from_dict: 'class' %r is neither a class nor a function" % (d["class"],))
    return cls(*args, **opts, **kwargs)


def build_dict(cls, **kwargs):
    """The dict for :func:`build_from_dict`: ``{"class": "rf.X" or "module.X", **kwargs}``."""
    if not isinstance(cls, (type, FunctionType, BuiltinFunctionType)):
        raise TypeError("build_dict: expected a class or function, got %r" % (cls,))
    return {"class": _get_cls_name(cls), **kwargs}


def _rf():
    # the rf package itself (always loaded before its submodules; no import needed)
    return sys.modules[__package__]


def _get_cls(name):
    if not isinstance(name, str) or "." not in name:
        raise ValueError("build_from_dict: 'class' must be 'rf.Name' or 'module.Name', got %r" % (name,))
    mod_name, attr = name.rsplit(".", 1)
    if mod_name == "rf":
        mod = _rf()
    else:
        if mod_name == "returnn" or mod_name.startswith("returnn."):  # the original's module paths
            mod_name = "returnn_lite" + mod_name[len("returnn"):]
        mod = importlib.import_module(mod_name)
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ValueError("build_from_dict: %r has no %r" % (mod_name, attr)) from None


def _get_cls_name(cls):
    if getattr(_rf(), cls.__name__, None) is cls:
        return "rf.%s" % cls.__name__
    return "%s.%s" % (cls.__module__, cls.__name__)
