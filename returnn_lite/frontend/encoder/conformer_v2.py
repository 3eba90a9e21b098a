"""
Conformer v2 (original's ``encoder.conformer_v2``): the front end and the layers as two modules.
:class:`ConformerFrontend` (input_layer, input_projection, input_embedding_scale, dropout) followed by
:class:`ConformerEncoderV2` (only the layers) is :class:`.conformer.ConformerEncoder`.
"""

from __future__ import annotations

import copy as _copy

from ...tensor import Dim
from ...util import NotSpecified
from ..build_from_dict import build_from_dict
from ..module import Sequential
from ..nn import Linear, dropout
from .base import ISeqDownsamplingEncoder, ISeqFramewiseEncoder
from .conformer import ConformerConvSubsample, ConformerEncoderLayer, _dropout_broadcast_default, _make_encoder_layer

__all__ = ["ConformerFrontend", "ConformerEncoderV2", "ConformerConvSubsample", "ConformerEncoderLayer"]


class ConformerFrontend(ISeqDownsamplingEncoder):
    """``(y, out_spatial_dim) = frontend(x, in_spatial_dim=)``; params input_layer, input_projection (no bias)."""

    def __init__(self, in_dim, out_dim=Dim(512, name="conformer-enc-default-out-dim"), *, input_layer,
                 input_embedding_scale=1.0, input_dropout=0.1):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.dropout_broadcast = _dropout_broadcast_default()
        if isinstance(input_layer, dict):
            input_layer = build_from_dict(input_layer, in_dim)
        elif input_layer is not None and not callable(input_layer):
            raise TypeError("ConformerFrontend: input_layer must be a module, a dict or None, got %r" % (input_layer,))
        self.input_layer = input_layer
        self.input_projection = (
            Linear(input_layer.out_dim if input_layer else in_dim, out_dim, with_bias=False) if input_layer else None)
        self.input_embedding_scale = input_embedding_scale
        self.input_dropout = input_dropout

    def __call__(self, source, *, in_spatial_dim):
        if self.input_layer:
            x, out_spatial_dim = self.input_layer(source, in_spatial_dim=in_spatial_dim)
        else:
            x, out_spatial_dim = source, in_spatial_dim
        if self.input_projection:
            x = self.input_projection(x)
        if self.input_embedding_scale != 1.0:
            x = x * self.input_embedding_scale
        x = dropout(x, self.input_dropout, axis=self.dropout_broadcast and self.out_dim)
        return x, out_spatial_dim


class ConformerEncoderV2(ISeqFramewiseEncoder):
    """``y = encoder(x, spatial_dim=)``: ``layers``, ``num_layers`` copies of ``encoder_layer`` (no front end)."""

    def __init__(self, out_dim=Dim(512, name="conformer-enc-default-out-dim"), *, num_layers, ff_dim=NotSpecified,
                 ff_activation=NotSpecified, dropout=0.1, conv_kernel_size=NotSpecified, conv_norm=NotSpecified,
                 num_heads=4, att_dropout=0.1, encoder_layer=None, encoder_layer_opts=None, sequential=Sequential):
        super().__init__()
        self.out_dim = out_dim
        self.dropout = dropout
        self.dropout_broadcast = _dropout_broadcast_default()
        layer = _make_encoder_layer(encoder_layer, encoder_layer_opts, dict(
            out_dim=out_dim, ff_dim=ff_dim, ff_activation=ff_activation, dropout=dropout,
            conv_kernel_size=conv_kernel_size, conv_norm=conv_norm, num_heads=num_heads, att_dropout=att_dropout))
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))

    def __call__(self, x, *, spatial_dim, collected_outputs=None):
        return self.layers(x, spatial_dim=spatial_dim, collected_outputs=collected_outputs)
