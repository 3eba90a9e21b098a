"""
Stand-in for the original's ``HyperParamTuning`` module: :class:`HyperParam` placeholders in configs.

returnn_lite has no hyper-parameter tuning (``task = "hyper_param_tuning"``). A config may still define
``HyperParam(...)`` values; where one reaches the network or the data description, construction fails with
one line naming the option and the placeholder's default (see :func:`check_no_hyper_params`).
"""

from __future__ import annotations

__all__ = ["HyperParam", "check_no_hyper_params"]


class HyperParam:
    """A hyper-parameter placeholder ``HyperParam(dtype, bounds, classes, log, default)`` as in the original."""

    def __init__(self, dtype=None, bounds=None, classes=None, log=False, default=None):
        self.dtype = dtype
        self.bounds = bounds
        self.classes = classes
        self.log = log
        self.default = default

    def get_default_value(self):
        return self.default

    def __repr__(self):
        return "HyperParam(%s, %r, default=%r)" % (getattr(self.dtype, "__name__", self.dtype), self.bounds,
                                                   self.default)


_ATOMS = frozenset((str, int, float, bool, type(None)))  # values that are no HyperParam and hold none (skipped fast)


def check_no_hyper_params(value, where):
    """Raise ValueError naming ``where`` (and the key path) if ``value`` contains a :class:`HyperParam`."""
    stack = [((where,), value)]  # (key path, value); the path is formatted only for the error
    while stack:
        path, v = stack.pop()
        if type(v) in _ATOMS:
            continue
        if isinstance(v, HyperParam):
            raise ValueError(
                "%s is a HyperParam placeholder (%r): returnn_lite does not do hyper-parameter tuning; "
                "put a plain value there (e.g. its default %r)" % (
                    path[0] + "".join("[%r]" % (k,) for k in path[1:]), v, v.default))
        if isinstance(v, dict):
            stack.extend((path + (k,), x) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((path + (i,), x) for i, x in enumerate(v))
