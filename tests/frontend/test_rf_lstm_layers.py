"""rf.LSTM on the layers backend is a ``rec`` layer (nativelstm2 unit) using the rf params via reuse_params (issue 16):
outputs, final states and gradients vs numpy and vs the frontend_op path, over time and one step (also in loops)."""

import numpy as np
import pytest
import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.errors import NetworkLayerException
from returnn_lite.frontend_layers import _lstm, get_net_dict
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, batch_dim
from returnn_lite.testing import build_network
from rf_harness import extern_feed  # noqa: E402 (tests/frontend/rf_harness.py)

tf1 = tf.compat.v1
PARAMS = ("lstm.bias", "lstm.ff_weight", "lstm.rec_weight")


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np_lstm(x, lens, h, c, p):
    """rf's LSTM (gates i, f, g, o; params [4*out, in|out]) over x [B, T, in]; padded frames keep the state."""
    ys = np.zeros(x.shape[:2] + h.shape[1:], "float32")
    for t in range(x.shape[1]):
        g = x[:, t] @ p["lstm.ff_weight"].T + h @ p["lstm.rec_weight"].T + p["lstm.bias"]
        i, f, gg, o = np.split(g, 4, axis=-1)
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(gg)
        h_new = _sigmoid(o) * np.tanh(c_new)
        m = (t < lens)[:, None]
        h, c = np.where(m, h_new, h), np.where(m, c_new, c)
        ys[:, t] = h
    return ys, h, c


def _setup(mode):
    """extern data, model and a train_step: rf.LSTM over time ("time"), one step ("single") or one step per frame of
    an rf.scan ("scan"); the initial state from the inputs h0/c0; a loss on the masked outputs and final states."""
    time_dim, in_dim, hid = Dim(None, name="time"), Dim(3, name="in"), Dim(4, name="hid")
    extern_data = {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
                   "x0": {"dims": (batch_dim, in_dim), "dtype": "float32"},
                   "h0": {"dims": (batch_dim, hid), "dtype": "float32"},
                   "c0": {"dims": (batch_dim, hid), "dtype": "float32"}}

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(in_dim, hid)

    def step(*, model, extern_data, **_):
        state = rf.LstmState(h=extern_data["h0"], c=extern_data["c0"])
        if mode == "single":
            y, st = model.lstm(extern_data["x0"], state=state, spatial_dim=rf.single_step_dim)
            y.mark_as_output("y", shape=(batch_dim, hid))
        else:
            if mode == "time":
                y, st = model.lstm(extern_data["data"], state=state, spatial_dim=time_dim)
            else:
                def body(x_t, s):
                    y_t, s_new = model.lstm(x_t, state=s, spatial_dim=rf.single_step_dim)
                    return y_t, s_new

                y, st, _ = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=state, ys=None, body=body)
            y.mark_as_output("y", shape=(batch_dim, time_dim, hid))
        st.h.mark_as_output("h", shape=(batch_dim, hid))
        st.c.mark_as_output("c", shape=(batch_dim, hid))
        w = rf.convert_to_tensor(np.array([-1.5, -0.5, 0.5, 1.5], "float32"), dims=[hid])
        loss = rf.reduce_sum(rf.reduce_sum(y * w, axis=hid), axis=[d for d in y.dims if d != batch_dim and d != hid]) \
            if mode != "single" else rf.reduce_sum(y * w, axis=hid)
        loss = loss + rf.reduce_sum(st.h * w * 0.5 + st.c * st.c, axis=hid)
        loss.mark_as_loss("loss")

    return extern_data, Model, step


def _inputs():
    rng = np.random.RandomState(3)
    return {"data": rng.randn(3, 5, 3).astype("float32"), "size:time": np.array([5, 2, 4], "int32"),
            "x0": rng.randn(3, 3).astype("float32"), "h0": rng.randn(3, 4).astype("float32") * 0.5,
            "c0": rng.randn(3, 4).astype("float32") * 0.5}


def _params():
    rng = np.random.RandomState(7)
    return {"lstm.ff_weight": rng.randn(16, 3).astype("float32") * 0.5,
            "lstm.rec_weight": rng.randn(16, 4).astype("float32") * 0.5,
            "lstm.bias": rng.randn(16).astype("float32") * 0.5}


def _run(mode):
    """(outputs, grads by param name, net dict, param names of the net)."""
    extern_data, model_cls, step = _setup(mode)
    for opts in extern_data.values():
        for d in opts["dims"]:
            d.reset_eager()
    config = Config({"extern_data": extern_data, "get_model": lambda **_: model_cls(), "task": "train",
                     "train_step": step})
    rf.select_backend_returnn_layers_tf()
    inputs, values = _inputs(), _params()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=False, eval_flag=True)
        net.construct_from_dict(net_dict)
        fetches = {k: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for k, t in outputs.items()}
        params = {v.op.name[:-len("/param")].replace("/", "."): v for v in net.get_params_list()}
        grads = tf.gradients(net.get_total_loss(), [params[n] for n in PARAMS])
        fetches.update({"grad:" + n: tf.convert_to_tensor(g) for n, g in zip(PARAMS, grads)})
        session.run(tf1.global_variables_initializer())
        for n, v in params.items():
            v.load(values[n], session)
        feed = extern_feed(net, inputs)
        res = session.run(fetches, feed_dict=feed)
    return res, net_dict, sorted(params)


def _classes(net_dict):
    res = set()
    for d in net_dict.values():
        res.add(d["class"])
        if isinstance(d.get("unit"), dict):
            res |= _classes(d["unit"])
    return res


@pytest.mark.parametrize("mode", ["time", "single", "scan"])
def test_rf_lstm_is_rec_layer_and_matches_numpy_and_frontend_op(mode, monkeypatch):
    res, net_dict, names = _run(mode)
    assert names == sorted(PARAMS)  # the rec layer creates no params of its own
    classes = _classes(net_dict)
    assert "frontend_op" not in classes and {"rec", "get_last_hidden_state", "slice", "concat"} <= classes
    recs = [d for d in list(net_dict.values()) + list(net_dict.get("loop", {}).get("unit", {}).values())
            if d.get("unit") == "nativelstm2"]
    assert len(recs) == 1 and set(recs[0]["reuse_params"]["map"]) == {"W", "W_re", "b"}
    assert ("state" in recs[0]) == (mode != "time") and ("initial_state" in recs[0]) == (mode == "time")
    inp, p = _inputs(), _params()
    if mode == "single":
        y, h, c = _np_lstm(inp["x0"][:, None], np.ones(3), inp["h0"], inp["c0"], p)
        y = y[:, 0]
        np.testing.assert_allclose(res["y"], y, rtol=1e-5, atol=1e-6)
    else:
        lens = inp["size:time"]
        y, h, c = _np_lstm(inp["data"], lens, inp["h0"], inp["c0"], p)
        for b, n in enumerate(lens):
            np.testing.assert_allclose(res["y"][b, :n], y[b, :n], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["h"], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["c"], c, rtol=1e-5, atol=1e-6)
    # the gradients are those of the frontend_op path (the frontend's own TF ops)
    monkeypatch.setattr(_lstm, "lstm_layers", lambda *args, **kwargs: None)
    ref, ref_dict, _ = _run(mode)
    assert "frontend_op" in _classes(ref_dict)
    for n in PARAMS:
        assert np.abs(res["grad:" + n]).max() > 1e-3
        np.testing.assert_allclose(res["grad:" + n], ref["grad:" + n], rtol=1e-4, atol=1e-5)


def test_rec_cell_unit_with_dims_and_param_map_in_a_hand_written_dict():
    """A rec layer with a cell unit over a Dim axis, its params the outputs of other layers (reuse_params map)."""
    time_dim, feat, hid = Dim(None, name="time"), Dim(3, name="feat"), Dim(2, name="hid")
    gates = Dim(8, name="gates")
    extern = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}
    rng = np.random.RandomState(0)
    w, w_re, b = rng.randn(8, 3) * 0.5, rng.randn(8, 2) * 0.5, rng.randn(8) * 0.5  # [gates, in] as rf has them
    net = {"W": {"class": "constant", "value": w.tolist(), "shape": [gates, feat]},
           "W_re": {"class": "constant", "value": w_re.tolist(), "shape": [gates, hid]},
           "b": {"class": "constant", "value": b.tolist(), "shape": [gates]},
           "y": {"class": "rec", "from": "data", "unit": "nativelstm2", "axis": time_dim, "in_dim": feat,
                 "out_dim": hid, "reuse_params": {"map": {"W": {"layer_output": "W", "shape": (feat, gates)},
                                                          "W_re": {"layer_output": "W_re", "shape": (hid, gates)},
                                                          "b": {"layer_output": "b", "shape": (gates,)}}}},
           "h": {"class": "get_last_hidden_state", "from": "y", "key": "h", "out_dim": hid, "is_output_layer": True}}
    x = rng.randn(2, 4, 3).astype("float32")
    lens = np.array([4, 3], "int32")
    time_dim.reset_eager()
    with tf.Graph().as_default(), tf1.Session() as session:
        net = build_network(net, extern)
        assert net.get_params_list() == [] and net.get_layer("y").output.dims[-1] is hid
        data = net.extern_data.data["data"]
        y, h = session.run([net.get_layer("y").output.copy_transpose([batch_dim, time_dim, hid]).placeholder,
                            net.get_layer("h").output.placeholder], feed_dict={data.placeholder: x,
                                                                               data.dims[1].dyn_size: lens})
    # NativeLstm2 gate order (cell-in j, i, f, o): rf's blocks here read as (j, i, f, o) directly
    p = {"lstm.ff_weight": np.concatenate([w[2:4], w[4:6], w[0:2], w[6:8]]),
         "lstm.rec_weight": np.concatenate([w_re[2:4], w_re[4:6], w_re[0:2], w_re[6:8]]),
         "lstm.bias": np.concatenate([b[2:4], b[4:6], b[0:2], b[6:8]])}
    y_ref, h_ref, _ = _np_lstm(x, lens, np.zeros((2, 2)), np.zeros((2, 2)), p)
    np.testing.assert_allclose(y[0], y_ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[1, :3], y_ref[1, :3], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)


def test_rec_dim_options_errors():
    time_dim, feat, hid = Dim(None, name="time"), Dim(3, name="feat"), Dim(2, name="hid")
    extern = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}
    base = {"class": "rec", "from": "data", "unit": "nativelstm2", "axis": time_dim, "out_dim": hid,
            "is_output_layer": True}
    cases = [({"state": {"h": "data"}}, "state is only supported with axis=single_step_dim"),
             ({"reuse_params": {"map": {"W": {"layer_output": "data", "shape": (feat, hid)}}}}, "reuse_params map 'rec/W': layer_output 'data' has dims"),
             ({"in_dim": Dim(3, name="other")}, "in_dim")]
    for opts, msg in cases:
        time_dim.reset_eager()
        with tf.Graph().as_default(), pytest.raises(NetworkLayerException, match=msg):
            build_network({"y": dict(base, **opts)}, extern)


def test_rf_lstm_over_time_inside_an_rf_loop():
    """rf.LSTM over its own dim in a loop body: a rec layer inside the loop's unit; the state goes around the loop."""
    outer, time_dim, in_dim, hid = Dim(2, name="outer"), Dim(None, name="time"), Dim(3, name="in"), Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(in_dim, hid)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        init = model.lstm.default_initial_state(batch_dims=[batch_dim])
        loop = rf.Loop(axis=outer)
        loop.state.s = init
        with loop:
            y, loop.state.s = model.lstm(x, state=loop.state.s, spatial_dim=time_dim)
            out = loop.stack(rf.reduce_sum(y, axis=time_dim))
        out.mark_as_output("y", shape=(batch_dim, outer, hid))
        _, st = model.lstm(x, state=init, spatial_dim=time_dim)
        y2, _ = model.lstm(x, state=st, spatial_dim=time_dim)
        rf.reduce_sum(y2, axis=time_dim).mark_as_output("ref", shape=(batch_dim, hid))

    time_dim.reset_eager()
    config = Config({"extern_data": {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}},
                     "get_model": lambda **_: Model(), "task": "forward", "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        assert net_dict["loop"]["unit"]["lstm/lstm"]["class"] == "rec" and "frontend_op" not in _classes(net_dict)
        net = TFNetwork(config=config, train_flag=False)
        net.construct_from_dict(net_dict)
        assert len(net.get_params_list()) == 3
        fetches = {k: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder
                   for k, t in rf.get_run_ctx().outputs.data.items()}
        session.run(tf1.global_variables_initializer())
        data = net.extern_data.data["data"]
        res = session.run(fetches, {data.placeholder: np.random.RandomState(1).randn(2, 4, 3),
                                    data.dims[1].dyn_size: [4, 2]})
    np.testing.assert_allclose(res["y"][:, 1], res["ref"], rtol=1e-5, atol=1e-6)


def _run_static(fallback, monkeypatch):
    """rf.LSTM over a static dim, the initial state without batch dim: outputs (rec layer or frontend_op path)."""
    time_dim, in_dim, hid = Dim(5, name="time"), Dim(3, name="in"), Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(in_dim, hid)

    def step(*, model, extern_data, **_):
        y, st = model.lstm(extern_data["data"], state=model.lstm.default_initial_state(batch_dims=[]),
                           spatial_dim=time_dim)
        y.mark_as_output("y", shape=(batch_dim, time_dim, hid))
        st.c.mark_as_output("c", shape=(batch_dim, hid))

    config = Config({"extern_data": {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}},
                     "get_model": lambda **_: Model(), "task": "forward", "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    if fallback:
        monkeypatch.setattr(_lstm, "lstm_layers", lambda *args, **kwargs: None)
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        assert ("frontend_op" in _classes(net_dict)) == fallback
        net = TFNetwork(config=config, train_flag=False)
        net.construct_from_dict(net_dict)
        fetches = {k: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder
                   for k, t in rf.get_run_ctx().outputs.data.items()}
        session.run(tf1.global_variables_initializer())
        for i, v in enumerate(sorted(net.get_params_list(), key=lambda v: v.name)):
            v.load(np.random.RandomState(i).randn(*v.shape.as_list()) * 0.5, session)
        data = net.extern_data.data["data"]
        return session.run(fetches, {data.placeholder: np.random.RandomState(0).randn(2, 5, 3)})


def test_rf_lstm_static_dim_and_state_without_batch(monkeypatch):
    res = _run_static(False, monkeypatch)
    ref = _run_static(True, monkeypatch)
    for k in ("y", "c"):
        np.testing.assert_allclose(res[k], ref[k], rtol=1e-5, atol=1e-6)
