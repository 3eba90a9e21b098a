"""
Dataset classes by name, and :func:`init_dataset`, which builds a dataset from config-style options.
"""

from __future__ import annotations

import ast
import difflib
import os
import re

from .basic import Dataset, DatasetError

__all__ = ["init_dataset", "get_dataset_class", "register_dataset_class", "dataset_class_names"]

_classes = {}


def register_dataset_class(cls, name=None):
    """Make ``cls`` available to ``{"class": name}`` (default: the class name)."""
    _classes[name or cls.__name__] = cls
    return cls


def _register_builtin():
    from .generating import (CopyTaskDataset, DummyDataset, Task12AXDataset, TaskEpisodicCopyDataset,
                             TaskNumberBaseConvertDataset, TaskXmlModelingDataset)
    from .hdf import HDFDataset
    from .meta import MetaDataset
    from .static import StaticDataset

    for cls in (Task12AXDataset, TaskEpisodicCopyDataset, TaskXmlModelingDataset, TaskNumberBaseConvertDataset,
                CopyTaskDataset, DummyDataset, StaticDataset, HDFDataset, MetaDataset):
        _classes.setdefault(cls.__name__, cls)


def dataset_class_names():
    if not _classes:
        _register_builtin()
    return sorted(_classes)


def get_dataset_class(name):
    if not _classes:
        _register_builtin()
    if name not in _classes:
        close = difflib.get_close_matches(str(name), sorted(_classes), n=3, cutoff=0.5)
        hint = (" Did you mean %s?" % " or ".join(map(repr, close))) if close else ""
        raise DatasetError("unknown dataset class %r.%s Known dataset classes: %s"
                           % (name, hint, ", ".join(sorted(_classes))))
    return _classes[name]


def _from_config_expr(expr):
    """``"config:<expr>"``: evaluate in the global config's namespace (e.g. a name or a function call)."""
    from returnn_lite.config import get_global_config

    config = get_global_config(raise_exception=False)
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
    if not _classes:
        _register_builtin()
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
    if text in _classes or re.match(r"^[A-Za-z_]\w*$", text):
        return {"class": get_dataset_class(text)}  # unknown names: error with suggestions
    files = [f for f in text.split(",") if f]
    if files and all(f.endswith((".hdf", ".h5", ".hdf5")) or os.path.isfile(f) for f in files):
        return {"class": "HDFDataset", "files": files}
    raise DatasetError("cannot make a dataset from %r: expected a dataset class name, 'config:<name>', a dict "
                       "literal or HDF file names. Known dataset classes: %s" % (text, ", ".join(sorted(_classes))))


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
