"""
The original's ``HyperParamTuning`` module: :class:`HyperParam` placeholders in configs.

``task = "hyper_param_tuning"`` replaces them by values (``returnn_lite/engine/hyper_param_tuning.py``). In any
other task, where one reaches the network or the data description, construction fails with one line naming the
option and the placeholder's default (see :func:`check_no_hyper_params`).

A hyper param has a value range: ``classes`` (a list), ``bool``, or ``int`` / ``float`` within inclusive
``bounds`` (``log=True``: in log space) or, without bounds, over the real line (a standard normal variate).
:meth:`HyperParam.get_value` maps a number in [0, 1] onto that range; the "canonical" value is that of 0.5.
"""

from __future__ import annotations

import itertools
import math
import statistics
import zlib

import numpy

__all__ = ["HyperParam", "check_no_hyper_params"]

EPS = 1e-16
_unique_idx = itertools.count(1)


class HyperParam:
    """A hyper-parameter placeholder ``HyperParam(dtype, bounds, classes, log, default)`` as in the original."""

    def __init__(self, dtype=None, bounds=None, classes=None, log=False, default=None):
        if isinstance(dtype, (list, tuple)):  # HyperParam(["a", "b"]): classes
            if classes is not None or bounds is not None:
                raise ValueError("HyperParam(%r): a list of classes takes no bounds or classes" % (dtype,))
            dtype, classes = None, dtype
        dtype = {"float": float, "int": int, "bool": bool}.get(dtype, dtype)
        if dtype not in (float, int, bool, None) or (dtype is None and classes is None):
            raise ValueError("HyperParam: dtype must be float, int or bool (or give classes), got %r" % (dtype,))
        if bounds is not None:
            if dtype not in (int, float) or not isinstance(bounds, (list, tuple)) or len(bounds) != 2 or \
                    not dtype(bounds[0]) < dtype(bounds[1]):
                raise ValueError("HyperParam(%s, bounds=%r): bounds must be [low, high] with low < high, for int or "
                                 "float" % (getattr(dtype, "__name__", dtype), bounds))
        if classes is not None and (not isinstance(classes, (list, tuple)) or not classes):
            raise ValueError("HyperParam(classes=%r): classes must be a non-empty list" % (classes,))
        self.dtype = dtype
        self.bounds = bounds
        self.classes = classes
        self.log = self.log_space = log
        self.default = default
        self.unique_idx = next(_unique_idx)
        self.usages = []  # paths (str) where the config uses it, e.g. "network['fw0']['n_out']"

    def __repr__(self):
        if self.classes is not None:
            return "HyperParam(%r)" % (self.classes,)
        ext = (", log=True" if self.log else "") + (", default=%r" % self.default if self.default is not None else "")
        if self.bounds is not None:
            return "HyperParam(%s, %s%s)" % (self.dtype.__name__, list(self.bounds), ext)
        return "HyperParam(%s%s)" % (self.dtype.__name__, ext)

    def description(self):
        usage = min(self.usages, key=lambda u: (u.count("["), u)) if self.usages else "<no usage>"
        return "%s%s: %r" % (usage, "|..." if len(self.usages) > 1 else "", self)

    def get_value(self, selected, eps=EPS):
        """The value for ``selected`` in [0, 1] (uniform over the range; log-uniform with log=True)."""
        if self.classes:
            return self.classes[min(int(len(self.classes) * selected), len(self.classes) - 1)]
        if self.dtype is bool:
            return selected > 0.5
        if self.bounds is None:  # the whole real line: the inverse of the normal CDF
            return self.dtype(statistics.NormalDist().inv_cdf(min(max(selected, eps), 1.0 - eps)))
        lo, hi = self.bounds
        if not self.log:
            if self.dtype is int:
                return lo + int((hi - lo) * selected)
            return self.dtype(lo + (hi - lo) * selected)
        sign = 1
        if lo < 0 or hi < 0:  # negative range: mirrored
            sign, lo, hi = -1, -hi, -lo
        y = math.exp(math.log(max(lo, eps * 0.5)) + (math.log(max(hi, eps)) - math.log(max(lo, eps * 0.5))) * selected)
        return self.dtype(y if y > eps else lo) * sign

    def merge_values(self, value1, value2):
        """The middle of two values (in log space with log=True); bool and classes keep value1."""
        if self.dtype is bool or self.classes:
            return value1
        if self.log:
            x0, x1 = sorted((value1, value2))
            sign = 1
            if x0 < 0 or x1 < 0:
                sign, x0, x1 = -1, -x1, -x0
            y = math.exp((math.log(max(x0, EPS * 0.5)) + math.log(max(x1, EPS))) * 0.5)
            return self.dtype(y if y > EPS else x0) * sign
        if self.dtype is int:
            return (value1 + value2) // 2
        return self.dtype((value1 + value2) * 0.5)

    def get_initial_value(self):
        """The canonical value (that of the middle of the range)."""
        return self.get_value(0.5)

    def get_default_value(self):
        if self.default is not None:
            return self.dtype(self.default) if self.dtype is not None else self.default
        return self.get_initial_value()

    def get_random_value(self, seed):
        return self.get_value(float(numpy.random.RandomState(seed % (2 ** 32)).uniform(0.0, 1.0)))

    def get_random_value_by_idx(self, iteration_idx, individual_idx):
        """Deterministic per (first usage, iteration, individual): unrelated config changes do not change it."""
        key = "%s|%i|%i" % (min(self.usages) if self.usages else repr(self), iteration_idx, individual_idx)
        return self.get_random_value(zlib.crc32(key.encode("utf8")))


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
                "%s is a HyperParam placeholder (%r): only task 'hyper_param_tuning' (hyper-parameter tuning) replaces "
                "these by values; for other tasks put a plain value there (e.g. its default %r)" % (
                    path[0] + "".join("[%r]" % (k,) for k in path[1:]), v, v.default))
        if isinstance(v, dict):
            stack.extend((path + (k,), x) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((path + (i,), x) for i, x in enumerate(v))
