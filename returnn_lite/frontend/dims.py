"""rf helpers on Dims: the dim-match priority of params with a repeated dim (as the original's ``rf.dims``)."""

from __future__ import annotations


def dim_match_priority_when_needed(dim, *other_dims):
    """
    ``dim`` itself, or, when it equals one of ``other_dims``, a copy of it (equal to it) with match priority 1:
    a param with dims ``[dim_match_priority_when_needed(in_dim, out_dim), out_dim]`` can then have ``in_dim == out_dim``
    (``rf.Linear(d, d)``), and matmul/reduce/gather over ``in_dim`` take its first axis.
    """
    if any(dim == d for d in other_dims):
        return dim.copy(match_priority=1)
    return dim
