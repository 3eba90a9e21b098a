"""
rf packing of masked frames, as the original's ``rf.masked_select`` / ``rf.masked_scatter`` / ``rf.pack_padded``:
composed from rf primitives (merge_dims, compare, matmul, gather, where), so every backend runs them. The position
of each frame among the selected ones is a cumulative sum, computed as a matmul with a triangular mask: memory
grows with the square of the number of packed frames (fine for the sizes of a batch of labels or frames; a
backend may later provide a native op).
"""

from __future__ import annotations

from ..tensor import Dim
from . import array_, math_
from ._utils import check_dims_in, dims_str, error, is_tensor

__all__ = ["masked_select", "masked_scatter", "pack_padded"]


def _flat_dim(dims):
    """The dim of dims merged: their product if static, else a dim of the padded product (a scalar size: the
    frames beyond the lengths are masked out by the callers, not by lengths of the merged dim)."""
    if len(dims) == 1:
        return dims[0]
    if all(d.dimension is not None for d in dims):
        return None  # (merge_dims' static product)
    size = None
    for d in dims:
        v = d.get_dim_value_tensor() if d.dimension is None else d.dimension
        size = v if size is None else size * v
    return Dim(size, name="flat(%s)" % ",".join(d.description for d in dims))


def _flat(tensor, dims, func, flat_dim=None):
    """tensor with dims merged into one (row-major, dims[0] major) -> (Tensor, merged dim)."""
    from ._backend import get_backend_for_tensor

    check_dims_in(func, tensor, dims)
    if any(d.is_batch_dim() for d in dims) and not get_backend_for_tensor(tensor).executing_eagerly():
        raise error(func, "packing the batch dim (dims %s) is not supported on the layers backend (its merge_dims "
                          "layer cannot merge the batch axis); pack the other dims per sequence" % dims_str(dims))
    if len(dims) == 1:
        return tensor, dims[0]
    return array_.merge_dims(tensor, dims=dims, out_dim=flat_dim or _flat_dim(dims))


def _inclusive_cumsum(mask, axis):
    """int32 count of the True frames of mask along axis up to and including each frame (a triangular matmul)."""
    later = axis.copy(same_as_self=False, description="%s:later" % axis.description)
    if axis.dimension is None:
        later.derived_from = ("add", (axis, 0))
    upto = math_.compare(array_.range_over_dim(axis), "less_equal", array_.range_over_dim(later),
                         allow_broadcast_all_sources=True)  # [axis, later]: frame m counts for frames m' >= m
    counts = math_.matmul(math_.cast(mask, "float32"), math_.cast(upto, "float32"), reduce=axis, use_mask=False)
    return math_.cast(array_.replace_dim(counts, in_dim=later, out_dim=axis)[0], "int32")


def masked_select(tensor, *, mask, dims, out_dim=None):
    """
    The frames of tensor where mask is True, packed along a new dim -> (Tensor, out_dim). dims (all or some of the
    mask's dims) are replaced by out_dim, in their order (dims[0] major); the mask's other dims stay (then the
    number of packed frames, out_dim's size, is per entry of those).
    """
    dims = list(dims)
    if not is_tensor(mask) or mask.dtype != "bool":
        raise error("masked_select", "mask must be a bool Tensor, got %r" % (mask,))
    if not dims or not set(dims) <= set(mask.dims):
        raise error("masked_select", "dims %s must be a non-empty subset of the mask's dims %s" % (
            dims_str(dims), dims_str(mask.dims)))
    check_dims_in("masked_select", tensor, list(mask.dims))
    mask = math_.logical_and(mask, array_.sequence_mask(dims), allow_broadcast_all_sources=True) \
        if any(d.dimension is None and not d.is_batch_dim() for d in dims) else mask
    flat_mask, flat_dim = _flat(mask, dims, "masked_select")
    flat, _ = _flat(tensor, dims, "masked_select", flat_dim)
    counts = _inclusive_cumsum(flat_mask, flat_dim)  # [others..., flat]
    sizes = math_.reduce_sum(math_.cast(flat_mask, "int32"), axis=flat_dim)  # [others...]
    if out_dim is None:
        out_dim = Dim(sizes, name="masked_select")
    elif out_dim.dimension is not None:
        raise error("masked_select", "out_dim must be a dynamic dim (the number of selected frames), got %s" %
                    out_dim.short_repr())
    elif out_dim.dyn_size_ext is None:
        out_dim.dyn_size_ext = sizes
    # source frame of packed frame n: the number of frames whose count is <= n
    before = math_.compare(counts, "less_equal", array_.range_over_dim(out_dim), allow_broadcast_all_sources=True)
    indices = math_.reduce_sum(math_.cast(before, "int32"), axis=flat_dim)  # [others..., out_dim]
    return array_.gather(flat, indices=indices, axis=flat_dim, clip_to_valid=True), out_dim


def masked_scatter(source, *, mask, dims, in_dim):
    """The inverse of masked_select: source [in_dim, ...] -> [dims..., ...] with frame k of in_dim at the k-th True
    position of mask (dims: the packed dims of the mask, in the packing order; its other dims, e.g. the batch of a
    per-sequence packing, are in source too), zeros elsewhere."""
    dims = list(dims)
    if not is_tensor(mask) or mask.dtype != "bool" or not dims or not set(dims) <= set(mask.dims):
        raise error("masked_scatter", "mask must be a bool Tensor with the dims %s (and maybe others, which source "
                                      "then has too), got %r" % (dims_str(dims), mask))
    check_dims_in("masked_scatter", source, [in_dim])
    flat_mask, flat_dim = _flat(mask, dims, "masked_scatter")
    counts = _inclusive_cumsum(flat_mask, flat_dim)  # [flat]
    if len(dims) > 1:  # back to [dims...]: the count at each frame's row-major flat index
        flat_index = None
        for d in dims:
            pos = array_.range_over_dim(d)
            flat_index = pos if flat_index is None else math_.combine(
                flat_index * d.get_dim_value_tensor(), "+", pos, allow_broadcast_all_sources=True)
        counts = array_.gather(counts, indices=flat_index, axis=flat_dim, clip_to_valid=True)
    positions = math_.maximum(counts - 1, 0)  # [dims...]: the packed frame of each True frame
    frames = array_.gather(source, indices=positions, axis=in_dim, clip_to_valid=True)
    return math_.where(mask, frames, array_.zeros([], dtype=source.dtype), allow_broadcast_all_sources=True)


def pack_padded(source, *, dims, enforce_sorted=False, out_dim=None):
    """The frames of source within the sequence lengths of dims, packed (dims[0] major) -> (Tensor, out_dim)."""
    if enforce_sorted:
        raise error("pack_padded", "enforce_sorted=True is not supported (as the original)")
    dims = list(dims)
    mask = array_.sequence_mask(dims)
    if mask is None:  # (no dynamic dims: all frames)
        mask = array_.ones(dims, dtype="bool")
    return masked_select(source, mask=mask, dims=dims, out_dim=out_dim)
