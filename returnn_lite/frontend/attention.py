"""
rf attention: :func:`dot_attention`, multi-head self attention (plain, causal with a step-wise state, with relative
positional encoding, with rotary positional encoding), cross attention, and the positional encodings.

Param names as the original's (``qkv``, ``proj``, ``linear_pos``, ``pos_bias_u``, ``pos_bias_v``, ``kv``, ``q``,
``learned_pos_emb.pos_emb``), so that checkpoints of the original load by name.
"""

from __future__ import annotations

import logging
import math

from ..tensor import Dim, single_step_dim
from . import array_, math_
from ._utils import error, is_tensor
from .module import Glorot, Module, Parameter
from .nn import Linear, State, dropout

__all__ = [
    "dot_attention", "SelfAttentionBase", "GenericSelfAttention", "SelfAttention", "CausalSelfAttention",
    "CausalSelfAttentionState", "RotaryPosSelfAttention", "RotaryPosCausalSelfAttention", "RelPosSelfAttention",
    "RelPosCausalSelfAttention", "CrossAttention", "LearnedRelativePositionalEncoding",
    "relative_positional_encoding", "sinusoidal_positional_encoding",
]


def _att_dropout_broadcast_default():
    """Config ``rf_att_dropout_broadcast``, else ``rf_dropout_broadcast``, else True up to behavior version 18."""
    from ..compat.util_basic import BehaviorVersion
    from ..config import get_global_config

    config = get_global_config(raise_exception=False)
    if config:
        for key in ("rf_att_dropout_broadcast", "rf_dropout_broadcast"):
            opt = config.bool(key, None)
            if opt is not None:
                return opt
    if BehaviorVersion.get() <= 18:
        logging.getLogger("returnn_lite.frontend").debug("attention dropout broadcasts (behavior version <= 18)")
        return True
    return False


def dot_attention(query, keys, values, *, key_dim, axis, att_dropout=0.0, att_dropout_broadcast=None):
    """
    softmax(query . keys / sqrt(key_dim), over axis) . values; padded frames of axis get weight 0.
    query: {..., key_dim} (for self attention, keys/values use another dim than the query's spatial dim);
    keys: {..., axis, key_dim}; values: {..., axis}. -> values' dims without axis, plus the query's other dims.
    """
    return _dot_attention(query, keys, values, key_dim=key_dim, axis=axis, att_dropout=att_dropout,
                          att_dropout_broadcast=att_dropout_broadcast)


def _masked_energy(energy, mask):
    """energy with -inf-like values where mask is False (the masked softmax then gives them weight 0)."""
    return energy if mask is None else math_.where(mask, energy, -1e30, allow_broadcast_all_sources=True)


def _dot_attention(query, keys, values, *, key_dim, axis, att_dropout, att_dropout_broadcast, mask=None):
    for name, t, dims in (("query", query, [key_dim]), ("keys", keys, [key_dim, axis]), ("values", values, [axis])):
        if not is_tensor(t):
            raise error("dot_attention", "%s must be a Tensor, got %r" % (name, t))
        missing = [d for d in dims if d not in t.dims]
        if missing:
            raise error("dot_attention", "%s %s lacks %s" % (name, t, ", ".join(d.short_repr() for d in missing)))
    query = query * key_dim.dimension ** -0.5
    energy = _masked_energy(math_.matmul(query, keys, reduce=key_dim), mask)
    att_weights = math_.softmax(energy, axis=axis)
    if att_dropout_broadcast is None:
        att_dropout_broadcast = _att_dropout_broadcast_default()
    att_weights = dropout(att_weights, att_dropout, axis=att_dropout_broadcast and axis)
    # the softmax gave padded frames weight 0, so no mask is needed here
    att = math_.matmul(att_weights, values, reduce=axis, use_mask=False)
    if values.feature_dim is not None and values.feature_dim in att.dims:
        att.feature_dim = values.feature_dim
    return att


def _heads_dim(num_heads):
    if isinstance(num_heads, int):
        return Dim(num_heads, name="num_heads")
    if not isinstance(num_heads, Dim):
        raise TypeError("num_heads must be an int or a Dim, got %r" % (num_heads,))
    return num_heads


def _set_head_dims(module, key_dim_total, value_dim_total, num_heads):
    """key/value dims in total and per head, and the heads dim (an int becomes a Dim), on an attention module."""
    num_heads = _heads_dim(num_heads)
    module.key_dim_total = key_dim_total
    module.key_dim_per_head = _per_head(key_dim_total, num_heads, "key_dim_total")
    module.value_dim_total = value_dim_total
    module.value_dim_per_head = _per_head(value_dim_total, num_heads, "value_dim_total")
    module.num_heads = num_heads


def _per_head(total, num_heads, what):
    if total.dimension is None or total.dimension % num_heads.dimension:
        raise ValueError("%s %s must be static and a multiple of num_heads %i" % (
            what, total.short_repr(), num_heads.dimension))
    return total.div_left(num_heads)


class SelfAttentionBase(Module):
    """
    Multi-head dot attention of a sequence to itself. Params: ``qkv`` (Linear in_dim -> 2*key_dim_total +
    value_dim_total, laid out per head as [q, k, v]) and ``proj`` (Linear value_dim_total -> proj_dim, if proj_dim).
    """

    def __init__(self, in_dim, proj_dim, *, key_dim_total, value_dim_total, num_heads, with_bias=True,
                 att_dropout=0.1, att_dropout_broadcast=None):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = proj_dim if proj_dim else value_dim_total
        _set_head_dims(self, key_dim_total, value_dim_total, num_heads)
        self.qkv_dim_total = 2 * key_dim_total + value_dim_total
        self.qkv_dim_per_head = 2 * self.key_dim_per_head + self.value_dim_per_head
        self.qkv = Linear(in_dim, self.qkv_dim_total, with_bias=with_bias)
        self.proj = Linear(value_dim_total, proj_dim, with_bias=with_bias) if proj_dim else None
        self.att_dropout = att_dropout
        if att_dropout_broadcast is None:
            att_dropout_broadcast = _att_dropout_broadcast_default()
        self.att_dropout_broadcast = att_dropout_broadcast

    def forward_qkv(self, source):
        """-> q, k, v, each with the num_heads dim and the per-head dim."""
        qkv = self.qkv(source)
        qkv = array_.split_dims(qkv, axis=self.qkv_dim_total, dims=(self.num_heads, self.qkv_dim_per_head))
        q, k, v = array_.split(qkv, axis=self.qkv_dim_per_head,
                               out_dims=(self.key_dim_per_head, self.key_dim_per_head, self.value_dim_per_head))
        return q, k, v

    def attention(self, q, k, v, *, kv_axis, mask=None):
        """dot attention per head over kv_axis (frames where the bool mask is False excluded), heads merged, then
        ``proj``."""
        att = _dot_attention(q, k, v, key_dim=self.key_dim_per_head, axis=kv_axis, att_dropout=self.att_dropout,
                             att_dropout_broadcast=self.att_dropout_broadcast, mask=mask)
        return self._merge_heads_and_project(att)

    def _merge_heads_and_project(self, att):
        output, _ = array_.merge_dims(att, dims=(self.num_heads, self.value_dim_per_head),
                                      out_dim=self.value_dim_total)
        if self.proj:
            output = self.proj(output)
        return output


GenericSelfAttention = SelfAttentionBase  # earlier returnn_lite name


def _kv_dim_like(axis):
    """A new dim for keys/values over the same frames as axis (same lengths)."""
    if axis.dimension is not None:
        return Dim(axis.dimension, name="%s:kv" % axis.description)
    kv_axis = axis.copy(same_as_self=False, description="%s:kv" % axis.description)
    kv_axis.derived_from = ("add", (axis, 0))  # its lengths are axis' (also for the layers backend)
    return kv_axis


def _check_in(module, source, dims):
    missing = [d for d in dims if d not in source.dims]
    if missing:
        raise error(type(module).__name__, "input %s lacks %s" % (source, ", ".join(d.short_repr() for d in missing)))


class SelfAttention(SelfAttentionBase):
    """Self attention over ``axis``: every frame attends to all frames within the sequence length."""

    def __call__(self, source, *, axis):
        _check_in(self, source, [self.in_dim, axis])
        q, k, v = self.forward_qkv(source)
        kv_axis = _kv_dim_like(axis)
        k, _ = array_.replace_dim(k, in_dim=axis, out_dim=kv_axis)
        v, _ = array_.replace_dim(v, in_dim=axis, out_dim=kv_axis)
        return self.attention(q, k, v, kv_axis=kv_axis)


class CausalSelfAttentionState(State):
    """State of :class:`CausalSelfAttention`: the keys/values so far (``k_accum``, ``v_accum``) over ``accum_axis``."""

    def __init__(self, *_args, k_accum=None, v_accum=None, accum_axis=None):
        super().__init__(*_args)
        if not _args:
            self.k_accum = k_accum
            self.v_accum = v_accum
            self.accum_axis = accum_axis


def _causal_history_dim(axis):
    """A dim over the frames of axis whose length at query frame i is i + 1 (lengths with dims [axis])."""
    hist_dim = Dim(None, name="%s:kv" % axis.description)
    hist_dim.dyn_size_ext = array_.range_over_dim(axis) + 1
    return hist_dim


def _causal_self_att_step(module, k, v, *, axis, state):
    """
    -> (k, v, hist_dim, new_state, mask): keys/values over the history (single step: appended to the state). Over a
    sequence, the history of query frame i is frames 0..i: as lengths of hist_dim (eager backends) or, on the layers
    backend, as a bool mask [axis, hist_dim] (else None).
    """
    from ._backend import get_backend_for_tensor

    mask = None
    if axis == single_step_dim:
        if not state:
            raise error(type(module).__name__, "a single step (axis=single_step_dim) needs state=")
        k, hist_dim = array_.cum_concat_step(k, prev_accum=state.k_accum, axis=state.accum_axis)
        v, _ = array_.cum_concat_step(v, prev_accum=state.v_accum, axis=state.accum_axis, out_spatial_dim=hist_dim)
    else:
        if state and state.accum_axis is not None and state.accum_axis.dimension != 0:
            raise error(type(module).__name__, "a whole sequence after a non-empty state (history %s) is not "
                                               "supported" % state.accum_axis.short_repr())
        if get_backend_for_tensor(k).executing_eagerly():
            hist_dim = _causal_history_dim(axis)
        else:
            hist_dim = _kv_dim_like(axis)
            mask = math_.compare(array_.range_over_dim(hist_dim), "less_equal", array_.range_over_dim(axis),
                                 allow_broadcast_all_sources=True)
        k, _ = array_.replace_dim(k, in_dim=axis, out_dim=hist_dim)
        v, _ = array_.replace_dim(v, in_dim=axis, out_dim=hist_dim)
    return k, v, hist_dim, CausalSelfAttentionState(k_accum=k, v_accum=v, accum_axis=hist_dim), mask


class CausalSelfAttention(SelfAttentionBase):
    """
    Causal self attention: frame i attends to frames 0..i. ``(out, new_state) = att(x, axis, state=)``; axis is the
    spatial dim (whole sequence, state may be the initial one) or ``single_step_dim`` (one frame, state required).
    """

    def __call__(self, source, axis, *, state=None):
        _check_in(self, source, [self.in_dim] + ([] if axis == single_step_dim else [axis]))
        q, k, v = self.forward_qkv(source)
        k, v, hist_dim, new_state, mask = _causal_self_att_step(self, k, v, axis=axis, state=state)
        return self.attention(q, k, v, kv_axis=hist_dim, mask=mask), new_state

    def default_initial_state(self, *, batch_dims):
        """Empty history (a dim of size 0)."""
        expand_dim = Dim(0, name="self_att_expand_dim_init")
        return CausalSelfAttentionState(
            k_accum=array_.zeros(list(batch_dims) + [expand_dim, self.num_heads, self.key_dim_per_head]),
            v_accum=array_.zeros(list(batch_dims) + [expand_dim, self.num_heads, self.value_dim_per_head]),
            accum_axis=expand_dim)


# ---- rotary positional encoding (RoPE) ----
def _rope_base(feat_dim):
    # sinusoidal_positional_encoding divides log(base) by (F/2 - 1); RoPE's usual 1e4 divides by F/2
    return 10_000 ** (1 - 2 / feat_dim.dimension)


def _apply_rope(x, pos_enc, feat_dim):
    """x [..., F] rotated pairwise (x[2i], x[2i+1]) by the angles of pos_enc [..., F] = [sin..., cos...]."""
    half = feat_dim.div_left(2)
    sin, cos = array_.split(pos_enc, axis=feat_dim, out_dims=[half, half])
    pair = Dim(2, name="complex")
    x = array_.split_dims(x, axis=feat_dim, dims=(half, pair))
    x_re = array_.gather(x, indices=0, axis=pair)
    x_im = array_.gather(x, indices=1, axis=pair)
    out, _ = array_.stack((x_re * cos - x_im * sin, x_re * sin + x_im * cos), out_dim=pair)
    out, _ = array_.merge_dims(out, dims=(half, pair), out_dim=feat_dim)
    return out


class RotaryPosSelfAttention(SelfAttention):
    """Self attention with rotary positional encoding of q and k."""

    def __call__(self, source, *, axis):
        _check_in(self, source, [self.in_dim, axis])
        q, k, v = self.forward_qkv(source)
        pos_enc = sinusoidal_positional_encoding(spatial_dim=axis, feat_dim=self.key_dim_per_head,
                                                 base=_rope_base(self.key_dim_per_head))
        q = _apply_rope(q, pos_enc, self.key_dim_per_head)
        k = _apply_rope(k, pos_enc, self.key_dim_per_head)
        kv_axis = _kv_dim_like(axis)
        k, _ = array_.replace_dim(k, in_dim=axis, out_dim=kv_axis)
        v, _ = array_.replace_dim(v, in_dim=axis, out_dim=kv_axis)
        return self.attention(q, k, v, kv_axis=kv_axis)


class RotaryPosCausalSelfAttention(CausalSelfAttention):
    """Causal self attention with rotary positional encoding of q and k."""

    def __call__(self, source, axis, *, state=None):
        _check_in(self, source, [self.in_dim] + ([] if axis == single_step_dim else [axis]))
        q, k, v = self.forward_qkv(source)
        k, v, hist_dim, new_state, mask = _causal_self_att_step(self, k, v, axis=axis, state=state)
        base = _rope_base(self.key_dim_per_head)
        pos_enc = sinusoidal_positional_encoding(spatial_dim=hist_dim, feat_dim=self.key_dim_per_head, base=base)
        if axis == single_step_dim:  # the query is the last frame of the history
            q_pos_enc = array_.gather(pos_enc, axis=hist_dim, indices=hist_dim.get_size_tensor() - 1)
        else:
            q_pos_enc = sinusoidal_positional_encoding(spatial_dim=axis, feat_dim=self.key_dim_per_head, base=base)
        q = _apply_rope(q, q_pos_enc, self.key_dim_per_head)
        k = _apply_rope(k, pos_enc, self.key_dim_per_head)
        return self.attention(q, k, v, kv_axis=hist_dim, mask=mask), new_state


# ---- relative positional encoding (Transformer-XL / Shaw et al.) ----
class _RelPosMixin:
    """Params and scores of relative positional self attention (shared by the plain and the causal variant)."""

    def __init__(self, in_dim, proj_dim, *, key_dim_total, value_dim_total, num_heads, with_bias=True,
                 with_linear_pos=True, with_pos_bias=True, learnable_pos_emb=False, learnable_pos_emb_clipping=16,
                 separate_pos_emb_per_head=True, pos_emb_dropout=0.0, att_dropout=0.1):
        super().__init__(in_dim, proj_dim, key_dim_total=key_dim_total, value_dim_total=value_dim_total,
                         num_heads=num_heads, with_bias=with_bias, att_dropout=att_dropout)
        self._init_rel_pos(with_linear_pos=with_linear_pos, with_pos_bias=with_pos_bias,
                           learnable_pos_emb=learnable_pos_emb, learnable_pos_emb_clipping=learnable_pos_emb_clipping,
                           separate_pos_emb_per_head=separate_pos_emb_per_head, pos_emb_dropout=pos_emb_dropout)

    def _init_rel_pos(self, *, with_linear_pos, with_pos_bias, learnable_pos_emb, learnable_pos_emb_clipping,
                      separate_pos_emb_per_head, pos_emb_dropout):
        self.separate_pos_emb_per_head = separate_pos_emb_per_head
        if with_linear_pos:
            self.pos_emb_feat_dim = self.in_dim
        elif separate_pos_emb_per_head:
            self.pos_emb_feat_dim = self.key_dim_total
        else:
            self.pos_emb_feat_dim = self.key_dim_per_head
        self.linear_pos = None
        if with_linear_pos:
            self.linear_pos = Linear(
                self.in_dim, self.key_dim_total if separate_pos_emb_per_head else self.key_dim_per_head,
                with_bias=False)
        self.learned_pos_emb = None
        if learnable_pos_emb:
            self.learned_pos_emb = LearnedRelativePositionalEncoding(
                self.pos_emb_feat_dim, clipping=learnable_pos_emb_clipping)
        # Transformer-XL's u and v (https://arxiv.org/abs/1901.02860, section 3.3)
        self.pos_bias_u = None
        self.pos_bias_v = None
        if with_pos_bias:
            self.pos_bias_u = Parameter((self.num_heads, self.key_dim_per_head))
            self.pos_bias_v = Parameter((self.num_heads, self.key_dim_per_head))
            self.pos_bias_u.initial = Glorot()
            self.pos_bias_v.initial = Glorot()
        self.pos_emb_dropout = pos_emb_dropout

    def _pos_emb(self, query_spatial_dim, kv_dim):
        """-> (pos_emb [P, (heads,) key_dim_per_head], P)"""
        if self.learned_pos_emb is not None:
            pos_emb, pos_dim = self.learned_pos_emb(query_spatial_dim=query_spatial_dim, key_value_spatial_dim=kv_dim)
        else:
            pos_emb, pos_dim = relative_positional_encoding(
                query_spatial_dim=query_spatial_dim, key_value_spatial_dim=kv_dim, feat_dim=self.pos_emb_feat_dim)
        if self.pos_emb_dropout:
            pos_emb = dropout(pos_emb, self.pos_emb_dropout)
        if self.linear_pos is not None:
            pos_emb = self.linear_pos(pos_emb)
        if self.separate_pos_emb_per_head:
            pos_emb = array_.split_dims(pos_emb, axis=self.key_dim_total, dims=(self.num_heads, self.key_dim_per_head))
        return pos_emb, pos_dim

    def _rel_pos_attention(self, q, k, v, *, axis, hist_dim, mask=None):
        # over a sequence, the encoding only needs the padded history length, which is axis' (also when causal)
        pos_emb, pos_dim = self._pos_emb(axis, hist_dim if axis == single_step_dim else axis)
        q_u = q + self.pos_bias_u if self.pos_bias_u is not None else q
        q_v = q + self.pos_bias_v if self.pos_bias_v is not None else q
        matrix_ac = math_.matmul(q_u, k, reduce=self.key_dim_per_head)  # content: [B,H,T,T']
        matrix_bd = math_.matmul(q_v, pos_emb, reduce=self.key_dim_per_head)  # position: [B,H,T,P]
        if axis != single_step_dim:
            matrix_bd = _rel_pos_enc_shift(matrix_bd, axis, pos_dim, hist_dim)
        scores = _masked_energy((matrix_ac + matrix_bd) * self.key_dim_per_head.dimension ** -0.5, mask)
        att_weights = math_.softmax(scores, axis=hist_dim)
        att_weights = dropout(att_weights, self.att_dropout, axis=self.att_dropout_broadcast and hist_dim)
        att = math_.matmul(att_weights, v, reduce=hist_dim, use_mask=False)
        return self._merge_heads_and_project(att)


def _rel_pos_enc_shift(x, axis, pos_emb_spatial_dim, hist_dim):
    """
    x [..., T, P] with P = T - 1 + T' indexed by relative position p - (T - 1) (padded lengths) -> [..., T, T'] with
    out[i, j] = x[i, j - i + T - 1] (the Transformer-XL relative shift).
    """
    rel = math_.combine_bc(array_.range_over_dim(hist_dim), "-", array_.range_over_dim(axis))  # [T, T']
    indices = rel + (array_.dim_value(axis) - 1)
    return array_.gather(x, indices=indices, axis=pos_emb_spatial_dim)


_REL_POS_DOC = """
    Options (the original's): with_linear_pos (Linear ``linear_pos`` on the encoding), with_pos_bias (``pos_bias_u``,
    ``pos_bias_v``), learnable_pos_emb (:class:`LearnedRelativePositionalEncoding` ``learned_pos_emb`` with
    learnable_pos_emb_clipping, else the sinusoidal :func:`relative_positional_encoding`), separate_pos_emb_per_head,
    pos_emb_dropout. Transformer-XL (Dai et al. 2019) by default; Shaw et al. 2018 with with_bias=False,
    with_linear_pos=False, with_pos_bias=False, learnable_pos_emb=True, separate_pos_emb_per_head=False.
"""


class RelPosSelfAttention(_RelPosMixin, SelfAttentionBase):
    __doc__ = "Self attention with relative positional encoding.\n" + _REL_POS_DOC

    def __call__(self, source, *, axis, **_kwargs):
        _check_in(self, source, [self.in_dim, axis])
        q, k, v = self.forward_qkv(source)
        hist_dim = _kv_dim_like(axis)
        k, _ = array_.replace_dim(k, in_dim=axis, out_dim=hist_dim)
        v, _ = array_.replace_dim(v, in_dim=axis, out_dim=hist_dim)
        return self._rel_pos_attention(q, k, v, axis=axis, hist_dim=hist_dim)

    @staticmethod
    def _rel_shift(x, axis, pos_emb_spatial_dim, hist_dim):
        return _rel_pos_enc_shift(x, axis, pos_emb_spatial_dim, hist_dim)


class RelPosCausalSelfAttention(_RelPosMixin, CausalSelfAttention):
    __doc__ = "Causal self attention with relative positional encoding (step-wise with state).\n" + _REL_POS_DOC

    def __call__(self, source, *, axis, state=None):
        _check_in(self, source, [self.in_dim] + ([] if axis == single_step_dim else [axis]))
        q, k, v = self.forward_qkv(source)
        k, v, hist_dim, new_state, mask = _causal_self_att_step(self, k, v, axis=axis, state=state)
        return self._rel_pos_attention(q, k, v, axis=axis, hist_dim=hist_dim, mask=mask), new_state


class CrossAttention(Module):
    """
    Multi-head attention of queries to an encoder output. Params ``kv`` (Linear encoder_dim -> key_dim_total +
    value_dim_total, per head [k, v]), ``q`` (Linear query_in_dim -> key_dim_total), ``proj``.
    ``enc = att.transform_encoder(encoder, axis=enc_spatial)`` once, then ``att(query, enc)`` per step or sequence.
    """

    def __init__(self, encoder_dim, query_in_dim, proj_dim, *, key_dim_total, value_dim_total, num_heads,
                 with_bias=True, att_dropout=0.1, att_dropout_broadcast=None):
        super().__init__()
        self.encoder_dim = encoder_dim
        self.query_in_dim = query_in_dim
        self.out_dim = proj_dim if proj_dim else value_dim_total
        _set_head_dims(self, key_dim_total, value_dim_total, num_heads)
        self.kv_dim_total = key_dim_total + value_dim_total
        self.kv_dim_per_head = self.key_dim_per_head + self.value_dim_per_head
        self.kv = Linear(encoder_dim, self.kv_dim_total, with_bias=with_bias)
        self.q = Linear(query_in_dim, self.key_dim_total, with_bias=with_bias)
        # as Fairseq's xavier_uniform with gain 1/sqrt(2) per q/k/v projection
        self.kv.weight.initial = Glorot(scale=3 / 4)
        self.q.weight.initial = Glorot(scale=1 / 2)
        self.proj = Linear(value_dim_total, proj_dim, with_bias=with_bias) if proj_dim else None
        self.att_dropout = att_dropout
        if att_dropout_broadcast is None:
            att_dropout_broadcast = _att_dropout_broadcast_default()
        self.att_dropout_broadcast = att_dropout_broadcast

    def transform_encoder(self, encoder, *, axis):
        """-> State(k=, v=, kv_axis=axis), computed once for all queries."""
        k, v = self.forward_kv(encoder)
        return State(k=k, v=v, kv_axis=axis)

    def forward_kv(self, source):
        kv = self.kv(source)
        kv = array_.split_dims(kv, axis=self.kv_dim_total, dims=(self.num_heads, self.kv_dim_per_head))
        k, v = array_.split(kv, axis=self.kv_dim_per_head, out_dims=(self.key_dim_per_head, self.value_dim_per_head))
        return k, v

    def forward_query(self, source):
        q = self.q(source)
        return array_.split_dims(q, axis=self.key_dim_total, dims=(self.num_heads, self.key_dim_per_head))

    def __call__(self, q, encoder):
        if not isinstance(encoder, dict) or not {"k", "v", "kv_axis"} <= set(encoder.keys()):
            raise error("CrossAttention", "encoder must be the State from transform_encoder, got %r" % (encoder,))
        return self.attention(q=self.forward_query(q), k=encoder["k"], v=encoder["v"], kv_axis=encoder["kv_axis"])

    def attention(self, q, k, v, *, kv_axis):
        att = dot_attention(q, k, v, key_dim=self.key_dim_per_head, axis=kv_axis, att_dropout=self.att_dropout,
                            att_dropout_broadcast=self.att_dropout_broadcast)
        output, _ = array_.merge_dims(att, dims=(self.num_heads, self.value_dim_per_head),
                                      out_dim=self.value_dim_total)
        return self.proj(output) if self.proj else output


# ---- positional encodings ----
def _rel_pos_indices(query_spatial_dim, key_value_spatial_dim, query_offset=None):
    """
    Relative positions kv_pos - q_pos, once each: -> (indices, P). Over a sequence, P = (T_q - 1) + T_kv with value
    p - (T_q - 1) at p (padded lengths); for a single step, P is the kv dim and the query the last kv frame.
    """
    if query_spatial_dim == single_step_dim:
        if query_offset is not None and not (isinstance(query_offset, int) and query_offset == 0):
            raise ValueError("relative positional encoding: query_offset with a single step is not supported")
        indices = math_.combine_bc(array_.range_over_dim(key_value_spatial_dim), "-",
                                   key_value_spatial_dim.get_size_tensor() - 1)
        return indices, key_value_spatial_dim
    q_m1 = query_spatial_dim - 1
    out_dim = q_m1 + key_value_spatial_dim
    indices = array_.range_over_dim(out_dim) - array_.dim_value(q_m1)
    if query_offset is not None and not (isinstance(query_offset, int) and query_offset == 0):
        indices = indices - query_offset
    return indices, out_dim


class LearnedRelativePositionalEncoding(Module):
    """
    Learned relative positional encoding (Shaw et al. 2018): param ``pos_emb`` [2 * clipping + 1 (causal:
    clipping + 1), feat_dim]; relative distances beyond clipping use the outermost entries.
    """

    def __init__(self, feat_dim, *, clipping=16, dtype=None, causal=False):
        super().__init__()
        self.feat_dim = feat_dim
        self.clipping = clipping
        self.causal = causal
        self.clipped_spatial_dim = Dim((1 if causal else 2) * clipping + 1, name="learned-rel-pos")
        self.pos_emb = Parameter((self.clipped_spatial_dim, self.feat_dim), dtype=dtype)
        self.pos_emb.initial = Glorot()

    def __call__(self, *, query_spatial_dim, key_value_spatial_dim, query_offset=None):
        """-> (encoding [P, feat_dim], P), as :func:`relative_positional_encoding`."""
        indices, out_dim = _rel_pos_indices(query_spatial_dim, key_value_spatial_dim, query_offset)
        indices = math_.clip_by_value(indices, -self.clipping, 0 if self.causal else self.clipping) + self.clipping
        return array_.gather(self.pos_emb, indices=indices, axis=self.clipped_spatial_dim), out_dim

    def full_matrix(self, *, query_spatial_dim, key_value_spatial_dim, query_offset=None):
        """-> encoding [query_spatial_dim, key_value_spatial_dim, feat_dim] (for query_offset 0: kv_pos - q_pos)."""
        kv_pos = array_.range_over_dim(key_value_spatial_dim)
        if query_spatial_dim == single_step_dim:
            if query_offset is not None:
                raise ValueError("LearnedRelativePositionalEncoding.full_matrix: query_offset with a single step")
            indices = math_.combine_bc(kv_pos, "-", key_value_spatial_dim.get_size_tensor() - 1)
        else:
            q_pos = array_.range_over_dim(query_spatial_dim)
            if query_offset is not None:
                q_pos = q_pos + query_offset
            indices = math_.combine_bc(kv_pos, "-", q_pos)
        indices = math_.clip_by_value(indices, -self.clipping, 0 if self.causal else self.clipping) + self.clipping
        return array_.gather(self.pos_emb, indices=indices, axis=self.clipped_spatial_dim)


def _sinusoids(positions, feat_dim, inv_freq_log_step, dtype):
    """[..., feat_dim]: sin(pos * w_i) for the first half, cos(pos * w_i) (as sin(. + pi/2)) for the second half,
    w_i = exp(-i * inv_freq_log_step)."""
    half = feat_dim.div_left(2)
    inv_freq = math_.exp(math_.cast(array_.range_over_dim(half), dtype) * -inv_freq_log_step)
    arg_sin = math_.combine_bc(math_.cast(positions, dtype), "*", inv_freq)
    arg_cos = arg_sin + math.pi / 2.0
    arg, _ = array_.concat((arg_sin, half), (arg_cos, half), out_dim=feat_dim)
    emb = math_.sin(arg)
    emb.feature_dim = feat_dim
    return emb


def _check_even(feat_dim, func):
    if feat_dim.dimension is None or feat_dim.dimension % 2:
        raise ValueError("%s: feat_dim %s must be static and even" % (func, feat_dim.short_repr()))


def relative_positional_encoding(spatial_dim=None, feat_dim=None, *, query_spatial_dim=None,
                                 key_value_spatial_dim=None, query_offset=0, dtype=None):
    """
    Sinusoidal relative positional encoding, Transformer-XL style: -> (encoding [P, feat_dim], P) where P covers the
    relative positions kv_pos - q_pos: (T_q - 1) + T_kv entries, from -(T_q - 1) up (a single step: the kv frames).
    ``relative_positional_encoding(spatial_dim, feat_dim)`` (older form) is query = kv = spatial_dim.
    """
    from .defaults import get_default_float_dtype

    if spatial_dim is not None:
        if query_spatial_dim is not None or key_value_spatial_dim is not None:
            raise TypeError("relative_positional_encoding: give spatial_dim or query/key_value_spatial_dim")
        query_spatial_dim = key_value_spatial_dim = spatial_dim
    if query_spatial_dim is None or key_value_spatial_dim is None or feat_dim is None:
        raise TypeError("relative_positional_encoding: needs query_spatial_dim, key_value_spatial_dim, feat_dim")
    _check_even(feat_dim, "relative_positional_encoding")
    indices, out_dim = _rel_pos_indices(query_spatial_dim, key_value_spatial_dim, query_offset)
    emb = _sinusoids(indices, feat_dim, 2.0 * math.log(1e4) / feat_dim.dimension,
                     dtype or get_default_float_dtype())
    return emb, out_dim


def sinusoidal_positional_encoding(*, spatial_dim, feat_dim, offset=None, base=1e4, dtype=None, device=None):
    """
    Absolute sinusoidal positional encoding [spatial_dim, feat_dim] (a single step: [feat_dim] at position
    ``offset``): first half sin(pos * w_i), second half cos(pos * w_i), w_i = base^(-i / (F/2 - 1)).
    """
    from .defaults import get_default_float_dtype
    from .device import copy_to_device

    _check_even(feat_dim, "sinusoidal_positional_encoding")
    if spatial_dim == single_step_dim:
        if offset is None:
            raise ValueError("sinusoidal_positional_encoding: a single step needs offset=")
        positions = offset if is_tensor(offset) else array_.convert_to_tensor(offset)
    else:
        positions = array_.range_over_dim(spatial_dim)
        if offset is not None:
            positions = positions + offset
    positions = copy_to_device(positions, device)
    half_minus_1 = feat_dim.dimension // 2 - 1
    step = math.log(base) / half_minus_1 if half_minus_1 else 0.0
    return _sinusoids(positions, feat_dim, step, dtype or get_default_float_dtype())
