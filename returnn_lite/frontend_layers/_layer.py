"""
``frontend_op``: the layer class of rf calls that have no layer class of their own.

``{"class": "frontend_op", "op": NAME, "from": [...], "out": <template Tensor>, "opts": {...}}``: the output
template is the one the frontend computed (dims, dtype, sparse_dim), so the net dict and the rf code agree on dims
by construction; the TF code of each op is a small function of :data:`OPS` working on named dims.
"""

from __future__ import annotations

import tensorflow as tf

from ..data import Data, graph_cached
from ..layers.base import LayerBase
from ..losses.base import Loss

tf1 = tf.compat.v1
OPS = {}


def op(name):
    def deco(fn):
        OPS[name] = fn
        return fn

    return deco


class FrontendOpLayer(LayerBase):
    """One rf operation (see :data:`OPS`) with the output template given by the frontend."""

    layer_class = "frontend_op"

    def __init__(self, op, out, opts=None, **kwargs):  # noqa: A002
        super().__init__(**kwargs)
        if op not in OPS:
            raise ValueError("frontend_op: unknown op %r" % op)
        self.op = op
        self.extra = {}  # further outputs of the op (e.g. the final LSTM state), read by "extra" ops
        x = OPS[op](self, [s.output for s in self.sources], self.output, **(opts or {}))
        self.output.placeholder = x
        for d in self.output.dims:
            if d.dimension is None and not d.is_batch_dim() and d.complete_dyn_size() is None:
                raise ValueError("frontend_op %r (%s): no sequence lengths for dim %s" % (self.name, op, d))

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        loss_opts = d.get("loss_opts")
        if loss_opts and isinstance(loss_opts.get("custom_inv_norm_factor"), str):
            loss_opts = dict(loss_opts)
            loss_opts["custom_inv_norm_factor"] = get_layer(loss_opts["custom_inv_norm_factor"])
            d["loss_opts"] = loss_opts
        super().transform_config_dict(d, network=network, get_layer=get_layer)

    @classmethod
    def get_out_data_from_opts(cls, name, network, out, sources=(), **kwargs):
        return out.copy_template(name="%s_output" % name)


class AsIsErrorLoss(Loss):
    """``mark_as_loss(..., as_error=True)``: the output (summed over frames) is reported as error, not trained."""

    class_name = "as_is_error"
    need_target = False

    def get_value(self):
        return None

    def get_error(self):
        return self.reduce_func(self.output_flat)


# ---------------------------------------------------------------------------------------------------------------
# helpers on named dims


def align(data, dims):
    """data's tensor transposed/expanded to broadcast against a tensor with ``dims`` (which contain data's dims)."""
    x = data.placeholder
    own = list(data.dims)
    order = [d for d in dims if d in own]
    if len(order) != len(own):
        raise ValueError("align: dims %s of %s are not in %s" % (own, data.name, dims))
    perm = [own.index(d) for d in order]
    if perm != list(range(len(own))):
        x = tf.transpose(x, perm)
    dims = list(dims)
    first = next((i for i, d in enumerate(dims) if d in own), len(dims))
    for i in range(first + 1, len(dims)):  # leading missing dims broadcast by themselves
        if dims[i] not in own:
            x = tf.expand_dims(x, i - first)
    return x


def _covers(inputs, specs, dims):
    """Whether one of the operands has all dims (so TF broadcasting gives the full shape)."""
    n = len(dims)
    return any(isinstance(sp, int) and len(inputs[sp].dims) == n for sp in specs)


def to_out(x, x_dims, out):
    """x with dims x_dims (same set as out.dims) transposed to out's order."""
    x_dims = list(x_dims)
    perm = [x_dims.index(d) for d in out.dims]
    if perm != list(range(len(perm))):
        x = tf.transpose(x, perm)
    return x


def _in_control_flow():
    return tf1.get_default_graph()._get_control_flow_context() is not None  # noqa (no public API)


def dim_value(layer, d):
    if d.dimension is not None:
        return d.dimension
    if d.is_batch_dim():
        return layer.network.get_data_batch_dim()
    size = d.complete_dyn_size()
    if size is None:
        raise ValueError("dim %s has no sequence lengths" % d)
    if _in_control_flow():
        return tf.reduce_max(size)
    return graph_cached(("max", size.ref()), lambda: tf.reduce_max(size, name="max_len"))


def seq_mask(d, dims, x=None):
    """Bool mask of the dynamic dim d (padded length: its max length), broadcastable against ``dims``."""
    from ..data import batch_dim

    size = d.complete_dyn_size()
    if _in_control_flow():
        mask = tf.sequence_mask(size, maxlen=tf.reduce_max(size))
    else:
        def create():
            with tf.name_scope("seq_mask"):
                return tf.sequence_mask(size, maxlen=tf.reduce_max(size))

        mask = graph_cached(("rf_mask", size.ref()), create)
    mask_dims = [batch_dim, d] if size.shape.rank == 1 else [d]
    return align(Data("mask", dims=mask_dims, dtype="bool", placeholder=mask), dims)


def masked(x, dims, axes, value):
    for d in axes:
        if d.dimension is None and not d.is_batch_dim():
            x = tf.where(seq_mask(d, dims), x, tf.constant(value, dtype=x.dtype))
    return x


def operand(inputs, spec, dims, dtype):
    if isinstance(spec, int):
        return align(inputs[spec], dims)
    return tf.constant(spec["const"], dtype=dtype)


# ---------------------------------------------------------------------------------------------------------------
# ops

_COMBINE = {
    "add": tf.add, "sub": tf.subtract, "mul": tf.multiply, "truediv": tf.truediv, "floordiv": tf.math.floordiv,
    "mod": tf.math.floormod, "pow": tf.pow, "maximum": tf.maximum, "minimum": tf.minimum,
    "logical_and": tf.logical_and, "logical_or": tf.logical_or, "squared_difference": tf.math.squared_difference,
    "equal": tf.equal, "not_equal": tf.not_equal, "less": tf.less, "less_equal": tf.less_equal,
    "greater": tf.greater, "greater_equal": tf.greater_equal,
}


@op("combine")
def _combine(layer, inputs, out, kind, a, b, dtype):
    x = operand(inputs, a, out.dims, dtype)
    y = operand(inputs, b, out.dims, dtype)
    z = _COMBINE[kind](x, y)
    if _covers(inputs, [a, b], out.dims):
        return z
    return tf.broadcast_to(z, _shape(layer, out))


def _shape(layer, out):
    return [dim_value(layer, d) for d in out.dims]


_ACT = {
    "relu": tf.nn.relu, "gelu": lambda x: tf.nn.gelu(x, approximate=False), "tanh": tf.tanh, "sigmoid": tf.sigmoid,
    "exp": tf.exp, "expm1": tf.math.expm1, "log": tf.math.log, "log1p": tf.math.log1p, "sqrt": tf.sqrt,
    "rsqrt": tf.math.rsqrt, "abs": tf.abs, "neg": tf.negative, "square": tf.square, "sin": tf.sin, "cos": tf.cos,
    "softplus": tf.nn.softplus, "log_sigmoid": tf.math.log_sigmoid, "silu": tf.nn.silu, "elu": tf.nn.elu,
    "selu": tf.nn.selu, "sign": tf.sign, "floor": tf.floor, "ceil": tf.math.ceil, "round": tf.round,
    "logical_not": tf.logical_not, "reciprocal": tf.math.reciprocal,
    "relu_square": lambda x: tf.square(tf.nn.relu(x)),
}


@op("activation")
def _activation(layer, inputs, out, func):
    return _ACT[func](inputs[0].placeholder)


@op("cast")
def _cast(layer, inputs, out, dtype):
    return tf.cast(inputs[0].placeholder, dtype)


@op("copy")
def _copy(layer, inputs, out):
    """Also the output layers: the source transposed to the order of the output dims."""
    return to_out(inputs[0].placeholder, inputs[0].dims, out)


@op("stop_gradient")
def _stop_gradient(layer, inputs, out):
    return tf.stop_gradient(inputs[0].placeholder)


@op("scaled_gradient")
def _scaled_gradient(layer, inputs, out, scale, shift=None, axis=None):
    """Identity forward; backward grad * scale (+ shift, times sum_axis |grad| with axis), as rf.scaled_gradient_ext.
    scale / shift: operand specs (Tensors with dims of the input, or constants)."""
    x = to_out(inputs[0].placeholder, inputs[0].dims, out)
    scale_t = tf.stop_gradient(tf.cast(operand(inputs, scale, out.dims, out.dtype), x.dtype))
    shift_t = None if shift is None else tf.stop_gradient(tf.cast(operand(inputs, shift, out.dims, out.dtype),
                                                                  x.dtype))
    axis_i = None if axis is None else list(out.dims).index(axis)

    @tf.custom_gradient
    def f(v):
        def grad(dy):
            res = dy * scale_t
            if shift_t is not None:
                res = res + shift_t * (tf.reduce_sum(tf.abs(dy), axis=axis_i, keepdims=True) if axis_i is not None
                                       else 1.0)
            return res

        return tf.identity(v), grad

    return f(x)


@op("where")
def _where(layer, inputs, out, cond, true_, false_):
    c = operand(inputs, cond, out.dims, "bool")
    t = operand(inputs, true_, out.dims, out.dtype)
    f = operand(inputs, false_, out.dims, out.dtype)
    y = tf.where(c, t, f)
    if _covers(inputs, [cond, true_, false_], out.dims):
        return y
    return tf.broadcast_to(y, _shape(layer, out))


@op("clip_by_value")
def _clip(layer, inputs, out, x, lo, hi):
    v = operand(inputs, x, out.dims, out.dtype)
    y = tf.minimum(tf.maximum(v, operand(inputs, lo, out.dims, out.dtype)), operand(inputs, hi, out.dims, out.dtype))
    if _covers(inputs, [x, lo, hi], out.dims):
        return y
    return tf.broadcast_to(y, _shape(layer, out))


@op("full")
def _full(layer, inputs, out, value):
    if inputs:
        return tf.broadcast_to(align(inputs[0], out.dims), _shape(layer, out))
    return tf.fill(_shape(layer, out), tf.constant(value, dtype=out.dtype))


@op("constant")
def _constant(layer, inputs, out, value):
    return tf.constant(value, dtype=out.dtype)


@op("range_over_dim")
def _range(layer, inputs, out, dim):
    return tf.range(dim_value(layer, dim), dtype=out.dtype)


@op("dim_value")
def _dim_value(layer, inputs, out, dim):
    return tf.cast(dim_value(layer, dim), out.dtype)


@op("dim_size")
def _dim_size(layer, inputs, out, dim):
    return tf.cast(dim.complete_dyn_size(), out.dtype)


_REDUCE = {"sum": tf.reduce_sum, "max": tf.reduce_max, "min": tf.reduce_min, "logsumexp": tf.reduce_logsumexp,
           "any": tf.reduce_any, "all": tf.reduce_all, "prod": tf.reduce_prod}
_NEUTRAL = {"sum": 0, "mean": 0, "max": float("-inf"), "min": float("inf"), "logsumexp": float("-inf"),
            "argmax": float("-inf"), "argmin": float("inf"), "any": False, "all": True, "prod": 1}


@op("reduce")
def _reduce(layer, inputs, out, mode, axes, use_mask):
    src = inputs[0]
    x = src.placeholder
    dims = list(src.dims)
    idx = [dims.index(a) for a in axes]
    dyn = [a for a in axes if a.dimension is None and not a.is_batch_dim()] if use_mask else []
    neutral = _NEUTRAL[mode]
    if x.dtype.is_integer and neutral in (float("inf"), float("-inf")):
        neutral = x.dtype.max if neutral > 0 else x.dtype.min
    x = masked(x, dims, dyn, neutral)
    rest = [d for d in dims if d not in axes]
    if mode in ("argmax", "argmin"):
        fn = tf.argmax if mode == "argmax" else tf.argmin
        y = tf.cast(fn(x, axis=idx[0]), out.dtype)
    elif mode == "mean":
        y = tf.reduce_sum(x, axis=idx)
        if dyn:
            ones = masked(tf.ones_like(x), dims, dyn, 0)
            y = y / tf.reduce_sum(ones, axis=idx)
        else:
            n = 1
            for a in axes:
                n = n * dim_value(layer, a)
            y = y / tf.cast(n, y.dtype)
    else:
        y = _REDUCE[mode](x, axis=idx)
    return to_out(y, rest, out)


@op("softmax")
def _softmax(layer, inputs, out, axis, use_mask, log):
    src = inputs[0]
    dims = list(src.dims)
    x = src.placeholder
    if use_mask and axis.dimension is None:
        x = masked(x, dims, [axis], float("-inf"))
    fn = tf.nn.log_softmax if log else tf.nn.softmax
    y = fn(x, axis=dims.index(axis))
    if use_mask and axis.dimension is None and not log:
        y = masked(y, dims, [axis], 0.0)
    return to_out(y, dims, out)


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@op("matmul")
def _matmul(layer, inputs, out, reduce, use_mask):
    """a . b over the dims reduce; with a third input: + bias (the fused rf.Linear)."""
    a, b = inputs[:2]
    all_dims = []
    for d in list(a.dims) + list(b.dims):
        if d not in all_dims:
            all_dims.append(d)

    def letters(dims):
        return "".join(_LETTERS[all_dims.index(d)] for d in dims)

    xa = a.placeholder
    if use_mask:
        xa = masked(xa, list(a.dims), [d for d in reduce if d.dimension is None and not d.is_batch_dim()], 0.0)
    eq = "%s,%s->%s" % (letters(a.dims), letters(b.dims), letters(out.dims))
    y = tf.einsum(eq, xa, b.placeholder)
    if len(inputs) > 2:
        y = y + align(inputs[2], out.dims)
    return y


@op("layer_norm")
def _layer_norm(layer, inputs, out, in_dim, eps):
    x = inputs[0]
    dims = list(x.dims)
    axis = dims.index(in_dim)
    mean, variance = tf.nn.moments(x.placeholder, axes=[axis], keepdims=True)
    y = (x.placeholder - mean) * tf.math.rsqrt(variance + eps) * align(inputs[1], dims)
    if len(inputs) > 2:
        y = y + align(inputs[2], dims)
    return y


@op("transpose")
def _transpose(layer, inputs, out):
    return to_out(inputs[0].placeholder, inputs[0].dims, out)


@op("concat")
def _concat(layer, inputs, out, axes, out_dim, padded=False):
    if any(a.dimension is None for a in axes) and not padded:
        return _concat_dynamic(layer, inputs, out, axes, out_dim)
    parts = []
    oidx = list(out.dims).index(out_dim)
    shape = _shape(layer, out)
    for src, axis in zip(inputs, axes):
        dims = [axis if d == out_dim else d for d in out.dims]
        x = align(src, dims)
        s = list(shape)
        s[oidx] = dim_value(layer, axis)
        parts.append(tf.broadcast_to(x, s))
    return tf.concat(parts, axis=oidx)


def _take_along_axis(x, idx, axis):
    """x[..., idx[...], ...] along axis with idx of the full output shape (the other axes index themselves)."""
    perm = [axis] + [k for k in range(x.shape.rank) if k != axis]
    xt = tf.transpose(x, perm)  # [T, rest...]
    it = tf.transpose(idx, perm)  # [T', rest...]
    rest_shape = tf.shape(it)[1:]
    n_rest = tf.reduce_prod(rest_shape)
    xf = tf.reshape(xt, [tf.shape(xt)[0], n_rest])  # [T, R]
    itf = tf.reshape(it, [tf.shape(it)[0], n_rest])  # [T', R]
    cols = tf.broadcast_to(tf.range(n_rest)[None, :], tf.shape(itf))
    yf = tf.gather_nd(xf, tf.stack([itf, cols], axis=-1))  # [T', R]
    y = tf.reshape(yf, tf.concat([tf.shape(it)[:1], rest_shape], 0))
    inv = [perm.index(k) for k in range(len(perm))]
    return tf.transpose(y, inv)


def _concat_dynamic(layer, inputs, out, axes, out_dim):
    """Concat along dynamic dims: per sequence, the frames of each source within its length, one after the other."""
    from ..data import batch_dim

    oidx = list(out.dims).index(out_dim)
    shape = _shape(layer, out)
    n_out = shape[oidx]
    pos = tf.range(n_out)[None, :]  # [1, T']
    y = None
    offset = tf.zeros([1, 1], tf.int32)
    for src, axis in zip(inputs, axes):
        dims = [axis if d == out_dim else d for d in out.dims]
        s = list(shape)
        s[oidx] = dim_value(layer, axis)
        x = tf.broadcast_to(align(src, dims), s)
        if axis.dimension is None:
            size = axis.complete_dyn_size()[:, None]  # [B, 1]
        else:
            size = tf.fill([dim_value(layer, batch_dim), 1], axis.dimension)
        idx = pos - offset  # [B, T'] position within this source
        inside = tf.logical_and(idx >= 0, idx < size)
        idx_c = tf.clip_by_value(idx, 0, tf.maximum(s[oidx] - 1, 0))
        m = align(Data("m", dims=[batch_dim, out_dim], dtype="bool", placeholder=inside), out.dims)
        i = align(Data("i", dims=[batch_dim, out_dim], dtype="int32", placeholder=idx_c), out.dims)
        i = tf.broadcast_to(i, [shape[k] if k != oidx else n_out for k in range(len(shape))])
        part = _take_along_axis(x, i, oidx)
        y = tf.where(m, part, tf.zeros_like(part)) if y is None else tf.where(m, part, y)
        offset = offset + size
    return y


@op("pad")
def _pad(layer, inputs, out, axes, padding, out_dims, handle_dynamic_dims, mode, value):
    src = inputs[0]
    dims = list(src.dims)
    x = src.placeholder
    pads = [[0, 0] for _ in dims]
    for a, (left, right) in zip(axes, padding):
        pads[dims.index(a)] = [left, right]
    if mode == "constant":
        y = tf.pad(x, pads, mode="CONSTANT", constant_values=tf.cast(value, x.dtype))
    else:
        y = tf.pad(x, pads, mode={"reflect": "REFLECT", "replicate": "SYMMETRIC"}[mode])
    new_dims = list(dims)
    for a, o in zip(axes, out_dims):
        new_dims[dims.index(a)] = o
    for a, (left, right) in zip(axes, padding):
        if handle_dynamic_dims and right and a.dimension is None and mode == "constant":
            # the right padding follows each sequence's end, not the padded end of the batch
            i = dims.index(a)
            size = a.complete_dyn_size()
            pos = tf.range(tf.shape(y)[i])
            after = tf.greater_equal(pos[None, :], (size + left)[:, None])  # [B, T']
            from ..data import batch_dim

            m = align(Data("m", dims=[batch_dim, new_dims[i]], dtype="bool", placeholder=after), new_dims)
            y = tf.where(tf.broadcast_to(m, tf.shape(y)), tf.cast(tf.fill(tf.shape(y), value), y.dtype), y)
    return to_out(y, new_dims, out)


@op("gather")
def _gather(layer, inputs, out, axis, clip_to_valid, index_value=None):
    src = inputs[0]
    if index_value is not None:  # an int index: axis removed
        if clip_to_valid:  # static axis (rf.gather refuses a dynamic one)
            index_value = min(max(index_value, 0), axis.dimension - 1)
        x = tf.gather(src.placeholder, index_value, axis=list(src.dims).index(axis))
        return to_out(x, [d for d in src.dims if d != axis], out)
    idx = inputs[1]
    common = [d for d in idx.dims if d in src.dims and d != axis]
    src_rest = [d for d in src.dims if d not in common and d != axis]
    idx_rest = [d for d in idx.dims if d not in common]
    params = align_exact(src, common + src_rest + [axis])
    indices = align_exact(idx, common + idx_rest)
    if clip_to_valid:
        indices = tf.clip_by_value(indices, 0, tf.shape(params)[-1] - 1)
    # gather along the last axis of params with batch dims = common
    n_common = len(common)
    y = tf.gather(params, indices, axis=n_common + len(src_rest), batch_dims=n_common)
    return to_out(y, common + src_rest + idx_rest, out)


def align_exact(data, dims):
    return to_out(data.placeholder, data.dims, Data("tmp", dims=dims))


@op("slice")
def _slice(layer, inputs, out, axis, start, end, step, size=None, start_from_input=False):
    src = inputs[0]
    if start_from_input:  # a scalar start computed in the graph
        start = inputs[1].placeholder
    if size is not None:  # a size Dim: [start:start + size]
        end = (0 if start is None else start) + dim_value(layer, size)
    dims = list(src.dims)
    i = dims.index(axis)
    sl = [slice(None)] * len(dims)
    sl[i] = slice(start, end, step)
    new_dims = list(dims)
    new_dims[i] = [d for d in out.dims if d not in dims or d == axis][0] if axis not in out.dims else axis
    return to_out(src.placeholder[tuple(sl)], new_dims, out)


@op("reshape")
def _reshape(layer, inputs, out, in_dims, out_dims):
    """The values of in_dims (row-major, padded lengths) laid out as out_dims (the same number of elements)."""
    src = inputs[0]
    rest = [d for d in src.dims if d not in in_dims]
    perm = [list(src.dims).index(d) for d in rest + list(in_dims)]
    x = tf.transpose(src.placeholder, perm) if perm != list(range(len(perm))) else src.placeholder
    y = tf.reshape(x, [dim_value(layer, d) for d in rest + list(out_dims)])
    return to_out(y, rest + list(out_dims), out)


@op("split_dims")
def _split_dims(layer, inputs, out, axis, dims):
    src = inputs[0]
    sdims = list(src.dims)
    i = sdims.index(axis)
    shape = [dim_value(layer, d) for d in sdims]
    new_shape = shape[:i] + [(-1 if d.dimension is None else d.dimension) for d in dims] + shape[i + 1:]
    y = tf.reshape(src.placeholder, new_shape)
    return to_out(y, sdims[:i] + list(dims) + sdims[i + 1:], out)


@op("merge_dims")
def _merge_dims(layer, inputs, out, dims, out_dim):
    src = inputs[0]
    rest = [d for d in src.dims if d not in dims]
    x = align_exact(src, rest + list(dims))
    shape = [dim_value(layer, d) for d in rest]
    y = tf.reshape(x, shape + [-1])
    return to_out(y, rest + [out_dim], out)


@op("expand_dim")
def _expand_dim(layer, inputs, out, dim):
    return tf.broadcast_to(align(inputs[0], out.dims), _shape(layer, out))


@op("squeeze")
def _squeeze(layer, inputs, out, axis):
    return tf.squeeze(inputs[0].placeholder, axis=list(inputs[0].dims).index(axis))


@op("replace_dim")
def _replace_dim(layer, inputs, out, in_dim, out_dim):
    src = inputs[0]
    if out_dim.dimension is None and out_dim.complete_dyn_size() is None:
        out_dim.dyn_size = in_dim.complete_dyn_size()
    return to_out(src.placeholder, [out_dim if d == in_dim else d for d in src.dims], out)


@op("softmax_ce")
def _softmax_ce(layer, inputs, out, axis):
    logits, targets = inputs
    dims = list(logits.dims)
    x = to_out(logits.placeholder, dims, Data("tmp", dims=[d for d in dims if d != axis] + [axis]))
    rest = [d for d in dims if d != axis]
    if targets.sparse_dim is not None:
        labels = align_exact(targets, rest) if set(targets.dims) == set(rest) else tf.broadcast_to(
            align(targets, rest), [dim_value(layer, d) for d in rest])
        y = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x)
    else:
        t = tf.broadcast_to(align(targets, rest + [axis]), tf.shape(x))
        y = tf.nn.softmax_cross_entropy_with_logits(labels=t, logits=x)
    return to_out(y, rest, out)


@op("dropout")
def _dropout(layer, inputs, out, rate, axes, on_forward):
    x = inputs[0].placeholder
    dims = list(inputs[0].dims)

    noise_shape = None
    if axes:
        noise_shape = [dim_value(layer, d) if (d in axes or d.is_batch_dim()) else 1 for d in dims]
    seed = layer.network.random.randint(2 ** 31)
    if on_forward:
        return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)
    return layer.network.dropout_on_train(x, rate, noise_shape=noise_shape, seed=seed)


def _conv_like(layer, src, in_dim, in_spatial_dims, out_spatial_dims, out, fn):
    """src -> [B', *spatial, in] (extra dims merged into the batch), fn(x) -> [B', *out_spatial, C], back."""
    dims = list(src.dims)
    batch_like = [d for d in dims if d not in in_spatial_dims and d != in_dim]
    x = align_exact(src, batch_like + list(in_spatial_dims) + [in_dim])  # padded frames as they are (original)
    shape_b = [dim_value(layer, d) for d in batch_like]
    x = tf.reshape(x, [-1] + [dim_value(layer, d) for d in in_spatial_dims] + [dim_value(layer, in_dim)])
    y = fn(x)
    out_feat = [d for d in out.dims if d not in batch_like and d not in out_spatial_dims][0]
    y = tf.reshape(y, shape_b + [tf.shape(y)[i + 1] for i in range(len(out_spatial_dims))] +
                   [dim_value(layer, out_feat)])
    return to_out(y, batch_like + list(out_spatial_dims) + [out_feat], out)


def _set_out_sizes(in_spatial_dims, out_spatial_dims, filter_size, padding, strides, dilation_rate):
    paddings = padding if isinstance(padding, (list, tuple)) else [padding] * len(in_spatial_dims)
    for d_in, d_out, fs, st, dil, pad in zip(in_spatial_dims, out_spatial_dims, filter_size, strides, dilation_rate,
                                            paddings):
        if d_out.dimension is not None or d_out.complete_dyn_size() is not None:
            continue
        size = d_in.complete_dyn_size()
        if isinstance(pad, int):
            size = size + 2 * pad - (fs - 1) * dil
        elif pad == "valid":
            size = size - (fs - 1) * dil
        d_out.dyn_size = tf.maximum((size + st - 1) // st, 0)


def _explicit_pad(x, padding, value):
    """[B', *spatial, C] padded by the ints of padding on both sides of each spatial axis; -> (x, TF padding)."""
    if isinstance(padding, str):
        return x, padding.upper()
    pads = [[0, 0]] + [[p, p] for p in padding] + [[0, 0]]
    return tf.pad(x, pads, constant_values=value), "VALID"


def _grouped_conv(x, w, groups, strides, padding, dilation_rate):
    """Grouped conv of x [B', *spatial, in] with w [*k, in // groups, out]; depthwise (in = groups) in one op."""
    n_in, n_out = x.shape[-1], w.shape[-1]
    nd = len(strides)
    if groups == n_in and nd <= 2 and n_out % n_in == 0:
        if nd == 1:  # as 2D with a spatial axis of size 1
            x, w = x[:, None], w[None]
        w = tf.reshape(w, list(w.shape[:-2]) + [n_in, n_out // n_in])
        y = tf.nn.depthwise_conv2d(x, w, strides=[1] + ([1] if nd == 1 else []) + list(strides) + [1],
                                   padding=padding, dilations=([1] if nd == 1 else []) + list(dilation_rate))
        return y[:, 0] if nd == 1 else y
    xs = tf.split(x, groups, axis=-1)
    ws = tf.split(w, groups, axis=-1)
    return tf.concat([tf.nn.convolution(xi, wi, strides=list(strides), padding=padding,
                                        dilations=list(dilation_rate)) for xi, wi in zip(xs, ws)], axis=-1)


@op("conv")
def _conv(layer, inputs, out, in_dim, out_dim, in_spatial_dims, out_spatial_dims, filter_size, padding, strides,
          dilation_rate, groups=1):
    src, filt = inputs[:2]
    fs_dims = list(filter_size)
    if list(filt.dims[2:]) == fs_dims and filt.dims[0] == out_dim:  # the rf param's order [out, in, *k]
        n = len(fs_dims)
        w = tf.transpose(filt.placeholder, list(range(2, 2 + n)) + [1, 0])
    else:
        w = align_exact(filt, fs_dims + [in_dim, out_dim])
    _set_out_sizes(in_spatial_dims, out_spatial_dims, [d.dimension for d in filter_size], padding, strides,
                   dilation_rate)

    def fn(x):
        x, tf_padding = _explicit_pad(x, padding, 0.0)
        if groups > 1:
            return _grouped_conv(x, w, groups, strides, tf_padding, dilation_rate)
        return tf.nn.convolution(x, w, strides=list(strides), padding=tf_padding, dilations=list(dilation_rate))

    y = _conv_like(layer, src, in_dim, in_spatial_dims, out_spatial_dims, out, fn)
    if len(inputs) > 2:
        y = y + align(inputs[2], out.dims)
    return y


@op("transposed_conv")
def _transposed_conv(layer, inputs, out, in_dim, out_dim, in_spatial_dims, out_spatial_dims, filter_size, padding,
                     remove_padding, output_padding, strides):
    """TF's conv_transpose without padding (the full (n - 1) * stride + k frames), cropped and zero-padded on the
    right to the output length of the padding (as the torch backend, see rf.conv.transposed_out_len)."""
    from ..frontend.conv import transposed_crop_left, transposed_out_len

    src, filt = inputs[:2]
    fs_dims = list(filter_size)
    ks = [d.dimension for d in fs_dims]
    n = len(fs_dims)
    if list(filt.dims) == [in_dim, out_dim] + fs_dims:  # the rf param's order [in, out, *k]
        w = tf.transpose(filt.placeholder, list(range(2, 2 + n)) + [1, 0])
    else:
        w = align_exact(filt, fs_dims + [out_dim, in_dim])
    for d_in, d_out, k, st, op_, rp in zip(in_spatial_dims, out_spatial_dims, ks, strides, output_padding,
                                           remove_padding):
        if d_out.dimension is None and d_out.complete_dyn_size() is None:
            d_out.dyn_size = tf.maximum(transposed_out_len(d_in.complete_dyn_size(), k, st, padding, op_, rp), 0)

    def fn(x):
        shape = tf.shape(x)
        in_lens = [shape[1 + i] for i in range(n)]
        full = [(m - 1) * st + k for m, st, k in zip(in_lens, strides, ks)]
        y = tf.nn.conv_transpose(x, w, output_shape=tf.stack([shape[0]] + full + [out_dim.dimension]),
                                 strides=list(strides), padding="VALID")
        for i, (k, st, op_, rp) in enumerate(zip(ks, strides, output_padding, remove_padding)):
            left = transposed_crop_left(k, st, padding, op_)
            out_len = transposed_out_len(in_lens[i], k, st, padding, op_)
            pads = [[0, 0]] * (1 + i) + [[0, tf.maximum(left + out_len - full[i], 0)]] + [[0, 0]] * (n - i)
            y = tf.pad(y, pads)
            begin = [0] * (1 + i) + [left + rp] + [0] * (n - i)
            size = [-1] * (1 + i) + [out_len - 2 * rp] + [-1] * (n - i)
            y = tf.slice(y, begin, size)
        return y

    y = _conv_like(layer, src, in_dim, in_spatial_dims, out_spatial_dims, out, fn)
    if len(inputs) > 2:
        y = y + align(inputs[2], out.dims)
    return y


@op("stft")
def _stft(layer, inputs, out, in_spatial_dim, out_spatial_dim, out_dim, frame_step, frame_size, fft_length,
          frame_pad_left, window):
    """Frames of frame_size every frame_step, zero-padded to fft_length, times the window, rfft (as the torch
    backend; the options are rf.stft's)."""
    x = inputs[0]
    batch_like = [d for d in x.dims if d != in_spatial_dim]
    raw = align_exact(x, batch_like + [in_spatial_dim])
    _set_out_sizes([in_spatial_dim], [out_spatial_dim], [frame_size], "valid", [frame_step], [1])
    frames = tf.signal.frame(raw, frame_size, frame_step, pad_end=False)  # [..., frames, frame_size]
    if fft_length > frame_size:
        pads = [[0, 0]] * len(batch_like) + [[0, 0], [frame_pad_left, fft_length - frame_size - frame_pad_left]]
        frames = tf.pad(frames, pads)
    frames = frames * tf.constant(window, dtype=frames.dtype)
    y = tf.signal.rfft(frames, fft_length=[fft_length])
    return to_out(y, batch_like + [out_spatial_dim, out_dim], out)


@op("top_k")
def _top_k(layer, inputs, out, axes, k, k_dim, sorted):  # noqa: A002
    """tf.math.top_k over the axes (flattened; padded frames masked with -inf); the indices per axis in extra."""
    x = inputs[0]
    rest = [d for d in x.dims if d not in axes]
    raw = masked(align_exact(x, rest + list(axes)), rest + list(axes), axes, float("-inf"))
    raw = tf.reshape(raw, tf.concat([tf.shape(raw)[:len(rest)], [-1]], axis=0))
    values, flat = tf.math.top_k(raw, k=k, sorted=sorted)
    for i in reversed(range(len(axes))):
        n = dim_value(layer, axes[i])
        layer.extra["indices%i" % i] = tf.cast(flat % n, tf.int32)
        flat = flat // n
    return to_out(values, rest + [k_dim], out)


@op("edit_distance")
def _edit_distance(layer, inputs, out, a_spatial_dim, b_spatial_dim, batch_dims):
    """tf.edit_distance of the sequences within their lengths (other dims flattened into the batch)."""

    def sparse(x, spatial_dim):
        raw = align_exact(x, list(batch_dims) + [spatial_dim])
        n = dim_value(layer, spatial_dim)
        raw = tf.reshape(raw, [-1, n])
        if spatial_dim.dimension is None:
            mask = tf.reshape(seq_mask(spatial_dim, list(batch_dims) + [spatial_dim]) & tf.ones_like(
                align_exact(x, list(batch_dims) + [spatial_dim]), dtype=tf.bool), [-1, n])
        else:
            mask = tf.ones_like(raw, dtype=tf.bool)
        idx = tf.where(mask)
        return tf.SparseTensor(idx, tf.gather_nd(raw, idx), tf.shape(raw, out_type=tf.int64))

    dist = tf.edit_distance(sparse(inputs[0], a_spatial_dim), sparse(inputs[1], b_spatial_dim), normalize=False)
    dist = tf.reshape(tf.cast(tf.round(dist), out.dtype), [dim_value(layer, d) for d in batch_dims])
    return to_out(dist, batch_dims, out)


@op("random_choice")
def _random_choice(layer, inputs, out, axis, common):
    """tf.random.categorical over axis for each entry of the new dims (out's dims beyond common)."""
    new = [d for d in out.dims if d not in common]
    logits = tf.math.log(tf.reshape(align_exact(inputs[0], list(common) + [axis]), [-1, dim_value(layer, axis)]))
    n_new = 1
    for d in new:
        n_new = n_new * dim_value(layer, d)
    idx = tf.random.categorical(logits, n_new, dtype=tf.int32, seed=layer.network.random.randint(2 ** 31))
    idx = tf.reshape(idx, [dim_value(layer, d) for d in list(common) + new])
    return to_out(idx, list(common) + new, out)


@op("pool")
def _pool(layer, inputs, out, mode, pool_size, padding, dilation_rate, strides, in_spatial_dims, out_spatial_dims,
          in_dim):
    src = inputs[0]
    _set_out_sizes(in_spatial_dims, out_spatial_dims, pool_size, padding, strides, dilation_rate)

    def fn(x):
        x, tf_padding = _explicit_pad(x, padding, float("-inf") if mode == "max" else 0.0)
        return tf.nn.pool(x, window_shape=list(pool_size), pooling_type=mode.upper(), strides=list(strides),
                          padding=tf_padding, dilations=list(dilation_rate))

    return _conv_like(layer, src, in_dim, in_spatial_dims, out_spatial_dims, out, fn)


@op("lstm")
def _lstm(layer, inputs, out, spatial_dim, in_dim, out_dim, gates_dim, single_step):
    src, h0, c0, ff_w, rec_w, bias = inputs
    batch_like = [d for d in src.dims if d not in (in_dim, spatial_dim)]
    w_ff = align_exact(ff_w, [in_dim, gates_dim])
    w_rec = align_exact(rec_w, [out_dim, gates_dim])
    b = bias.placeholder
    h = align_exact(h0, batch_like + [out_dim]) if set(h0.dims) == set(batch_like + [out_dim]) else tf.broadcast_to(
        align(h0, batch_like + [out_dim]), [dim_value(layer, d) for d in batch_like + [out_dim]])
    c = align_exact(c0, batch_like + [out_dim]) if set(c0.dims) == set(batch_like + [out_dim]) else tf.broadcast_to(
        align(c0, batch_like + [out_dim]), [dim_value(layer, d) for d in batch_like + [out_dim]])
    shape_b = [dim_value(layer, d) for d in batch_like]
    h = tf.reshape(h, [-1, out_dim.dimension])
    c = tf.reshape(c, [-1, out_dim.dimension])

    def cell(x_t, h, c):
        g = tf.matmul(x_t, w_ff) + tf.matmul(h, w_rec) + b
        i, f, gg, o = tf.split(g, 4, axis=-1)
        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(gg)
        h_new = tf.sigmoid(o) * tf.tanh(c_new)
        return h_new, c_new

    if single_step:
        x = tf.reshape(align_exact(src, batch_like + [in_dim]), [-1, in_dim.dimension])
        h, c = cell(x, h, c)
        y = h
        layer.extra["h"] = tf.reshape(h, shape_b + [out_dim.dimension])
        layer.extra["c"] = tf.reshape(c, shape_b + [out_dim.dimension])
        return to_out(tf.reshape(y, shape_b + [out_dim.dimension]), batch_like + [out_dim], out)
    x = align_exact(src, [spatial_dim] + batch_like + [in_dim])
    n_time = tf.shape(x)[0]
    x = tf.reshape(x, [n_time, -1, in_dim.dimension])
    x_ff = tf.einsum("tbi,ig->tbg", x, w_ff)
    if spatial_dim.dimension is None:
        from ..data import batch_dim as _b

        lens = spatial_dim.complete_dyn_size()
        mask = tf.sequence_mask(lens, maxlen=n_time)  # [B,T]
        mask = align(Data("m", dims=[_b, spatial_dim], dtype="bool", placeholder=mask), [spatial_dim] + batch_like)
        mask = tf.reshape(tf.broadcast_to(mask, [n_time] + shape_b), [n_time, -1, 1])
    else:
        mask = tf.ones([n_time, 1, 1], dtype=tf.bool)
    ta = tf.TensorArray(x.dtype, size=n_time)

    def body(t, h, c, ta):
        g = x_ff[t] + tf.matmul(h, w_rec) + b
        i, f, gg, o = tf.split(g, 4, axis=-1)
        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(gg)
        h_new = tf.sigmoid(o) * tf.tanh(c_new)
        m = mask[t]
        h_new = tf.where(m, h_new, h)
        c_new = tf.where(m, c_new, c)
        return t + 1, h_new, c_new, ta.write(t, h_new)

    _, h, c, ta = tf.while_loop(lambda t, *_: t < n_time, body, [tf.constant(0), h, c, ta])
    y = tf.reshape(ta.stack(), [n_time] + shape_b + [out_dim.dimension])
    layer.extra["h"] = tf.reshape(h, shape_b + [out_dim.dimension])
    layer.extra["c"] = tf.reshape(c, shape_b + [out_dim.dimension])
    return to_out(y, [spatial_dim] + batch_like + [out_dim], out)


@op("extra")
def _extra(layer, inputs, out, key, dims):
    """An extra output of the source layer (e.g. the final LSTM state)."""
    return to_out(layer.sources[0].extra[key], dims, out)
