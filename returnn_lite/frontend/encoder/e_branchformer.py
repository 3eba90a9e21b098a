"""
E-Branchformer layer (Kim et al. 2022, https://arxiv.org/abs/2210.00077), to be used as ``encoder_layer`` of
:class:`.conformer.ConformerEncoder` (e.g. ``encoder_layer=rf.build_dict(EBranchformerLayer, ff_dim=...)``):

    x = x + 0.5 * dropout(ffn1(ln(x)))
    x = x + dropout(merge(dropout(self_att(ln(x))), dropout(cgmlp(ln(x)))))    # the two branches in parallel
    x = x + 0.5 * dropout(ffn2(ln(x)))
    y = final_layer_norm(x)

cgMLP (:class:`FeedForwardConvGated`): Linear(d, 2 * ff) -> activation -> split (gate, rest) -> gate: norm,
depthwise conv, gate_activation -> gate * rest -> dropout -> Linear(ff, d).
:class:`Merge`: concat of both branches, + its depthwise conv, Linear(2d, d).
"""

from __future__ import annotations

import copy as _copy

from ...tensor import Dim
from ...util import NotSpecified
from .. import array_, math_
from ..build_from_dict import build_from_dict
from ..conv import Conv1d
from ..decoder.transformer import make_norm
from ..module import Module
from ..nn import LayerNorm, Linear, dropout
from .conformer import _dropout_broadcast_default, _drop, _rel_pos_self_attention, make_ff

__all__ = ["EBranchformerLayer", "FeedForwardConvGated", "Merge"]


class EBranchformerLayer(Module):
    """Params ffn1, ffn1_layer_norm, self_att, self_att_layer_norm, cgmlp, cgmlp_layer_norm, merge, ffn2,
    ffn2_layer_norm, final_layer_norm."""

    def __init__(self, out_dim=Dim(512, name="conformer-enc-default-out-dim"), *, ff=NotSpecified, ff_dim=NotSpecified,
                 ff_activation=NotSpecified, dropout=0.1, num_heads=4, self_att=NotSpecified, att_dropout=0.1,
                 cgmlp=NotSpecified, cgmlp_ff_dim=NotSpecified, cgmlp_conv_kernel=31, merge_conv_kernel=3,
                 norm=LayerNorm):
        super().__init__()
        self.dropout = dropout
        self.dropout_broadcast = _dropout_broadcast_default()
        self.out_dim = out_dim

        self.ffn1 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn1_layer_norm = make_norm(norm, out_dim)
        self.ffn2 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn2_layer_norm = make_norm(norm, out_dim)

        att_opts = dict(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                        num_heads=num_heads, att_dropout=att_dropout)
        if self_att is NotSpecified:
            self.self_att = _rel_pos_self_attention(**att_opts)
        elif isinstance(self_att, type):
            self.self_att = self_att(**att_opts)
        elif isinstance(self_att, dict):
            self.self_att = build_from_dict(self_att, **{k: v for k, v in att_opts.items() if k not in self_att})
        elif isinstance(self_att, Module):
            self.self_att = _copy.deepcopy(self_att)
        else:
            raise TypeError("EBranchformerLayer: self_att must be a class, dict or Module, got %r" % (self_att,))
        self.self_att_layer_norm = make_norm(norm, out_dim)

        cgmlp_opts = {k: v for k, v in dict(ff_dim=cgmlp_ff_dim, kernel_size=cgmlp_conv_kernel, dropout=dropout).items()
                      if v is not NotSpecified}
        if cgmlp is NotSpecified:
            cgmlp = FeedForwardConvGated
        if isinstance(cgmlp, type):
            cgmlp = cgmlp(out_dim, **cgmlp_opts)
        elif isinstance(cgmlp, dict):
            cgmlp = build_from_dict(cgmlp, out_dim, **{k: v for k, v in cgmlp_opts.items() if k not in cgmlp})
        elif isinstance(cgmlp, Module):
            cgmlp = _copy.deepcopy(cgmlp)
        if not isinstance(cgmlp, Module):
            raise TypeError("EBranchformerLayer: cgmlp must give an rf.Module, got %r" % (cgmlp,))
        self.cgmlp = cgmlp
        self.cgmlp_layer_norm = make_norm(norm, out_dim)
        self.merge = Merge(in_dim1=out_dim, in_dim2=out_dim, out_dim=out_dim, merge_conv_kernel=merge_conv_kernel)
        self.final_layer_norm = make_norm(norm, out_dim)

    def __call__(self, inp, *, spatial_dim):
        x = inp + 0.5 * _drop(self, self.ffn1(self.ffn1_layer_norm(inp)), self.dropout)
        att = _drop(self, self.self_att(self.self_att_layer_norm(x), axis=spatial_dim), self.dropout)
        local = _drop(self, self.cgmlp(self.cgmlp_layer_norm(x), spatial_dim=spatial_dim), self.dropout)
        x = x + _drop(self, self.merge(att, local, spatial_dim=spatial_dim), self.dropout)
        x = x + 0.5 * _drop(self, self.ffn2(self.ffn2_layer_norm(x)), self.dropout)
        return self.final_layer_norm(x)


class FeedForwardConvGated(Module):
    """cgMLP with the convolutional spatial gating unit; params linear_ff (d -> 2 * ff_dim), norm, conv (depthwise),
    linear_out. ff_dim defaults to 3 * out_dim (an int gives a new Dim)."""

    def __init__(self, out_dim, *, ff_dim=NotSpecified, kernel_size=31, dropout=0.1, activation=math_.gelu,
                 gate_activation=math_.identity, with_bias=True, norm=LayerNorm):
        super().__init__()
        if ff_dim is NotSpecified:
            ff_dim = out_dim * 3
        if isinstance(ff_dim, int):
            ff_dim = Dim(ff_dim, name="e-branchformer-ff-dim")
        if not isinstance(ff_dim, Dim):
            raise TypeError("FeedForwardConvGated: ff_dim must be a Dim or int, got %r" % (ff_dim,))
        self.out_dim = out_dim
        self.ff_dim = ff_dim
        self.dropout = dropout
        self.dropout_broadcast = _dropout_broadcast_default()
        self.activation = _make_activation(math_.gelu if activation is NotSpecified else activation)
        self.gate_activation = _make_activation(math_.identity if gate_activation is NotSpecified else gate_activation)
        self.linear_ff = Linear(out_dim, 2 * ff_dim, with_bias=with_bias)
        self.norm = make_norm(norm, ff_dim)
        self.conv = Conv1d(ff_dim, ff_dim, filter_size=kernel_size, groups=ff_dim.dimension, padding="same",
                           with_bias=with_bias)
        self.linear_out = Linear(ff_dim, out_dim, with_bias=with_bias)

    def __call__(self, x, *, spatial_dim):
        x = self.activation(self.linear_ff(x))
        gate, rest = array_.split(x, axis=self.linear_ff.out_dim, out_dims=[self.ff_dim, self.ff_dim])
        gate, _ = self.conv(self.norm(gate), in_spatial_dim=spatial_dim)
        x = self.gate_activation(gate) * rest
        x = dropout(x, self.dropout, axis=self.dropout_broadcast and self.linear_out.in_dim)
        return self.linear_out(x)


class Merge(Module):
    """Merge of the two branches: y = merge_proj(c + depthwise_conv_fusion(c)), c = concat(x1, x2)."""

    def __init__(self, *, in_dim1, in_dim2, out_dim, merge_conv_kernel=3):
        super().__init__()
        self.in_dim1 = in_dim1
        self.in_dim2 = in_dim2
        self.concat_in_dim = in_dim1 + in_dim2
        self.out_dim = out_dim
        self.depthwise_conv_fusion = Conv1d(self.concat_in_dim, self.concat_in_dim, filter_size=merge_conv_kernel,
                                            groups=self.concat_in_dim.dimension, padding="same")
        self.merge_proj = Linear(self.concat_in_dim, out_dim)

    def __call__(self, x1, x2, *, spatial_dim):
        x, _ = array_.concat((x1, self.in_dim1), (x2, self.in_dim2), out_dim=self.concat_in_dim)
        x_conv, _ = self.depthwise_conv_fusion(x, in_spatial_dim=spatial_dim)
        return self.merge_proj(x + x_conv)


def _make_activation(activation):
    """A callable activation from a function, a dict (build_from_dict), a module (deep copy) or a class."""
    if isinstance(activation, dict):
        activation = build_from_dict(activation)
    elif isinstance(activation, Module):
        activation = _copy.deepcopy(activation)
    elif isinstance(activation, type):
        activation = activation()
    if not callable(activation):
        raise TypeError("E-Branchformer: activation must be callable, got %r" % (activation,))
    return activation
