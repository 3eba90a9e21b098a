"""rf dtype helpers: the default int / array index dtype and :func:`is_float_dtype` (the float default is in
:mod:`.defaults`)."""

from __future__ import annotations

__all__ = ["get_default_int_dtype", "get_default_array_index_dtype", "is_float_dtype"]


def get_default_int_dtype():
    return "int32"


def get_default_array_index_dtype():
    """The dtype of indices (as the int default)."""
    return get_default_int_dtype()


def is_float_dtype(dtype):
    """Whether dtype is a float dtype (supports backprop)."""
    return dtype.startswith("float") or dtype == "bfloat16"
