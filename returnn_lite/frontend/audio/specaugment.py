"""
SpecAugment (Park et al. 2019, https://arxiv.org/abs/1904.08779): random time and feature masks, in training only.

As the original rf: per sequence a random number of time masks in [min(s, T), min(max(T // num_spatial_mask_factor,
2) * (1 + s1 + 2 s2), T)] (T: the padded length; s1, s2: 1 from global step 1000 / 2000 on, with
global_train_step_dependent, else 1), each at a distinct random frame within the sequence and 1 to
max_consecutive_spatial_dims frames long (clipped at the sequence end); feature masks likewise, [s, 2 + s1 + 2 s2]
of them, 1 to max_consecutive_feature_dims (default feature dim // 5) wide. Masked values are 0.
"""

from __future__ import annotations

from ..array_ import dim_value, range_over_dim, sequence_mask
from ..math_ import compare, logical_and, reduce_argmax, where
from ..nn import random_uniform
from ..run_ctx import get_run_ctx
from .._utils import error, is_tensor

__all__ = ["specaugment", "random_mask", "mask"]


def specaugment(x, *, spatial_dim, feature_dim=None, global_train_step_dependent=True, only_on_train=True,
                max_consecutive_spatial_dims=20, max_consecutive_feature_dims=None, num_spatial_mask_factor=100):
    """x [..., spatial_dim, feature_dim] with random time and feature masks (see the module docstring)."""
    ctx = get_run_ctx()
    if only_on_train and not ctx.train_flag:
        return x
    feature_dim = feature_dim or x.feature_dim
    if feature_dim is None:
        raise error("audio.specaugment", "the input has no feature dim: pass feature_dim=")
    max_consecutive_feature_dims = max_consecutive_feature_dims or feature_dim.dimension // 5
    step1 = step2 = 1
    if global_train_step_dependent:
        step = _as_int(ctx.step, "the global train step")
        step1, step2 = int(step >= 1000), int(step >= 2000)
    spatial_len = _as_int(dim_value(spatial_dim), "the padded length of %s" % spatial_dim.short_repr())
    x = random_mask(x, mask_axis=spatial_dim, broadcast_axis=feature_dim, min_num=min(step1 + step2, spatial_len),
                    max_num=min(max(spatial_len // num_spatial_mask_factor, 2) * (1 + step1 + step2 * 2), spatial_len),
                    max_dims=max_consecutive_spatial_dims)
    return random_mask(x, mask_axis=feature_dim, broadcast_axis=spatial_dim, min_num=step1 + step2,
                       max_num=2 + step1 + step2 * 2, max_dims=max_consecutive_feature_dims)


def _as_int(value, what):
    if isinstance(value, int):
        return value
    raw = getattr(value, "placeholder", value)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise error("audio.specaugment", "%s must be known when the graph is built (an eager backend such as torch), "
                                         "got %r" % (what, value)) from None


def random_mask(x, *, mask_axis, broadcast_axis, min_num, max_num, max_dims, mask_value=0.0):
    """
    Per entry of the dims of x other than mask_axis and broadcast_axis (one Dim or several): a random number in
    [min_num, max_num] of masks at distinct random positions of mask_axis (within its lengths), each
    :func:`mask` 1 to max_dims wide.
    """
    broadcast = [broadcast_axis] if not isinstance(broadcast_axis, (list, tuple, set)) else list(broadcast_axis)
    batch_dims = [d for d in x.dims if d != mask_axis and d not in broadcast]
    min_num, max_num = _as_int(min_num, "min_num"), _as_int(max_num, "max_num")
    num = None
    if min_num != max_num:
        num = random_uniform(batch_dims, minval=min_num, maxval=max_num + 1, dtype="int32")
    scores = random_uniform(batch_dims + [mask_axis], minval=0.0, maxval=1.0)
    within = sequence_mask([mask_axis])
    if within is not None:
        scores = where(within, scores, -1.0, allow_broadcast_all_sources=True)
    positions = range_over_dim(mask_axis)
    for i in range(max_num):
        pos = reduce_argmax(scores, axis=mask_axis)  # the highest remaining score: distinct positions, as top_k
        scores = where(compare(positions, "equal", pos, allow_broadcast_all_sources=True), -2.0, scores,
                       allow_broadcast_all_sources=True)
        masked = mask(x, mask_axis=mask_axis, pos=pos, max_amount=max_dims, mask_value=mask_value)
        if num is None:
            x = masked
        else:
            x = where(compare(num, "greater", i), masked, x, allow_broadcast_all_sources=True)
    return x


def mask(x, *, mask_axis, pos, max_amount, mask_value=0.0):
    """x with mask_axis frames [pos, min(pos + amount, length)) set to mask_value, amount uniform in
    [1, max_amount] per entry of pos (e.g. per sequence)."""
    if not is_tensor(pos):
        raise error("audio.mask", "pos must be a Tensor (per batch entry), got %r" % (pos,))
    amount = random_uniform(list(pos.dims), minval=1, maxval=_as_int(max_amount, "max_amount") + 1, dtype="int32")
    end = pos + amount
    length = mask_axis.get_size_tensor() if mask_axis.dimension is None else None
    idxs = range_over_dim(mask_axis)
    cond = logical_and(compare(idxs, "greater_equal", pos, allow_broadcast_all_sources=True),
                       compare(idxs, "less", end, allow_broadcast_all_sources=True), allow_broadcast_all_sources=True)
    if length is not None:
        cond = logical_and(cond, compare(idxs, "less", length, allow_broadcast_all_sources=True),
                           allow_broadcast_all_sources=True)
    return where(cond, mask_value, x, allow_broadcast_all_sources=True)


