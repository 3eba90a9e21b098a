"""rf.top_k (values and indices of the k largest entries over one or more dims), rf.reduce_out (maxout-style
reduction of feature pieces) and rf.RunningMean."""

from __future__ import annotations

from ..tensor import Dim
from . import array_, math_
from ._backend import get_backend_for_tensor
from ._utils import as_dims, check_dims_in, error, is_tensor
from .module import Module, Parameter

__all__ = ["top_k", "reduce_out", "RunningMean"]


def top_k(source, *, axis, k=None, k_dim=None, sorted=True):  # noqa: A002 (the original's name)
    """The k largest entries of source over axis (a Dim, or Dims flattened) -> (values [..., k_dim], indices,
    k_dim); indices: int32 sparse over axis (a list, one per dim, where axis is a sequence). Padded frames of a
    dynamic axis are never chosen (masked with -inf)."""
    axes = as_dims(axis)
    check_dims_in("top_k", source, axes)
    if k is None:
        if k_dim is None or k_dim.dimension is None:
            raise error("top_k", "give k (an int) or a static k_dim")
        k = k_dim.dimension
    if is_tensor(k):
        raise error("top_k", "k as a Tensor (a dynamic k_dim) is not supported; give an int")
    k = int(k)
    if k_dim is None:
        k_dim = Dim(k, name="top-k-dim")
    elif k_dim.dimension != k:
        raise error("top_k", "k=%i differs from k_dim %s" % (k, k_dim.short_repr()))
    n = 1
    for d in axes:
        n = None if d.dimension is None or n is None else n * d.dimension
    if n is not None and k > n:
        raise error("top_k", "k=%i is larger than the %i entries over %s" % (k, n, [d.short_repr() for d in axes]))
    backend = get_backend_for_tensor(source)
    method = getattr(backend, "top_k", None)
    if method is None:
        raise error("top_k", "not implemented by the %s backend" % backend.name)
    values, indices = method(source, axis=axes, k=k, k_dim=k_dim, sorted=bool(sorted))
    return values, (indices if isinstance(axis, (list, tuple)) else indices[0]), k_dim


def reduce_out(source, *, mode, num_pieces, out_dim=None):
    """The feature dim split into (out_dim, num_pieces), then reduced over the pieces (e.g. maxout: mode="max")."""
    feat = source.feature_dim
    if feat is None or feat.dimension is None or feat.dimension % num_pieces:
        raise error("reduce_out", "needs a static feature dim divisible by num_pieces=%i, got %r" % (
            num_pieces, feat))
    parts_dim = Dim(num_pieces, name="readout-parts")
    if out_dim is None:
        out_dim = Dim(feat.dimension // num_pieces, name="%s/pieces" % feat.name)
    out = array_.split_dims(source, axis=feat, dims=[out_dim, parts_dim])
    return math_.reduce(out, mode=mode, axis=parts_dim)


class RunningMean(Module):
    """Exponential moving average of the input's mean over the dims not in the mean's shape (in_dim):
    ``mean += alpha * (reduce_mean(x) - mean)`` at each call (eager backends); returns the mean."""

    def __init__(self, in_dim, *, alpha, dtype=None, is_prob_distribution=None):
        super().__init__()
        self.in_dim = in_dim
        self.shape = [in_dim] if isinstance(in_dim, Dim) else list(in_dim)
        self.alpha = alpha
        self.is_prob_distribution = is_prob_distribution
        self.mean = Parameter(self.shape, dtype=dtype, auxiliary=True)
        if is_prob_distribution:
            self.mean.initial = 1.0 / in_dim.dimension

    def __call__(self, x):
        check_dims_in("RunningMean", x, self.shape, what="mean dims")
        x_ = math_.reduce_mean(x, axis=[d for d in x.dims if d not in self.shape])
        self.mean.assign_add(self.alpha * (x_ - self.mean))
        return self.mean
