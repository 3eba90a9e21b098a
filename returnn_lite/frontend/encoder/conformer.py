"""
Conformer encoder (Gulati et al. 2020, https://arxiv.org/abs/2005.08100) with the original rf's options and param
names, so that its params load by name and give the same outputs.

A layer (pre-norm, "macaron" FF halves):

    x = x + 0.5 * dropout(ffn1(ln(x)))
    x = x + dropout(self_att(ln(x)))                 # RelPosSelfAttention by default
    x = x + dropout(conv_block(ln(x)))               # Linear(d, 2d) -> GLU -> depthwise conv -> BN -> swish -> Linear
    x = x + 0.5 * dropout(ffn2(ln(x)))
    y = final_layer_norm(x)

The encoder: optional input layer (e.g. :class:`ConformerConvSubsample`, conv2d + pooling/striding), a Linear without
bias to ``out_dim``, optional scale, dropout, then ``num_layers`` deep copies of the layer.
"""

from __future__ import annotations

import copy as _copy

from ...tensor import Dim
from ...util import NotSpecified
from .. import array_, math_
from ..build_from_dict import build_from_dict
from ..conv import Conv1d, Conv2d, gating, make_conv_out_spatial_dims, pool2d
from ..decoder.transformer import FeedForward, make_norm
from ..module import Module, ModuleList, Sequential
from ..nn import BatchNorm, LayerNorm, Linear, dropout
from .base import ISeqDownsamplingEncoder

__all__ = ["ConformerPositionwiseFeedForward", "ConformerConvBlock", "ConformerConvSubsample",
           "ConformerEncoderLayer", "ConformerEncoder", "make_ff"]


def _dropout_broadcast_default():
    from .. import defaults

    return defaults.dropout_broadcast_default()


def _rel_pos_self_attention(**opts):
    from ..attention import RelPosSelfAttention

    return RelPosSelfAttention(**opts)


def _drop(module, x, rate):
    """Dropout of a block output (the mask broadcast over all but out_dim where dropout_broadcast is on)."""
    return dropout(x, rate, axis=module.dropout_broadcast and module.out_dim)


class ConformerPositionwiseFeedForward(FeedForward):
    """FeedForward (Linear -> activation -> dropout -> Linear) with swish as the default activation."""

    def __init__(self, out_dim, *, ff_dim=NotSpecified, dropout=0.1, activation=math_.swish, **kwargs):
        if activation is NotSpecified:
            activation = math_.swish
        super().__init__(out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, activation=activation, **kwargs)


class ConformerConvBlock(Module):
    """
    Conv module: ``positionwise_conv1`` (Linear d -> 2d), GLU, ``depthwise_conv`` (Conv1d, groups=d, 'same'),
    ``norm`` (BatchNorm originally), swish, ``positionwise_conv2`` (Linear d -> d).
    """

    def __init__(self, out_dim, *, kernel_size, norm):
        super().__init__()
        self.out_dim = out_dim
        self.positionwise_conv1 = Linear(out_dim, 2 * out_dim)
        self.depthwise_conv = Conv1d(out_dim, out_dim, filter_size=kernel_size, groups=out_dim.dimension,
                                     padding="same")
        self.positionwise_conv2 = Linear(out_dim, out_dim)
        if not callable(norm):
            raise TypeError("%s: norm must be callable (e.g. rf.BatchNorm(out_dim)), got %r" % (
                type(self).__name__, norm))
        self.norm = norm

    def __call__(self, inp, *, spatial_dim):
        x = self.positionwise_conv1(inp)
        x, _ = gating(x)
        x, _ = self.depthwise_conv(x, in_spatial_dim=spatial_dim)
        x = self.norm(x)
        x = math_.swish(x)
        return self.positionwise_conv2(x)


class ConformerConvSubsample(ISeqDownsamplingEncoder):
    """
    Conv2d front end over (time, feature) with one input channel: per entry of ``out_dims`` a Conv2d (filter size,
    stride), the activation and optionally max pooling (``pool_sizes[i]``, 'same'); then the feature and channel
    dims are merged into ``out_dim``. ESPnet's Conv2dSubsampling6 is ``out_dims=[d, d], filter_sizes=[3, 5],
    strides=[2, 3], padding="valid"``.
    """

    def __init__(self, in_dim, *, out_dims, filter_sizes, strides=None, pool_sizes=None, activation=math_.relu,
                 padding="same"):
        super().__init__()
        out_dims = list(out_dims)
        filter_sizes = list(filter_sizes)
        strides = [1] * len(out_dims) if strides is None else list(strides)
        if not (len(out_dims) == len(filter_sizes) == len(strides) > 0):
            raise ValueError("ConformerConvSubsample: out_dims, filter_sizes and strides need the same length > 0, "
                             "got %i, %i, %i" % (len(out_dims), len(filter_sizes), len(strides)))
        self.pool_sizes = pool_sizes
        self.activation = activation
        self.in_dim = in_dim
        self._dummy_in_dim = Dim(1, name="dummy-input-feature-dim")
        self.conv_layers = ModuleList()
        channels = self._dummy_in_dim
        feature_dim = in_dim
        for i, (filter_size, stride, out_dim) in enumerate(zip(filter_sizes, strides, out_dims)):
            conv_layer = Conv2d(channels, out_dim, filter_size=filter_size, strides=stride, padding=padding)
            self.conv_layers.append(conv_layer)
            (feature_dim,) = make_conv_out_spatial_dims(
                [feature_dim], filter_size=conv_layer.filter_size[1], strides=conv_layer.strides[1], padding=padding)
            if pool_sizes and i < len(pool_sizes):
                pool_size = _pair(pool_sizes[i])
                (feature_dim,) = make_conv_out_spatial_dims(
                    [feature_dim], filter_size=pool_size[1], strides=pool_size[1], padding="same")
            channels = out_dim
        self._final_second_spatial_dim = feature_dim
        self.out_dim = feature_dim * channels

    def __call__(self, source, *, in_spatial_dim):
        if self.in_dim not in source.dims:
            raise ValueError("ConformerConvSubsample: in_dim %s is not a dim of the input %r" % (self.in_dim, source))
        spatial_dims = [in_spatial_dim, self.in_dim]
        channels = self._dummy_in_dim
        x = array_.expand_dim(source, dim=channels)
        for i, conv_layer in enumerate(self.conv_layers):
            x, spatial_dims = conv_layer(x, in_spatial_dims=spatial_dims)
            channels = conv_layer.out_dim
            x = self.activation(x)
            if self.pool_sizes and i < len(self.pool_sizes):
                x, spatial_dims = pool2d(x, in_spatial_dims=spatial_dims, pool_size=self.pool_sizes[i],
                                         padding="same", mode="max")
        x, _ = array_.replace_dim(x, in_dim=spatial_dims[-1], out_dim=self._final_second_spatial_dim)
        out, _ = array_.merge_dims(x, dims=[self._final_second_spatial_dim, channels], out_dim=self.out_dim)
        return out, spatial_dims[0]


def _pair(size):
    return (size, size) if isinstance(size, int) else tuple(size)


class ConformerEncoderLayer(Module):
    """One Conformer block (see the module docstring); params ffn1, ffn1_layer_norm, self_att, self_att_layer_norm,
    conv_block, conv_layer_norm, ffn2, ffn2_layer_norm, final_layer_norm."""

    def __init__(self, out_dim=Dim(512, name="conformer-enc-default-out-dim"), *, ff=NotSpecified, ff_dim=NotSpecified,
                 ff_activation=NotSpecified, dropout=0.1, conv_kernel_size=32, conv_norm=NotSpecified,
                 conv_norm_opts=None, num_heads=4, self_att=None, self_att_opts=None, att_dropout=0.1,
                 norm=LayerNorm):
        super().__init__()
        self.dropout = dropout
        self.dropout_broadcast = _dropout_broadcast_default()
        self.out_dim = out_dim

        self.ffn1 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn1_layer_norm = make_norm(norm, out_dim)
        self.ffn2 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn2_layer_norm = make_norm(norm, out_dim)

        self.conv_block = ConformerConvBlock(out_dim=out_dim, kernel_size=conv_kernel_size,
                                             norm=_make_conv_norm(conv_norm, conv_norm_opts, out_dim))
        self.conv_layer_norm = make_norm(norm, out_dim)

        self.self_att = _make_self_att(self_att, self_att_opts, dict(
            in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim, num_heads=num_heads,
            att_dropout=att_dropout))
        self.self_att_layer_norm = make_norm(norm, out_dim)
        self.final_layer_norm = make_norm(norm, out_dim)

    def __call__(self, inp, *, spatial_dim):
        x = inp + 0.5 * _drop(self, self.ffn1(self.ffn1_layer_norm(inp)), self.dropout)
        x = x + _drop(self, self.self_att(self.self_att_layer_norm(x), axis=spatial_dim), self.dropout)
        x = x + _drop(self, self.conv_block(self.conv_layer_norm(x), spatial_dim=spatial_dim), self.dropout)
        x = x + 0.5 * _drop(self, self.ffn2(self.ffn2_layer_norm(x)), self.dropout)
        return self.final_layer_norm(x)


def _make_conv_norm(conv_norm, conv_norm_opts, out_dim):
    """BatchNorm (use_mask=False unless given, as most implementations) by default; a class, a dict or a module."""
    if conv_norm is NotSpecified or conv_norm is BatchNorm:
        opts = dict(conv_norm_opts or {})
        opts.setdefault("use_mask", False)
        conv_norm = BatchNorm(out_dim, **opts)
    elif isinstance(conv_norm, type):
        conv_norm = conv_norm(out_dim, **(conv_norm_opts or {}))
    elif isinstance(conv_norm, dict):
        conv_norm = build_from_dict(conv_norm, out_dim, **(conv_norm_opts or {}))
    if not callable(conv_norm):
        raise TypeError("ConformerEncoderLayer: conv_norm must give a callable, got %r" % (conv_norm,))
    return conv_norm


def _make_self_att(self_att, self_att_opts, default_opts):
    """RelPosSelfAttention by default; a class or dict gets the default options (a dict's own keys win)."""
    if self_att is not None and not isinstance(self_att, (dict, type)):
        if not callable(self_att):
            raise TypeError("ConformerEncoderLayer: self_att must be callable, got %r" % (self_att,))
        return self_att
    opts = dict(default_opts)
    opts.update(self_att_opts or {})
    if self_att is None:
        return _rel_pos_self_attention(**opts)
    if isinstance(self_att, type):
        return self_att(**opts)
    return build_from_dict(self_att, **{k: v for k, v in opts.items() if k not in self_att})


class ConformerEncoder(ISeqDownsamplingEncoder):
    """
    ``(y, out_spatial_dim) = encoder(x, in_spatial_dim=)``: input_layer, input_projection (Linear without bias),
    ``* input_embedding_scale``, dropout, ``layers`` (``num_layers`` copies of ``encoder_layer``).
    """

    def __init__(self, in_dim, out_dim=Dim(512, name="conformer-enc-default-out-dim"), *, num_layers, input_layer,
                 input_embedding_scale=1.0, input_dropout=0.1, ff_dim=NotSpecified, ff_activation=NotSpecified,
                 dropout=0.1, conv_kernel_size=NotSpecified, conv_norm=NotSpecified, num_heads=4, att_dropout=0.1,
                 encoder_layer=None, encoder_layer_opts=None, sequential=Sequential):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.dropout = dropout
        self.dropout_broadcast = _dropout_broadcast_default()
        self.input_layer = input_layer
        self.input_projection = (
            Linear(input_layer.out_dim if input_layer else in_dim, out_dim, with_bias=False) if input_layer else None)
        self.input_embedding_scale = input_embedding_scale
        self.input_dropout = input_dropout
        layer = _make_encoder_layer(encoder_layer, encoder_layer_opts, dict(
            out_dim=out_dim, ff_dim=ff_dim, ff_activation=ff_activation, dropout=dropout,
            conv_kernel_size=conv_kernel_size, conv_norm=conv_norm, num_heads=num_heads, att_dropout=att_dropout))
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))

    def __call__(self, source, *, in_spatial_dim, collected_outputs=None):
        if self.input_layer:
            x, out_spatial_dim = self.input_layer(source, in_spatial_dim=in_spatial_dim)
        else:
            x, out_spatial_dim = source, in_spatial_dim
        if self.input_projection:
            x = self.input_projection(x)
        if self.input_embedding_scale != 1.0:
            x = x * self.input_embedding_scale
        x = dropout(x, self.input_dropout, axis=self.dropout_broadcast and self.out_dim)
        x = self.layers(x, spatial_dim=out_spatial_dim, collected_outputs=collected_outputs)
        return x, out_spatial_dim


def _make_encoder_layer(encoder_layer, encoder_layer_opts, default_opts):
    """ConformerEncoderLayer by default; a class or dict gets the encoder's options (unless NotSpecified)."""
    if encoder_layer and not isinstance(encoder_layer, (dict, type)):
        if not callable(encoder_layer):
            raise TypeError("Conformer encoder: encoder_layer must be callable, got %r" % (encoder_layer,))
        return encoder_layer
    opts = {k: v for k, v in default_opts.items() if v is not NotSpecified}
    opts.update(encoder_layer_opts or {})
    if not encoder_layer:
        return ConformerEncoderLayer(**opts)
    if isinstance(encoder_layer, type):
        return encoder_layer(**opts)
    return build_from_dict(encoder_layer, **{k: v for k, v in opts.items() if k not in encoder_layer})


def make_ff(*, out_dim, ff, ff_dim, ff_activation, dropout):
    """The feed-forward module of a Conformer-like layer: ConformerPositionwiseFeedForward by default, a class or
    dict with the given options (NotSpecified ones left out), or a deep copy of a module."""
    if ff is NotSpecified:
        ff = ConformerPositionwiseFeedForward
    if isinstance(ff, Module):
        return _copy.deepcopy(ff)
    opts = {k: v for k, v in dict(out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, activation=ff_activation).items()
            if v is not NotSpecified}
    if isinstance(ff, type):
        ff = ff(**opts)
    elif isinstance(ff, dict):
        ff = build_from_dict(ff, **opts)
    else:
        raise TypeError("make_ff: ff must be a Module class, dict or Module, got %r" % (ff,))
    if not isinstance(ff, Module):
        raise TypeError("make_ff: ff gave %r, not an rf.Module" % (ff,))
    return ff


_make_ff = make_ff  # the older name
