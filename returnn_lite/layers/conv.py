"""
Convolution family: conv (1D/2D/3D), pool, transposed_conv, dct.

All of them work on the input transposed to ``[B, <other axes>..., <spatial axes>..., F]`` (NHWC): the axes
that are neither batch, feature nor convolved over are treated like extra batch axes. Output spatial axes
get new dim tags (with sequence lengths computed from the input lengths) unless the size arithmetic is the
identity, in which case the input's tag is kept (as the original's Dim arithmetic does).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..activations import get_activation_function
from ..data import Data, Dim
from ..util import NotSpecified, as_list
from .base import ConcatInputLayer, concat_sources_template


def _tuple_opt(value, n, opt_name, default=None):
    """An int (or None -> default) broadcast to n entries, or a list/tuple of exactly n entries."""
    if value is None:
        value = default
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(value)
    if len(value) != n:
        raise ValueError("%s=%r must have %i entries (one per spatial axis), got %i" % (
            opt_name, value, n, len(value)))
    return value


def _ceildiv(a, b):
    return -(-a // b)


class _SpatialSpec:
    """How one spatial axis maps from input to output: out = f(in) for static ints and length tensors."""

    def __init__(self, func, identity):
        self.func = func
        self.identity = identity


def conv_out_len(n, filter_size, stride, padding, dilation=1):
    """Output length of a conv/pool over an axis of length n (int or int tensor); like the original's calc_out_dim."""
    padding = padding.upper()
    if padding == "SAME":
        res = n if stride == 1 else _ceildiv(n, stride)
    elif padding == "VALID":
        eff = (filter_size - 1) * dilation
        res = n - eff if eff else n
        if stride != 1:
            res = _ceildiv(res, stride)
        if isinstance(res, tf.Tensor):
            res = tf.maximum(res, 0)
    else:
        raise ValueError("padding must be 'same' or 'valid', got %r" % padding)
    return res


def deconv_out_len(n, filter_size, stride, padding, output_padding=None, remove_padding=0):
    """Output length of a transposed conv over an axis of length n (keras' deconv_output_length, minus padding)."""
    padding = padding.lower()
    if output_padding is None:
        if padding == "valid":
            res = n * stride if stride != 1 else n
            if filter_size > stride:
                res = res + (filter_size - stride)
        elif padding == "same":
            res = n * stride if stride != 1 else n
        elif padding == "full":
            res = n * stride - (stride + filter_size - 2)
        else:
            raise ValueError("padding must be 'same', 'valid' or 'full', got %r" % padding)
    else:
        pad = {"same": filter_size // 2, "valid": 0, "full": filter_size - 1}.get(padding)
        if pad is None:
            raise ValueError("padding must be 'same', 'valid' or 'full', got %r" % padding)
        res = (n - 1) * stride + filter_size - 2 * pad + output_padding
    if remove_padding:
        res = res - 2 * remove_padding
    return res


def _is_identity(func):
    return func(1) == 1 and func(7) == 7 and func(10) == 10


def transform_input(data, name, in_spatial_dims=None, num_spatial=None, input_expand_dims=0,
                    input_split_feature_dim=None, input_add_feature_dim=False, filter_opt="filter_size"):
    """
    Bring data into the layout [B, <batch-like axes>..., <spatial axes>..., F].

    :return: (data, number of leading batch-like axes incl. B, spatial axes count)
    """
    if data.sparse:
        raise ValueError("input %s is sparse; convolutions need dense input" % data.short_repr())
    for _ in range(input_expand_dims or 0):
        data = data.copy_add_spatial_dim(dim=1)
    if input_split_feature_dim:
        data = data.copy_split_feature_dim(input_split_feature_dim)
    if input_add_feature_dim:
        data = data.copy_add_feature_dim()
    if data.feature_dim_axis is None:  # e.g. raw audio [B, T]: a single input channel
        data = data.copy_add_feature_dim()
    b, f = data.batch_dim_axis, data.feature_dim_axis
    if in_spatial_dims is not None:
        spatial = []
        for d in as_list(in_spatial_dims):
            a = data.get_axis_from_description(d)
            if a in (b, f) or a in spatial:
                raise ValueError("in_spatial_dims=%r: entry %r is not a distinct spatial axis of %s" % (
                    in_spatial_dims, d, data.short_repr()))
            spatial.append(a)
    else:
        spatial = [i for i in range(data.batch_ndim) if i not in (b, f)]
    if num_spatial is not None and len(spatial) != num_spatial:
        raise ValueError(
            "%s has %i entries but the input %s has %i spatial axes %s to convolve over "
            "(use in_spatial_dims, input_expand_dims, input_add_feature_dim or input_split_feature_dim)" % (
                filter_opt, num_spatial, data.short_repr(), len(spatial),
                [data.dims[a].short_repr() for a in spatial]))
    if in_spatial_dims is not None:  # the original keeps the order of all batch-like axes (incl. B)
        lead = [i for i in range(data.batch_ndim) if i not in spatial and i != f]
    else:
        lead = ([b] if b is not None else []) + [
            i for i in range(data.batch_ndim) if i not in spatial and i not in (b, f)]
    perm = lead + spatial + ([f] if f is not None else [])
    data = data.copy_transpose(perm) if data.placeholder is not None else data._with_dims(
        [data.dims[p] for p in perm], placeholder=None, perm=perm)
    return data, len(lead), len(spatial)


def _make_output(name, data, n_batch, out_spatial_dims, feature_dim, dtype=None):
    """Template [B, batch-like..., out spatial..., F] (batch-major)."""
    dims = list(data.dims[:n_batch]) + list(out_spatial_dims) + ([feature_dim] if feature_dim is not None else [])
    out = Data(name="%s_output" % name, dims=dims, dtype=dtype or data.dtype)
    if feature_dim is not None and out.feature_dim_axis != len(dims) - 1:
        out.feature_dim_axis = len(dims) - 1
    return out


def _new_spatial_dims(name, in_dims, funcs, out_spatial_dims=None, kind="conv"):
    """New spatial dims where the length changes, described ``<layer>:<kind>:s<i>`` as the original (e.g. for
    ``stag:conv0p:conv:s1``; pool outputs are ``conv`` too, they share the conv template in the original)."""
    res = []
    for i, (d, func) in enumerate(zip(in_dims, funcs)):
        if out_spatial_dims:
            res.append(out_spatial_dims[i])
            continue
        if _is_identity(func):
            res.append(d)
            continue
        back = _undo_offset(d, func)
        if back is not None:
            res.append(back)
            continue
        size = func(d.dimension) if d.dimension is not None else None
        if size is not None and size <= 0:
            raise ValueError("spatial axis %s of length %i is too short: the output length would be %i" % (
                d.short_repr(), d.dimension, size))
        res.append(Dim(size, kind=Dim.Types.Spatial, description="%s:%s:s%i" % (name, kind, i)))
    return res


def _linear_offset(dim):
    """dim == base + offset through dim arithmetic with constants (e.g. a padded axis): (base, offset)."""
    offset = 0
    while True:
        kind, operands = dim.get_same_base().arith_of or (None, ())
        if kind not in ("add", "sub") or len(operands) != 2:
            return dim, offset
        a, b = operands
        if isinstance(b, int) and isinstance(a, Dim):
            dim, offset = a, offset + (b if kind == "add" else -b)
        elif isinstance(a, int) and isinstance(b, Dim) and kind == "add":
            dim, offset = b, offset + a
        else:
            return dim, offset


def _undo_offset(dim, func):
    """The original's dim arithmetic simplifies ``(15 + T + 15) - 30`` to T: a stride-1 'valid' conv over a padded
    axis that takes the padding away again gives back the unpadded dim (so it combines with it)."""
    shift = func(1000) - 1000
    if shift == 0 or func(2000) - 2000 != shift:
        return None
    base, offset = _linear_offset(dim)
    return base if base is not dim and offset + shift == 0 else None


def _set_dyn_sizes(in_dims, out_dims, funcs):
    for d_in, d_out, func in zip(in_dims, out_dims, funcs):
        if d_out is d_in or d_out.dimension is not None or d_out.dyn_size is not None:
            continue
        if d_in.dyn_size is None:
            continue
        with tf.name_scope("out_len"):
            d_out.dyn_size = func(d_in.dyn_size)


def _merge_batch(x, n_batch):
    """[b1, .., bn, rest...] -> [b1*..*bn, rest...]; returns (x, restore function)."""
    if n_batch == 1:
        return x, lambda y: y
    shape = tf.shape(x)
    lead = shape[:n_batch]
    x = tf.reshape(x, tf.concat([[-1], shape[n_batch:]], axis=0))

    def restore(y):
        static = y.shape.as_list()[1:]
        dyn = tf.shape(y)[1:]
        return tf.reshape(y, tf.concat([lead, [s if s is not None else dyn[i] for i, s in enumerate(static)]], 0))

    return x, restore


class _ConvBase(ConcatInputLayer):
    """Shared: input transform options and the filter/bias layer options."""

    recurrent = True
    layer_options = ("filter", "bias")

    def _add_bias_and_activation(self, y, with_bias, bias_layer, bias_init, n_out, activation):
        """Bias (param "bias" or the ``bias`` layer's output) and activation on the feature-last result."""
        if with_bias:
            y = y + (bias_layer.output.placeholder if bias_layer is not None
                     else self.create_param("bias", (n_out,), bias_init))
        if activation:
            y = get_activation_function(activation)(y)
        return y


class ConvLayer(_ConvBase):
    """N-D convolution over the spatial axes, filter layout [*filter_size, n_in // groups, n_out].
    :param filter_size: window size per spatial axis, e.g. (3,) for 1D or (3, 3) for 2D (required)
    :param padding: "same" or "valid" (required)
    :param strides: stride per spatial axis (int for all axes)
    :param dilation_rate: dilation per spatial axis (int for all axes)
    :param groups: number of channel groups (grouped convolution)
    :param input_expand_dims: add this many dim-1 spatial axes to the input before the conv
    :param input_add_feature_dim: treat the input's feature axis as spatial and add a new feature axis of dim 1
    :param input_split_feature_dim: split the input's feature axis into (new spatial, features of this size)
    :param auto_use_channel_first: use channel-first layout on GPU
    :param with_bias: add a bias (default: True unless given a filter layer without bias)
    :param activation: activation function applied to the output
    :param forward_weights_init: initializer of the filter weights
    :param bias_init: initializer of the bias
    :param filter: layer whose output is used as the filter instead of a param
    :param filter_perm: dict mapping filter axes to reorder the given filter layer's axes
    :param bias: layer whose output is used as the bias instead of a param
    :param in_dim: the input feature (channel) Dim: checked to be the input's feature dim (see LayerBase)
    :param in_spatial_dims: the input's spatial Dims to convolve over (default: all spatial axes)
    :param out_dim: the output feature (channel) Dim (alternative to n_out)
    :param out_spatial_dims: the output spatial Dims (default: new dims computed from the input ones)
    :param use_time_mask: zero the padded frames of dynamic spatial axes before applying
    """

    layer_class = "conv"
    options_without_effect = {"auto_use_channel_first": "a layout choice for speed; the output is the same"}

    def __init__(self, n_out=None, filter_size=None, padding=None, strides=1, dilation_rate=1, groups=1,
                 input_expand_dims=0, input_add_feature_dim=False, input_split_feature_dim=None,
                 auto_use_channel_first=False, with_bias=NotSpecified, activation=None,
                 forward_weights_init="glorot_uniform", bias_init=0.0, filter=None, filter_perm=None, bias=None,
                 in_spatial_dims=None, out_dim=None, out_spatial_dims=None, use_time_mask=False,
                 **kwargs):
        super().__init__(**kwargs)
        opts = self._norm_opts(filter_size, strides, dilation_rate)
        filter_size, strides, dilation_rate = opts
        data, n_batch, _ = transform_input(
            self.input_data.copy_masked(0.0) if use_time_mask else self.input_data, self.name, in_spatial_dims, len(filter_size), input_expand_dims,
            input_split_feature_dim, input_add_feature_dim, filter_opt="filter_size=%r" % (filter_size,))
        n_in = data.dim
        n_out = self.output.dim
        if n_in % groups or n_out % groups:
            raise ValueError("groups=%i must divide the input dim %i and n_out %i" % (groups, n_in, n_out))
        padding = padding.upper()
        funcs = [self._len_func(f, s, dl, padding) for f, s, dl in zip(filter_size, strides, dilation_rate)]
        in_dims = data.dims[n_batch:n_batch + len(filter_size)]
        out_dims = self.output.dims[n_batch:n_batch + len(filter_size)]
        _set_dyn_sizes(in_dims, out_dims, funcs)
        if filter is not None:
            w = filter.output.placeholder
            if filter_perm:
                w = _apply_filter_perm(filter.output, filter_perm, filter_size, n_in // groups, n_out)
        else:
            w = self.create_param("W", tuple(filter_size) + (n_in // groups, n_out), forward_weights_init)
        x, restore = _merge_batch(data.placeholder, n_batch)
        strides_ = list(strides)
        dil = list(dilation_rate)
        subsample = None
        if any(st > 1 for st in strides_) and any(d > 1 for d in dil):
            # TF has no strided dilated conv: convolve with stride 1, then take every stride-th frame (as the original)
            subsample, strides_ = strides_, [1] * len(strides_)
        if groups == 1:
            y = tf.nn.convolution(x, w, strides=strides_, padding=padding, dilations=dil)
        else:
            xs = tf.split(x, groups, axis=-1)
            ws = tf.split(w, groups, axis=-1)
            y = tf.concat([tf.nn.convolution(xi, wi, strides=strides_, padding=padding, dilations=dil)
                           for xi, wi in zip(xs, ws)], axis=-1)
        if subsample:
            y = y[(slice(None),) + tuple(slice(None, None, st) for st in subsample) + (slice(None),)]
        y = restore(y)
        if with_bias is NotSpecified:
            with_bias = bias is not None
        self.output.placeholder = self._add_bias_and_activation(y, with_bias, bias, bias_init, n_out, activation)

    @staticmethod
    def _norm_opts(filter_size, strides, dilation_rate):
        if filter_size is None:
            raise ValueError("filter_size must be given")
        filter_size = tuple(as_list(filter_size))
        n = len(filter_size)
        if not 1 <= n <= 3:
            raise ValueError("filter_size=%r: only 1D, 2D and 3D convolutions are supported" % (filter_size,))
        return filter_size, _tuple_opt(strides, n, "strides", 1), _tuple_opt(dilation_rate, n, "dilation_rate", 1)

    @staticmethod
    def _len_func(f, s, dl, padding):
        return lambda n: conv_out_len(n, f, s, padding, dl)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, filter_size=None, padding=None, strides=1,
                               dilation_rate=1, input_expand_dims=0, input_add_feature_dim=False,
                               input_split_feature_dim=None, in_spatial_dims=None, out_dim=None,
                               out_spatial_dims=None, out_type=None, **kwargs):
        if padding is None:
            raise ValueError("padding ('same' or 'valid') must be given")
        filter_size, strides, dilation_rate = cls._norm_opts(filter_size, strides, dilation_rate)
        if out_dim is not None and (n_out is NotSpecified or n_out is None):
            n_out = out_dim.dimension
        if n_out is NotSpecified or n_out is None:
            raise ValueError("n_out must be given")
        data = concat_sources_template(sources, name="%s_input" % name)
        data, n_batch, _ = transform_input(
            data, name, in_spatial_dims, len(filter_size), input_expand_dims, input_split_feature_dim,
            input_add_feature_dim, filter_opt="filter_size=%r" % (filter_size,))
        funcs = [cls._len_func(f, s, dl, padding) for f, s, dl in zip(filter_size, strides, dilation_rate)]
        in_dims = data.dims[n_batch:n_batch + len(filter_size)]
        out_dims = _new_spatial_dims(name, in_dims, funcs, out_spatial_dims)
        feat = out_dim or Dim(n_out, kind=Dim.Types.Feature, description="%s:channel" % name)
        return _make_output(name, data, n_batch, out_dims, feat)


def _apply_filter_perm(filter_data, filter_perm, filter_size, n_in, n_out):
    """filter_perm: like the transpose layer's perm (dict target axis -> source axis) applied to the filter layer."""
    from .shape import TransposeLayer

    x = TransposeLayer.transpose(filter_data, filter_perm).placeholder
    expected = tuple(filter_size) + (n_in, n_out)
    if x.shape.rank is not None and tuple(x.shape.as_list()) != expected:
        raise ValueError("filter (after filter_perm=%r) has shape %s, expected %s = [*filter_size, in, out]" % (
            filter_perm, x.shape.as_list(), list(expected)))
    return x


class PoolLayer(_ConvBase):
    """Max/avg pooling over the spatial axes (strides default to pool_size).
    :param mode: "max" or "avg"
    :param pool_size: window size per spatial axis
    :param padding: "valid" or "same"
    :param dilation_rate: dilation per spatial axis
    :param strides: stride per spatial axis (default: pool_size)
    :param use_channel_first: use channel-first layout
    :param in_dim: the input feature (channel) Dim: checked to be the input's feature dim (see LayerBase)
    :param in_spatial_dims: the input's spatial Dims to convolve over (default: all spatial axes)
    :param out_dim: the output feature (channel) Dim, the input's one (the template takes this Dim; see LayerBase)
    :param out_spatial_dims: the output spatial Dims (default: new dims computed from the input ones)
    :param use_time_mask: zero the padded frames of dynamic spatial axes before applying
    """

    layer_class = "pool"
    options_without_effect = {"use_channel_first": "a layout choice for speed; the output is the same"}

    def __init__(self, mode, pool_size, padding="VALID", dilation_rate=1, strides=None, use_channel_first=False,
                 in_spatial_dims=None, out_spatial_dims=None, use_time_mask=False, **kwargs):
        super().__init__(**kwargs)
        pool_size, strides, dilation_rate = self._norm_opts(pool_size, strides, dilation_rate)
        padding = padding.upper()
        inp = self.input_data
        if use_time_mask:
            inp = inp.copy_masked(float("-inf") if mode.lower() == "max" else 0.0)
        no_feature = inp.feature_dim_axis is None  # a size-1 channel axis is added for tf.nn.pool and removed again
        data, n_batch, _ = transform_input(inp, self.name, in_spatial_dims, len(pool_size),
                                           filter_opt="pool_size=%r" % (pool_size,))
        if all(p == 1 for p in pool_size) and all(s == 1 for s in strides):
            self.output.placeholder = tf.squeeze(data.placeholder, -1) if no_feature else data.placeholder
            return
        funcs = [ConvLayer._len_func(p, s, dl, padding) for p, s, dl in zip(pool_size, strides, dilation_rate)]
        in_dims = data.dims[n_batch:n_batch + len(pool_size)]
        out_dims = self.output.dims[n_batch:n_batch + len(pool_size)]
        _set_dyn_sizes(in_dims, out_dims, funcs)
        mode = mode.upper()
        if mode not in ("MAX", "AVG"):
            raise ValueError("mode must be 'max' or 'avg', got %r" % mode)
        x, restore = _merge_batch(data.placeholder, n_batch)
        y = tf.nn.pool(x, window_shape=list(pool_size), pooling_type=mode, padding=padding,
                       dilations=list(dilation_rate), strides=list(strides))
        y = restore(y)
        self.output.placeholder = tf.squeeze(y, -1) if no_feature else y

    @staticmethod
    def _norm_opts(pool_size, strides, dilation_rate):
        pool_size = tuple(as_list(pool_size))
        n = len(pool_size)
        if not 1 <= n <= 3:
            raise ValueError("pool_size=%r: only 1D, 2D and 3D pooling are supported" % (pool_size,))
        strides = pool_size if strides is None else _tuple_opt(strides, n, "strides")
        return pool_size, strides, _tuple_opt(dilation_rate, n, "dilation_rate", 1)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), pool_size=None, strides=None, dilation_rate=1, padding="VALID",
                               in_spatial_dims=None, out_spatial_dims=None, **kwargs):
        pool_size, strides, dilation_rate = cls._norm_opts(pool_size, strides, dilation_rate)
        data = concat_sources_template(sources, name="%s_input" % name)
        no_feature = data.feature_dim_axis is None
        data, n_batch, _ = transform_input(data, name, in_spatial_dims, len(pool_size),
                                           filter_opt="pool_size=%r" % (pool_size,))
        if all(p == 1 for p in pool_size) and all(s == 1 for s in strides):
            out = data.copy_template(name="%s_output" % name)
            return out.copy_template_excluding_axis(-1) if no_feature else out
        funcs = [ConvLayer._len_func(p, s, dl, padding) for p, s, dl in zip(pool_size, strides, dilation_rate)]
        in_dims = data.dims[n_batch:n_batch + len(pool_size)]
        try:
            out_dims = _new_spatial_dims(name, in_dims, funcs, out_spatial_dims)
        except ValueError as exc:
            raise ValueError("pool_size=%r with padding=%r: %s" % (pool_size, padding, exc)) from None
        f = data.feature_dim_axis
        return _make_output(name, data, n_batch, out_dims, None if no_feature else data.dims[f])


class TransposedConvLayer(_ConvBase):
    """Transposed convolution (1D/2D), filter param ``W_native_transposed_conv`` [*filter_size, n_out, n_in].
    :param filter_size: window size per spatial axis (required)
    :param activation: activation function applied to the output
    :param strides: stride (upsampling factor) per spatial axis (default: filter_size)
    :param padding: "same" or "valid"
    :param remove_padding: remove this many frames at both ends of each spatial axis
    :param output_padding: extra frames added at the end of each spatial axis
    :param with_bias: add a bias
    :param forward_weights_init: initializer of the filter weights
    :param bias_init: initializer of the bias
    :param filter: layer whose output is used as the filter instead of a param
    :param filter_perm: dict mapping filter axes to reorder the given filter layer's axes
    :param bias: layer whose output is used as the bias instead of a param
    :param in_dim: the input feature (channel) Dim: checked to be the input's feature dim (see LayerBase)
    :param in_spatial_dims: the input's spatial Dims to convolve over (default: all spatial axes)
    :param out_dim: the output feature (channel) Dim (alternative to n_out)
    :param out_spatial_dims: the output spatial Dims (default: new dims computed from the input ones)
    :param use_time_mask: zero the padded frames of dynamic spatial axes before applying
    """

    layer_class = "transposed_conv"
    unsupported_options = {"filter_perm": (None,)}

    def __init__(self, filter_size, activation=None, strides=None, padding="same", remove_padding=0,
                 output_padding=None, with_bias=True, forward_weights_init="glorot_uniform", bias_init=0.0,
                 filter=None, filter_perm=None, bias=None, in_spatial_dims=None, out_dim=None,
                 out_spatial_dims=None, use_time_mask=False, **kwargs):
        super().__init__(**kwargs)
        filter_size, strides, remove_padding, output_padding = self._norm_opts(
            filter_size, strides, remove_padding, output_padding)
        inp = self.input_data.copy_masked(0.0) if use_time_mask else self.input_data
        data, n_batch, n_sp = transform_input(inp, self.name, in_spatial_dims, len(filter_size),
                                              filter_opt="filter_size=%r" % (filter_size,))
        funcs = self._funcs(filter_size, strides, padding, output_padding, remove_padding)
        in_dims = data.dims[n_batch:n_batch + n_sp]
        out_dims = self.output.dims[n_batch:n_batch + n_sp]
        _set_dyn_sizes(in_dims, out_dims, funcs)
        n_in, n_out = data.dim, self.output.dim
        fs2, st2 = list(filter_size), list(strides)
        if n_sp == 1:
            fs2, st2 = fs2 + [1], st2 + [1]
        if filter is not None:
            w = filter.output.placeholder
        else:
            w = self.create_param("W_native_transposed_conv", tuple(fs2) + (n_out, n_in), forward_weights_init)
        x, restore = _merge_batch(data.placeholder, n_batch)
        if n_sp == 1:
            x = tf.expand_dims(x, 2)
        shape = tf.shape(x)
        out_shape = [shape[0]]
        for i in range(len(fs2)):
            n = x.shape[1 + i] if x.shape[1 + i] is not None else shape[1 + i]
            op = output_padding[i] if i < n_sp else None
            out_shape.append(deconv_out_len(n, fs2[i], st2[i], padding, op))
        out_shape.append(n_out)
        y = tf.nn.conv2d_transpose(x, w, output_shape=tf.stack(out_shape) if any(
            isinstance(s, tf.Tensor) for s in out_shape) else out_shape, strides=[1] + st2 + [1],
            padding=padding.upper())
        if any(remove_padding):
            sl = [slice(None)]
            for r in remove_padding:
                sl.append(slice(r, -r) if r else slice(None))
            y = y[tuple(sl)]
        if n_sp == 1:
            y = tf.squeeze(y, 2)
        y = restore(y)
        self.output.placeholder = self._add_bias_and_activation(y, with_bias, bias, bias_init, n_out, activation)

    @staticmethod
    def _norm_opts(filter_size, strides, remove_padding, output_padding):
        filter_size = tuple(as_list(filter_size))
        n = len(filter_size)
        if not 1 <= n <= 2:
            raise ValueError("filter_size=%r: transposed_conv supports 1D and 2D" % (filter_size,))
        strides = filter_size if strides is None else _tuple_opt(strides, n, "strides")
        remove_padding = _tuple_opt(remove_padding, n, "remove_padding", 0)
        if output_padding is None or isinstance(output_padding, int):
            output_padding = (output_padding,) * n
        else:
            output_padding = _tuple_opt(output_padding, n, "output_padding")
        return filter_size, strides, remove_padding, output_padding

    @staticmethod
    def _funcs(filter_size, strides, padding, output_padding, remove_padding):
        return [(lambda f, s, op, r: (lambda n: deconv_out_len(n, f, s, padding, op, r)))(f, s, op, r)
                for f, s, op, r in zip(filter_size, strides, output_padding, remove_padding)]

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, filter_size=None, strides=None,
                               padding="same", remove_padding=0, output_padding=None, in_spatial_dims=None,
                               out_dim=None, out_spatial_dims=None, **kwargs):
        filter_size, strides, remove_padding, output_padding = cls._norm_opts(
            filter_size, strides, remove_padding, output_padding)
        if out_dim is not None and (n_out is NotSpecified or n_out is None):
            n_out = out_dim.dimension
        if n_out is NotSpecified or n_out is None:
            raise ValueError("n_out must be given")
        data = concat_sources_template(sources, name="%s_input" % name)
        data, n_batch, n_sp = transform_input(data, name, in_spatial_dims, len(filter_size),
                                              filter_opt="filter_size=%r" % (filter_size,))
        funcs = cls._funcs(filter_size, strides, padding, output_padding, remove_padding)
        out_dims = _new_spatial_dims(name, data.dims[n_batch:n_batch + n_sp], funcs, out_spatial_dims,
                                     kind="transposed_conv")
        feat = out_dim or Dim(n_out, kind=Dim.Types.Feature, description="%s:channel" % name)
        return _make_output(name, data, n_batch, out_dims, feat)


class DctLayer(ConcatInputLayer):
    """tf.signal.dct over the feature axis.
    :param type: DCT type (1, 2, 3 or 4)
    :param n: length of the transform (default: the feature dim)
    :param norm: None or "ortho"
    """

    layer_class = "dct"
    recurrent = True

    def __init__(self, type=2, n=None, norm=None, **kwargs):  # noqa: A002 (original's option name)
        super().__init__(**kwargs)
        data = self.input_data
        f = data.feature_dim_axis
        x = data.placeholder
        last = data.batch_ndim - 1
        if f != last:
            x = tf.transpose(x, [i for i in range(data.batch_ndim) if i != f] + [f])
        y = tf.signal.dct(x, type=type, n=n, axis=-1, norm=norm)
        if f != last:
            perm = list(range(data.batch_ndim - 1))
            perm.insert(f, last)
            y = tf.transpose(y, perm)
        self.output.placeholder = y

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n=None, type=2, norm=None, **kwargs):  # noqa: A002
        if type not in (1, 2, 3, 4):
            raise ValueError("type=%r: DCT type must be 1, 2, 3 or 4" % (type,))
        if norm not in (None, "ortho"):
            raise ValueError("norm=%r must be None or 'ortho'" % (norm,))
        out = concat_sources_template(sources, name="%s_output" % name)
        if out.feature_dim_axis is None:
            raise ValueError("input %s has no feature axis" % out.short_repr())
        if n is not None and n != out.dim:
            out = out.copy_template_replace_dim_tag(
                out.feature_dim_axis, Dim(n, kind=Dim.Types.Feature, description="%s:dct" % name))
        return out
