"""
Matmuls whose gradients ``tf.gradients`` builds with fewer ops (issue 30: gradient construction at plain-TF cost).

TF's gradient of ``BatchMatMulV2`` assumes the batch dims may broadcast whenever they are not all static: it adds
Shape, StridedSlice, BroadcastGradientArgs, Sum and Reshape per operand (17 ops per matmul), and for a weight matrix
[n_in, n_out] broadcast against x [..., n_in] it computes a [..., n_in, n_out] product that it then sums. The
forward op stays the same here (same kernel, same values); only its gradient function is chosen by the caller, who
knows the shapes (via ``Graph.gradient_override_map``):

- ``matmul_by_weights(x, w)``: x [..., n_in] @ w [n_in, n_out] (w 2D, static shape): dw as one 2D MatMul of the
  flattened frames (as plain TF's dense layer), dx one matmul without reduction;
- ``matmul_same_batch(a, b, ...)``: batch dims of a and b equal by construction (e.g. attention [B,H,T,D]): the two
  matmuls, no reduction;
- ``mul_by_mask(x, mask)``: x * a mask broadcast to x (dropout): only x's gradient, grad * mask.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.framework import ops

_WEIGHTS_GRAD = "ReturnnLiteMatMulByWeights"
_SAME_BATCH_GRAD = "ReturnnLiteMatMulSameBatch"
_MASK_GRAD = "ReturnnLiteMulByMask"


def _matmul_by_weights_grad(op, grad):
    x, w = op.inputs
    n_in, n_out = w.shape.as_list()
    grad_x = tf.matmul(grad, w, transpose_b=True)  # [..., n_in]: x's shape, nothing to reduce
    grad_w = tf.matmul(tf.reshape(x, [-1, n_in]), tf.reshape(grad, [-1, n_out]), transpose_a=True)
    return grad_x, grad_w


def _matmul_same_batch_grad(op, grad):
    a, b = op.inputs
    adj_a, adj_b = op.get_attr("adj_x"), op.get_attr("adj_y")
    if not adj_a and not adj_b:
        return tf.matmul(grad, b, adjoint_b=True), tf.matmul(a, grad, adjoint_a=True)
    if not adj_a and adj_b:
        return tf.matmul(grad, b), tf.matmul(grad, a, adjoint_a=True)
    if adj_a and not adj_b:
        return tf.matmul(b, grad, adjoint_b=True), tf.matmul(a, grad)
    return tf.matmul(b, grad, adjoint_a=True, adjoint_b=True), tf.matmul(grad, a, adjoint_a=True, adjoint_b=True)


def _mul_by_mask_grad(op, grad):
    return grad * op.inputs[1], None  # the mask (no param behind it) gets no gradient


for _name, _fn in ((_WEIGHTS_GRAD, _matmul_by_weights_grad), (_SAME_BATCH_GRAD, _matmul_same_batch_grad),
                   (_MASK_GRAD, _mul_by_mask_grad)):
    try:
        ops.RegisterGradient(_name)(_fn)
    except KeyError:  # registered already (this module imported a second time under another name)
        pass


def matmul_by_weights(x, w):
    """x [..., n_in] @ w [n_in, n_out] (w 2D with static shape)."""
    w = tf.convert_to_tensor(w)
    if x.shape.rank is None or x.shape.rank <= 2 or not w.shape.is_fully_defined():
        return tf.matmul(x, w)  # 2D: MatMul (cheap gradient already); unknown shapes: TF's general gradient
    with tf.compat.v1.get_default_graph().gradient_override_map({"BatchMatMulV2": _WEIGHTS_GRAD, "BatchMatMulV3": _WEIGHTS_GRAD}):
        return tf.matmul(x, w)


def matmul_same_batch(a, b, transpose_a=False, transpose_b=False):
    """tf.matmul of a and b whose batch dims (all but the last two) are the same dims (no broadcasting)."""
    with tf.compat.v1.get_default_graph().gradient_override_map({"BatchMatMulV2": _SAME_BATCH_GRAD, "BatchMatMulV3": _SAME_BATCH_GRAD}):
        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def mul_by_mask(x, mask):
    """
    x * mask for a mask that broadcasts to x's shape (e.g. dropout's [1, 1, F] mask on [B, T, F]) and needs no
    gradient: the gradient is grad * mask, without TF's reduction of a gradient for the mask over broadcast axes.
    """
    with tf.compat.v1.get_default_graph().gradient_override_map({"Mul": _MASK_GRAD}):
        return tf.multiply(x, mask)
