"""
(Label-synchronous) Transformer decoder (Vaswani et al. 2017, pre-norm as in most current implementations), with
optional cross attention to an encoder: :class:`TransformerDecoder`, :class:`TransformerDecoderLayer`, the
position-wise :class:`FeedForward` / :class:`FeedForwardGated` blocks and :func:`make_norm`.

Constructor options and param names as the original's ``returnn.frontend.decoder.transformer``, so that the
original's checkpoints load by name. Full sequence or step by step with the same numbers::

    logits, state = dec(labels, spatial_dim=time, state=dec.default_initial_state(batch_dims=[batch]), encoder=enc)
    logits, state = dec(label_t, spatial_dim=single_step_dim, state=state, encoder=enc)
"""

from __future__ import annotations

import copy as _copy
import functools
import logging
from types import FunctionType

from ...compat.util_basic import BehaviorVersion
from ...tensor import Dim, single_step_dim
from ...util import NotSpecified
from .. import array_, math_
from ..attention import CausalSelfAttention, CrossAttention, sinusoidal_positional_encoding
from ..build_from_dict import build_from_dict
from ..defaults import dropout_broadcast_default
from ..module import Module, Sequential
from ..nn import Embedding, LayerNorm, Linear, State, dropout

__all__ = ["TransformerDecoder", "TransformerDecoderLayer", "FeedForward", "FeedForwardGated", "make_norm"]

_log = logging.getLogger("returnn_lite.frontend")


def _ceil_div(a, b):
    return -(-a // b)


def _make_module(spec, what, default, opts):
    """A module from spec: None/NotSpecified -> default(**opts), a class -> spec(**opts), a dict -> build_from_dict
    (its own options win), a Module -> a deep copy."""
    if spec is None or spec is NotSpecified:
        return default(**opts)
    if isinstance(spec, type):
        return spec(**opts)
    if isinstance(spec, dict):
        return build_from_dict(spec, **{k: v for k, v in opts.items() if k not in spec})
    if isinstance(spec, Module):
        return _copy.deepcopy(spec)
    raise TypeError("%s: expected None, a class, a dict or an rf.Module, got %r" % (what, spec))


def _make_pos_enc(pos_enc, feat_dim):
    if pos_enc is None or isinstance(pos_enc, Module):
        return pos_enc
    if isinstance(pos_enc, dict):
        return build_from_dict(pos_enc, feat_dim=feat_dim)
    if isinstance(pos_enc, (FunctionType, functools.partial)):
        return functools.partial(pos_enc, feat_dim=feat_dim)
    raise TypeError("pos_enc: expected None, a function, a dict or an rf.Module, got %r" % (pos_enc,))


def _as_dim(x, name, what):
    if isinstance(x, int) and not isinstance(x, bool):
        return Dim(x, name=name)
    if not isinstance(x, Dim):
        raise TypeError("%s: expected a Dim or int, got %r" % (what, x))
    return x


class TransformerDecoder(Module):
    """
    Embedding (scaled by input_embedding_scale) + positional encoding, dropout, optional projection embed -> model,
    ``num_layers`` :class:`TransformerDecoderLayer` (``layers.0``, ...), ``final_layer_norm``, ``logits`` (Linear,
    weight shared with the embedding if share_embedding).
    """

    def __init__(self, encoder_dim, vocab_dim, model_dim=Dim(512, name="transformer-dec-default-model-dim"), *,
                 num_layers, ff=NotSpecified, ff_dim=NotSpecified, ff_activation=NotSpecified,
                 pos_enc=sinusoidal_positional_encoding, dropout=0.1, num_heads=8, att_dropout=0.1, norm=LayerNorm,
                 layer=None, layer_opts=None, embed_dim=None, share_embedding=None, input_embedding_scale=None,
                 input_dropout=None, logits_with_bias=False, sequential=Sequential, **compat_kwargs):
        super().__init__()
        if "decoder_layer" in compat_kwargs:  # the original's earlier option names
            if layer is not None:
                raise TypeError("TransformerDecoder: give layer or decoder_layer, not both")
            layer = compat_kwargs.pop("decoder_layer")
        if "decoder_layer_opts" in compat_kwargs:
            if layer_opts is not None:
                raise TypeError("TransformerDecoder: give layer_opts or decoder_layer_opts, not both")
            layer_opts = compat_kwargs.pop("decoder_layer_opts")
        if compat_kwargs:
            raise TypeError("TransformerDecoder: unexpected options %s" % sorted(compat_kwargs))
        if not isinstance(vocab_dim, Dim):
            raise TypeError("TransformerDecoder: vocab_dim must be a Dim, got %r" % (vocab_dim,))
        model_dim = _as_dim(model_dim, "transformer-dec-model-dim", "TransformerDecoder model_dim")

        self.encoder_dim = encoder_dim
        self.vocab_dim = vocab_dim
        self.model_dim = model_dim
        self.embed_dim = embed_dim
        self.input_embedding = Embedding(vocab_dim, embed_dim or model_dim)
        self.input_embedding_proj = Linear(embed_dim, model_dim, with_bias=False) if embed_dim else None
        self.pos_enc = _make_pos_enc(pos_enc, embed_dim or model_dim)

        new_defaults = BehaviorVersion.get() >= 20
        if share_embedding is None:
            share_embedding = new_defaults
        if input_embedding_scale is None:
            input_embedding_scale = model_dim.dimension ** 0.5 if new_defaults else 1.0
        if input_dropout is None:
            input_dropout = dropout if new_defaults else 0.0
        if not new_defaults:
            _log.debug("TransformerDecoder: behavior version < 20 defaults (no shared embedding, scale 1, no input "
                       "dropout) unless given")
        self.input_embedding_scale = input_embedding_scale
        self.input_dropout = input_dropout

        if not isinstance(layer, Module) or layer is None:
            opts = dict(encoder_dim=encoder_dim, out_dim=model_dim, ff=ff, ff_dim=ff_dim, ff_activation=ff_activation,
                        dropout=dropout, num_heads=num_heads, att_dropout=att_dropout, norm=norm)
            opts = {k: v for k, v in opts.items() if v is not NotSpecified}
            opts.update(layer_opts or {})
            layer = _make_module(layer, "TransformerDecoder layer", TransformerDecoderLayer, opts)
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))
        self.final_layer_norm = make_norm(norm, model_dim)
        self.logits = Linear(model_dim, vocab_dim, with_bias=logits_with_bias)
        if share_embedding:
            if embed_dim or logits_with_bias:
                raise ValueError("TransformerDecoder: share_embedding does not go with embed_dim or logits_with_bias")
            self.logits.weight = self.input_embedding.weight

    def default_initial_state(self, *, batch_dims):
        """Per layer its state, and ``pos`` (the number of frames so far)."""
        state = State({k: v.default_initial_state(batch_dims=batch_dims) for k, v in self.layers.items()})
        state.pos = array_.zeros((), dtype="int32", device="cpu")
        return state

    def transform_encoder(self, encoder, *, axis):
        """The keys/values of the cross attention of each layer (computed once; expects a normed encoder output)."""
        return State({k: v.transform_encoder(encoder, axis=axis) for k, v in self.layers.items()})

    def __call__(self, source, *, spatial_dim, state, encoder=None, collected_outputs=None,
                 output_only_last_frame=False):
        """labels over spatial_dim (or one step: single_step_dim) -> (logits, new state)."""
        new_state = State()
        decoded = self.input_embedding(source) * self.input_embedding_scale
        if self.pos_enc is not None:
            decoded = decoded + self.pos_enc(spatial_dim=spatial_dim, offset=state.pos)
        decoded = dropout(decoded, self.input_dropout)
        if self.input_embedding_proj is not None:
            decoded = self.input_embedding_proj(decoded)
        new_state.pos = state.pos + (1 if spatial_dim == single_step_dim else spatial_dim.get_size_tensor())
        for name, layer in self.layers.items():
            decoded, new_state[name] = layer(decoded, spatial_dim=spatial_dim, state=state[name],
                                             encoder=encoder[name] if encoder else None)
            if collected_outputs is not None:
                collected_outputs[name] = decoded
        if output_only_last_frame and spatial_dim != single_step_dim:
            decoded = array_.gather(decoded, axis=spatial_dim, indices=array_.last_frame_position_of_dim(spatial_dim))
        decoded = self.final_layer_norm(decoded)
        return self.logits(decoded), new_state


class TransformerDecoderLayer(Module):
    """
    Pre-norm decoder block: x + self_att(norm(x)) (causal), x + cross_att(norm(x)) (if encoder_dim), x + ff(norm(x)),
    each branch with dropout. Params ``self_att``, ``self_att_layer_norm``, ``cross_att``, ``cross_att_layer_norm``,
    ``ff``, ``ff_layer_norm``.
    """

    def __init__(self, encoder_dim, out_dim=Dim(512, name="transformer-dec-default-out-dim"), *, ff=NotSpecified,
                 ff_dim=NotSpecified, ff_activation=NotSpecified, dropout=0.1, num_heads=8, self_att=None,
                 self_att_opts=None, att_dropout=0.1, norm=LayerNorm):
        super().__init__()
        self.encoder_dim = encoder_dim
        self.dropout = dropout
        self.dropout_broadcast = dropout_broadcast_default()
        self.out_dim = out_dim

        ff_opts = dict(out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, activation=ff_activation)
        self.ff = _make_module(ff, "TransformerDecoderLayer ff", FeedForward,
                               {k: v for k, v in ff_opts.items() if v is not NotSpecified})
        self.ff_layer_norm = make_norm(norm, out_dim)

        att_opts = dict(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                        num_heads=num_heads, att_dropout=att_dropout)
        att_opts.update(self_att_opts or {})
        if isinstance(self_att, dict):  # the original passes all options, also those the dict sets
            self.self_att = build_from_dict(self_att, **att_opts)
        else:
            self.self_att = _make_module(self_att, "TransformerDecoderLayer self_att", CausalSelfAttention, att_opts)
        self.self_att_layer_norm = make_norm(norm, out_dim)

        self.cross_att = None
        self.cross_att_layer_norm = None
        if encoder_dim is not None:
            self.cross_att = CrossAttention(encoder_dim=encoder_dim, query_in_dim=out_dim, proj_dim=out_dim,
                                            key_dim_total=out_dim, value_dim_total=out_dim, num_heads=num_heads,
                                            att_dropout=att_dropout)
            self.cross_att_layer_norm = make_norm(norm, out_dim)

    def default_initial_state(self, *, batch_dims):
        return State(self_att=self.self_att.default_initial_state(batch_dims=batch_dims))

    def transform_encoder(self, encoder, *, axis):
        if self.cross_att is None:
            raise ValueError("TransformerDecoderLayer: transform_encoder without cross attention (encoder_dim=None)")
        return State(cross_att=self.cross_att.transform_encoder(encoder, axis=axis))

    def _residual(self, x, y):
        return dropout(y, self.dropout, axis=self.dropout_broadcast and self.out_dim) + x

    def __call__(self, x, *, spatial_dim, state, encoder=None):
        new_state = State()
        x_sa, new_state.self_att = self.self_att(self.self_att_layer_norm(x), axis=spatial_dim, state=state.self_att)
        x = self._residual(x, x_sa)
        if self.cross_att is not None:
            if encoder is None:
                raise ValueError("TransformerDecoderLayer: cross attention needs encoder= (from transform_encoder)")
            x = self._residual(x, self.cross_att(self.cross_att_layer_norm(x), encoder.cross_att))
        x = self._residual(x, self.ff(self.ff_layer_norm(x)))
        return x, new_state


def _make_activation(activation, default, what):
    if activation is NotSpecified or activation is None:
        return default
    if isinstance(activation, dict):
        return build_from_dict(activation)
    if not callable(activation):
        raise TypeError("%s: activation must be callable or a dict, got %r" % (what, activation))
    return activation


class FeedForward(Module):
    """Position-wise feed-forward: ``linear_out(dropout(activation(linear_ff(x))))``; ff_dim defaults to 4 * out_dim."""

    def __init__(self, out_dim, *, ff_dim=NotSpecified, dropout=0.1, activation=math_.relu, with_bias=True):
        super().__init__()
        if ff_dim is NotSpecified or ff_dim is None:
            ff_dim = out_dim * 4
        ff_dim = _as_dim(ff_dim, "transformer-ff-dim", "FeedForward ff_dim")
        self.out_dim = out_dim
        self.dropout = dropout
        self.dropout_broadcast = dropout_broadcast_default()
        self.activation = _make_activation(activation, math_.relu, "FeedForward")
        self.linear_ff = Linear(out_dim, ff_dim, with_bias=with_bias)
        self.linear_out = Linear(ff_dim, out_dim, with_bias=with_bias)

    def __call__(self, inp):
        x = self.activation(self.linear_ff(inp))
        x = dropout(x, self.dropout, axis=self.dropout_broadcast and self.linear_ff.out_dim)
        return self.linear_out(x)


class FeedForwardGated(Module):
    """
    Gated feed-forward (GLU variants, https://arxiv.org/abs/2002.05202; SwiGLU by default):
    ``linear_out(dropout(activation(a) * b))`` with ``[a, b] = linear_ff(x)``; ff_dim defaults to 4 * 2/3 * out_dim
    rounded up to a multiple of 256 (about the params of :class:`FeedForward`); no biases by default.
    """

    def __init__(self, out_dim, *, ff_dim=NotSpecified, dropout=0.1, activation=math_.swish, with_bias=False):
        super().__init__()
        if ff_dim is NotSpecified or ff_dim is None:
            ff_dim = Dim(_ceil_div(out_dim.dimension * 4 * 2 // 3, 256) * 256, name="transformer-ff-dim")
        ff_dim = _as_dim(ff_dim, "transformer-ff-dim", "FeedForwardGated ff_dim")
        self.out_dim = out_dim
        self.dropout = dropout
        self.dropout_broadcast = dropout_broadcast_default()
        self.activation = _make_activation(activation, math_.swish, "FeedForwardGated")
        self.linear_ff = Linear(out_dim, 2 * ff_dim, with_bias=with_bias)
        self.linear_out = Linear(ff_dim, out_dim, with_bias=with_bias)

    def __call__(self, inp):
        x = self.linear_ff(inp)
        a, b = array_.split(x, axis=self.linear_ff.out_dim, out_dims=[self.linear_out.in_dim] * 2)
        x = self.activation(a) * b
        x = dropout(x, self.dropout, axis=self.dropout_broadcast and self.linear_out.in_dim)
        return self.linear_out(x)


def make_norm(norm, out_dim):
    """norm(out_dim) for a class, build_from_dict(norm, out_dim) for a dict, a deep copy of a Module, or a callable."""
    if isinstance(norm, type):
        norm = norm(out_dim)
    elif isinstance(norm, dict):
        norm = build_from_dict(norm, out_dim)
    elif isinstance(norm, Module):
        norm = _copy.deepcopy(norm)
    if not callable(norm):
        raise TypeError("make_norm: expected a class, dict, rf.Module or callable, got %r" % (norm,))
    return norm
