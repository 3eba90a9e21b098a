"""
Transformer encoder (Vaswani et al. 2017, pre-norm): :class:`TransformerEncoder`, :class:`TransformerEncoderLayer`.
Options and param names as the original's ``returnn.frontend.encoder.transformer``; also see
:mod:`returnn_lite.frontend.decoder.transformer`.
"""

from __future__ import annotations

import copy as _copy

from ...tensor import Dim
from ...util import NotSpecified
from ..attention import SelfAttention, sinusoidal_positional_encoding
from ..build_from_dict import build_from_dict
from ..decoder.transformer import FeedForward, _as_dim, _make_module, _make_pos_enc, make_norm
from ..defaults import dropout_broadcast_default
from ..module import Module, Sequential
from ..nn import Embedding, LayerNorm, Linear, State, dropout

__all__ = ["TransformerEncoder", "TransformerEncoderLayer"]


class TransformerEncoder(Module):
    """
    input_embedding (of labels; None: the input already has model_dim) scaled by input_embedding_scale, plus
    positional encoding, dropout, optional projection embed -> model, ``num_layers`` :class:`TransformerEncoderLayer`
    (``layers.0``, ...), ``final_layer_norm``.
    """

    def __init__(self, vocab_dim, model_dim=Dim(512, name="transformer-enc-default-model-dim"), *, num_layers,
                 ff=NotSpecified, pos_enc=sinusoidal_positional_encoding, dropout=0.1, num_heads=8, att_dropout=0.1,
                 norm=LayerNorm, layer=None, layer_opts=None, embed_dim=None, input_embedding=Embedding,
                 input_embedding_scale=None, input_dropout=None, sequential=Sequential, **compat_kwargs):
        super().__init__()
        if "decoder_layer" in compat_kwargs:  # the original's earlier option name
            if layer is not None:
                raise TypeError("TransformerEncoder: give layer or decoder_layer, not both")
            layer = compat_kwargs.pop("decoder_layer")
        if compat_kwargs:
            raise TypeError("TransformerEncoder: unexpected options %s" % sorted(compat_kwargs))
        if not isinstance(vocab_dim, Dim):
            raise TypeError("TransformerEncoder: vocab_dim must be a Dim, got %r" % (vocab_dim,))
        model_dim = _as_dim(model_dim, "transformer-enc-model-dim", "TransformerEncoder model_dim")
        self.vocab_dim = vocab_dim
        self.model_dim = model_dim
        self.embed_dim = embed_dim

        if isinstance(input_embedding, type):
            input_embedding = input_embedding(vocab_dim, embed_dim or model_dim)
        elif isinstance(input_embedding, dict):
            input_embedding = build_from_dict(input_embedding, vocab_dim, embed_dim or model_dim)
        elif input_embedding is not None and not isinstance(input_embedding, Module):
            raise TypeError("TransformerEncoder: input_embedding must be None, a class, a dict or an rf.Module, "
                            "got %r" % (input_embedding,))
        self.input_embedding = input_embedding
        self.input_embedding_proj = Linear(embed_dim, model_dim, with_bias=False) if embed_dim else None
        self.pos_enc = _make_pos_enc(pos_enc, embed_dim or model_dim)
        self.input_embedding_scale = model_dim.dimension ** 0.5 if input_embedding_scale is None else \
            input_embedding_scale
        self.input_dropout = dropout if input_dropout is None else input_dropout

        if not isinstance(layer, Module) or layer is None:
            opts = dict(out_dim=model_dim, ff=ff, dropout=dropout, num_heads=num_heads, att_dropout=att_dropout,
                        norm=norm)
            opts = {k: v for k, v in opts.items() if v is not NotSpecified}
            opts.update(layer_opts or {})
            layer = _make_module(layer, "TransformerEncoder layer", TransformerEncoderLayer, opts)
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))
        self.final_layer_norm = make_norm(norm, model_dim)

    def default_initial_state(self, *, batch_dims):
        state = State({k: v.default_initial_state(batch_dims=batch_dims) for k, v in self.layers.items()})
        from .. import array_

        state.pos = array_.zeros((), dtype="int32", device="cpu")
        return state

    def __call__(self, source, *, spatial_dim, collected_outputs=None):
        """labels (or model_dim features without input_embedding) over spatial_dim -> output after final norm."""
        if self.input_embedding is not None:
            x = self.input_embedding(source) * self.input_embedding_scale
        else:
            if self.model_dim not in source.dims:
                raise ValueError("TransformerEncoder without input_embedding: input %r lacks model_dim %s" % (
                    source, self.model_dim.short_repr()))
            x = source
        if self.pos_enc is not None:
            x = x + self.pos_enc(spatial_dim=spatial_dim)
        x = dropout(x, self.input_dropout)
        if self.input_embedding_proj is not None:
            x = self.input_embedding_proj(x)
        for name, layer in self.layers.items():
            x = layer(x, spatial_dim=spatial_dim)
            if collected_outputs is not None:
                collected_outputs[name] = x
        return self.final_layer_norm(x)


class TransformerEncoderLayer(Module):
    """
    Pre-norm encoder block: x + self_att(norm(x)), x + ff(norm(x)), each branch with dropout. Params ``self_att``,
    ``self_att_layer_norm``, ``ff``, ``ff_layer_norm``.
    """

    def __init__(self, out_dim=Dim(512, name="transformer-enc-default-out-dim"), *, ff=NotSpecified, dropout=0.1,
                 num_heads=8, self_att=None, att_dropout=0.1, norm=LayerNorm):
        super().__init__()
        self.dropout = dropout
        self.dropout_broadcast = dropout_broadcast_default()
        self.out_dim = out_dim
        self.ff = _make_module(ff, "TransformerEncoderLayer ff", FeedForward, dict(out_dim=out_dim, dropout=dropout))
        self.ff_layer_norm = make_norm(norm, out_dim)
        att_opts = dict(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                        num_heads=num_heads, att_dropout=att_dropout)
        if isinstance(self_att, dict):  # as the original: all options are passed
            self.self_att = build_from_dict(self_att, **att_opts)
        else:
            self.self_att = _make_module(self_att, "TransformerEncoderLayer self_att", SelfAttention, att_opts)
        self.self_att_layer_norm = make_norm(norm, out_dim)

    def default_initial_state(self, *, batch_dims):
        return State(self_att=self.self_att.default_initial_state(batch_dims=batch_dims))

    def __call__(self, x, *, spatial_dim):
        x_sa = self.self_att(self.self_att_layer_norm(x), axis=spatial_dim)
        x = dropout(x_sa, self.dropout, axis=self.dropout_broadcast and self.out_dim) + x
        x_ff = self.ff(self.ff_layer_norm(x))
        return dropout(x_ff, self.dropout, axis=self.dropout_broadcast and self.out_dim) + x
