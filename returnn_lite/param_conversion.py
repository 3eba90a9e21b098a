"""
Param conversions for checkpoints whose params have another layout than ours (e.g. other LSTM kernels).
Each converter gets the param name, the variable and the checkpoint reader and returns a numpy value or None.
"""

from __future__ import annotations

_converters = []


def register_converter(func):
    """func(name, var, reader, ckpt_shapes) -> numpy value or None."""
    _converters.append(func)
    return func


def convert_param(name, var, reader, ckpt_shapes):
    for func in _converters:
        value = func(name, var, reader, ckpt_shapes)
        if value is not None:
            return value
    return None
