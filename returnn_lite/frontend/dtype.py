"""rf dtype helpers: the default int / array index dtype and :func:`is_float_dtype` (the float default is in
:mod:`.defaults`)."""

from __future__ import annotations

from .defaults import get_default_array_index_dtype, get_default_int_dtype  # noqa: F401 (re-exported)

__all__ = ["get_default_int_dtype", "get_default_array_index_dtype", "is_float_dtype"]


def is_float_dtype(dtype):
    """Whether dtype is a float dtype (supports backprop)."""
    return dtype.startswith("float") or dtype == "bfloat16"
