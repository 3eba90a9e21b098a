"""Unit tests of rf on the layers backend: dims, ops, dropout/BatchNorm in training, errors naming the call site."""

import numpy as np
import pytest
import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite import data as compiler_data
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, Tensor, batch_dim
from rf_harness import extern_feed  # noqa: E402 (tests/frontend/rf_harness.py)

tf1 = tf.compat.v1


def _build_and_run(extern_data, get_model, step, inputs, *, train_flag=False, task="forward", fetch_params=()):
    """net dict from rf code -> TFNetwork -> one session.run; returns (outputs by name, net_dict, extra fetches)."""
    config = Config({"extern_data": extern_data, "get_model": get_model, "task": task,
                     ("forward_step" if task == "forward" else "train_step"): step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, model = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=train_flag, eval_flag=task != "forward")
        net.construct_from_dict(net_dict)
        fetches = {name: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for name, t in outputs.items()}
        session.run(tf1.global_variables_initializer())
        feed = extern_feed(net, inputs)
        post = net.get_post_control_dependencies()  # e.g. batch_norm's running stats updates (run by the engine)
        res = session.run(dict(fetches, _post=post) if post else fetches, feed_dict=feed)
        res.pop("_post", None)
        params = {}
        if fetch_params:
            by_name = {v.op.name: v for v in net.get_params_list()}
            params = session.run({n: by_name[n] for n in fetch_params})
    return res, net_dict, params


def test_tensor_and_dim_are_the_compilers():
    # one dim system: the TF compiler's Data is a Tensor (with the TF parts), its Dim is rf's Dim
    assert issubclass(compiler_data.Data, Tensor) and Dim is compiler_data.Dim and batch_dim is compiler_data.batch_dim


def test_dim_arithmetic():
    a, b, t = Dim(3, name="a"), Dim(2, name="b"), Dim(None, name="t")
    assert (a + b).dimension == 5 and (1 + (a + b) + 2).dimension == 8 and (2 * a).dimension == 6
    assert (t + 2) is (t + 2) and (t + 2).dimension is None
    assert t.ceildiv_right(2).dimension is None and Dim(7).ceildiv_right(2).dimension == 4
    with tf.Graph().as_default(), tf1.Session() as session:
        t.dyn_size = tf.constant([5, 3])
        assert session.run((t + 2).dyn_size_ext.raw_tensor).tolist() == [7, 5]
        assert session.run(t.ceildiv_right(2).complete_dyn_size()).tolist() == [3, 2]
    t.reset_eager()
    assert t.dyn_size is None


def _data_3d(f=4):
    time_dim, feat = Dim(None, name="time"), Dim(f, name="feat")
    return time_dim, feat, {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}


class _Empty(rf.Module):
    pass


def test_ops_and_masked_reduce():
    time_dim, feat, extern_data = _data_3d(3)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        rf.reduce_mean(x, axis=time_dim).mark_as_output("mean", shape=(batch_dim, feat))
        rf.reduce_max(x, axis=[time_dim, feat]).mark_as_output("max", shape=(batch_dim,))
        rf.softmax(x, axis=time_dim).mark_as_output("sm", shape=(batch_dim, time_dim, feat))
        rf.where(x > 0.0, x, 0.0).mark_as_output("relu", shape=(batch_dim, time_dim, feat))

    x = np.random.RandomState(1).randn(2, 4, 3).astype("float32")
    lens = np.array([4, 2], "int32")
    res, _, _ = _build_and_run(extern_data, lambda **_: _Empty(), step, {"data": x, "size:time": lens})
    np.testing.assert_allclose(res["mean"][1], x[1, :2].mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(res["max"], [x[0].max(), x[1, :2].max()], rtol=1e-6)
    np.testing.assert_allclose(res["sm"][1, :2].sum(axis=0), np.ones(3), rtol=1e-5)
    assert np.all(res["sm"][1, 2:] == 0)
    np.testing.assert_allclose(res["relu"], np.maximum(x, 0))


def test_dropout_in_training():
    time_dim, feat, extern_data = _data_3d(50)

    def step(*, model, extern_data, **_):
        rf.dropout(extern_data["data"], 0.5, axis=feat).mark_as_output("y", shape=(batch_dim, time_dim, feat))

    inputs = {"data": np.ones((4, 6, 50), "float32"), "size:time": np.array([6, 6, 5, 3], "int32")}
    res, _, _ = _build_and_run(extern_data, lambda **_: _Empty(), step, inputs, train_flag=True)
    y = res["y"]
    assert set(np.unique(y).tolist()) <= {0.0, 2.0}
    assert 0.3 < (y == 0).mean() < 0.7
    assert np.all(y == y[:, :1])  # mask varies along feat (and batch) only: shared over time
    res, _, _ = _build_and_run(extern_data, lambda **_: _Empty(), step, inputs, train_flag=False)
    np.testing.assert_array_equal(res["y"], inputs["data"])


def test_batch_norm_in_training():
    time_dim, feat, extern_data = _data_3d(3)

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.bn = rf.BatchNorm(feat, use_mask=True)

    def step(*, model, extern_data, **_):
        model.bn(extern_data["data"]).mark_as_output("y", shape=(batch_dim, time_dim, feat))

    rng = np.random.RandomState(3)
    x = (rng.randn(2, 5, 3) * 3 + 1).astype("float32")
    lens = np.array([5, 3], "int32")
    x[1, 3:] = 1000.0  # padded frames must not count
    res, net_dict, params = _build_and_run(
        extern_data, lambda **_: Model(), step, {"data": x, "size:time": lens}, train_flag=True,
        fetch_params=["bn/running_mean/param"])
    assert net_dict["bn/running_mean"]["class"] == "variable"
    frames = np.concatenate([x[0, :5], x[1, :3]])
    mean, var = frames.mean(axis=0), frames.var(axis=0)
    y = np.concatenate([res["y"][0, :5], res["y"][1, :3]])
    np.testing.assert_allclose(y, (frames - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(params["bn/running_mean/param"], 0.1 * mean, rtol=1e-4)


def test_lstm_single_step_matches_loop():
    time_dim, feat, extern_data = _data_3d(3)
    hid = Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(feat, hid)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        state = model.lstm.default_initial_state(batch_dims=[batch_dim])
        y, _ = model.lstm(x, state=state, spatial_dim=time_dim)
        y.mark_as_output("y", shape=(batch_dim, time_dim, hid))
        x0 = rf.gather(x, indices=0, axis=time_dim)
        y0, st = model.lstm(x0, state=state, spatial_dim=rf.single_step_dim)
        y0.mark_as_output("y0", shape=(batch_dim, hid))
        st.c.mark_as_output("c0", shape=(batch_dim, hid))

    x = np.random.RandomState(2).randn(2, 3, 3).astype("float32")
    res, net_dict, _ = _build_and_run(extern_data, lambda **_: Model(), step,
                                      {"data": x, "size:time": np.array([3, 2], "int32")})
    np.testing.assert_allclose(res["y0"], res["y"][:, 0], rtol=1e-5)
    assert sorted(k for k, v in net_dict.items() if v["class"] == "variable") == [
        "lstm/bias", "lstm/ff_weight", "lstm/rec_weight"]


def _expect_error(step, match, extern_data=None, get_model=None):
    time_dim, feat, default = _data_3d(3)
    with pytest.raises(rf.FrontendError, match=match) as exc:
        _build_and_run(extern_data or default, get_model or (lambda **_: _Empty()), step, {}, task="train")
    return str(exc.value)


def test_error_dim_mismatch_names_call_site_and_dims():
    other = Dim(5, name="other")

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        y = rf.zeros([batch_dim, other])
        (x + y).mark_as_loss("l")  # the line of the error

    msg = _expect_error(step, "dims do not match")
    assert "test_rf_unit.py:%i" % (step.__code__.co_firstlineno + 3) in msg
    assert "'other'(5)" in msg and "'feat'(3)" in msg


def test_error_reduce_over_missing_dim():
    other = Dim(5, name="other")

    def step(*, model, extern_data, **_):
        rf.reduce_sum(extern_data["data"], axis=other).mark_as_loss("l")

    msg = _expect_error(step, r"rf.reduce_sum at .*test_rf_unit.py:\d+: axis 'other'\(5\) is not a dim")
    assert "'feat'(3)" in msg


def test_error_loss_marked_twice():
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        rf.reduce_sum(x, axis=x.dims[-1]).mark_as_loss("l")
        x.mark_as_loss("l")

    _expect_error(step, r"loss 'l' was already marked at .*test_rf_unit.py:\d+")


def test_error_param_of_module_outside_model():
    time_dim, feat, extern_data = _data_3d(3)
    lin = rf.Linear(feat, Dim(2, name="out"))

    def step(*, model, extern_data, **_):
        lin(extern_data["data"]).mark_as_loss("l")

    _expect_error(step, "not part of the model returned by get_model", extern_data=extern_data)


def test_select_backend_torch():
    pytest.importorskip("torch")
    rf.select_backend_torch()
    assert rf.get_selected_backend().name == "torch"
    rf.select_backend_returnn_layers_tf()


def test_concat_dynamic_dims():
    t1, t2, f = Dim(None, name="t1"), Dim(None, name="t2"), Dim(2, name="f")
    extern_data = {"a": {"dims": (batch_dim, t1, f), "dtype": "float32"},
                   "b": {"dims": (batch_dim, t2, f), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        y, d = rf.concat((extern_data["a"], t1), (extern_data["b"], t2))
        y.mark_as_output("y", shape=(batch_dim, d, f))
        d.get_size_tensor().mark_as_output("lens", shape=(batch_dim,))

    a = np.arange(12).reshape(2, 3, 2).astype("float32")
    b = -np.arange(1, 9).reshape(2, 2, 2).astype("float32")
    res, _, _ = _build_and_run(extern_data, lambda **_: _Empty(), step, {
        "a": a, "b": b, "size:t1": np.array([3, 1], "int32"), "size:t2": np.array([2, 1], "int32")})
    assert res["lens"].tolist() == [5, 2]
    np.testing.assert_array_equal(res["y"][0], np.concatenate([a[0], b[0]]))
    np.testing.assert_array_equal(res["y"][1, :2], np.concatenate([a[1, :1], b[1, :1]]))


def test_scan_cumsum_and_lstm_cell_loop():
    time_dim, feat, extern_data = _data_3d(3)
    hid = Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(feat, hid)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]

        def body(x_t, s):
            acc = s["acc"] + x_t
            y_t, st = model.lstm(x_t, state=s["lstm"], spatial_dim=rf.single_step_dim)
            return (acc, y_t), {"acc": acc, "lstm": st}

        initial = {"acc": rf.zeros([batch_dim, feat]), "lstm": model.lstm.default_initial_state(batch_dims=[batch_dim])}
        (acc, ys), last, _ = rf.scan(spatial_dim=time_dim, xs=x, initial=initial, ys=None, body=body)
        acc.mark_as_output("acc", shape=(batch_dim, time_dim, feat))
        last["acc"].mark_as_output("last", shape=(batch_dim, feat))
        ys.mark_as_output("ys", shape=(batch_dim, time_dim, hid))
        y_ref, _ = model.lstm(x, state=model.lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=time_dim)
        y_ref.mark_as_output("y_ref", shape=(batch_dim, time_dim, hid))

    x = np.random.RandomState(4).randn(2, 4, 3).astype("float32")
    lens = np.array([4, 2], "int32")
    res, net_dict, _ = _build_and_run(extern_data, lambda **_: Model(), step, {"data": x, "size:time": lens})
    np.testing.assert_allclose(res["acc"][0], np.cumsum(x[0], axis=0), rtol=1e-5)
    np.testing.assert_allclose(res["last"], [x[0].sum(0), x[1, :2].sum(0)], rtol=1e-5)
    np.testing.assert_allclose(res["ys"][0], res["y_ref"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["ys"][1, :2], res["y_ref"][1, :2], rtol=1e-5, atol=1e-6)
    assert net_dict["loop"]["class"] == "rec" and net_dict["loop"]["unit"]["unstack"]["from"] == ["base:data:data"]


def test_loop_state_unstack_stack():
    time_dim, feat, extern_data = _data_3d(3)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        loop = rf.Loop(axis=time_dim)
        loop.state.acc = rf.zeros([batch_dim, feat])
        with loop:
            x_t = loop.unstack(x)
            loop.state.acc = loop.state.acc + x_t
            y = loop.stack(loop.state.acc * 2.0)
        y.mark_as_output("y", shape=(batch_dim, time_dim, feat))
        loop.state.acc.mark_as_output("last", shape=(batch_dim, feat))

    x = np.random.RandomState(5).randn(2, 4, 3).astype("float32")
    res, _, _ = _build_and_run(extern_data, lambda **_: _Empty(), step, {"data": x, "size:time": np.array([4, 3], "int32")})
    np.testing.assert_allclose(res["y"][0], 2 * np.cumsum(x[0], axis=0), rtol=1e-5)
    np.testing.assert_allclose(res["last"][1], x[1, :3].sum(0), rtol=1e-5)


def test_while_loop():
    time_dim, feat, extern_data = _data_3d(3)

    def step(*, model, extern_data, **_):
        x = rf.reduce_sum(extern_data["data"], axis=time_dim)  # [B, F]

        def cond(s):
            return s["i"] < 3

        def body(s):
            return {"i": s["i"] + 1, "x": s["x"] * 2.0}

        out = rf.while_loop(cond, body, {"i": rf.convert_to_tensor(0), "x": x})
        out["x"].mark_as_output("x8", shape=(batch_dim, feat))

    x = np.random.RandomState(6).randn(2, 4, 3).astype("float32")
    res, _, _ = _build_and_run(extern_data, lambda **_: _Empty(), step, {"data": x, "size:time": np.array([4, 4], "int32")})
    np.testing.assert_allclose(res["x8"], 8 * x.sum(1), rtol=1e-5)
