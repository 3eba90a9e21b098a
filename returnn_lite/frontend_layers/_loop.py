"""
``rf.scan`` on the layers backend: the body's rf code is recorded once into its own layer dict (a per-frame
subnetwork: ``loop_input`` layers for the frames of ``xs`` and the previous state, ``base:`` references to
outer layers and params); the ``loop`` op layer runs it in a ``tf.while_loop`` over ``spatial_dim`` (a child
TFNetwork built per iteration body), keeping the state of finished sequences, and stacks ``ys`` along the dim.
"""

from __future__ import annotations

import tensorflow as tf

from ..data import Data
from ..frontend._utils import FrontendError, call_site, dims_str, is_tensor
from ._emit import _make, _raw_name
from ._layer import align_exact, dim_value, op, to_out
from ._net import NetDictBuilder, get_current_builder


def _flatten(struct):
    if is_tensor(struct):
        return [struct]
    if isinstance(struct, dict):
        return [x for k in sorted(struct) for x in _flatten(struct[k])]
    if isinstance(struct, (list, tuple)):
        return [x for v in struct for x in _flatten(v)]
    if struct is None:
        return []
    raise TypeError("rf.scan: unsupported structure element %r" % (struct,))


def _pack(struct, flat):
    it = iter(flat)

    def rec(s):
        if is_tensor(s):
            return next(it)
        if isinstance(s, dict):
            out = {k: rec(s[k]) for k in sorted(s)}
            return type(s)(**out) if hasattr(type(s), "__getattr__") and type(s) is not dict else out
        if isinstance(s, (list, tuple)):
            return type(s)(rec(v) for v in s)
        return None

    return rec(struct)


class _LoopRecorder:
    """Records a loop body into its own per-frame layer dict and emits the ``loop`` layer (+ output layers)."""

    def __init__(self, spatial_dim, func):
        self.outer = get_current_builder()
        self.sub = NetDictBuilder(parent=self.outer)
        self.sub.scope = list(self.outer.scope)
        self.spatial_dim = spatial_dim
        self.func = func
        self.site = call_site()
        self.xs, self.inits = [], []

    def _input(self, key, dims, like):
        template = Data(key, dims=dims, dtype=like.dtype, sparse_dim=like.sparse_dim)
        d = {"class": "frontend_op", "op": "loop_input", "from": [], "out": template, "opts": {"key": key}}
        layer = self.sub.add_layer(key, d, absolute=True)
        return Data(key, dims=list(dims), dtype=like.dtype, sparse_dim=like.sparse_dim, placeholder=layer)

    def unstack(self, x):
        if self.spatial_dim not in x.dims:
            raise FrontendError("rf.%s at %s: %r %s does not have the loop dim %s" % (
                self.func, call_site(), x.name, dims_str(x.dims), self.spatial_dim.short_repr()))
        self.xs.append(x)
        return self._input("x%i" % (len(self.xs) - 1), [d for d in x.dims if d != self.spatial_dim], x)

    def prev_state(self, init):
        self.inits.append(init)
        return self._input("prev_s%i" % (len(self.inits) - 1), list(init.dims), init)

    def add_outputs(self, ys, new_states):
        """Inside the body (sub builder current): copy layers out_y<i>, out_s<i>."""
        if len(new_states) != len(self.inits):
            raise FrontendError("rf.%s at %s: %i new state tensors, but %i initial ones" % (
                self.func, self.site, len(new_states), len(self.inits)))
        self.y_specs, self.s_specs = [], []
        for kind, tensors, specs in (("y", ys, self.y_specs), ("s", new_states, self.s_specs)):
            for i, t in enumerate(tensors):
                if kind == "s" and set(t.dims) != set(self.inits[i].dims):
                    raise FrontendError("rf.%s at %s: new state %i has dims %s, the initial one %s" % (
                        self.func, self.site, i, dims_str(t.dims), dims_str(self.inits[i].dims)))
                name = "out_%s%i" % (kind, i)
                self.sub.add_layer(name, {"class": "frontend_op", "op": "copy", "from": [_raw_name(t)],
                                          "out": Data(name, dims=list(t.dims), dtype=t.dtype,
                                                      sparse_dim=t.sparse_dim)}, absolute=True)
                specs.append((name, t))

    def emit(self, cond=None):
        """With the outer builder current: the loop layer and one layer per stacked y / final state."""
        sd = self.spatial_dim
        outputs = [(n, list(t.dims)) for n, t in self.y_specs + self.s_specs]
        opts = {"sub_net_dict": self.sub.net_dict, "spatial_dim": sd, "n_x": len(self.xs), "outputs": outputs,
                "n_y": len(self.y_specs)}
        if cond is not None:
            opts["cond"] = cond
        loop = _make("loop", self.xs + self.inits, [], "int32", opts=opts, name="loop")
        ys = [_make("extra", [loop], [sd] + list(t.dims), t.dtype, sparse_dim=t.sparse_dim,
                    opts={"key": n, "dims": [sd] + list(t.dims)}, name="loop_" + n) for n, t in self.y_specs]
        finals = [_make("extra", [loop], list(init.dims), init.dtype, sparse_dim=init.sparse_dim,
                        opts={"key": n, "dims": list(init.dims)}, name="loop_" + n)
                  for (n, _t), init in zip(self.s_specs, self.inits)]
        return ys, finals


def scan(*, spatial_dim, initial, xs, ys, body):
    rec = _LoopRecorder(spatial_dim, "scan")
    xs_flat, init_flat = _flatten(xs), _flatten(initial)
    x_frames = [rec.unstack(x) for x in xs_flat]
    s_prev = [rec.prev_state(s) for s in init_flat]
    with rec.sub:
        y_t, s_new = body(_pack(xs, x_frames), _pack(initial, s_prev))
        y_flat = _flatten(y_t)
        for i, (t, tpl) in enumerate(zip(y_flat, _flatten(ys))):
            if set(t.dims) != set(d for d in tpl.dims if d != spatial_dim):
                raise FrontendError("rf.scan at %s: body output y%i has dims %s, expected %s" % (
                    rec.site, i, dims_str(t.dims), dims_str(tpl.dims)))
        rec.add_outputs(y_flat, _flatten(s_new))
    ys_out, s_out = rec.emit()
    return _pack(y_t, ys_out), _pack(initial, s_out), spatial_dim


def while_loop(cond, body, initial):
    """``s = initial; while cond(s): s = body(s)`` with a scalar bool Tensor cond; -> the final s."""
    rec = _LoopRecorder(None, "while_loop")
    init_flat = _flatten(initial)
    s_prev = [rec.prev_state(s) for s in init_flat]
    with rec.sub:
        s_struct = _pack(initial, s_prev)
        c = cond(s_struct)
        if not is_tensor(c) or c.dims or c.dtype != "bool":
            raise FrontendError("rf.while_loop at %s: cond must return a scalar bool Tensor, got %r" % (rec.site, c))
        s_new = body(s_struct)
        rec.add_outputs([], _flatten(s_new))
        rec.sub.add_layer("out_cond", {"class": "frontend_op", "op": "copy", "from": [_raw_name(c)],
                                       "out": Data("out_cond", dims=[], dtype="bool")}, absolute=True)
    _ys, finals = rec.emit(cond="out_cond")
    return _pack(initial, finals)


class Loop:
    """
    ``rf.Loop(axis=time_dim)``: ``loop.state.x = initial`` before, ``with loop:`` the per-frame body with
    ``loop.unstack(x)``, ``loop.state.x`` (previous / new value) and ``y = loop.stack(y_t)``; after the block the
    stacked tensors and ``loop.state.x`` (final values) are available. The loop runs over ``axis`` with its lengths.
    """

    def __init__(self, *, axis=None, max_seq_len=None):
        if axis is None or max_seq_len is not None:
            raise FrontendError("rf.Loop at %s: only loops over a given axis are supported (no max_seq_len / "
                                "loop.end)" % call_site())
        object.__setattr__(self, "_rec", _LoopRecorder(axis, "Loop"))
        object.__setattr__(self, "axis", axis)
        object.__setattr__(self, "state", _LoopState(self))
        object.__setattr__(self, "_phase", "init")
        object.__setattr__(self, "_stacked", [])

    def __enter__(self):
        if self._phase != "init":
            raise FrontendError("rf.Loop at %s: a loop can be entered once" % call_site())
        self.state._enter()
        object.__setattr__(self, "_phase", "body")
        self._rec.sub.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        rec = self._rec
        try:
            if exc_type is None:
                rec.add_outputs([t for t, _ in self._stacked], self.state._new_values())
        finally:
            rec.sub.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return False
        ys, finals = rec.emit()
        for (_t, result), y in zip(self._stacked, ys):
            result.placeholder = y.placeholder
            result.name = y.name
        self.state._exit(finals)
        object.__setattr__(self, "_phase", "done")
        return False

    def unstack(self, source, **_kwargs):
        self._check_body("unstack")
        return self._rec.unstack(source)

    def stack(self, source):
        """The frames of source, stacked along the loop axis (valid after the with block)."""
        self._check_body("stack")
        result = Data("loop_stack", dims=[self.axis] + list(source.dims), dtype=source.dtype,
                      sparse_dim=source.sparse_dim)
        self._stacked.append((source, result))
        return result

    def end(self, *_args, **_kwargs):
        raise FrontendError("rf.Loop.end at %s: loops with a dynamic end are not supported" % call_site())

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

    def _enter(self):
        rec = self._loop._rec
        for key in self._names:
            init = self._values[key]
            self._structs[key] = init
            self._values[key] = _pack(init, [rec.prev_state(t) for t in _flatten(init)])

    def _new_values(self):
        flat = []
        for key in self._names:
            flat.extend(_flatten(self._new.get(key, self._values[key])))
        return flat

    def _exit(self, finals):
        it = iter(finals)
        for key in self._names:
            n = len(_flatten(self._structs[key]))
            self._values[key] = _pack(self._structs[key], [next(it) for _ in range(n)])
        self._new.clear()


@op("loop_input")
def _loop_input(layer, inputs, out, key):
    return layer.network._rf_loop_inputs[key]


def _base_refs(net_dict):
    refs = set()
    for d in net_dict.values():
        for src in d.get("from", []):
            if src.startswith("base:"):
                refs.add(src[len("base:"):])
        f = (d.get("loss_opts") or {}).get("custom_inv_norm_factor")
        if isinstance(f, str) and f.startswith("base:"):
            refs.add(f[len("base:"):])
    return refs


@op("loop")
def _loop(layer, inputs, out, sub_net_dict, spatial_dim, n_x, outputs, n_y, cond=None):
    from ..network import TFNetwork

    net = layer.network
    for ref in sorted(_base_refs(sub_net_dict)):  # outer layers (params!) are built outside the while loop
        net.get_layer(ref)
    xs, states = inputs[:n_x], inputs[n_x:]
    x_tm = [align_exact(x, [spatial_dim] + [d for d in x.dims if d != spatial_dim]) for x in xs]
    n_time = dim_value(layer, spatial_dim) if spatial_dim is not None else None
    lens = spatial_dim.complete_dyn_size() if spatial_dim is not None and spatial_dim.dimension is None else None
    s_init = [s.placeholder for s in states]
    y_outputs, s_outputs = outputs[:n_y], outputs[n_y:]
    tas = [tf.TensorArray(_dtype_of(sub_net_dict, name), size=n_time) for name, dims in y_outputs]

    def subnet_for(t, s_cur):
        subnet = TFNetwork(parent_net=net, absolute_name_prefix=net.get_absolute_name_prefix() + layer.name + "/",
                           train_flag=net.train_flag, eval_flag=False, extern_data=net.extern_data)
        subnet._rf_loop_inputs = {"x%i" % i: x[t] for i, x in enumerate(x_tm)}
        subnet._rf_loop_inputs.update({"prev_s%i" % i: s for i, s in enumerate(s_cur)})
        subnet._net_dict = sub_net_dict
        return subnet

    def loop_cond(t, *args):
        if cond is None:
            return t < n_time
        subnet = subnet_for(t, list(args[:len(s_init)]))
        return tf.reshape(subnet.construct_layer(sub_net_dict, cond).output.placeholder, [])

    def body(t, *args):
        s_cur, tas_cur = list(args[:len(s_init)]), list(args[len(s_init):])
        subnet = subnet_for(t, s_cur)
        new_s = []
        for (name, dims), s_old, s_data in zip(s_outputs, s_cur, states):
            v = to_out(subnet.construct_layer(sub_net_dict, name).output.placeholder, dims, s_data)
            if lens is not None:
                mask = tf.less(t, lens)  # [B]: keep the state of finished sequences
                mask = _bcast_mask(mask, s_data)
                v = tf.where(mask, v, s_old)
            new_s.append(v)
        new_tas = []
        for (name, dims), ta in zip(y_outputs, tas_cur):
            new_tas.append(ta.write(t, subnet.construct_layer(sub_net_dict, name).output.placeholder))
        return [t + 1] + new_s + new_tas

    res = tf.while_loop(loop_cond, body, [tf.constant(0)] + s_init + tas)
    final_s, final_tas = res[1:1 + len(s_init)], res[1 + len(s_init):]
    for (name, dims), v in zip(s_outputs, final_s):
        layer.extra[name] = v
    for (name, dims), ta in zip(y_outputs, final_tas):
        layer.extra[name] = ta.stack()
    return tf.cast(res[0], tf.int32)


def _dtype_of(sub_net_dict, name):
    return sub_net_dict[name]["out"].dtype


def _bcast_mask(mask, data):
    """[B] mask -> broadcastable against data (which must have the batch dim)."""
    axis = data.batch_dim_axis
    if axis is None:
        raise ValueError("rf.scan: a loop state without batch dim cannot be masked per sequence")
    shape = [1] * data.batch_ndim
    shape[axis] = -1
    return tf.reshape(mask, shape)

