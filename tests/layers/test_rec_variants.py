"""rec family variants: gradients after a run, num_proj, base:X as a whole, split sub-layers in a unit,
initial_output variants, rec_unstack, clear errors for unsupported options."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork
from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1
LENS = np.array([7, 5, 4], "int32")
MASK = (np.arange(7)[None] < LENS[:, None])[..., None]
EXTERN = {"data": {"dim": 5}, "classes": {"dim": 3, "sparse": True}}


def _build(net_dict, train_flag=False):
    return build_network(net_dict, EXTERN, train_flag)


def _feed(net, seed=0):
    return random_feed(net, LENS, seed)


def _run(net, fetches):
    with tf1.Session() as session:
        net.initialize_params(session)
        return session.run(fetches, _feed(net))


def _params(net):
    return sorted((p.op.name, tuple(p.shape.as_list())) for p in net.get_params_list())


@pytest.mark.parametrize("unit", ["lstm", "standardlstm", "gru"])
def test_cell_gradients_built_after_run(unit):
    with tf.Graph().as_default():
        net = _build({"l": {"class": "rec", "unit": unit, "n_out": 4, "from": "data", "direction": -1},
                      "output": {"class": "softmax", "from": "l", "loss": "ce", "target": "classes"}},
                     train_flag=True)
        with tf1.Session() as session:
            net.initialize_params(session)
            session.run(net.get_layer("output").output.placeholder, _feed(net))
            grads = tf.gradients(net.get_objective(), net.get_params_list())
            assert all(g is not None for g in grads)
            values = session.run(grads, _feed(net))
            assert all(np.isfinite(v).all() and np.abs(v).sum() > 0 for v in values)


def test_standardlstm_num_proj_output_dim():
    with tf.Graph().as_default():
        net = _build({"l": {"class": "rec", "unit": "standardlstm", "n_out": 6, "unit_opts": {"num_proj": 3},
                            "from": "data"},
                      "h": {"class": "get_last_hidden_state", "from": "l", "n_out": 9},
                      "output": {"class": "rec", "from": "data", "unit": {
                          "c": {"class": "rnn_cell", "unit": "standardlstm", "unit_opts": {"num_proj": 2}, "n_out": 5,
                                "from": ["data:source", "prev:c"]},
                          "output": {"class": "copy", "from": "c"}}}})
        assert net.get_layer("l").output.batch_shape == (None, None, 3)
        assert net.get_layer("output").output.batch_shape == (None, None, 2)
        assert ("l/rec/lstm_cell/projection/kernel", (6, 3)) in _params(net)
        y, h, z = _run(net, [net.get_layer(n).output.placeholder for n in ("l", "h", "output")])
        assert y.shape == (7, 3, 3) and h.shape == (3, 9) and z.shape == (7, 3, 2)


@pytest.mark.parametrize("move_out", [True, False])
def test_base_layer_is_whole_in_unit(move_out):
    with tf.Graph().as_default():
        net = _build({"enc": {"class": "copy", "from": "data"},
                      "output": {"class": "rec", "from": "data", "optimize_move_layers_out": move_out, "unit": {
                          "s": {"class": "reduce", "mode": "sum", "axis": "T", "from": "base:enc"},
                          "output": {"class": "combine", "kind": "add", "from": ["data", "s"]}}}})
        y, x = _run(net, [net.get_layer("output").output.placeholder, net.extern_data.get_data("data").placeholder])
        exp = (x + (x * MASK).sum(1, keepdims=True)) * MASK
        np.testing.assert_allclose(y.transpose(1, 0, 2) * MASK, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("move_out", [True, False])
def test_rec_unstack_of_base_layer(move_out):
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "from": "data", "optimize_move_layers_out": move_out, "unit": {
            "x": {"class": "rec_unstack", "from": "base:data"},
            "output": {"class": "combine", "kind": "add", "from": ["prev:output", "x"]}}}})
        out = net.get_layer("output").output
        assert out.batch_shape == (None, None, 5) and out.time_dim_axis == 0
        y, x = _run(net, [out.placeholder, net.extern_data.get_data("data").placeholder])
        np.testing.assert_allclose(y.transpose(1, 0, 2) * MASK, np.cumsum(x * MASK, 1) * MASK, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("move_out", [True, False])
def test_split_sub_layer_in_unit(move_out):
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "from": "data", "optimize_move_layers_out": move_out, "unit": {
            "sp": {"class": "split", "from": "data:source", "size_splits": [2, 3]},
            "a": {"class": "combine", "kind": "add", "from": ["sp/0", "prev:a"]},
            "output": {"class": "copy", "from": ["a", "sp/1"]}}}})
        assert net.get_layer("output").output.batch_shape == (None, None, 5)
        y, x = _run(net, [net.get_layer("output").output.placeholder, net.extern_data.get_data("data").placeholder])
        exp = np.concatenate([np.cumsum(x[..., :2] * MASK, 1), x[..., 2:]], -1) * MASK
        np.testing.assert_allclose(y.transpose(1, 0, 2) * MASK, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("init,value", [("var", 0.), (2.5, 2.5), ("ones", 1.), ("zeros", 0.), ("base:x0", 1.5)])
def test_initial_output_variants(init, value):
    with tf.Graph().as_default():
        net = _build({"x0": {"class": "constant", "value": 1.5, "shape": (5,), "with_batch_dim": True},
                      "output": {"class": "rec", "from": "data", "unit": {
                          "output": {"class": "combine", "kind": "add", "from": ["prev:output", "data:source"],
                                     "initial_output": init}}}})
        assert _params(net) == ([("output/init_output", (5,))] if init == "var" else [])
        y, x = _run(net, [net.get_layer("output").output.placeholder, net.extern_data.get_data("data").placeholder])
        np.testing.assert_allclose(y.transpose(1, 0, 2) * MASK, (value + np.cumsum(x * MASK, 1)) * MASK,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts,word", [
    ({"unit": {"output": {"class": "copy", "from": "data:source"}}, "direction": -1}, "direction"),
    ({"unit": "lstm", "n_out": 3, "input_projection": False}, "input_projection"),
    ({"unit": {"output": {"class": "copy", "from": "data:source", "initial_output": "apply(0)"},
               "x": {"class": "copy", "from": "prev:output"}}}, "initial_output"),
])
def test_unsupported_options_raise(opts, word):
    with tf.Graph().as_default():
        with pytest.raises(Exception, match=word):
            _build({"output": dict({"class": "rec", "from": "data"}, **opts),
                    **({"y": {"class": "copy", "from": "output/x"}} if "x" in opts.get("unit", {}) else {})})


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _np_lstm(x, W, Wr, b, lens, rev=False):
    B, T, _ = x.shape
    n = Wr.shape[0]
    out, c, h = np.zeros((B, T, n)), np.zeros((B, n)), np.zeros((B, n))
    for bi in range(B):
        cc, hh = np.zeros(n), np.zeros(n)
        for t in (reversed(range(lens[bi])) if rev else range(lens[bi])):
            j, i, f, o = np.split(x[bi, t] @ W + b + hh @ Wr, 4)
            cc = _sig(f) * cc + _sig(i) * np.tanh(j)
            hh = _sig(o) * np.tanh(cc)
            out[bi, t] = hh
        c[bi], h[bi] = cc, hh
    return out, c, h


@pytest.mark.parametrize("variant", ["time_major", "sparse", "two_sources", "backward"])
def test_lstm_input_variants_and_hidden_state_keys(variant):
    with tf.Graph().as_default():
        ext = dict(EXTERN)
        if variant == "time_major":
            ext["data"] = {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}
        src = {"sparse": "data:classes", "two_sources": ["data", "data"]}.get(variant, "data")
        net = TFNetwork(extern_data=ExternData(ext), train_flag=False)
        net.construct_from_dict({
            "output": {"class": "rec", "unit": "nativelstm2", "n_out": 4, "from": src, "dropout": 0.5,
                       "direction": -1 if variant == "backward" else 1},
            "h": {"class": "get_last_hidden_state", "from": "output", "n_out": 4, "key": "h"},
            "c": {"class": "get_last_hidden_state", "from": "output", "n_out": 4, "key": "c"},
            "all": {"class": "get_last_hidden_state", "from": "output", "n_out": 8}})
        out = net.get_layer("output").output
        assert (out.time_dim_axis, out.batch_dim_axis, out.batch_shape) == (0, 1, (None, None, 4))
        rng = np.random.RandomState(0)
        x, cl = rng.randn(3, 7, 5).astype("float32"), rng.randint(0, 3, (3, 7)).astype("int32")
        d, c_ = net.extern_data.get_data("data"), net.extern_data.get_data("classes")
        feed = {d.placeholder: x.transpose(1, 0, 2) if variant == "time_major" else x, d.size_placeholder[0]: LENS,
                c_.placeholder: cl, c_.size_placeholder[0]: LENS}
        with tf1.Session() as session:
            net.initialize_params(session)
            pv = {p.op.name: session.run(p) for p in net.get_params_list()}
            y, h, c, a = session.run([net.get_layer(n).output.placeholder for n in ["output", "h", "c", "all"]], feed)
        xin = {"sparse": np.eye(3)[cl], "two_sources": np.concatenate([x, x], -1)}.get(variant, x)
        ry, rc, rh = _np_lstm(xin, pv["output/rec/W"], pv["output/rec/W_re"], pv["output/rec/b"], LENS,
                              rev=variant == "backward")
        np.testing.assert_allclose(y.transpose(1, 0, 2), ry, atol=1e-5)
        np.testing.assert_allclose(h, rh, atol=1e-5)
        np.testing.assert_allclose(c, rc, atol=1e-5)
        np.testing.assert_allclose(a, np.concatenate([rc, rh], -1), atol=1e-5)


def test_basicrnn_activation_unit_opt():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "unit": "basicrnn", "n_out": 4, "from": "data",
                                 "unit_opts": {"activation": "relu"}}})
        with tf1.Session() as session:
            net.initialize_params(session)
            pv = {p.op.name: session.run(p) for p in net.get_params_list()}
            feed = _feed(net)
            y = session.run(net.get_layer("output").output.placeholder, feed)
        x = feed[net.extern_data.get_data("data").placeholder]
        K, b = pv["output/rec/basic_rnn_cell/kernel"], pv["output/rec/basic_rnn_cell/bias"]
        h, ref = np.zeros((3, 4)), np.zeros((7, 3, 4))
        for t in range(7):
            hn = np.maximum(np.concatenate([x[:, t], h], -1) @ K + b, 0)
            m = (t < LENS)[:, None]
            h, ref[t] = np.where(m, hn, h), np.where(m, hn, 0)
        np.testing.assert_allclose(y, ref, atol=1e-5)


def _subnet_loss_and_grads(move_out):
    unit = {"emb": {"class": "linear", "from": "data:source", "n_out": 4, "activation": None},
            "lin": {"class": "linear", "from": ["emb", "prev:output"], "n_out": 4, "activation": "tanh"},
            "lstm": {"class": "rnn_cell", "unit": "LSTMBlock", "from": "lin", "n_out": 4},
            "output": {"class": "softmax", "from": ["lstm", "emb"], "n_out": 3, "loss": "ce", "target": "classes"}}
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "unit": unit, "from": "data", "target": "classes",
                                 "optimize_move_layers_out": move_out}}, train_flag=True)
        with tf1.Session() as session:
            net.initialize_params(session)
            params = sorted(net.get_params_list(), key=lambda p: p.op.name)
            for p in params:
                p.load(np.random.RandomState(len(p.op.name)).randn(*p.shape.as_list()).astype("float32") * .3,
                       session)
            session.run(net.get_layer("output").output.placeholder, _feed(net))  # run first, then gradients
            obj = net.get_objective()
            grads = [tf.convert_to_tensor(g) for g in tf.gradients(obj, params)]
            return session.run([obj] + grads, _feed(net))


def test_subnet_gradients_after_run_and_move_out_equality():
    a, b = _subnet_loss_and_grads(True), _subnet_loss_and_grads(False)
    assert len(a) == len(b) == 9
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_cell_back_prop_false_stops_gradient():
    with tf.Graph().as_default():
        net = _build({"l": {"class": "rec", "unit": "lstm", "n_out": 4, "from": "data", "back_prop": False},
                      "output": {"class": "softmax", "from": "l", "loss": "ce", "target": "classes"}},
                     train_flag=True)
        params = {p.op.name: p for p in net.get_params_list()}
        grads = tf.gradients(net.get_objective(), [params["l/rec/W"], params["output/W"]])
        assert grads[0] is None and grads[1] is not None


@pytest.mark.parametrize("move_out", [True, False])
def test_extern_data_per_frame_in_unit(move_out):
    """data:classes (another time tag than the loop over data) is seen per frame inside the unit."""
    unit = {"e": {"class": "linear", "from": "data:classes", "n_out": 2, "activation": None, "with_bias": False},
            "output": {"class": "combine", "kind": "add", "from": ["prev:output", "e"]}}
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "unit": unit, "from": "data", "optimize_move_layers_out": move_out}})
        assert net.get_layer("output").output.batch_shape == (None, None, 2)
        with tf1.Session() as session:
            net.initialize_params(session)
            W = session.run(net.get_params_list()[0])
            feed = _feed(net)
            y = session.run(net.get_layer("output").output.placeholder, feed)
        cl = feed[net.extern_data.get_data("classes").placeholder]
        np.testing.assert_allclose(y.transpose(1, 0, 2) * MASK, np.cumsum(W[cl] * MASK, 1) * MASK, atol=1e-5)


@pytest.mark.parametrize("unit_opts,norm_params", [
    ({}, ["beta_input_below", "beta_new_c", "gamma_input_below", "gamma_new_c", "gamma_state_below"]),
    ({"global_norm_joined": True}, ["beta_lstm_in", "beta_new_c", "gamma_lstm_in", "gamma_new_c"]),
    ({"with_concat": True}, ["beta_lstm_in", "beta_new_c", "gamma_lstm_in", "gamma_new_c"]),
])
def test_layernormvariantslstm_norm_param_names(unit_opts, norm_params):
    # one norm of the summed projections (joined, or with_concat) is the original's "lstm_in"
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "unit": "layernormvariantslstm", "unit_opts": unit_opts,
                                 "n_out": 4, "from": "data"}})
        names = [n.split("/")[-1] for n, _ in _params(net)]
        assert sorted(n for n in names if n.startswith(("gamma_", "beta_"))) == norm_params
        y = _run(net, net.get_layer("output").output.placeholder)
        assert np.isfinite(y).all()


def test_reduce_over_time_of_prev_attention_weights_in_unit():
    # the first template guess of prev:att_weights has no encoder time axis: the reduce over "t" gets a stand-in
    # template in that pass, and the real one once the attention weights' template is known
    unit = {
        "max_att": {"class": "reduce", "mode": "max", "axes": "t", "from": "prev:att_weights",
                    "is_output_layer": True},
        "s": {"class": "rnn_cell", "unit": "LSTMBlock", "from": ["prev:output", "max_att"], "n_out": 5},
        "energy_in": {"class": "combine", "kind": "add", "from": ["base:enc_ctx", "s_tr"], "n_out": 6},
        "s_tr": {"class": "linear", "activation": None, "with_bias": False, "from": "s", "n_out": 6},
        "energy": {"class": "linear", "activation": "tanh", "from": "energy_in", "n_out": 1},
        "att_weights": {"class": "softmax_over_spatial", "from": "energy", "is_output_layer": True},
        "att0": {"class": "generic_attention", "weights": "att_weights", "base": "base:enc_ctx"},
        "att": {"class": "merge_dims", "axes": "except_batch", "from": "att0"},
        "output": {"class": "linear", "activation": "tanh", "from": ["s", "att"], "n_out": 3}}
    with tf.Graph().as_default():
        net = _build({"enc_ctx": {"class": "linear", "from": "data", "n_out": 6},
                      "output": {"class": "rec", "from": "data", "unit": unit}})
        max_att, att = net.get_layer("output/max_att").output, net.get_layer("output/att_weights").output
        assert max_att.dim == 1 and max_att.batch_ndim == 3  # [T,B,1]: the encoder time axis reduced away
        m, a = _run(net, [max_att.copy_as_batch_spatial_major().placeholder,
                          att.copy_as_batch_spatial_major().placeholder])
    # a: [B, T(loop), T(enc), 1], masked beyond the encoder lengths by the softmax
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(m[b, 0], 0.0, atol=1e-6)  # prev:att_weights initially zeros
        np.testing.assert_allclose(m[b, 1:n, 0], a[b, :n - 1, :n, 0].max(axis=-1), rtol=1e-5)


@pytest.mark.parametrize("initial_state", [None, "var"])
def test_zoneoutlstm_cell_in_a_rec_loop(initial_state):
    # the state dims of the zoneout LSTM inside a loop (the loop's initial state) need no LSTMCell-only option
    # (was: KeyError 'num_proj'); its unit_opts are the two zoneout factors (as the original)
    cell = {"class": "rnn_cell", "unit": "zoneoutlstm", "n_out": 4, "from": ["data:source", "prev:s"],
            "unit_opts": {"zoneout_factor_cell": 0.1, "zoneout_factor_output": 0.05}}
    if initial_state:
        cell["initial_state"] = initial_state
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "from": "data", "unit": {
            "s": cell, "output": {"class": "copy", "from": "s"}}}})
        names = [n for n, _ in _params(net)]
        assert "output/rec/s/rec/lstm_cell/kernel" in names
        assert ("output/rec/s/initial_c" in names) == (initial_state == "var")
        y = _run(net, net.get_layer("output").output.placeholder)
        assert y.shape == (7, 3, 4) and np.isfinite(y).all()
    with tf.Graph().as_default():
        with pytest.raises(Exception, match="num_proj"):
            _build({"output": {"class": "rec", "unit": "zoneoutlstm", "n_out": 4, "from": "data",
                               "unit_opts": {"num_proj": 2}}})
