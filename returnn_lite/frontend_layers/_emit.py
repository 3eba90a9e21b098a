"""
Emitting layers: :func:`_emit` adds one layer dict of an ordinary layer class per rf op (with ``out_shape``: the
rf Tensor's dims, dtype and sparse dim and the rf call site, verified when the net is constructed), :func:`_make`
a ``frontend_op`` layer (the few ops without a layer class, see :mod:`._backend`); source names (``base:`` for
outer layers in a loop body); scalar operands as ``constant`` layers (:func:`_const`).
"""

from __future__ import annotations

from ..data import Data
from ..layers.base import OutShape
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


def _emit(layer_class, sources, dims_, dtype_, *, sparse_dim=None, name=None, absolute=False, sparse_dim_option=False,
          **opts):
    """
    One layer dict ``{"class": layer_class, "from": sources, **opts, "out_shape": ...}``; the rf Tensor of it.
    ``sparse_dim_option``: also give the layer the option ``sparse_dim`` (for classes that take it, e.g. constant).
    """
    builder = get_current_builder()
    d = {"class": layer_class}
    if sources is not None:
        d["from"] = [s if isinstance(s, str) else _raw_name(s) for s in sources]
    d.update(opts)
    if sparse_dim_option and sparse_dim is not None:
        d["sparse_dim"] = sparse_dim
    d["out_shape"] = OutShape(dims_, dtype_, sparse_dim, call_site())
    layer = builder.add_layer(name or layer_class, d, absolute=absolute)
    t = Data(layer.name, dims=list(dims_), dtype=dtype_, sparse_dim=sparse_dim, placeholder=layer)
    for dim in dims_:
        if dim not in builder.dim_sources:
            builder.dim_sources[dim] = t
    return t


def _const(value, dtype):
    """A scalar ``constant`` layer (one per value and dtype and net dict level); its layer name."""
    builder = get_current_builder()
    if hasattr(value, "tolist"):
        value = value.tolist()
    cache = builder.__dict__.setdefault("_const_cache", {})
    key = (repr(value), dtype)
    if key not in cache:
        if dtype.startswith("int") and isinstance(value, float) and not value.is_integer():
            raise FrontendError("rf at %s: constant %r does not fit the dtype %s of the other operand" % (
                call_site(), value, dtype))
        layer = builder.add_layer("const", {"class": "constant", "value": value, "dtype": dtype}, absolute=True)
        cache[key] = layer.name
    return cache[key]


def _sources(values, dtype):
    """Tensors -> their layer names, scalars -> ``constant`` layers of dtype."""
    return [_raw_name(v) if is_tensor(v) else _const(v, dtype) for v in values]
