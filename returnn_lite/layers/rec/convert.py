"""
Param conversion: checkpoints written with TF's LSTMCell / BasicLSTMCell / LSTMBlockCell layout
(``<layer>/rec/lstm_cell/kernel`` [n_in + n, 4n] with gates (i, j, f, o), ``.../bias``) loaded into a
NativeLstm2-layout rec layer (``<layer>/rec/W`` [n_in, 4n], ``W_re`` [n, 4n], ``b`` [4n], gates (j, i, f, o)).
The TF cells add forget_bias (default 1.0) at run time; it is folded into b.
"""

from __future__ import annotations

import numpy as np

from ...param_conversion import register_converter

_TF_SCOPES = (("lstm_cell", 1.0), ("basic_lstm_cell", 1.0), ("lstm_block_cell", 1.0))


def _to_native_order(x, n):
    """(i, j, f, o) blocks on the last axis -> (j, i, f, o)."""
    i, j, f, o = (x[..., k * n:(k + 1) * n] for k in range(4))
    return np.concatenate([j, i, f, o], axis=-1)


@register_converter
def convert_tf_lstm_to_native(name, var, reader, ckpt_shapes):
    for suffix in ("/rec/W", "/rec/W_re", "/rec/b"):
        if name.endswith(suffix):
            base = name[:-len(suffix)] + "/rec/"
            break
    else:
        return None
    for scope, forget_bias in _TF_SCOPES:
        kernel_name, bias_name = base + scope + "/kernel", base + scope + "/bias"
        if kernel_name in ckpt_shapes and bias_name in ckpt_shapes:
            break
    else:
        return None
    kernel = reader.get_tensor(kernel_name)
    n = kernel.shape[1] // 4
    n_in = kernel.shape[0] - n
    if suffix == "/rec/W":
        value = _to_native_order(kernel[:n_in], n)
    elif suffix == "/rec/W_re":
        value = _to_native_order(kernel[n_in:], n)
    else:
        bias = reader.get_tensor(bias_name).copy()
        bias[2 * n:3 * n] += forget_bias
        value = _to_native_order(bias, n)
    if tuple(value.shape) != tuple(var.shape.as_list()):
        return None
    return value
