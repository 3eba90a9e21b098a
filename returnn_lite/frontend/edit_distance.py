"""rf.edit_distance: the Levenshtein distance between two label sequences per batch entry."""

from __future__ import annotations

from ._backend import get_backend_for_tensor
from ._utils import check_dims_in, dims_str, error

__all__ = ["edit_distance"]


def edit_distance(a, a_spatial_dim, b, b_spatial_dim, *, dtype="int32"):
    """a [B..., Ta], b [B..., Tb] (int labels, within their lengths) -> the number of insertions, deletions and
    substitutions turning one into the other, [B...]."""
    check_dims_in("edit_distance", a, [a_spatial_dim])
    check_dims_in("edit_distance", b, [b_spatial_dim])
    a_rest = [d for d in a.dims if d != a_spatial_dim]
    b_rest = [d for d in b.dims if d != b_spatial_dim]
    if set(a_rest) != set(b_rest):
        raise error("edit_distance", "a and b need the same other dims, got %s and %s" % (
            dims_str(a_rest), dims_str(b_rest)))
    if not dtype.startswith("int"):
        raise error("edit_distance", "dtype must be an int dtype, got %r" % (dtype,))
    backend = get_backend_for_tensor(a)
    method = getattr(backend, "edit_distance", None)
    if method is None:
        raise error("edit_distance", "not implemented by the %s backend" % backend.name)
    return method(a, a_spatial_dim, b, b_spatial_dim, batch_dims=a_rest, dtype=dtype)


def levenshtein(a, b):
    """Edit distance of two Python sequences (one row of the DP table at a time)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]
