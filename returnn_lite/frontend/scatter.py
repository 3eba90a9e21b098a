"""
rf scatter and sorted search, as the original's ``rf.scatter`` / ``rf.scatter_argmax`` / ``rf.search_sorted``:
composed from rf primitives (a one-hot comparison of the indices with the target positions, then a matmul or a
masked reduction), so every backend runs them. Memory grows with (source frames) x (target positions).
"""

from __future__ import annotations

from . import array_, math_
from ._utils import as_dims, check_dims_in, dims_str, error, is_tensor

__all__ = ["scatter", "scatter_argmax", "search_sorted"]

_MODES = ("sum", "max", "min")


def _float_limit(dtype, mode):
    import numpy

    if dtype.startswith(("int", "uint")):
        info = numpy.iinfo(dtype)
        return int(info.min if mode == "max" else info.max)
    return float("-inf") if mode == "max" else float("inf")


def scatter(source, *, indices, indices_dim, mode="sum", fill_value=None, out_dim=None):
    """
    A new tensor over ``out_dim`` (default: the indices' sparse dim): frame i of source (over ``indices_dim``, one
    dim or several) goes to position ``indices[i]``; frames that meet are summed (mode "sum") or their max/min
    taken; positions nothing goes to are ``fill_value`` (default 0 for sum, the lowest/highest value for max/min).
    Several out dims: indices into their merged (row-major) positions. Frames beyond the lengths are not scattered.
    """
    if mode not in _MODES:
        raise error("scatter", "mode must be one of %s, got %r" % (", ".join(_MODES), mode))
    if not is_tensor(indices) or not indices.dtype.startswith(("int", "uint")):
        raise error("scatter", "indices must be an int Tensor, got %r" % (indices,))
    indices_dims = as_dims(indices_dim)
    check_dims_in("scatter", source, indices_dims)
    check_dims_in("scatter", indices, indices_dims)
    if out_dim is None:
        if indices.sparse_dim is None:
            raise error("scatter", "needs out_dim= or indices with a sparse dim")
        out_dim = indices.sparse_dim
    out_dims = as_dims(out_dim)
    if any(d.dimension is None for d in out_dims) and len(out_dims) > 1:
        raise error("scatter", "several out dims must be static, got %s" % dims_str(out_dims))
    target = out_dims[0] if len(out_dims) == 1 else None
    if target is None:
        target = out_dims[0]
        for d in out_dims[1:]:
            target = target * d
    if fill_value is None:
        fill_value = 0 if mode == "sum" else _float_limit(source.dtype, mode)
    hit = math_.compare(indices, "equal", array_.range_over_dim(target, dtype=indices.dtype),
                        allow_broadcast_all_sources=True)  # [..., indices_dims, target]
    if mode == "sum":
        hit = math_.cast(hit, source.dtype)
        dynamic = [d for d in indices_dims if d.dimension is None and not d.is_batch_dim()]
        if dynamic:  # frames beyond the lengths add nothing (masked here: the hits may lack the lengths' dims)
            source = math_.where(array_.sequence_mask(dynamic), source, array_.zeros([], dtype=source.dtype),
                                 allow_broadcast_all_sources=True)
        out = math_.matmul(source, hit, reduce=indices_dims, use_mask=False)
        if not isinstance(fill_value, (int, float)) or fill_value != 0:
            out = out + fill_value
    else:
        # frames going elsewhere are -inf (max) / +inf (min) (ints in float64, which holds the infinities)
        dtype = "float64" if source.dtype.startswith(("int", "uint")) else source.dtype
        empty = float("-inf") if mode == "max" else float("inf")
        values = math_.where(hit, math_.cast(source, dtype), array_.full(dims=[], fill_value=empty, dtype=dtype),
                             allow_broadcast_all_sources=True)
        out = math_.reduce(values, mode=mode, axis=indices_dims)
        out = (math_.maximum if mode == "max" else math_.minimum)(out, float(fill_value))
        out = math_.cast(out, source.dtype)
    if len(out_dims) > 1:
        out = array_.split_dims(out, axis=target, dims=out_dims)
    return out


def scatter_argmax(source, *, indices, indices_dim, invalid_idx=-1, out_dim=None):
    """For each target position (as :func:`scatter`), the index (in indices_dim, one dim) of the frame with the max
    value that goes there (the first of equal ones), invalid_idx where none goes."""
    (indices_dim,) = as_dims(indices_dim)
    if out_dim is None:
        out_dim = indices.sparse_dim
    best = scatter(source, indices=indices, indices_dim=indices_dim, mode="max", out_dim=out_dim)
    best_at_frame = array_.gather(best, indices=indices, axis=out_dim)  # [..., indices_dim]: the max at its target
    is_best = math_.compare(best_at_frame, "equal", source, allow_broadcast_all_sources=True)
    if indices_dim.dimension is None:
        is_best = math_.logical_and(is_best, array_.sequence_mask([indices_dim]), allow_broadcast_all_sources=True)
    frame_index = array_.range_over_dim(indices_dim, dtype=indices.dtype)
    unset = _float_limit(indices.dtype, "min")
    candidates = math_.where(is_best, frame_index, unset, allow_broadcast_all_sources=True)
    out = scatter(candidates, indices=indices, indices_dim=indices_dim, mode="min", out_dim=out_dim)
    return math_.where(math_.compare(out, "equal", unset), invalid_idx, out)


def search_sorted(sorted_seq, values, *, axis, side="left", out_dtype="int32"):
    """
    For each value, its insertion index into sorted_seq along axis (sorted ascending; its other dims shared with
    values): the number of entries < value (side "left") or <= value ("right"), within the length of axis.
    """
    if side not in ("left", "right"):
        raise error("search_sorted", "side must be 'left' or 'right', got %r" % (side,))
    check_dims_in("search_sorted", sorted_seq, [axis])
    if axis in values.dims:
        raise error("search_sorted", "values must not have the searched axis %s" % axis.short_repr())
    before = math_.compare(sorted_seq, "less" if side == "left" else "less_equal", values,
                           allow_broadcast_all_sources=True)
    return math_.cast(math_.reduce_sum(math_.cast(before, "int32"), axis=axis), out_dtype)
