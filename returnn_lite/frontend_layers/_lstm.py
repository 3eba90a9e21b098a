"""
rf.LSTM on the layers backend: a ``rec`` layer with the ``nativelstm2`` unit (the fused NativeLstm2 op where it is
available), as a hand-written RETURNN dict would have it::

    "lstm/ff_weight": {"class": "variable", ...},                       # the rf params [4*out, in] etc. (i, f, g, o)
    "lstm/ff_weight_slice": {"class": "slice", "from": "lstm/ff_weight", "axis": gates, ...},  # x4 (gate blocks)
    "lstm/ff_weight_cifo": {"class": "concat", "from": [(".._slice_2", g2), (".._slice", g0), ...]},  # NativeLstm2
    ...                                                                 # order: cell-in (g), i, f, o; the same for
    "lstm/lstm": {"class": "rec", "unit": "nativelstm2", "from": "x",   # rec_weight and bias
                  "axis": time_dim, "in_dim": in_dim, "out_dim": out_dim,
                  "initial_state": {"h": "state_h", "c": "state_c"},    # (single_step_dim: "state" instead)
                  "reuse_params": {"map": {"W": {"layer_output": "lstm/ff_weight_cifo", "shape": (in_dim, gates)},
                                           "W_re": {..., "shape": (out_dim, gates)}, "b": {...}}}},
    "lstm/state_h": {"class": "get_last_hidden_state", "from": "lstm/lstm", "key": "h", "out_dim": out_dim},

The rec layer creates no params of its own: the net's params stay the rf params. The reordered params are emitted
once per LSTM module in the net dict that has its params (also when the LSTM is called in a loop body).
"""

from __future__ import annotations

from ..data import Dim, batch_dim, single_step_dim
from ._emit import _emit, _raw_name
from ._net import _current

# NativeLstm2 gate blocks (cell-in, input, forget, output) as blocks of rf's order (input, forget, cell-in, output)
_NATIVE_GATE_ORDER = (2, 0, 1, 3)


def lstm_layers(source, *, state_h, state_c, ff_weight, rec_weight, bias, spatial_dim, in_dim, out_dim):
    """
    The rec layer for rf.LSTM, and its final (h, c) as ``get_last_hidden_state`` layers; None where the rec layer
    does not take these inputs (batch dims other than [batch], states without exactly [batch, out_dim]).
    """
    single = spatial_dim is single_step_dim
    rest = [d for d in source.dims if d not in (in_dim, spatial_dim)]
    if rest != [batch_dim] or in_dim not in source.dims or (not single and spatial_dim not in source.dims) or \
            source.dtype != ff_weight.dtype:
        return None
    state_h, state_c = (_with_batch(s, out_dim) for s in (state_h, state_c))
    for s in (state_h, state_c):
        if set(s.dims) != {batch_dim, out_dim} or len(s.dims) != 2 or s.dtype != source.dtype:
            return None
    w, w_re, b, gates = _native_params(ff_weight, rec_weight, bias, in_dim, out_dim)
    reuse = {"map": {"W": {"layer_output": w, "shape": (in_dim, gates)},
                     "W_re": {"layer_output": w_re, "shape": (out_dim, gates)},
                     "b": {"layer_output": b, "shape": (gates,)}}}
    states = {"h": _raw_name(state_h), "c": _raw_name(state_c)}
    dims = [out_dim if d == in_dim else d for d in source.dims]
    out = _emit("rec", [source], dims, source.dtype, unit="nativelstm2", axis=spatial_dim, in_dim=in_dim,
                out_dim=out_dim, reuse_params=reuse, name="lstm",
                **({"state": states} if single else {"initial_state": states}))
    h = _emit("get_last_hidden_state", [out], [batch_dim, out_dim], source.dtype, key="h", out_dim=out_dim,
              name="state_h")
    c = _emit("get_last_hidden_state", [out], [batch_dim, out_dim], source.dtype, key="c", out_dim=out_dim,
              name="state_c")
    return out, (h, c)


def _with_batch(state, out_dim):
    """A state [out_dim] (e.g. default_initial_state(batch_dims=[])) broadcast to [batch, out_dim] (``combine``)."""
    if list(state.dims) != [out_dim]:
        return state
    zeros = _emit("constant", None, [batch_dim, out_dim], state.dtype, value=0.0, dtype=state.dtype, shape=[out_dim],
                  with_batch_dim=True, name="full")
    return _emit("combine", [zeros, state], [batch_dim, out_dim], state.dtype, kind="add", name="add")


def _native_params(ff_weight, rec_weight, bias, in_dim, out_dim):
    """
    The params in NativeLstm2's gate order (layer names, as seen from the current net dict) and their gates dim:
    ``slice`` layers per gate block and a ``concat`` in the new order, emitted once per param set in the net dict of
    the params.
    """
    params = ff_weight.placeholder.builder
    cache = params.__dict__.setdefault("_lstm_native_params", {})
    key = (ff_weight.placeholder.name, rec_weight.placeholder.name, bias.placeholder.name)
    if key not in cache:
        prev = _current[0]
        _current[0] = params  # (the reordered params are no per-frame layers of a loop body)
        try:
            cache[key] = _reorder_gates(ff_weight, rec_weight, bias, in_dim, out_dim)
        finally:
            _current[0] = prev
    names, gates = cache[key]
    return tuple(_raw_name(t) for t in names) + (gates,)


def _reorder_gates(ff_weight, rec_weight, bias, in_dim, out_dim):
    old_gates = bias.dims[0]
    gates = Dim(old_gates.dimension, kind=Dim.Types.Feature, description="%s:gates-cifo" % out_dim.description)
    res = []
    for param in (ff_weight, rec_weight, bias):
        prefix = param.placeholder.name
        blocks = [Dim(out_dim.dimension, description="%s:gate%i" % (out_dim.description, i)) for i in range(4)]
        parts = [_emit("slice", [param], [blocks[i] if d == old_gates else d for d in param.dims], param.dtype,
                       axis=old_gates, slice_start=i * out_dim.dimension, slice_end=(i + 1) * out_dim.dimension,
                       slice_step=None, out_dim=blocks[i], name="%s_gate%i" % (prefix, i), absolute=True)
                 for i in range(4)]
        dims = [gates if d == old_gates else d for d in param.dims]
        res.append(_emit("concat", None, dims, param.dtype, out_dim=gates, name="%s_cifo" % prefix, absolute=True,
                         **{"from": [(_raw_name(parts[i]), blocks[i]) for i in _NATIVE_GATE_ORDER]}))
    return res, gates
