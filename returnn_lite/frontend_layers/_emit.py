"""Emitting layers: a frontend_op layer dict per rf op, source names (``base:`` for outer layers in a loop body)."""

from __future__ import annotations

from ..data import Data
from ..frontend._utils import FrontendError, call_site, dims_str, is_tensor
from ._net import Layer, get_current_builder


def _raw_name(t):
    raw = t.placeholder
    if raw is None:
        from ..frontend.module import Parameter

        if isinstance(t, Parameter):
            raise FrontendError(
                "rf at %s: param %s %s is used but has no layer: it is not part of the model returned by get_model "
                "(assign its module as an attribute of the model)" % (call_site(), t.rf_name or "?", dims_str(t.dims)))
        raise FrontendError("rf at %s: tensor %r has no raw tensor (not created by rf?)" % (call_site(), t.name))
    if not isinstance(raw, Layer):
        raise FrontendError("rf at %s: tensor %r has a raw tensor of type %s, not a layer of the layers backend" % (
            call_site(), t.name, type(raw).__name__))
    builder = get_current_builder()
    if raw.builder is builder:
        return raw.name
    level, outer = 1, builder.parent  # inside a loop body / cond branch: "base:" per level up
    while outer is not None and outer is not raw.builder:
        level, outer = level + 1, outer.parent
    if outer is None:
        raise FrontendError("rf at %s: tensor %r is not from this net dict or an enclosing loop body / cond branch"
                            % (call_site(), t.name))
    return "base:" * level + raw.name


def _make(op_name, sources, out_dims, dtype, *, sparse_dim=None, opts=None, name=None, extra=None):
    builder = get_current_builder()
    template = Data(name or op_name, dims=list(out_dims), dtype=dtype, sparse_dim=sparse_dim)
    d = {"class": "frontend_op", "op": op_name, "from": [_raw_name(s) for s in sources], "out": template}
    if opts:
        d["opts"] = opts
    if extra:
        d.update(extra)
    layer = builder.add_layer(name or op_name, d, absolute=extra is not None and "loss" in extra)
    return Data(layer.name, dims=list(out_dims), dtype=dtype, sparse_dim=sparse_dim, placeholder=layer)


def _operands(values):
    """Tensors -> source indices, others -> {"const": value}."""
    sources, specs = [], []
    for v in values:
        if is_tensor(v):
            if v in sources:
                specs.append([i for i, s in enumerate(sources) if s is v][0])
            else:
                sources.append(v)
                specs.append(len(sources) - 1)
        else:
            if hasattr(v, "tolist"):
                v = v.tolist()
            specs.append({"const": v})
    return sources, specs
