"""
``rf.cond`` with a Tensor predicate on the layers backend -> a ``cond`` layer whose branches are subnetworks::

    "cond": {"class": "cond", "from": [], "condition": "greater",
             "true_layer": {"class": "subnetwork", "from": [], "subnetwork": {
                 "mul": {"class": ..., "from": ["base:x"]}, "output": {"class": "copy", "from": "mul"}}},
             "false_layer": {"class": "subnetwork", "from": [], "subnetwork": {...}}}

Each branch function runs once, recording into its own net dict (outer tensors are ``base:`` references). A result
structure with several Tensors gives one cond layer per Tensor, each branch dict pruned to what that Tensor needs.
Inside a loop body (a rec unit, whose per-step templates cannot hold the branch subnetworks) both branches are
recorded into the body and the results selected with ``where``.
"""

from __future__ import annotations

from ..frontend._utils import FrontendError, call_site, dims_str
from ._loop import _flatten, _pack, _ref_in, _tensor, outer_refs
from ._net import NetDictBuilder, get_current_builder


def cond(pred, true_fn, false_fn):
    site = call_site()
    outer = get_current_builder()
    b = outer
    while b is not None and getattr(b, "loop_recorder", None) is None:
        b = b.parent
    if b is not None:
        return _cond_in_loop(pred, true_fn, false_fn, site)
    recorded = []
    for fn in (true_fn, false_fn):
        builder = NetDictBuilder(parent=outer)
        builder.scope = list(outer.scope)
        with builder:
            res = fn()
        recorded.append((builder, res))
    (t_builder, t_res), (f_builder, f_res) = recorded
    t_flat, f_flat = _flatten(t_res), _flatten(f_res)
    if len(t_flat) != len(f_flat) or _pack(t_res, [None] * len(t_flat)) != _pack(f_res, [None] * len(f_flat)):
        raise FrontendError("rf.cond at %s: the branches return different structures: %r vs %r" % (
            site, t_res, f_res))
    for i, (a, b) in enumerate(zip(t_flat, f_flat)):
        if set(a.dims) != set(b.dims) or a.dtype != b.dtype:
            raise FrontendError("rf.cond at %s: result %i is %s %s in the true branch, %s %s in the false branch" % (
                site, i, a.dtype, dims_str(a.dims), b.dtype, dims_str(b.dims)))
    condition = _ref_in(outer, pred)
    outs = []
    for a, b in zip(t_flat, f_flat):
        layer = outer.add_layer("cond", {"class": "cond", "from": [], "condition": condition,
                                         "true_layer": _branch(t_builder, a), "false_layer": _branch(f_builder, b)})
        outs.append(_tensor(layer.name, a.dims, a, layer))
    return _pack(t_res, outs)


def _cond_in_loop(pred, true_fn, false_fn, site):
    from ..frontend import math_

    t_res, f_res = true_fn(), false_fn()
    t_flat, f_flat = _flatten(t_res), _flatten(f_res)
    if len(t_flat) != len(f_flat):
        raise FrontendError("rf.cond at %s: the branches return different structures: %r vs %r" % (site, t_res, f_res))
    return _pack(t_res, [math_.where(pred, a, b, allow_broadcast_all_sources=True) for a, b in zip(t_flat, f_flat)])


def _branch(builder, t):
    """A subnetwork layer dict: the layers of the branch that t needs, and ``output`` (a copy of t)."""
    ref = _ref_in(builder, t)
    keep, stack = set(), [ref]
    while stack:
        name = stack.pop()
        if name in keep or name not in builder.net_dict:
            continue
        keep.add(name)
        stack.extend(outer_refs(builder.net_dict[name]))
    net = {name: d for name, d in builder.net_dict.items() if name in keep}
    if "output" in net:
        raise FrontendError("rf.cond at %s: a layer of the branch is named 'output'" % call_site())
    net["output"] = {"class": "copy", "from": [ref]}
    return {"class": "subnetwork", "from": [], "subnetwork": net}
