"""
rf helpers on Dims (as the original's ``rf.dims``): ranges over dims, replacing a dim or the sparse dim, the
dim-match priority of params with a repeated dim, the number of (unmasked) elements of a shape.
"""

from __future__ import annotations

from ..tensor import Dim
from ._utils import as_dims, error, is_tensor

__all__ = [
    "range_over_dim_strided", "range_over_merged_dims", "linspace_over_dim", "replace_dim_v2", "set_sparse_dim",
    "dim_match_priority_when_needed", "num_elements_of_shape", "masked_fraction_of_shape",
]


def range_over_dim_strided(dim, *, stride, out_dim=None, dtype=None, device=None):
    """[out_dim] -> 0, stride, 2 * stride, ... (out_dim: ``ceil(dim / stride)`` by default) -> (Tensor, out_dim)."""
    from .array_ import range_over_dim

    if out_dim is None:
        out_dim = dim.ceildiv_right(stride)
    return range_over_dim(out_dim, dtype=dtype, device=device) * stride, out_dim


def range_over_merged_dims(dims, *, dtype=None, device=None):
    """[dims...] -> the flat index into the merged dim ``dims[0] * ... * dims[-1]`` (row-major, its sparse dim)."""
    from .array_ import range_over_dim, split_dims

    dims = list(dims)
    if not dims:
        raise error("range_over_merged_dims", "needs at least one dim")
    merged = dims[0]
    for d in dims[1:]:
        merged = merged * d
    indices = range_over_dim(merged, dtype=dtype, device=device)
    return split_dims(indices, axis=merged, dims=dims) if len(dims) > 1 else indices


def linspace_over_dim(dim, start=0.0, end=1.0, *, dtype=None, device=None):
    """[dim] -> start + (end - start) * i / max(size, 1) for i = 0 .. size - 1 (size per sequence for a dynamic dim,
    as the original: the end itself is not reached)."""
    from . import math_
    from .array_ import range_over_dim
    from .defaults import get_default_float_dtype

    dtype = dtype or get_default_float_dtype()
    positions = range_over_dim(dim, dtype=dtype, device=device)
    size = math_.cast(math_.maximum(dim.get_size_tensor(device=positions.device), 1), dtype)
    res = math_.combine(positions, "/", size, allow_broadcast_all_sources=True)
    if not isinstance(end - start, (int, float)) or end - start != 1:
        res = res * (end - start)
    if not isinstance(start, (int, float)) or start != 0:
        res = res + start
    return res


def replace_dim_v2(source, *, in_dim, out_dim, allow_expand=True, allow_shrink=True):
    """
    ``source`` with ``in_dim`` replaced by ``out_dim`` of another (padded) size: zero-padded at the end when longer
    (``allow_expand``), cut when shorter (``allow_shrink``). Eager backends only, as the original.
    """
    from . import array_
    from ._backend import get_backend_for_tensor

    if not get_backend_for_tensor(source).executing_eagerly():
        raise error("replace_dim_v2", "only on an eager backend (torch), as the original")
    if in_dim not in source.dims:
        raise error("replace_dim_v2", "dim %s not in %r" % (in_dim.short_repr(), source))
    if out_dim in source.dims:
        raise error("replace_dim_v2", "dim %s already in %r" % (out_dim.short_repr(), source))
    old, new = int(in_dim.get_dim_value()), int(out_dim.get_dim_value())
    if new == old:
        return array_.replace_dim(source, in_dim=in_dim, out_dim=out_dim)[0]
    if new > old:
        if not allow_expand:
            raise error("replace_dim_v2", "not allowed to expand %s (%i) to %s (%i)" % (
                in_dim.short_repr(), old, out_dim.short_repr(), new))
        return array_.pad(source, axes=[in_dim], padding=[(0, new - old)], out_dims=[out_dim], value=0,
                          handle_dynamic_dims=False)[0]
    if not allow_shrink:
        raise error("replace_dim_v2", "not allowed to shrink %s (%i) to %s (%i)" % (
            in_dim.short_repr(), old, out_dim.short_repr(), new))
    return array_.slice(source, axis=in_dim, size=out_dim)[0]


def set_sparse_dim(source, sparse_dim):
    """The same values with ``sparse_dim`` as their sparse dim (int Tensors: indices into that dim)."""
    if not is_tensor(source):
        raise error("set_sparse_dim", "expects a Tensor, got %r" % (source,))
    if not isinstance(sparse_dim, Dim):
        raise error("set_sparse_dim", "sparse_dim must be a Dim, got %r" % (sparse_dim,))
    if not source.dtype.startswith(("int", "uint")):
        raise error("set_sparse_dim", "a sparse dim needs int values, %r has dtype %s" % (source, source.dtype))
    res = source.copy()
    res.sparse_dim = sparse_dim
    return res


def dim_match_priority_when_needed(dim, *other_dims):
    """
    ``dim`` itself, or, when it equals one of ``other_dims``, a copy of it (equal to it) with match priority 1:
    a param with dims ``[dim_match_priority_when_needed(in_dim, out_dim), out_dim]`` can then have ``in_dim == out_dim``
    (``rf.Linear(d, d)``), and matmul/reduce/gather over ``in_dim`` take its first axis.
    """
    if any(dim == d for d in other_dims):
        return dim.copy(match_priority=1)
    return dim


def num_elements_of_shape(dims, *, use_mask=True, device=None):
    """
    Number of elements of a tensor with these dims (a Dim or a list): an int where all are static, else a scalar
    Tensor; with ``use_mask`` only the frames within the sequence lengths count, else the padded sizes.
    (device: the lengths stay where they are, as the original's default.)
    """
    from . import math_

    dims = as_dims(dims)
    if use_mask:
        return math_.num_elements_of_shape(dims)
    n = 1
    for d in dims:
        n = n * (d.dimension if d.dimension is not None else d.get_dim_value_tensor())
    return n


def masked_fraction_of_shape(dims, *, inverse=False, device=None):
    """num_elements_of_shape(dims) / the padded number of elements (or its inverse); 1 without dynamic dims."""
    from . import math_

    dims = as_dims(dims)
    if all(d.dimension is not None or d.is_batch_dim() for d in dims):
        return 1
    masked = num_elements_of_shape(dims, device=device)
    total = num_elements_of_shape(dims, use_mask=False, device=device)
    masked, total = (math_.cast(x, "float32") if is_tensor(x) else float(x) for x in (masked, total))
    return total / masked if inverse else masked / total
