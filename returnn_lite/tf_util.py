"""
TF helpers for config code, under the names of the original's TF util module (``TFUtil`` /
``returnn.tf.util.basic``).

This module is also the namespace of ``eval`` strings (``{"class": "eval", "eval": "safe_log(source(0))"}``), as in
the original: every public name here is visible there, plus ``tf`` (TF 2 with TF1 names, see
:mod:`returnn_lite.compat.tf1`), ``np``, ``source``, ``self`` (the layer) and the layer's ``eval_locals``.

Helpers: ``where_bc``, ``safe_log``, ``safe_exp``, ``nd_indices``, ``expand_dims_unbroadcast``,
``expand_multiple_dims``, ``tile_transposed``, ``get_shape``, ``get_shape_dim``, ``get_ndim``, ``sequence_mask``,
``sequence_mask_time_major``, ``optional_add``, ``optional_mul``, ``move_axis``, ``swapaxes``, ``dimshuffle``,
``flatten_with_seq_len_mask``, ``check_input_ndim``, ``check_shape_equal``, ``identity``, ``reuse_name_scope``,
``var_creation_scope``, ``get_initializer``, ``get_activation_function``, ``log_sigmoid``, ``dot``,
``get_shared_vocab``, ``same_control_flow_ctx``, and ``Data``, ``Dim``, ``DimensionTag``, ``batch_dim``.
"""

from __future__ import annotations

import contextlib

import numpy as np
import tensorflow as tf

from .data import Data, Dim

tf1 = tf.compat.v1
DimensionTag = Dim

__all__ = [
    "where_bc", "safe_log", "safe_exp", "nd_indices", "expand_dims_unbroadcast", "expand_multiple_dims",
    "tile_transposed", "get_shape", "get_shape_dim", "get_ndim", "sequence_mask", "sequence_mask_time_major",
    "optional_add", "optional_mul", "move_axis", "swapaxes", "dimshuffle", "flatten_with_seq_len_mask",
    "check_input_ndim", "check_shape_equal", "identity", "reuse_name_scope", "var_creation_scope",
    "get_initializer", "get_activation_function", "log_sigmoid", "dot", "get_shared_vocab",
    "same_control_flow_ctx", "Data", "Dim", "DimensionTag", "batch_dim", "tf", "np",
]


def __getattr__(name):
    if name == "batch_dim":
        from . import data

        return getattr(data, "batch_dim")
    raise AttributeError(
        "returnn_lite.tf_util has no %r (the original's TF util helper of that name is not provided; "
        "available: %s)" % (name, ", ".join(n for n in __all__ if n not in ("tf", "np"))))


def where_bc(condition, x, y, name="where_bc"):
    """``tf.where`` with broadcasting of condition, x and y."""
    with tf.name_scope(name):
        x = tf.convert_to_tensor(x)
        y = tf.convert_to_tensor(y, dtype=x.dtype) if not isinstance(y, tf.Tensor) else y
        if not isinstance(x, tf.Tensor) or x.dtype != y.dtype:
            x = tf.cast(x, y.dtype)
        return tf.where(condition, x, y)


def safe_log(x, eps=1e-20, use_fake_grad=True):
    """log(x), numerically safe: log(softmax(z)) becomes log_softmax(z), else log(max(x, eps))."""
    x = tf.convert_to_tensor(x)
    if x.op.type == "Softmax":
        return tf.nn.log_softmax(x.op.inputs[0])
    if x.op.type == "Sigmoid":
        return tf.math.log_sigmoid(x.op.inputs[0])
    return tf.math.log(tf.maximum(x, tf.cast(eps, x.dtype)))


def safe_exp(x, eps=1e-20):
    """exp(x) clipped so that it stays finite."""
    x = tf.convert_to_tensor(x)
    max_val = np.log(np.finfo(x.dtype.as_numpy_dtype).max) - 1.0
    return tf.exp(tf.minimum(x, tf.cast(max_val, x.dtype)))


def log_sigmoid(x):
    return tf.math.log_sigmoid(x)


def get_shape(x):
    """Static dims as ints where known, else scalar tensors."""
    x = tf.convert_to_tensor(x)
    static = x.shape.as_list()
    dyn = tf.shape(x)
    return [d if d is not None else dyn[i] for i, d in enumerate(static)]


def get_shape_dim(x, axis, name="get_shape_dim"):
    dim = x.shape.as_list()[axis] if x.shape.rank is not None else None
    if dim is not None:
        return dim
    with tf.name_scope(name):
        return tf.shape(x)[axis]


def get_ndim(x):
    return x.shape.rank if x.shape.rank is not None else tf.rank(x)


def nd_indices(indices, batch_axis=0, indices_batch_major=None):
    """indices (B, ...) -> (B, ..., 2) with the batch index first, for ``tf.gather_nd``."""
    with tf.name_scope("nd_indices"):
        indices = tf.convert_to_tensor(indices)
        batch_idxs = tf.range(tf.shape(indices)[batch_axis], dtype=indices.dtype)
        shape = [1] * indices.shape.rank
        shape[batch_axis] = -1
        batch_idxs = tf.reshape(batch_idxs, shape) + tf.zeros_like(indices)
        return tf.stack([batch_idxs, indices], axis=-1)


def expand_dims_unbroadcast(x, axis, dim, name="expand_dims_unbroadcast"):
    """Insert a new axis at ``axis`` and tile it to ``dim``."""
    with tf.name_scope(name):
        x = tf.expand_dims(tf.convert_to_tensor(x), axis)
        if isinstance(dim, int) and dim == 1:
            return x
        multiples = [1] * x.shape.rank
        multiples[axis] = dim
        return tf.tile(x, multiples)


def expand_multiple_dims(x, axes, name="expand_multiple_dims"):
    with tf.name_scope(name):
        for axis in sorted(axes):
            x = tf.expand_dims(x, axis)
        return x


def tile_transposed(x, axis, multiples):
    """Like tile along axis, but each entry is repeated ``multiples`` times in place (a b -> a a b b)."""
    with tf.name_scope("tile_transposed"):
        x = tf.convert_to_tensor(x)
        shape = tf.shape(x)
        x = tf.expand_dims(x, axis + 1)
        tiles = [1] * x.shape.rank
        tiles[axis + 1] = multiples
        x = tf.tile(x, tiles)
        new_shape = tf.concat([shape[:axis], [shape[axis] * multiples], shape[axis + 1:]], axis=0)
        return tf.reshape(x, new_shape)


def sequence_mask(lengths, maxlen=None):
    """(B,) -> (B, T) bool."""
    return tf.sequence_mask(lengths, maxlen=maxlen)


def sequence_mask_time_major(lengths, maxlen=None):
    """(B,) -> (T, B) bool."""
    return tf.transpose(tf.sequence_mask(lengths, maxlen=maxlen), [1, 0])


def optional_add(*args):
    args = [a for a in args if a is not None]
    if not args:
        return None
    y = args[0]
    for a in args[1:]:
        y = y + a
    return y


def optional_mul(*args):
    args = [a for a in args if a is not None]
    if not args:
        return None
    y = args[0]
    for a in args[1:]:
        y = y * a
    return y


def move_axis(x, old_axis, new_axis, name="move_axis"):
    with tf.name_scope(name):
        ndim = x.shape.rank
        old_axis %= ndim
        new_axis %= ndim
        perm = [i for i in range(ndim) if i != old_axis]
        perm.insert(new_axis, old_axis)
        return tf.transpose(x, perm)


def swapaxes(x, axis1, axis2):
    ndim = x.shape.rank
    perm = list(range(ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return tf.transpose(x, perm)


def dimshuffle(x, axes, name="dimshuffle"):
    """Theano-style dimshuffle: axes is a list of source axes or "x" for a new broadcast axis."""
    with tf.name_scope(name):
        real = [a for a in axes if a != "x"]
        y = tf.transpose(x, real) if real != list(range(len(real))) else x
        for i, a in enumerate(axes):
            if a == "x":
                y = tf.expand_dims(y, i)
        return y


def flatten_with_seq_len_mask(x, seq_lens, batch_dim_axis=0, time_dim_axis=1, time_major=None):
    """(B, T, ...) -> (sum(seq_lens), ...): the frames within the sequence lengths."""
    with tf.name_scope("flatten_with_seq_len_mask"):
        if time_major is not None:
            batch_dim_axis, time_dim_axis = (1, 0) if time_major else (0, 1)
        if (batch_dim_axis, time_dim_axis) != (0, 1):
            x = tf.transpose(x, [batch_dim_axis, time_dim_axis] + [
                i for i in range(x.shape.rank) if i not in (batch_dim_axis, time_dim_axis)])
        mask = tf.sequence_mask(seq_lens, maxlen=tf.shape(x)[1])
        return tf.boolean_mask(x, mask)


def check_input_ndim(x, ndim):
    if x.shape.rank is not None and x.shape.rank != ndim:
        raise ValueError("expected ndim %i, got shape %s" % (ndim, x.shape))
    return x


def check_shape_equal(x, y):
    return x


def identity(x):
    return x


def dot(a, b, transpose_b=False):
    """Matrix product of the last axis of a with the first axis of b (b 2D)."""
    with tf.name_scope("dot"):
        shape = tf.shape(a)
        a2 = tf.reshape(a, [-1, shape[-1]])
        y = tf.matmul(a2, b, transpose_b=transpose_b)
        out_dim = tf.shape(b)[0 if transpose_b else 1]
        return tf.reshape(y, tf.concat([shape[:-1], [out_dim]], axis=0))


@contextlib.contextmanager
def reuse_name_scope(name, absolute=None, reuse=None, **kwargs):
    """Enter the variable scope ``name`` (optionally reusing variables)."""
    with tf1.variable_scope(name, reuse=reuse) as scope:
        yield scope


@contextlib.contextmanager
def var_creation_scope(**kwargs):
    yield


@contextlib.contextmanager
def same_control_flow_ctx(x):
    yield


def get_initializer(s, seed=None, eval_local_ns=None, dtype=tf.float32):
    from .initializers import get_initializer as _get

    return _get(s, seed=seed) if s is not None else None


def get_activation_function(s):
    from .activations import get_activation_function as _get

    return _get(s)


def get_shared_vocab(labels):
    """A constant string tensor of the labels."""
    return tf.constant(list(labels), dtype=tf.string)
