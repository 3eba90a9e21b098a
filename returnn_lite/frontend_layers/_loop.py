"""
rf loops on the layers backend: ``rf.Loop`` / ``rf.scan`` / ``rf.while_loop`` become a ``rec`` layer whose ``unit``
is the per-frame body (recorded once), as a hand-written RETURNN rec unit reads::

    "loop": {"class": "rec", "from": [], "axis": time_dim, "optimize_move_layers_out": False, "unit": {
        "unstack": {"class": "rec_unstack", "from": "base:data:data", "axis": time_dim},   # loop.unstack, scan xs
        "acc": {"class": "copy", "from": "add", "initial_output": "base:zeros"},            # a state: prev:acc
        "add": {"class": ..., "from": ["prev:acc", "unstack"]},
        "output": {"class": "copy", "from": "add"}}},                                       # the first stacked
    "loop_acc": {"class": "rec_last_output", "rec_layer": "loop", "sub_layer_name": "acc"},  # the final state

Stacked tensors (``loop.stack``, scan's ys) are the rec layer's sub-layers seen from outside (``loop/add``, over the
loop's axis). The final value of a state is its frame at the sequence length (the state of a sequence stays as it is
after its length). ``rf.cum_concat_step`` in a body is a ``cum_concat`` sub-layer.

A loop without axis gets a new dim and an ``end`` sub-layer (a sequence ends with the frame where it is True; the
rec layer runs at least one frame, at most its ``max_seq_len``):

- ``rf.scan(cond=, cond_dims=)`` and ``rf.while_loop``: the body, then the cond of the new state in each frame (no
  body call on a state whose cond is False). A sequence whose cond(initial) is False (or max_seq_len <= 0) still
  ends after one frame; a ``loop_frames`` op re-tags the stacked frames to the new dim with length 0 there, and its
  final state is the initial one (``where``).
- ``rf.Loop(max_seq_len=)`` with ``loop.end(flag, include_eos=True)``: the end frame is part of the sequence. With
  ``include_eos=False`` the rec layer runs over its own axis (one frame more per sequence) and the stacked frames
  are sliced (``slice_end=-1``) to ``loop.axis``; final states and ``loop.last`` are the previous values at the end
  frame (a ``prev:`` copy; the initial value / zeros for an empty sequence).
- An int ``max_seq_len`` is the rec layer's bound; an int Tensor (scalar or [batch]) a step counter state that
  ends each sequence at it (the rec layer unbounded).

Sub-layers are not moved out of the loop: the layers of the frontend carry their per-frame output templates. A loop
inside a loop body is a rec layer in the unit of the outer rec layer (an initial value that is a ``prev:`` value
of the outer loop goes through a copy layer there).
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from ..data import Data, Dim
from ..frontend._utils import FrontendError, call_site, dims_str, is_tensor
from ._emit import _make, _raw_name
from ._layer import op, to_out
from ._net import Layer, NetDictBuilder, _current, get_current_builder

_UNBOUNDED = 2 ** 31 - 1  # max_seq_len of a loop ended only by its condition (rf.while_loop)


def _flatten(struct):
    """The Tensors of a nested structure (dicts by sorted key); Dims and None stay in the structure."""
    return [t for _, t in _named(struct, "")]


def _named(struct, prefix):
    """[(path, Tensor)] in the order of _flatten; paths name the state sub-layers ("acc", "lstm_h", "0")."""
    if is_tensor(struct):
        return [(prefix or "state", struct)]
    if isinstance(struct, dict):
        return [x for k in sorted(struct) for x in _named(struct[k], _join(prefix, k))]
    if isinstance(struct, (list, tuple)):
        return [x for i, v in enumerate(struct) for x in _named(v, _join(prefix, i))]
    if struct is None or isinstance(struct, Dim):
        return []
    raise FrontendError("rf at %s: unsupported element %r in a loop state / cond result (Tensors, Dims, dicts, lists, "
                        "tuples)" % (call_site(), struct))


def _join(prefix, key):
    return "%s_%s" % (prefix, key) if prefix else "state_%s" % key if isinstance(key, int) else str(key)


def _pack(struct, flat, dims=None):
    """struct with its Tensors replaced by flat (in order) and its Dims by dims.get(dim, dim)."""
    it = iter(flat)

    def rec(s):
        if is_tensor(s):
            return next(it)
        if isinstance(s, Dim):
            return dims.get(s, s) if dims else s
        if isinstance(s, dict):
            out = {k: rec(s[k]) for k in sorted(s)}
            return type(s)(**out) if hasattr(type(s), "__getattr__") and type(s) is not dict else out
        if isinstance(s, (list, tuple)):
            return type(s)(rec(v) for v in s)
        return None

    return rec(struct)


def _ref_in(builder, t):
    """The name of t's layer as seen from builder's net dict (``base:`` for the direct outer level)."""
    prev = _current[0]
    _current[0] = builder
    try:
        return _raw_name(t)
    finally:
        _current[0] = prev


def _tensor(name, dims, like, raw):
    return Data(name, dims=list(dims), dtype=like.dtype, sparse_dim=like.sparse_dim, placeholder=raw)


class _LoopRecorder:
    """Records a loop body into the unit dict of a ``rec`` layer and emits the rec layer and its results."""

    def __init__(self, func, axis, *, dynamic_end=False, max_seq_len=None, site=None):
        """max_seq_len (a loop without axis): an int bound on the frames, or a scalar / [batch] int Tensor (a step
        counter state ends each sequence at it)."""
        self.func, self.site = func, site or call_site()
        self.outer = get_current_builder()
        self.sub = NetDictBuilder(parent=self.outer)
        self.sub.scope = list(self.outer.scope)
        self.sub.loop_recorder = self
        self.axis, self.dynamic_end = axis, dynamic_end
        self.max_seq_len = max_seq_len if not is_tensor(max_seq_len) else None
        self.max_seq_tensor = max_seq_len if is_tensor(max_seq_len) else None
        self.step_init = None
        if self.max_seq_tensor is not None:  # the counter's initial value, in the outer net dict
            from ..frontend import array_

            self.step_init = array_.zeros([], dtype="int32")
        self.name = self.outer.unique_name("_".join(self.outer.scope + ["loop"]), absolute=True)
        self.outer.net_dict[self.name] = {}  # reserved (stacked results refer to it before emit)
        self.sub.net_dict["output"] = {}
        self.sub.net_dict["end"] = {}
        self.states = []  # [unit name, initial Tensor, prev Tensor, new Tensor]
        self.hidden = []  # the same for the loop's own states (a cond flag, a step counter, loop.last values)
        self.exclude_end = False  # the end frame is not part of the sequence (include_eos=False, scan with cond)
        self.cum_concat = {}  # cum_concat unit layer name -> (state name, source unit layer name, accum axis)
        self.end_set = False

    def abort(self):
        """The body raised: the reserved layer name is freed (the error propagates)."""
        if not self.outer.net_dict.get(self.name):
            self.outer.net_dict.pop(self.name, None)

    def error(self, msg):
        return FrontendError("rf.%s at %s: %s" % (self.func, self.site, msg))

    def ref(self, t):
        return _ref_in(self.sub, t)

    def unit_layer(self, t, base_name):
        """A unit layer with t's value (t's own layer if it is one, else a copy of the prev:/base: value)."""
        ref = self.ref(t)
        if ref in self.sub.net_dict and self.sub.net_dict[ref]:
            return ref
        return self.sub.add_layer(base_name, {"class": "copy", "from": [ref]}).name

    # ---- inside the body ----
    def unstack(self, x, name=None):
        if self.dynamic_end:
            raise self.error("unstack needs a loop over an axis (rf.Loop(axis=...)), this loop ends by loop.end")
        if self.axis not in x.dims:
            raise FrontendError("rf.%s at %s: %r %s does not have the loop dim %s" % (
                self.func, call_site(), x.name, dims_str(x.dims), self.axis.short_repr()))
        layer = self.sub.add_layer(name or "unstack", {"class": "rec_unstack", "from": [self.ref(x)],
                                                       "axis": self.axis})
        return _tensor(layer.name, [d for d in x.dims if d != self.axis], x, layer)

    def prev_state(self, path, init, *, hidden=False):
        name = self.sub.unique_name(path, absolute=True)
        self.sub.net_dict[name] = {}  # reserved; set in set_new_states
        prev = _tensor(path, init.dims, init, Layer("prev:" + name, {}, self.sub))
        (self.hidden if hidden else self.states).append([name, init, prev, None])
        return prev

    def set_new_states(self, new_flat):
        if len(new_flat) != len(self.states):
            raise self.error("%i new state tensors, but %i initial ones" % (len(new_flat), len(self.states)))
        for i, (st, t) in enumerate(zip(self.states, new_flat)):
            if not is_tensor(t):
                raise self.error("new state %r is not a Tensor: %r" % (st[0], t))
            if self._cum_concat_of(st, t) is None and set(t.dims) != set(st[1].dims):
                raise self.error("new state %r has dims %s, the initial one %s" % (
                    st[0], dims_str(t.dims), dims_str(st[1].dims)))
            st[3] = t

    def set_end(self, flag, *, include_eos=True):
        """Inside the body: the sequence ends with the frame where flag is True (without it: include_eos=False);
        a Tensor max_seq_len adds a step counter (flag None: only that ends the loop)."""
        from ..frontend import math_

        if flag is not None and (set(flag.dims) - {d for d in flag.dims if d.is_batch_dim()} or flag.dtype != "bool"):
            raise self.error("the end flag must be a bool scalar or [batch], got %s %s" % (
                flag.dtype, dims_str(flag.dims)))
        self.exclude_end = not include_eos
        if self.max_seq_tensor is not None:
            step = self.prev_state("step", self.step_init, hidden=True)  # frames before this one
            self.hidden[-1][3] = step + 1
            limit = math_.greater_equal(step if self.exclude_end else step + 1, self.max_seq_tensor)
            flag = limit if flag is None else math_.logical_or(flag, limit, allow_broadcast_all_sources=True)
        self.sub.net_dict["end"] = {"class": "copy", "from": [self.ref(flag)]}
        self.end_set = True

    def last_included(self, t):
        """Inside the body, with the end frame excluded (loop.last): a hidden state holding t (zeros before the first
        frame), whose previous value at the end frame is t at the last frame of the sequence."""
        from ..frontend import array_

        prev = _current[0]
        _current[0] = self.outer
        try:
            init = array_.zeros(list(t.dims), dtype=t.dtype)  # (only its values are used, also for a sparse t)
        finally:
            _current[0] = prev
        self.prev_state("last", init, hidden=True)
        self.hidden[-1][3] = t
        return self.hidden[-1]

    def cum_concat_step(self, source, prev_accum, axis, out_spatial_dim):
        st = next((s for s in self.states if s[2].placeholder is prev_accum.placeholder), None)
        if st is None:
            raise FrontendError("rf.cum_concat_step at %s: prev_accum must be a state of the loop (its previous "
                                "value), on the layers backend" % call_site())
        if axis not in prev_accum.dims or axis.dimension != 0:
            raise FrontendError("rf.cum_concat_step at %s: on the layers backend, the initial prev_accum must be "
                                "empty along axis (a Dim(0)), got axis %s of %s" % (
                                    call_site(), axis.short_repr(), dims_str(prev_accum.dims)))
        if set(source.dims) != set(prev_accum.dims) - {axis}:
            raise FrontendError("rf.cum_concat_step at %s: source %s does not match prev_accum %s without %s" % (
                call_site(), dims_str(source.dims), dims_str(prev_accum.dims), axis.short_repr()))
        if out_spatial_dim.dimension is not None:  # the frontend's default axis + 1: the history grows per step
            out_spatial_dim = Dim(None, kind=Dim.Types.Spatial, description="%s:cum_concat" % self.name)
        src = self.unit_layer(source, "cum_concat_source")
        layer = self.sub.add_layer("cum_concat", {"class": "cum_concat", "from": [src],
                                                  "out_spatial_dim": out_spatial_dim})
        self.cum_concat[layer.name] = (st[0], src, axis)
        return _tensor(layer.name, [out_spatial_dim if d == axis else d for d in prev_accum.dims], source, layer)

    def _cum_concat_of(self, st, t):
        raw = t.placeholder
        if isinstance(raw, Layer) and raw.builder is self.sub and raw.name in self.cum_concat \
                and self.cum_concat[raw.name][0] == st[0]:
            return raw.name
        return None

    # ---- after the body ----
    def emit(self, stacked):
        """stacked: [(unit layer name, frame Tensor)]. -> (stacked Tensors, final state Tensors, {Dim: final Dim})"""
        with _abort_on_error(self):
            return self._emit(stacked)

    def _emit(self, stacked):
        unit, name = self.sub.net_dict, self.name
        for d in unit.values():
            for key, v in d.items():
                if key not in ("unit", "subnetwork"):
                    d[key] = self._route_outer_prev(v)
        cum_states = {}
        for st_name, init, _prev, new in self.states + self.hidden:
            cc = self._cum_concat_of([st_name], new)
            if cc is not None:
                cum_states[st_name] = cc
                del unit[st_name]
                continue
            unit[st_name] = {"class": "copy", "from": [self.ref(new)],
                             "initial_output": "base:" + self._outer_name(init)}
        for st_name in cum_states:
            users = [x for x, d in unit.items() if "prev:" + st_name in _strings(d)]
            if users:
                raise self.error("the state %r of rf.cum_concat_step is used as a value in %s; on the layers "
                                 "backend it can only be the prev_accum of rf.cum_concat_step" % (st_name, users))
        self.cum_state_names = set(cum_states)
        if self.dynamic_end and not self.end_set:
            raise self.error("a loop without axis needs its end (loop.end(...))")
        if not self.dynamic_end:
            del unit["end"]
        out = stacked[0][0] if stacked else next((s[0] for s in self.states if s[0] not in cum_states), None)
        if out is None:
            raise self.error("the loop body has no state and stacks nothing")
        unit["output"] = {"class": "copy", "from": [out]}
        # with the end frame excluded, the rec layer runs over its own axis (one more frame per sequence, the end
        # frame), and the stacked frames are sliced to the loop's axis
        self.rec_axis = self.axis if not self.exclude_end else Dim(
            None, kind=Dim.Types.Spatial, description="%s:with_end_frame" % self.axis.description)
        d = {"class": "rec", "from": [], "unit": unit, "axis": self.rec_axis, "optimize_move_layers_out": False}
        if self.dynamic_end:
            d["max_seq_len"] = _UNBOUNDED if self.max_seq_len is None else self.max_seq_len + int(self.exclude_end)
        self.outer.net_dict[name] = d
        ys = [self._frames(x, t) for x, t in stacked]
        finals, dims = [], {}
        for st in self.states:
            st_name, init, _prev, new = st
            if st_name in cum_states:
                _st, src, accum_axis = self.cum_concat[cum_states[st_name]]
                dims[accum_axis] = self.axis  # after the loop: all frames (the loop's lengths)
                finals.append(self._frames(src, _tensor(st_name, [d for d in new.dims if d in init.dims], new,
                                                        None)))
                continue
            finals.append(self.final(st))
        return ys, finals, dims

    def _route_outer_prev(self, v):
        """A reference ``base:prev:X`` of the body (the previous value of an enclosing loop) -> ``base:X_prev``, a copy
        layer in that loop's unit (a nested rec layer resolves its base: references as layers there)."""
        if isinstance(v, (list, tuple)):
            return type(v)(self._route_outer_prev(x) for x in v)
        if type(v) is dict:
            return {k: self._route_outer_prev(x) for k, x in v.items()}
        if not isinstance(v, str) or not v.startswith("base:"):
            return v
        rest, level = v, 0
        while rest.startswith("base:"):
            rest, level = rest[len("base:"):], level + 1
        if not rest.startswith("prev:"):
            return v
        b = self.sub
        for _ in range(level):
            b = b.parent
        copies = b.__dict__.setdefault("_prev_copies", {})
        if rest not in copies:
            copies[rest] = b.add_layer(rest[len("prev:"):] + "_prev", {"class": "copy", "from": [rest]},
                                       absolute=True).name
        return "base:" * level + copies[rest]

    def _outer_name(self, t):
        """t's layer in the outer net dict; a ``prev:`` value of an enclosing loop as a copy layer (the initial
        output of a nested loop's state is taken from the outer unit's layers)."""
        return self._route_outer_prev("base:" + _ref_in(self.outer, t))[len("base:"):]

    def _frames(self, unit_name, t):
        """The stacked frames of a unit layer (t: its frame) over the loop's axis."""
        y = _tensor(unit_name, [self.rec_axis] + list(t.dims), t, Layer("%s/%s" % (self.name, unit_name), {},
                                                                       self.outer))
        if not self.exclude_end:
            return y
        from ._emit import _emit

        return _emit("slice", [y], [self.axis] + list(t.dims), t.dtype, sparse_dim=t.sparse_dim, axis=self.rec_axis,
                     slice_end=-1, out_dim=self.axis, name="%s_%s" % (self.name, unit_name.replace("/", "_")),
                     absolute=True)

    def final(self, st):
        """The final value of a (hidden) state: its frame at the sequence's last frame; with the end frame excluded,
        its previous value at the end frame (the initial value for an empty sequence)."""
        st_name, _init, _prev, new = st
        src = st_name
        if self.exclude_end:
            src = self.sub.add_layer(st_name + "_final", {"class": "copy", "from": ["prev:" + st_name]},
                                     absolute=True).name
        layer = self.outer.add_layer("%s_%s" % (self.name, st_name), {
            "class": "rec_last_output", "rec_layer": self.name, "sub_layer_name": src}, absolute=True)
        return _tensor(layer.name, new.dims, new, layer)

    def last(self, unit_name, t):
        layer = self.outer.add_layer("%s_last_%s" % (self.name, unit_name.replace("/", "_")), {
            "class": "rec_last_output", "rec_layer": self.name, "sub_layer_name": unit_name}, absolute=True)
        return _tensor(layer.name, t.dims, t, layer)


def _strings(v):
    """All strings in a layer dict (nested), e.g. to find the references to a layer."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, (list, tuple)):
        return [s for x in v for s in _strings(x)]
    return []


# options of the emitted layer classes that name layers of the same net dict
_REF_OPTIONS = frozenset({"from", "initial_output", "rec_layer", "condition", "true_layer", "false_layer", "loss_opts",
                          "logits", "targets", "position", "true_from", "false_from", "filter", "bias", "scale",
                          "initial_state", "state", "reuse_params", "init_by_layer"})


def outer_refs(layer_dict):
    """Names of the same net dict that a layer dict needs: its sources and options, and the ``base:`` references of
    its unit / subnetwork / branch dicts (one level up from them)."""
    res = []
    for key, v in layer_dict.items():
        if key in ("unit", "subnetwork") and isinstance(v, dict):
            for sub in v.values():
                res.extend(s[len("base:"):] for s in outer_refs(sub) if s.startswith("base:"))
        elif key in ("true_layer", "false_layer", "condition") and isinstance(v, dict):
            res.extend(outer_refs(v))
        elif key in _REF_OPTIONS:
            res.extend(s for s in _strings(v) if s != "output")
    return res


@contextlib.contextmanager
def _abort_on_error(rec):
    try:
        yield
    except BaseException:
        rec.abort()
        raise


def scan(*, spatial_dim, initial, xs, ys, body):
    rec = _LoopRecorder("scan", spatial_dim)
    with rec.sub, _abort_on_error(rec):
        x_frames = [rec.unstack(x) for x in _flatten(xs)]
        s_prev = [rec.prev_state(path, s) for path, s in _named(initial, "")]
        y_t, s_new = body(_pack(xs, x_frames), _pack(initial, s_prev))
        y_flat = _flatten(y_t)
        for i, (t, tpl) in enumerate(zip(y_flat, _flatten(ys))):
            if set(t.dims) != set(d for d in tpl.dims if d != spatial_dim):
                raise rec.error("body output y%i has dims %s, expected %s" % (i, dims_str(t.dims), dims_str(tpl.dims)))
        stacked = [(rec.unit_layer(t, "y%i" % i), t) for i, t in enumerate(y_flat)]
        rec.set_new_states(_flatten(s_new))
    ys_out, finals, dims = rec.emit(stacked)
    return _pack(y_t, ys_out), _pack(initial, finals, dims), spatial_dim


def _check_max_seq_len(func, max_seq_len, site, min_int=1):
    if max_seq_len is None or isinstance(max_seq_len, int) and not isinstance(max_seq_len, bool) and \
            max_seq_len >= min_int:
        return
    if is_tensor(max_seq_len) and max_seq_len.dtype.startswith("int") and all(d.is_batch_dim()
                                                                                for d in max_seq_len.dims):
        return
    raise FrontendError("rf.%s at %s: max_seq_len must be an int >= %i or an int Tensor (scalar or [batch]), got %r" % (
        func, site, min_int, max_seq_len))


def scan_cond(*, spatial_dim, initial, ys, body, cond, cond_dims, cond_before_body, max_seq_len):
    """
    ``rf.scan`` with ``cond`` (no spatial_dim to iterate over): while ``cond(None, state)`` is True per sequence,
    ``ys_t, state = body(None, state)``. A rec layer whose frame i runs the body and ends the sequence (the frame
    included) where the cond of the new state is False (or at max_seq_len, by the rec layer's bound or a step counter);
    as the cond comes after the body, a sequence whose cond(initial) is False (cond_before_body) ends after one
    frame, and a ``loop_frames`` op gives the new dim its lengths 0 there (the final state: the initial one).
    """
    from ..frontend import math_

    site = call_site()
    cond_dims = list(cond_dims or [])
    if any(not d.is_batch_dim() for d in cond_dims):
        raise FrontendError("rf.scan at %s: cond_dims %s: on the layers backend only [] or [batch]" % (
            site, dims_str(cond_dims)))
    _check_max_seq_len("scan", max_seq_len, site, min_int=0)
    if is_tensor(max_seq_len) and not set(max_seq_len.dims) <= set(cond_dims):
        raise FrontendError("rf.scan at %s: max_seq_len %s has dims not in cond_dims %s" % (
            site, dims_str(max_seq_len.dims), dims_str(cond_dims)))
    b = get_current_builder()
    while spatial_dim is not None and b is not None:
        if spatial_dim in b.dim_sources:
            raise FrontendError("rf.scan at %s: spatial_dim %s already has sizes (a dim of %r); with cond it must be "
                                "a new dim" % (site, spatial_dim.short_repr(), b.dim_sources[spatial_dim].name))
        b = b.parent
    axis = spatial_dim if spatial_dim is not None else Dim(None, kind=Dim.Types.Spatial, description="scan")
    ok = None  # per sequence: whether it has any step (None: all have)
    if cond_before_body:
        ok = cond(None, initial)
        _check_cond(ok, cond_dims, site)
    if is_tensor(max_seq_len):
        positive = math_.greater(max_seq_len, 0)
        ok = positive if ok is None else math_.logical_and(ok, positive, allow_broadcast_all_sources=True)
    elif max_seq_len == 0:
        from ..frontend import array_

        ok = array_.full(dims=cond_dims, fill_value=False, dtype="bool")
        max_seq_len = 1
    rec_axis = axis if ok is None else Dim(None, kind=Dim.Types.Spatial, description="%s:frames" % axis.description)
    rec = _LoopRecorder("scan", rec_axis, dynamic_end=True, max_seq_len=max_seq_len, site=site)
    with rec.sub, _abort_on_error(rec):
        s_prev = [rec.prev_state(path, s) for path, s in _named(initial, "")]
        y_t, s_new = body(None, _pack(initial, s_prev))
        rec.set_new_states(_flatten(s_new))
        for st in rec.states:
            if rec._cum_concat_of(st, st[3]) is not None:
                raise rec.error("rf.cum_concat_step in rf.scan with cond is not supported on the layers backend")
        c = cond(None, s_new)
        _check_cond(c, cond_dims, site)
        end = math_.logical_not(c)
        if ok is not None:  # a sequence without steps ends at once (not to run the loop longer)
            end = math_.logical_or(end, math_.logical_not(ok), allow_broadcast_all_sources=True)
        rec.set_end(end)
        y_flat = _flatten(y_t)
        for i, (t, tpl) in enumerate(zip(y_flat, _flatten(ys))):
            if set(t.dims) != set(tpl.dims):
                raise rec.error("body output y%i has dims %s, expected %s" % (i, dims_str(t.dims), dims_str(tpl.dims)))
        stacked = [(rec.unit_layer(t, "y%i" % i), t) for i, t in enumerate(y_flat)]
        if not stacked and ok is not None:  # the new dim gets its lengths from a stacked layer
            stacked.append((rec.unit_layer(c, "frame_cond"), c))
    ys_out, finals, dims = rec.emit(stacked)
    if ok is not None:
        ys_out = [_make("loop_frames", [y, ok], [axis if d == rec_axis else d for d in y.dims], y.dtype,
                        sparse_dim=y.sparse_dim, opts={"in_dim": rec_axis, "out_dim": axis}) for y in ys_out]
        if ys_out:
            rec.outer.dim_sources.setdefault(axis, ys_out[0])
        any_ok = None  # for a state without the dims of ok: whether the loop had any step
        for i, (f, st) in enumerate(zip(finals, rec.states)):
            if not set(ok.dims) <= set(f.dims) and any_ok is None:
                any_ok = math_.reduce_any(ok, axis=list(ok.dims))
            finals[i] = math_.where(ok if set(ok.dims) <= set(f.dims) else any_ok, f, st[1])
    return _pack(y_t, ys_out[:len(y_flat)]), _pack(initial, finals, dims), axis


@op("loop_frames")
def _loop_frames(layer, inputs, out, in_dim, out_dim):
    """The frames of src over out_dim instead of in_dim (a loop's frames), out_dim's lengths those of in_dim where
    ok (scalar or [batch]) is True, else 0."""
    src, ok = inputs
    if out_dim.complete_dyn_size() is None:
        lens = in_dim.complete_dyn_size()
        flag = ok.copy_as_batch_major().placeholder if ok.have_batch_axis() else ok.placeholder
        out_dim.dyn_size = tf.where(flag, lens, tf.zeros_like(lens))
    return to_out(src.placeholder, [out_dim if d == in_dim else d for d in src.dims], out)


def _check_cond(c, cond_dims, site):
    if not is_tensor(c) or c.dtype != "bool" or set(c.dims) != set(cond_dims):
        raise FrontendError("rf.scan at %s: cond must return a bool Tensor with the dims %s (cond_dims), got %r" % (
            site, dims_str(cond_dims), c))


def while_loop(cond, body, initial):
    """``s = initial; while cond(s): s = body(s)`` with a scalar bool Tensor cond -> the final s. The rec layer's
    step i computes s_i = body(s_(i-1)) and ends when not cond(s_i) (cond comes after the body: no body call on a
    state whose cond is False); zero iterations (cond(initial) False) give initial: the rec layer still runs one
    step, whose result is not taken (a cum_concat_step state gets length 0 by a ``loop_frames`` op)."""
    from ..frontend import math_

    site = call_site()
    c0 = cond(initial)
    if isinstance(c0, bool):
        if not c0:
            return initial
    elif not is_tensor(c0) or c0.dims or c0.dtype != "bool":
        raise FrontendError("rf.while_loop at %s: cond must return a scalar bool Tensor, got %r" % (site, c0))
    axis = Dim(None, kind=Dim.Types.Spatial, description="while_loop")
    rec = _LoopRecorder("while_loop", axis, dynamic_end=True, site=site)
    with rec.sub, _abort_on_error(rec):
        s_prev = [rec.prev_state(path, s) for path, s in _named(initial, "")]
        s_new = body(_pack(initial, s_prev))
        rec.set_new_states(_flatten(s_new))
        c = cond(s_new)
        if not is_tensor(c) or c.dims or c.dtype != "bool":
            raise rec.error("cond must return a scalar bool Tensor, got %r" % (c,))
        rec.set_end(math_.logical_not(c))
    _ys, finals, dims = rec.emit([])
    if is_tensor(c0):
        steps = Dim(None, kind=Dim.Types.Spatial, description="while_loop:steps") if rec.cum_state_names else None
        for i, (f, st) in enumerate(zip(finals, rec.states)):
            if st[0] in rec.cum_state_names:  # the frames of all steps, none without steps
                finals[i] = _make("loop_frames", [f, c0], [steps if d == axis else d for d in f.dims], f.dtype,
                                  sparse_dim=f.sparse_dim, opts={"in_dim": axis, "out_dim": steps})
            else:
                finals[i] = math_.where(c0, f, st[1])
        dims = {k: steps if v == axis else v for k, v in dims.items()}
    return _pack(initial, finals, dims)


def cum_concat_step(source, *, prev_accum, axis, out_spatial_dim):
    rec = getattr(get_current_builder(), "loop_recorder", None)
    if rec is None:
        raise FrontendError("rf.cum_concat_step at %s: on the layers backend only inside the body of rf.scan / "
                            "rf.Loop / rf.while_loop" % call_site())
    return rec.cum_concat_step(source, prev_accum, axis, out_spatial_dim)


class Loop:
    """
    ``rf.Loop(axis=time_dim)``: ``loop.state.x = initial`` before, ``with loop:`` the per-frame body with
    ``loop.unstack(x)``, ``loop.state.x`` (previous / new value), ``y = loop.stack(y_t)``, ``loop.last(y_t)``; after
    the block the stacked tensors and ``loop.state.x`` (final values) are available. Without axis the loop ends by
    ``loop.end(flag, include_eos=...)`` (a new dim ``loop.axis``; ``max_seq_len``: an int or an int Tensor bound).
    """

    def __init__(self, *, axis=None, max_seq_len=None):
        site = call_site()
        if axis is not None and max_seq_len is not None:
            raise FrontendError("rf.Loop at %s: max_seq_len is only for a loop without axis (ended by loop.end)" %
                                site)
        _check_max_seq_len("Loop", max_seq_len, site)
        dynamic = axis is None
        if dynamic:
            axis = Dim(None, kind=Dim.Types.Spatial, description="loop")
        object.__setattr__(self, "_rec", _LoopRecorder("Loop", axis, dynamic_end=dynamic, max_seq_len=max_seq_len,
                                                       site=site))
        object.__setattr__(self, "axis", axis)
        object.__setattr__(self, "state", _LoopState(self))
        object.__setattr__(self, "_phase", "init")
        object.__setattr__(self, "_stacked", [])
        object.__setattr__(self, "_last", [])

    def __enter__(self):
        if self._phase != "init":
            raise FrontendError("rf.Loop at %s: a loop can be entered once" % call_site())
        self._rec.sub.__enter__()
        self.state._enter()
        object.__setattr__(self, "_phase", "body")
        return self

    def __exit__(self, exc_type, exc, tb):
        rec = self._rec
        try:
            if exc_type is None:
                rec.set_new_states(self.state._new_values())
                stacked = [(rec.unit_layer(t, name or "stack"), t) for t, _r, name in self._stacked]
                if rec.exclude_end:  # the last frame within the sequence: the previous frame at the end frame
                    last = [(rec.last_included(t), t, r) for t, r, _name in self._last]
                else:
                    last = [(rec.unit_layer(t, name or "last"), t, r) for t, r, name in self._last]
        finally:
            rec.sub.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            rec.abort()
            return False
        ys, finals, dims = rec.emit(stacked)
        for (_t, result, _n), y in zip(self._stacked, ys):
            result.placeholder, result.name = y.placeholder, y.name
        for unit_name, t, result in last:
            y = rec.last(unit_name, t) if not rec.exclude_end else rec.final(unit_name)
            result.placeholder, result.name = y.placeholder, y.name
        self.state._exit(finals, dims)
        object.__setattr__(self, "_phase", "done")
        return False

    def __setattr__(self, key, value):
        raise AttributeError("rf.Loop: use loop.state.%s = ... for loop state" % key)

    def unstack(self, source, *, name=None):
        self._check_body("unstack")
        return self._rec.unstack(source, name)

    def stack(self, source, *, name=None):
        """The frames of source, stacked along the loop axis (valid after the with block)."""
        self._check_body("stack")
        result = Data("loop_stack", dims=[self.axis] + list(source.dims), dtype=source.dtype,
                      sparse_dim=source.sparse_dim)
        self._stacked.append((source, result, name))
        return result

    def last(self, source, *, name=None):
        """The frame of source at the end of each sequence (valid after the with block)."""
        self._check_body("last")
        result = Data("loop_last", dims=list(source.dims), dtype=source.dtype, sparse_dim=source.sparse_dim)
        self._last.append((source, result, name))
        return result

    def end(self, source, *, include_eos):
        """The loop (without axis) ends with the frame where source (bool, scalar or [batch]) is True; that frame
        is part of the sequence with include_eos=True, else not (then the states after the loop and loop.last are
        those of the last frame before it)."""
        self._check_body("end")
        if not self._rec.dynamic_end:
            raise FrontendError("rf.Loop.end at %s: the loop runs over the axis %s; loop.end is for a loop without "
                                "axis" % (call_site(), self.axis.short_repr()))
        if self._rec.end_set:
            raise FrontendError("rf.Loop.end at %s: the end of the loop is already set" % call_site())
        if not isinstance(include_eos, bool):
            raise FrontendError("rf.Loop.end at %s: include_eos must be a bool, got %r" % (call_site(), include_eos))
        self._rec.set_end(source, include_eos=include_eos)
        return source

    def _check_body(self, what):
        if self._phase != "body":
            raise FrontendError("rf.Loop.%s at %s: only inside `with loop:`" % (what, call_site()))


class _LoopState:
    """``loop.state``: initial values before the loop, previous/new values inside, final values after."""

    def __init__(self, loop):
        object.__setattr__(self, "_loop", loop)
        object.__setattr__(self, "_names", [])
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_structs", {})
        object.__setattr__(self, "_new", {})

    def __setattr__(self, key, value):
        phase = self._loop._phase
        if phase == "init":
            if key not in self._names:
                self._names.append(key)
            self._values[key] = value
        elif phase == "body":
            if key not in self._names:
                raise FrontendError("rf.Loop at %s: state %r was not set before the loop" % (call_site(), key))
            self._new[key] = value
        else:
            raise FrontendError("rf.Loop at %s: the loop is done, its state is read-only" % call_site())

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        if key in self._new:
            return self._new[key]
        if key in self._values:
            return self._values[key]
        raise AttributeError("loop state has no %r" % key)

    def __getitem__(self, key):
        try:
            return self.__getattr__(key)
        except AttributeError:
            raise KeyError(key) from None

    def __setitem__(self, key, value):
        self.__setattr__(key, value)

    def keys(self):
        return list(self._names)

    def values(self):
        return [getattr(self, key) for key in self._names]

    def __len__(self):
        return len(self._names)

    def deep_tensors(self):
        """All Tensors of the current state values (see rf.State.deep_tensors)."""
        from ..frontend.nn import State

        return State.cls_deep_tensors(self.values())

    def _enter(self):
        rec = self._loop._rec
        for key in self._names:
            init = self._values[key]
            self._structs[key] = init
            self._values[key] = _pack(init, [rec.prev_state(path, t) for path, t in _named(init, key)])

    def _new_values(self):
        flat = []
        for key in self._names:
            flat.extend(_flatten(self._new.get(key, self._values[key])))
        return flat

    def _exit(self, finals, dims):
        it = iter(finals)
        for key in self._names:
            n = len(_flatten(self._structs[key]))
            self._values[key] = _pack(self._structs[key], [next(it) for _ in range(n)], dims)
        self._new.clear()
