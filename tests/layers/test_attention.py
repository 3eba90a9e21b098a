"""
Attention family (returnn_lite/layers/attention.py): templates and dim tags, values against numpy, and the
in-loop code paths (driven here by hand through the rec hook interface, step by step) against the
whole-sequence code paths.
"""

import types

import numpy as np
import tensorflow as tf

from returnn_lite.data import Data, Dim, batch_dim
from returnn_lite.extern_data import ExternData
from returnn_lite.layers.base import InternalLayer, get_layer_class
from returnn_lite.network import TFNetwork
from returnn_lite.testing import build_network

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")
RNG = np.random.RandomState(1)


def _net(extern, net_dict, train_flag=False):
    return build_network(net_dict, extern, train_flag)


def _feed(net, **arrays):
    feed = {}
    for key, value in arrays.items():
        data = net.extern_data.get_data(key)
        feed[data.placeholder] = value
        for axis, size in data.size_placeholder.items():
            feed[size] = LENS
    return feed


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_self_att(x, w, heads, key_total, lens=None, left_only=False, key_shift=None):
    b, t, _ = x.shape
    kd = key_total // heads
    qkv = (x @ w).reshape(b, t, heads, -1).transpose(0, 2, 1, 3)
    q, k, v = qkv[..., :kd] * kd ** -0.5, qkv[..., kd:2 * kd], qkv[..., 2 * kd:]
    e = q @ k.transpose(0, 1, 3, 2)
    if key_shift is not None:
        e = e + np.einsum("bhqd,qkd->bhqk", q, key_shift)
    if left_only:
        e = np.where(np.tril(np.ones((t, t), bool)), e, -np.inf)
    elif lens is not None:
        e = np.where((np.arange(t)[None, :] < lens[:, None])[:, None, None, :], e, -np.inf)
    return (_softmax(e) @ v).transpose(0, 2, 1, 3).reshape(b, t, -1)


def _pe(n, pos):
    nt = n // 2
    inv = np.exp(np.arange(nt) * -(np.log(1e4) / (nt - 1)))
    st = np.asarray(pos, "float32")[..., None] * inv
    s = np.concatenate([np.sin(st), np.cos(st)], -1)
    return np.pad(s, [(0, 0)] * (s.ndim - 1) + [(0, n % 2)])


def _valid(a, b, lens=LENS):
    for i, n in enumerate(lens):
        np.testing.assert_allclose(a[i, :n], b[i, :n], rtol=1e-5, atol=1e-5)


def test_self_attention_template_and_values_time_major():
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net({"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}},
                   {"output": {"class": "self_attention", "from": "data", "n_out": 6, "num_heads": 2,
                               "total_key_dim": 4}})
        layer = net.get_layer("output")
        inp = net.extern_data.get_data("data")
        out = layer.output
        assert out.batch_dim_axis == 0 and out.time_dim_axis == 1 and out.dim == 6
        assert out.dims[1] is inp.dims[0]  # same time tag
        assert layer.params["QKV"].shape.as_list() == [5, 2 * 4 + 6]
        session.run(tf1.global_variables_initializer())
        x = RNG.randn(7, 3, 5).astype("float32")
        y, w = session.run([out.placeholder, layer.params["QKV"]], feed_dict=_feed(net, data=x))
        _valid(y, _np_self_att(x.transpose(1, 0, 2), w, 2, 4, lens=LENS))


def test_self_attention_left_only_and_key_shift():
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net({"data": {"dim": 5}},
                   {"rel": {"class": "relative_positional_encoding", "from": "data", "n_out": 2, "clipping": 2},
                    "output": {"class": "self_attention", "from": "data", "n_out": 4, "num_heads": 2,
                               "total_key_dim": 4, "attention_left_only": True, "key_shift": "rel"}})
        rel = net.get_layer("rel")
        tag = net.extern_data.get_data("data").dims[1]
        assert rel.output.dims[0] is tag and rel.output.dims[1] is tag and not rel.output.have_batch_axis()
        assert rel.output.feature_dim_axis == 2 and rel.output.dim == 2
        session.run(tf1.global_variables_initializer())
        x = RNG.randn(3, 7, 5).astype("float32")
        y, ks, w, e = session.run([net.get_layer("output").output.placeholder, rel.output.placeholder,
                                   net.get_layer("output").params["QKV"], rel.params["encoding_matrix"]],
                                  feed_dict=_feed(net, data=x))
        r = np.arange(7)
        np.testing.assert_allclose(ks, e[np.clip(r[None, :] - r[:, None], -2, 2) + 2])
        _valid(y, _np_self_att(x, w, 2, 4, left_only=True, key_shift=ks))


def test_positional_encoding_values_and_n_out():
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net({"data": {"dim": 5}},
                   {"add": {"class": "positional_encoding", "from": "data", "add_to_input": True},
                    "pe": {"class": "positional_encoding", "from": "data", "n_out": 6, "is_output_layer": True},
                    "output": {"class": "copy", "from": "add"}})
        x = RNG.randn(3, 7, 5).astype("float32")
        a, p = session.run([net.get_layer("add").output.placeholder, net.get_layer("pe").output.placeholder],
                           feed_dict=_feed(net, data=x))
        assert net.get_layer("pe").output.dims[1] is net.extern_data.get_data("data").dims[1]
        np.testing.assert_allclose(a, x + _pe(5, np.arange(7))[None], rtol=1e-5, atol=1e-5)
        assert p.shape == (3, 7, 6)
        np.testing.assert_allclose(p, np.broadcast_to(_pe(6, np.arange(7))[None], (3, 7, 6)), rtol=1e-5, atol=1e-5)


def test_generic_attention():
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net({"data": {"dim": 5}},
                   {"energy": {"class": "linear", "activation": "exp", "n_out": 1, "from": "data"},
                    "output": {"class": "generic_attention", "weights": "energy", "base": "data"}})
        out = net.get_layer("output").output
        assert out.batch_shape == (None, 5) and out.feature_dim_axis == 1 and out.time_dim_axis is None
        session.run(tf1.global_variables_initializer())
        x = RNG.randn(3, 7, 5).astype("float32")
        y, w = session.run([out.placeholder, net.get_layer("energy").output.placeholder], feed_dict=_feed(net, data=x))
        np.testing.assert_allclose(y, np.einsum("bt,btf->bf", w[..., 0], x), rtol=1e-5, atol=1e-5)


def test_dot_and_concat_attention():
    extern = {"data": {"dim": 5}, "s": {"shape": (4,), "time_dim_axis": None}}
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net(extern, {"ctx": {"class": "linear", "n_out": 4, "from": "data"},
                            "dot": {"class": "dot_attention", "from": "data:s", "base": "data", "base_ctx": "ctx",
                                    "is_output_layer": True},
                            "output": {"class": "concat_attention", "from": "data:s", "base": "data",
                                       "base_ctx": "ctx"}})
        for name in ("dot", "output"):
            out = net.get_layer(name).output
            assert out.batch_shape == (None, 5) and out.feature_dim_axis == 1
        assert net.get_layer("output").params["v"].shape.as_list() == [4]
        session.run(tf1.global_variables_initializer())
        x = RNG.randn(3, 7, 5).astype("float32")
        s = RNG.randn(3, 4).astype("float32")
        feed = _feed(net, data=x)
        feed[net.extern_data.get_data("s").placeholder] = s
        d, c, ctx, v = session.run([net.get_layer("dot").output.placeholder, net.get_layer("output").output.placeholder,
                                    net.get_layer("ctx").output.placeholder, net.get_layer("output").params["v"]], feed)
        mask = np.arange(7)[None, :] < LENS[:, None]
        for energy, y in ((np.einsum("btf,bf->bt", ctx, s), d), ((np.tanh(ctx + s[:, None]) * v).sum(-1), c)):
            w = _softmax(np.where(mask, energy, -np.inf))
            np.testing.assert_allclose(y, np.einsum("bt,btf->bf", w, x), rtol=1e-5, atol=1e-5)


def _run_steps(layer_dict, n_steps, n_in, session_inputs):
    """
    Drives one layer through the rec hook interface, as the rec layer does: per step a network inside the
    loop with rec_step_info.step, rec_previous_layer carrying rec_vars_outputs.
    :return: list of per-step output tensors, the feed placeholder [T,B,F], the layer of the last step
    """
    root = TFNetwork(extern_data=ExternData({"data": {"dim": n_in}}), train_flag=False)
    rec_time = Dim(None, kind=Dim.Types.Spatial, description="rec-time")
    x_tbf = tf1.placeholder(tf.float32, (n_steps, None, n_in))
    outs, state, layer = [], None, None
    for t in range(n_steps):
        net = TFNetwork(extern_data=root.extern_data, parent_net=root, inside_rec_time_dim=rec_time, name="rec",
                        absolute_name_prefix="")
        net.rec_step_info = types.SimpleNamespace(step=tf.constant(t, tf.int32))
        src = Data(name="src", dims=(batch_dim, Dim(n_in, kind=Dim.Types.Feature, description="f")),
                   placeholder=x_tbf[t])
        net.layers["src"] = InternalLayer(name="src", network=net, output=src)
        desc = dict(layer_dict, **{"from": "src"})
        cls = get_layer_class(desc["class"])
        if state is None:
            opts = dict(desc)
            opts.pop("class")
            opts["_name"], opts["_network"] = "att", net
            cls.transform_config_dict(opts, network=net, get_layer=net.get_layer)
            opts.pop("_name"), opts.pop("_network")
            state = cls.get_rec_initial_extra_outputs(batch_dim=tf.shape(x_tbf)[1], rec_layer=None, name="att",
                                                      network=net, **opts)
        desc["rec_previous_layer"] = types.SimpleNamespace(rec_vars_outputs=state)
        layer = net.construct_layer({"att": desc}, "att")
        state = getattr(layer, "rec_vars_outputs", {}) or state
        outs.append(layer.output.placeholder)
    return outs, x_tbf, layer


def test_self_attention_in_loop_matches_whole_sequence():
    n_steps = 5
    with tf.Graph().as_default(), tf1.Session() as session:
        opts = {"class": "self_attention", "attention_left_only": True, "num_heads": 2, "total_key_dim": 4,
                "n_out": 6}
        outs, x_ph, layer = _run_steps(opts, n_steps, 3, {})
        assert layer.output.batch_shape == (None, 6)
        assert set(layer.rec_vars_outputs) == {"k_left", "v_left"}
        session.run(tf1.global_variables_initializer())
        x = RNG.randn(n_steps, 2, 3).astype("float32")
        ys, w = session.run([tf.stack(outs, axis=1), layer.params["QKV"]], {x_ph: x})
        np.testing.assert_allclose(ys, _np_self_att(x.transpose(1, 0, 2), w, 2, 4, left_only=True),
                                   rtol=1e-5, atol=1e-5)


def test_positional_encoding_in_loop():
    with tf.Graph().as_default(), tf1.Session() as session:
        outs, x_ph, layer = _run_steps({"class": "positional_encoding", "add_to_input": True}, 4, 6, {})
        x = RNG.randn(4, 2, 6).astype("float32")
        ys = session.run(tf.stack(outs, axis=0), {x_ph: x})
        np.testing.assert_allclose(ys, x + _pe(6, np.arange(4))[:, None], rtol=1e-5, atol=1e-5)


def test_cum_concat_in_loop():
    with tf.Graph().as_default(), tf1.Session() as session:
        outs, x_ph, layer = _run_steps({"class": "cum_concat"}, 3, 2, {})
        assert layer.output.batch_ndim == 3 and layer.output.dims[1].is_dynamic()
        x = RNG.randn(3, 2, 2).astype("float32")
        y_last = session.run(outs[-1], {x_ph: x})
        np.testing.assert_allclose(y_last, x.transpose(1, 0, 2))


def test_generic_attention_multi_head_time_major_base():
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net({"data": {"dim": 6, "time_dim_axis": 0, "batch_dim_axis": 1}},
                   {"energy": {"class": "linear", "activation": "exp", "n_out": 2, "from": "data"},
                    "base": {"class": "split_dims", "axis": "F", "dims": (2, 3), "from": "data"},
                    "output": {"class": "generic_attention", "weights": "energy", "base": "base"}})
        out = net.get_layer("output").output
        assert out.batch_shape == (None, 2, 3) and out.feature_dim_axis == 2 and out.batch_dim_axis == 0
        session.run(tf1.global_variables_initializer())
        x = RNG.randn(7, 3, 6).astype("float32")
        y, w = session.run([out.placeholder, net.get_layer("energy").output.placeholder], feed_dict=_feed(net, data=x))
        np.testing.assert_allclose(y, np.einsum("tbh,tbhd->bhd", w, x.reshape(7, 3, 2, 3)), rtol=1e-5, atol=1e-5)


def test_self_attention_key_shift_in_rec_loop():
    """relative_positional_encoding + self_attention(key_shift) per step in a rec loop == whole-sequence numpy."""
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net({"data": {"dim": 5}}, {"output": {"class": "rec", "from": "data", "unit": {
            "rel": {"class": "relative_positional_encoding", "from": "data:source", "n_out": 2, "clipping": 2},
            "output": {"class": "self_attention", "from": "data:source", "attention_left_only": True, "num_heads": 2,
                       "total_key_dim": 4, "n_out": 4, "key_shift": "rel"}}}})
        session.run(tf1.global_variables_initializer())
        params = {p.op.name: p for p in net.get_params_list()}
        assert sorted(params) == ["output/rec/output/QKV", "output/rec/rel/encoding_matrix"]
        x = RNG.randn(3, 7, 5).astype("float32")
        out = net.get_layer("output").output.copy_as_batch_major()
        y, w, e = session.run([out.placeholder, params["output/rec/output/QKV"],
                               params["output/rec/rel/encoding_matrix"]], feed_dict=_feed(net, data=x))
        r = np.arange(7)
        ks = e[np.clip(r[None, :] - r[:, None], -2, 2) + 2]
        _valid(y, _np_self_att(x, w, 2, 4, left_only=True, key_shift=ks))


def test_positional_encoding_constant_offset_time_major():
    with tf.Graph().as_default(), tf1.Session() as session:
        extern = {"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}, "off": {"shape": (), "dtype": "int32"}}
        net = _net(extern,
                   {"const": {"class": "positional_encoding", "from": "data", "constant": 3, "n_out": 4,
                              "is_output_layer": True},
                    "output": {"class": "positional_encoding", "from": "data", "offset": "data:off",
                               "add_to_input": True}})
        const, out = net.get_layer("const").output, net.get_layer("output").output
        assert const.batch_shape == (None, None, 4) and const.time_dim_axis == 0
        x = RNG.randn(7, 3, 5).astype("float32")
        off = np.array([0, 2, 5], "int32")
        feed = _feed(net, data=x)
        feed[net.extern_data.get_data("off").placeholder] = off
        c, y = session.run([const.placeholder, out.placeholder], feed)
        np.testing.assert_allclose(c, np.broadcast_to(_pe(4, np.array([3.0])), (7, 3, 4)), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(y, x + _pe(5, np.arange(7)[:, None] + off[None, :]), rtol=1e-5, atol=1e-5)


def test_gauss_window_attention():
    extern = {"data": {"dim": 4}, "loc": {"shape": (), "dtype": "float32"}}
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net(extern, {"inner": {"class": "gauss_window_attention", "from": "data:loc", "base": "data",
                                      "window_size": 3, "inner_size": 2, "is_output_layer": True},
                            "output": {"class": "gauss_window_attention", "from": "data:loc", "base": "data",
                                       "window_size": 3, "std": 2.0}})
        out, inner = net.get_layer("output").output, net.get_layer("inner").output
        assert out.batch_shape == (None, 4) and inner.batch_shape == (None, 2, 4) and inner.feature_dim_axis == 2
        x = RNG.randn(3, 7, 4).astype("float32")
        loc = np.array([0.2, 4.6, 3.0], "float32")
        feed = _feed(net, data=x)
        feed[net.extern_data.get_data("loc").placeholder] = loc
        y, yi = session.run([out.placeholder, inner.placeholder], feed)

        def ref(std, offs):
            res = np.zeros((3, len(offs), 4))
            for b in range(3):
                start = int(np.round(loc[b])) - 1
                for k in range(3):
                    idx = start + k
                    cidx = min(max(idx, 0), 6)
                    cidx = cidx if cidx < LENS[b] else LENS[b] - 1
                    for i, o in enumerate(offs):
                        g = np.exp(-((loc[b] + o - idx) ** 2) / (2 * std ** 2)) / (std * np.sqrt(2 * np.pi))
                        res[b, i] += g * x[b, cidx]
            return res

        np.testing.assert_allclose(y, ref(2.0, [0.0])[:, 0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(yi, ref(1.0, [-1.0, -0.5]), rtol=1e-5, atol=1e-5)


def test_cum_concat_in_rec_layer():
    """cum_concat per step in a real rec loop, reduced over the accumulated axis == cumsum over time."""
    with tf.Graph().as_default(), tf1.Session() as session:
        net = _net({"data": {"dim": 3}}, {"output": {"class": "rec", "from": "data", "unit": {
            "cc": {"class": "cum_concat", "from": "data:source"},
            "output": {"class": "reduce", "mode": "sum", "axis": "T", "from": "cc"}}}})
        x = RNG.randn(3, 7, 3).astype("float32")
        out = net.get_layer("output").output.copy_as_batch_major()
        y = session.run(out.placeholder, feed_dict=_feed(net, data=x))
        _valid(y, np.cumsum(x, axis=1))
