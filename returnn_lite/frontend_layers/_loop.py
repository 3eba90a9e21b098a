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


def scan(*, spatial_dim, initial, xs, ys, body):
    outer = get_current_builder()
    site = call_site()
    xs_flat, init_flat = _flatten(xs), _flatten(initial)
    for x in xs_flat:
        if spatial_dim not in x.dims:
            raise FrontendError("rf.scan at %s: xs entry %r %s does not have the spatial_dim %s" % (
                site, x.name, dims_str(x.dims), spatial_dim.short_repr()))
    sub = NetDictBuilder(parent=outer)
    sub.scope = list(outer.scope)

    def _input(key, template):
        d = {"class": "frontend_op", "op": "loop_input", "from": [], "out": template, "opts": {"key": key}}
        layer = sub.add_layer(key, d, absolute=True)
        return Data(key, dims=list(template.dims), dtype=template.dtype, sparse_dim=template.sparse_dim,
                    placeholder=layer)

    x_frames, s_prev = [], []
    for i, x in enumerate(xs_flat):
        x_frames.append(_input("x%i" % i, Data("x%i" % i, dims=[d for d in x.dims if d != spatial_dim],
                                                dtype=x.dtype, sparse_dim=x.sparse_dim)))
    for i, s in enumerate(init_flat):
        s_prev.append(_input("prev_s%i" % i, Data("s%i" % i, dims=list(s.dims), dtype=s.dtype,
                                                  sparse_dim=s.sparse_dim)))
    with sub:
        y_t, s_new = body(_pack(xs, x_frames), _pack(initial, s_prev))
        y_flat, s_new_flat = _flatten(y_t), _flatten(s_new)
        if len(s_new_flat) != len(init_flat):
            raise FrontendError("rf.scan at %s: the body returned %i state tensors, initial has %i" % (
                site, len(s_new_flat), len(init_flat)))
        out_names = []
        for kind, tensors, templates in (("y", y_flat, _flatten(ys) or y_flat), ("s", s_new_flat, init_flat)):
            for i, (t, tpl) in enumerate(zip(tensors, templates)):
                if set(t.dims) != set(tpl.dims if kind == "s" else [d for d in tpl.dims if d != spatial_dim]):
                    raise FrontendError("rf.scan at %s: body output %s%i has dims %s, expected %s" % (
                        site, kind, i, dims_str(t.dims), dims_str(tpl.dims)))
                name = "out_%s%i" % (kind, i)
                sub.add_layer(name, {"class": "frontend_op", "op": "copy", "from": [_raw_name(t)],
                                     "out": Data(name, dims=list(t.dims), dtype=t.dtype, sparse_dim=t.sparse_dim)},
                              absolute=True)
                out_names.append((kind, name, t))
    y_specs = [(n, t) for k, n, t in out_names if k == "y"]
    s_specs = [(n, t0) for (k, n, t), t0 in zip([o for o in out_names if o[0] == "s"], init_flat)]
    if not y_specs:
        raise FrontendError("rf.scan at %s: the body returns no ys" % site)
    main_name, main_t = y_specs[0]
    opts = {"sub_net_dict": sub.net_dict, "spatial_dim": spatial_dim, "n_x": len(xs_flat),
            "outputs": [(n, list(t.dims)) for n, t in y_specs + s_specs], "n_y": len(y_specs)}
    loop = _make("loop", xs_flat + init_flat, [spatial_dim] + list(main_t.dims), main_t.dtype,
                 sparse_dim=main_t.sparse_dim, opts=opts, name="loop")
    ys_out = [loop]
    for n, t in y_specs[1:]:
        ys_out.append(_make("extra", [loop], [spatial_dim] + list(t.dims), t.dtype, sparse_dim=t.sparse_dim,
                            opts={"key": n, "dims": [spatial_dim] + list(t.dims)}, name="loop_" + n))
    s_out = [_make("extra", [loop], list(t.dims), t.dtype, sparse_dim=t.sparse_dim,
                   opts={"key": n, "dims": list(t.dims)}, name="loop_" + n) for n, t in s_specs]
    return _pack(ys if _flatten(ys) else y_t, ys_out), _pack(initial, s_out), spatial_dim


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
def _loop(layer, inputs, out, sub_net_dict, spatial_dim, n_x, outputs, n_y):
    from ..network import TFNetwork

    net = layer.network
    for ref in sorted(_base_refs(sub_net_dict)):  # outer layers (params!) are built outside the while loop
        net.get_layer(ref)
    xs, states = inputs[:n_x], inputs[n_x:]
    x_tm = [align_exact(x, [spatial_dim] + [d for d in x.dims if d != spatial_dim]) for x in xs]
    n_time = dim_value(layer, spatial_dim)
    lens = spatial_dim.complete_dyn_size() if spatial_dim.dimension is None else None
    s_init = [s.placeholder for s in states]
    y_outputs, s_outputs = outputs[:n_y], outputs[n_y:]
    tas = [tf.TensorArray(_dtype_of(sub_net_dict, name), size=n_time) for name, dims in y_outputs]

    def body(t, *args):
        s_cur, tas_cur = list(args[:len(s_init)]), list(args[len(s_init):])
        subnet = TFNetwork(parent_net=net, absolute_name_prefix=net.get_absolute_name_prefix() + layer.name + "/",
                           train_flag=net.train_flag, eval_flag=False, extern_data=net.extern_data)
        subnet._rf_loop_inputs = {"x%i" % i: x[t] for i, x in enumerate(x_tm)}
        subnet._rf_loop_inputs.update({"prev_s%i" % i: s for i, s in enumerate(s_cur)})
        subnet._net_dict = sub_net_dict
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

    res = tf.while_loop(lambda t, *_: t < n_time, body, [tf.constant(0)] + s_init + tas)
    final_s, final_tas = res[1:1 + len(s_init)], res[1 + len(s_init):]
    for (name, dims), v in zip(s_outputs, final_s):
        layer.extra[name] = v
    stacked = []
    for (name, dims), ta in zip(y_outputs, final_tas):
        stacked.append(ta.stack())
        layer.extra[name] = stacked[-1]
    return to_out(stacked[0], [spatial_dim] + list(y_outputs[0][1]), out)


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

