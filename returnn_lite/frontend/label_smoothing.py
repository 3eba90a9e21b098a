"""rf label smoothing: :func:`label_smoothing` (of probabilities or sparse targets), :func:`smooth_one_hot` and
:func:`label_smoothed_log_prob_gradient` (smooths the gradient of log-probs, e.g. for CE or CTC)."""

from __future__ import annotations

from . import array_, math_
from ._utils import check_dims_in, error
from .gradient import scaled_gradient_ext

__all__ = ["label_smoothing", "smooth_one_hot", "label_smoothed_log_prob_gradient"]


def label_smoothing(prob, smoothing, *, axis=None):
    """prob (dense over axis, or sparse indices) smoothed: the label gets 1 - smoothing, the others
    smoothing / (dim - 1) (dense: prob * (1 - dim * floor) + floor, floor = smoothing / (dim - 1))."""
    if axis is None:
        axis = prob.feature_dim or prob.sparse_dim
        if axis is None:
            raise error("label_smoothing", "prob has no feature or sparse dim: pass axis=")
    if prob.sparse_dim is not None:
        if prob.sparse_dim != axis:
            raise error("label_smoothing", "axis %s is not the sparse dim %s" % (
                axis.short_repr(), prob.sparse_dim.short_repr()))
        return smooth_one_hot(prob, label_prob=1.0 - smoothing)
    check_dims_in("label_smoothing", prob, [axis])
    floor_prob = smoothing / (axis.dimension - 1)
    return prob * (1.0 - axis.dimension * floor_prob) + floor_prob


def smooth_one_hot(source, *, label_prob):
    """Sparse indices -> dense over their sparse dim: label_prob at the index, (1 - label_prob) / (dim - 1) else."""
    dim = source.sparse_dim
    if dim is None:
        raise error("smooth_one_hot", "source must be sparse (have a sparse_dim)")
    if dim.dimension is None:
        raise error("smooth_one_hot", "the sparse dim %s must be static" % dim.short_repr())
    hit = math_.compare(array_.range_over_dim(dim), "equal", source, allow_broadcast_all_sources=True)
    return math_.where(hit, label_prob, (1.0 - label_prob) / (dim.dimension - 1), allow_broadcast_all_sources=True)


def label_smoothed_log_prob_gradient(log_prob, smoothing, *, axis=None, exclude_labels=None):
    """log_prob unchanged forward; its gradient (the negative target distribution of CE-like losses) smoothed as
    :func:`label_smoothing` does with probs (labels in exclude_labels, e.g. blank, keep their gradient)."""
    if axis is None:
        axis = log_prob.feature_dim
        if axis is None:
            raise error("label_smoothed_log_prob_gradient", "log_prob has no feature dim: pass axis=")
    check_dims_in("label_smoothed_log_prob_gradient", log_prob, [axis])
    dim = axis.dimension
    if not exclude_labels:
        floor_prob = smoothing / (dim - 1)
        factor = 1.0 - dim * floor_prob
    else:
        floor_value = smoothing / (dim - len(exclude_labels) - 1)
        indices = array_.range_over_dim(axis)
        keep = None
        for label in exclude_labels:
            ne = math_.compare(indices, "not_equal", label)
            keep = ne if keep is None else math_.logical_and(keep, ne)
        factor = math_.where(keep, 1.0 - (dim - len(exclude_labels)) * floor_value, 1.0)
        floor_prob = math_.where(keep, floor_value, 0.0)
    return scaled_gradient_ext(log_prob, scale=factor, shift=-floor_prob, scale_shift_by_sum_over_axis=axis)
