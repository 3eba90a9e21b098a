"""rf.PiecewiseLinear (linear interpolation between points, constant outside) and
rf.PiecewiseLinearStepwiseScheduler (the same over the current train step, e.g. for a learning-rate-like factor)."""

from __future__ import annotations

import numpy

from ..tensor import Dim
from . import array_, math_
from ._utils import error, is_tensor
from .module import Module, Parameter

__all__ = ["PiecewiseLinear", "PiecewiseLinearStepwiseScheduler"]


class PiecewiseLinear(Module):
    """``points`` {x: y}: y linearly interpolated between the neighbouring points, the first / last y outside; the
    sorted keys and values are auxiliary params ``_keys`` / ``_values`` (as the original)."""

    def __init__(self, points):
        super().__init__()
        if not points:
            raise error("PiecewiseLinear", "points must not be empty")
        items = sorted(points.items())
        if any(is_tensor(v) for _, v in items):
            raise error("PiecewiseLinear", "Tensor values are not supported (give numbers)")
        self.points_dim = Dim(len(items), name="pcw_schd_pieces")
        self._keys = Parameter([self.points_dim], auxiliary=True,
                               initial=numpy.array([k for k, _ in items], dtype="float32"))
        self._values = Parameter([self.points_dim], auxiliary=True,
                                 initial=numpy.array([v for _, v in items], dtype="float32"))

    def __call__(self, x):
        n = self.points_dim.dimension
        if not is_tensor(x):
            x = array_.convert_to_tensor(float(x), dims=[], dtype="float32")
        elif x.dtype != "float32":
            x = math_.cast(x, "float32")
        if n == 1:
            return self._values + x * 0.0 if x.dims else math_.reduce_sum(self._values, axis=self.points_dim)
        below = math_.compare(self._keys, "less", x, allow_broadcast_all_sources=True)
        index = math_.reduce_sum(math_.cast(below, "int32"), axis=self.points_dim)  # search_sorted, side left
        index = math_.clip_by_value(index, 1, n - 1)
        x_start = array_.gather(self._keys, indices=index - 1, axis=self.points_dim)
        x_end = array_.gather(self._keys, indices=index, axis=self.points_dim)
        frac = math_.clip_by_value((x - x_start) / (x_end - x_start), 0.0, 1.0)
        y_start = array_.gather(self._values, indices=index - 1, axis=self.points_dim)
        y_end = array_.gather(self._values, indices=index, axis=self.points_dim)
        return math_.lerp(y_start, y_end, frac)


class PiecewiseLinearStepwiseScheduler(PiecewiseLinear):
    """:class:`PiecewiseLinear` of the current train step (``rf.get_run_ctx().step``); call arguments are ignored."""

    def __call__(self, *_args, **_kwargs):
        from .run_ctx import get_run_ctx

        step = get_run_ctx().step
        if is_tensor(step):
            return super().__call__(step)
        return super().__call__(float(step))
