"""rf's defaults: float dtype, rf.control_flow_ctx, dropout broadcasting (the default device: device.py)."""

from __future__ import annotations

import contextlib

from ._utils import error

__all__ = ["get_default_float_dtype", "set_default_float_dtype", "get_default_int_dtype",
           "get_default_array_index_dtype", "control_flow_ctx", "dropout_broadcast_default"]

_default_float_dtype = ["float32"]


def get_default_float_dtype():
    """The dtype of new float params and constants ("float32" unless set)."""
    return _default_float_dtype[0]


def set_default_float_dtype(dtype):
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise error("set_default_float_dtype", "not a float dtype: %r" % (dtype,))
    _default_float_dtype[0] = dtype


def get_default_int_dtype():
    """The dtype of new int constants ("int32", as the original)."""
    return "int32"


def get_default_array_index_dtype():
    """The dtype of indices (loop counters, range_over_dim): the default int dtype, as the original."""
    return get_default_int_dtype()


@contextlib.contextmanager
def control_flow_ctx(ctx=None):
    """
    The original computes things outside of loops/conds with ``control_flow_ctx(None)``; here ops are created in the
    context they are called in (both backends handle a loop-invariant op inside a loop), so this is a no-op scope.
    """
    yield ctx


def dropout_broadcast_default():
    """
    Whether dropout shares its mask over all dims but the given axis by default: config ``rf_dropout_broadcast``,
    else True up to behavior version 18 (the original's old default), else False.
    """
    from ..compat.util_basic import BehaviorVersion
    from ..config import get_global_config

    config = get_global_config(raise_exception=False)
    if config:
        opt = config.bool("rf_dropout_broadcast", None)
        if opt is not None:
            return opt
    return BehaviorVersion.get() <= 18
