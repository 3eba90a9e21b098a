"""rf loops and cond on the layers backend (rec / cond layers) and, where it supports them, the torch backend:
the net dict reads like a hand-written rec unit, the numbers match a numpy reference."""

import numpy as np
import pytest
import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, Tensor, TensorDict, batch_dim

tf1 = tf.compat.v1

time_dim, feat = Dim(None, name="time"), Dim(3, name="feat")
extern_data = {"data": {"dims": [batch_dim, time_dim, feat], "dtype": "float32"}}
X = np.random.RandomState(3).randn(2, 4, 3).astype("float32")
LENS = np.array([4, 2], "int32")
INPUTS = {"data": X, "size:time": LENS}


class _Empty(rf.Module):
    pass


def _run_layers(step, inputs=INPUTS, model_cls=_Empty, params_out=None):
    """rf step -> net dict -> TFNetwork -> one session.run: ({output name: array}, net_dict); params_out: filled
    with the initial param values by rf name."""
    config = Config({"extern_data": extern_data, "get_model": lambda **_: model_cls(), "task": "forward",
                     "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=False, eval_flag=False)
        net.construct_from_dict(net_dict)
        fetches = {name: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for name, t in outputs.items()}
        session.run(tf1.global_variables_initializer())
        data = net.extern_data.data["data"]
        feed = {data.placeholder: inputs["data"], time_dim.dyn_size_ext.raw_tensor: inputs["size:time"]}
        if params_out is not None:
            params_out.update({v.op.name[:-len("/param")].replace("/", "."): session.run(v)
                               for v in net.get_params_list()})
        return session.run(fetches, feed_dict=feed), net_dict


def _run_torch(step, inputs=INPUTS, model_cls=_Empty, params=None):
    torch = pytest.importorskip("torch")
    rf.select_backend_torch()
    td = TensorDict()
    td.update(extern_data, auto_convert=True)
    for d in (time_dim, batch_dim):
        d.reset_eager()
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(2, dtype=torch.int32))
    time_dim.dyn_size_ext = Tensor("s", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor(inputs["size:time"]))
    td.data["data"].raw_tensor = torch.tensor(inputs["data"])
    try:
        model = model_cls()
        for name, p in model.named_parameters():
            with torch.no_grad():
                p.raw_tensor.copy_(torch.tensor(params[name]))
        rf.init_forward_step_run_ctx(epoch=1, step=0)
        step(model=model, extern_data=td)
        return {name: t.raw_tensor.detach().numpy() for name, t in rf.get_run_ctx().outputs.data.items()}
    finally:
        for d in (time_dim, batch_dim):
            d.reset_eager()
        rf.select_backend_returnn_layers_tf()


def _both(step, model_cls=_Empty):
    params = {}
    res, net_dict = _run_layers(step, model_cls=model_cls, params_out=params)
    try:
        import torch  # noqa: F401
    except ImportError:  # the layers backend only
        return [res], net_dict
    return [res, _run_torch(step, model_cls=model_cls, params=params)], net_dict


def test_scan_is_a_rec_layer_with_prev_state():
    def step(*, model, extern_data, **_):
        def body(x_t, s):
            acc = s["acc"] + x_t
            return acc * 2.0, {"acc": acc}

        initial = {"acc": rf.zeros([batch_dim, feat])}
        ys, last, dim = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=initial, ys=None, body=body)
        assert dim is time_dim
        ys.mark_as_output("ys", shape=(batch_dim, time_dim, feat))
        last["acc"].mark_as_output("last", shape=(batch_dim, feat))

    results, net_dict = _both(step)
    rec = net_dict["loop"]
    assert rec["class"] == "rec" and rec["from"] == [] and rec["axis"] is time_dim
    unit = rec["unit"]
    assert unit["unstack"] == {"class": "rec_unstack", "from": ["base:data:data"], "axis": time_dim}
    assert unit["acc"]["initial_output"].startswith("base:") and "prev:acc" in unit[unit["acc"]["from"][0]]["from"]
    assert unit["output"]["class"] == "copy" and "end" not in unit
    assert net_dict["loop_acc"] == {"class": "rec_last_output", "rec_layer": "loop", "sub_layer_name": "acc"}
    assert net_dict["ys"]["from"] == ["loop/" + unit["output"]["from"][0]]
    for res in results:
        np.testing.assert_allclose(res["ys"][0], 2 * np.cumsum(X[0], axis=0), rtol=1e-5)
        np.testing.assert_allclose(res["ys"][1, :2], 2 * np.cumsum(X[1, :2], axis=0), rtol=1e-5)
        np.testing.assert_allclose(res["last"], [X[0].sum(0), X[1, :2].sum(0)], rtol=1e-5)  # kept after the length


def test_scan_over_static_dim_without_batch_state():
    def step(*, model, extern_data, **_):
        x = rf.reduce_sum(extern_data["data"], axis=time_dim)  # [B, F]

        def body(x_t, s):
            return x_t * s, s + 1.0  # frames over feat; the state is a scalar

        ys, last, _ = rf.scan(spatial_dim=feat, xs=x, initial=rf.convert_to_tensor(1.0), ys=None, body=body)
        ys.mark_as_output("ys", shape=(batch_dim, feat))
        last.mark_as_output("last", shape=())

    results, _ = _both(step)
    ref = np.array([X[0].sum(0), X[1, :2].sum(0)]) * np.arange(1, 4)
    for res in results:
        np.testing.assert_allclose(res["ys"], ref, rtol=1e-5)
        assert float(res["last"]) == 4.0


def test_loop_stack_last_and_state():
    def step(*, model, extern_data, **_):
        loop = rf.Loop(axis=time_dim)
        loop.state.acc = rf.zeros([batch_dim, feat])
        with loop:
            x_t = loop.unstack(extern_data["data"])
            loop.state.acc = loop.state.acc + x_t
            y = loop.stack(loop.state.acc * 2.0, name="y")
            last_x = loop.last(x_t)
        y.mark_as_output("y", shape=(batch_dim, time_dim, feat))
        loop.state.acc.mark_as_output("acc", shape=(batch_dim, feat))
        last_x.mark_as_output("last_x", shape=(batch_dim, feat))

    res, net_dict = _run_layers(step)
    np.testing.assert_allclose(res["y"][0], 2 * np.cumsum(X[0], axis=0), rtol=1e-5)
    np.testing.assert_allclose(res["acc"][1], X[1, :2].sum(0), rtol=1e-5)
    np.testing.assert_allclose(res["last_x"], [X[0, 3], X[1, 1]], rtol=1e-5)


def test_while_loop_end_layer_and_zero_iterations():
    def step(*, model, extern_data, **_):
        x = rf.reduce_sum(extern_data["data"], axis=time_dim)
        out = rf.while_loop(lambda s: s["i"] < 3, lambda s: {"i": s["i"] + 1, "x": s["x"] * 2.0},
                            {"i": rf.convert_to_tensor(0), "x": x})
        out["x"].mark_as_output("x8", shape=(batch_dim, feat))
        out["i"].mark_as_output("i", shape=())
        none = rf.while_loop(lambda s: s["i"] > 3, lambda s: {"i": s["i"] + 1, "x": s["x"] * 2.0},
                             {"i": rf.convert_to_tensor(0), "x": x})
        none["x"].mark_as_output("x1", shape=(batch_dim, feat))

    results, net_dict = _both(step)
    unit = net_dict["loop"]["unit"]
    assert net_dict["loop"]["class"] == "rec" and unit["end"]["class"] == "copy"
    assert isinstance(net_dict["loop"]["max_seq_len"], int)
    xs = np.array([X[0].sum(0), X[1, :2].sum(0)])
    for res in results:
        np.testing.assert_allclose(res["x8"], 8 * xs, rtol=1e-5)
        assert int(res["i"]) == 3
        np.testing.assert_allclose(res["x1"], xs, rtol=1e-5)


def test_loop_end_dynamic_lengths():
    def step(*, model, extern_data, **_):
        start = rf.reduce_max(rf.reduce_sum(extern_data["data"] * 0.0 + 1.0, axis=feat), axis=time_dim)  # 3 [B]
        start = start - rf.cast(rf.reduce_sum(rf.cast(rf.range_over_dim(feat) < 0, "float32"), axis=feat), "float32")
        loop = rf.Loop(max_seq_len=10)
        loop.state.v = start
        with loop:
            loop.state.v = loop.state.v - 1.0
            y = loop.stack(loop.state.v)
            loop.end(loop.state.v <= 0.0, include_eos=True)
        n = rf.reduce_sum(rf.cast(y > -100.0, "int32"), axis=loop.axis)
        n.mark_as_output("n", shape=(batch_dim,))
        rf.reduce_sum(y, axis=loop.axis).mark_as_output("sum", shape=(batch_dim,))

    inputs = {"data": X, "size:time": np.array([4, 2], "int32")}
    res, net_dict = _run_layers(step, inputs)
    assert net_dict["loop"]["axis"] is not time_dim and "end" in net_dict["loop"]["unit"]
    assert res["n"].tolist() == [3, 3]  # 3 - 1 - 1 - 1 <= 0 at the third frame (the end frame is included)
    np.testing.assert_allclose(res["sum"], [3.0, 3.0])


def test_cond_layer_with_tensor_pred():
    def step(*, model, extern_data, **_):
        x = rf.reduce_sum(extern_data["data"], axis=time_dim)
        total = rf.reduce_sum(x, axis=[batch_dim, feat])
        a, b = rf.cond(total > 1000.0, lambda: (x * 3.0, x + 1.0), lambda: (x * -1.0, x))
        a.mark_as_output("a", shape=(batch_dim, feat))
        b.mark_as_output("b", shape=(batch_dim, feat))
        c = rf.cond(total < 1000.0, lambda: x * 2.0, lambda: x)
        c.mark_as_output("c", shape=(batch_dim, feat))
        d = rf.cond(True, lambda: x, lambda: x * 5.0)  # a Python bool: only that branch, no layer
        d.mark_as_output("d", shape=(batch_dim, feat))

    results, net_dict = _both(step)
    conds = [d for d in net_dict.values() if d["class"] == "cond"]
    assert len(conds) == 3
    assert all(d["true_layer"]["class"] == "subnetwork" and "output" in d["true_layer"]["subnetwork"] for d in conds)
    xs = np.array([X[0].sum(0), X[1, :2].sum(0)])
    for res in results:
        np.testing.assert_allclose(res["a"], -xs, rtol=1e-5)
        np.testing.assert_allclose(res["b"], xs, rtol=1e-5)
        np.testing.assert_allclose(res["c"], 2 * xs, rtol=1e-5)
        np.testing.assert_allclose(res["d"], xs, rtol=1e-5)


def test_cum_concat_step_in_while_loop():
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        hist_dim = Dim(0, name="hist")
        hist = rf.zeros([batch_dim, hist_dim, feat])

        def body(s):
            t, h, h_dim = s
            h, h_dim = rf.cum_concat_step(rf.gather(x, indices=t, axis=time_dim), prev_accum=h, axis=h_dim)
            return t + 1, h, h_dim

        _, hist, hist_dim = rf.while_loop(lambda s: s[0] < time_dim.get_dim_value_tensor(), body,
                                          (rf.convert_to_tensor(0), hist, hist_dim))
        rf.reduce_sum(hist, axis=hist_dim).mark_as_output("sum", shape=(batch_dim, feat))

    results, net_dict = _both(step)
    assert any(d["class"] == "cum_concat" for d in net_dict["loop"]["unit"].values())
    for res in results:
        np.testing.assert_allclose(res["sum"], X.sum(1), rtol=1e-5)  # all (padded) frames, as the loop runs


def test_cum_concat_step_in_loop_self_attention_like():
    def step(*, model, extern_data, **_):
        loop = rf.Loop(axis=time_dim)
        loop.state.k = rf.zeros([batch_dim, Dim(0, name="hist0"), feat])
        loop.state.k_dim = loop.state.k.dims[1]
        with loop:
            x_t = loop.unstack(extern_data["data"])
            k, k_dim = rf.cum_concat_step(x_t, prev_accum=loop.state.k, axis=loop.state.k_dim)
            loop.state.k, loop.state.k_dim = k, k_dim
            y = loop.stack(rf.reduce_sum(k, axis=k_dim))  # the masked sum over the history so far
        y.mark_as_output("y", shape=(batch_dim, time_dim, feat))
        rf.reduce_sum(loop.state.k, axis=loop.state.k_dim).mark_as_output("k", shape=(batch_dim, feat))

    res, _ = _run_layers(step)
    np.testing.assert_allclose(res["y"][0], np.cumsum(X[0], axis=0), rtol=1e-5)
    np.testing.assert_allclose(res["y"][1, :2], np.cumsum(X[1, :2], axis=0), rtol=1e-5)
    np.testing.assert_allclose(res["k"], [X[0].sum(0), X[1, :2].sum(0)], rtol=1e-5)


@pytest.mark.parametrize("case", ["end_with_axis", "end_twice", "cum_concat_outside", "accum_as_value", "int_state"])
def test_loop_errors(case):
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        if case == "int_state":
            rf.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1]), (rf.convert_to_tensor(0), 5))
        if case == "cum_concat_outside":
            h = Dim(0, name="h")
            rf.cum_concat_step(rf.reduce_sum(x, axis=time_dim), prev_accum=rf.zeros([batch_dim, h, feat]), axis=h)
        loop = rf.Loop(axis=time_dim) if case != "end_twice" else rf.Loop(max_seq_len=3)
        loop.state.k = rf.zeros([batch_dim, Dim(0, name="hist0"), feat])
        with loop:
            if case == "end_with_axis":
                loop.end(rf.reduce_max(x, axis=[time_dim, feat]) > 0.0, include_eos=True)
            if case == "end_twice":
                loop.end(rf.reduce_max(x, axis=[time_dim, feat]) > 0.0, include_eos=False)
                loop.end(rf.reduce_max(x, axis=[time_dim, feat]) > 0.0, include_eos=True)
            x_t = loop.unstack(x)
            prev_k = loop.state.k
            k, _ = rf.cum_concat_step(x_t, prev_accum=prev_k, axis=prev_k.dims[1])
            loop.state.k = k
            loop.stack(rf.reduce_sum(prev_k, axis=feat) if case == "accum_as_value" else x_t)

    config = Config({"extern_data": extern_data, "get_model": lambda **_: _Empty(), "task": "forward",
                     "forward_step": step})
    match = {"end_with_axis": "loop.end is for a loop without axis", "end_twice": "already set",
             "cum_concat_outside": "only inside the body", "accum_as_value": "only be the prev_accum",
             "int_state": "unsupported element 5"}[case]
    with global_config_ctx(config), pytest.raises(rf.FrontendError, match=match) as exc:
        get_net_dict(epoch=1, step=0)
    assert "test_rf_loops.py" in str(exc.value)


def test_cond_runs_only_the_taken_branch():
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        n = time_dim.get_dim_value_tensor()
        # the false branch would fail (gather beyond the time axis) if it ran
        y = rf.cond(n < 100, lambda: rf.reduce_sum(x, axis=time_dim), lambda: rf.gather(x, indices=100, axis=time_dim))
        y.mark_as_output("y", shape=(batch_dim, feat))

    res, net_dict = _run_layers(step)
    np.testing.assert_allclose(res["y"], [X[0].sum(0), X[1, :2].sum(0)], rtol=1e-5)


def test_cond_inside_loop_body_selects():
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        scale = rf.reduce_max(x, axis=[batch_dim, time_dim, feat]) * 0.0 + 2.0  # two levels up: base:base:

        def body(x_t, s):
            acc = rf.cond(rf.reduce_sum(s, axis=[batch_dim, feat]) > 1e6, lambda: s * 0.0, lambda: s + x_t * scale)
            return acc, acc

        ys, _, _ = rf.scan(spatial_dim=time_dim, xs=x, initial=rf.zeros([batch_dim, feat]), ys=None, body=body)
        ys.mark_as_output("ys", shape=(batch_dim, time_dim, feat))

    res, _ = _run_layers(step)
    np.testing.assert_allclose(res["ys"][0], 2 * np.cumsum(X[0], axis=0), rtol=1e-5)


def test_scan_lstm_gradients_match_lstm_over_time():
    hid = Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(feat, hid)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]

        def body(x_t, s):
            y_t, st = model.lstm(x_t, state=s, spatial_dim=rf.single_step_dim)
            return y_t, st

        ys, _, _ = rf.scan(spatial_dim=time_dim, xs=x, initial=model.lstm.default_initial_state(batch_dims=[batch_dim]),
                           ys=None, body=body)
        y_ref, _ = model.lstm(x, state=model.lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=time_dim)
        rf.reduce_sum(ys, axis=[batch_dim, time_dim, hid]).mark_as_output("s", shape=())
        rf.reduce_sum(y_ref, axis=[batch_dim, time_dim, hid]).mark_as_output("s_ref", shape=())

    (v, g), (v_ref, g_ref) = _values_and_grads(Model, step, ["s", "s_ref"])
    np.testing.assert_allclose(v, v_ref, rtol=1e-5)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _values_and_grads(model_cls, step, names):
    """[(value, grads of the params)] of the scalar outputs names."""
    config = Config({"extern_data": extern_data, "get_model": lambda **_: model_cls(), "task": "forward",
                     "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=False, eval_flag=False)
        net.construct_from_dict(net_dict)
        values = [net.get_layer(outputs[n].raw_tensor.get_abs_name()).output.placeholder for n in names]
        params = net.get_params_list()
        grads = [[g if g is not None else tf.zeros_like(p) for g, p in zip(tf.gradients(v, params), params)]
                 for v in values]
        session.run(tf1.global_variables_initializer())
        data = net.extern_data.data["data"]
        feed = {data.placeholder: X, time_dim.dyn_size_ext.raw_tensor: LENS}
        return list(zip(*session.run((values, grads), feed_dict=feed)))


def test_cond_with_params_gradients():
    out = Dim(2, name="out")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lin = rf.Linear(feat, out)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        n = time_dim.get_dim_value_tensor()
        for name, pred in (("taken", n > 2), ("not_taken", n < 2)):
            y = rf.cond(pred, lambda: model.lin(x), lambda: rf.zeros([batch_dim, time_dim, out]))
            rf.reduce_sum(y, axis=[batch_dim, time_dim, out]).mark_as_output(name, shape=())
        rf.reduce_sum(model.lin(x), axis=[batch_dim, time_dim, out]).mark_as_output("ref", shape=())

    (v, g), (v0, g0), (v_ref, g_ref) = _values_and_grads(Model, step, ["taken", "not_taken", "ref"])
    np.testing.assert_allclose(v, v_ref, rtol=1e-5)
    assert v0 == 0.0 and all(not np.any(x) for x in g0)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.parametrize("case", ["unchanged", "swap"])
def test_scan_states_unchanged_and_swapped(case):
    def step(*, model, extern_data, **_):
        def body(x_t, s):
            a, b, c = s
            if case == "swap":  # a state is another state's previous value
                return a + x_t, (b, a, c)
            return a + x_t + c, (a + x_t, b, c)  # b, c: the previous value unchanged

        zeros = rf.zeros([batch_dim, feat])
        ys, last, _ = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=(zeros, zeros + 1.0, zeros + 2.0),
                              ys=None, body=body)
        ys.mark_as_output("ys", shape=(batch_dim, time_dim, feat))
        last[1].mark_as_output("b", shape=(batch_dim, feat))

    res, _ = _run_layers(step)
    ref = X[0] + np.array([0.0, 1.0, 0.0, 1.0])[:, None] if case == "swap" else np.cumsum(X[0], axis=0) + 2.0
    np.testing.assert_allclose(res["ys"][0], ref, rtol=1e-5)
    np.testing.assert_allclose(res["b"], np.ones([2, 3]))  # swapped an even number of times (lengths 4, 2)


def test_scan_without_xs_attention_over_encoder():
    steps = Dim(3, name="steps")

    def step(*, model, extern_data, **_):
        enc = extern_data["data"]

        def body(_x, s):  # a decoder-like step: dot attention over the encoder frames (masked by their lengths)
            att = rf.softmax(rf.matmul(enc, s, reduce=feat), axis=time_dim)
            ctx = rf.matmul(att, enc, reduce=time_dim)
            return ctx, s + ctx

        ys, _, _ = rf.scan(spatial_dim=steps, xs=None, initial=rf.zeros([batch_dim, feat]) + 0.1, ys=None, body=body)
        ys.mark_as_output("ys", shape=(batch_dim, steps, feat))

    ref = np.zeros([2, 3, 3])
    for b in range(2):
        s, e = np.full([3], 0.1), X[b, :LENS[b]]
        for t in range(3):
            a = np.exp(e @ s - (e @ s).max())
            ref[b, t] = (a / a.sum()) @ e
            s = s + ref[b, t]
    results, _ = _both(step)
    for res in results:
        np.testing.assert_allclose(res["ys"], ref, rtol=1e-4)


def test_loop_error_leaves_no_reserved_layer():
    from returnn_lite.frontend_layers import NetDictBuilder

    rf.select_backend_returnn_layers_tf()
    builder = NetDictBuilder()
    with builder:
        x = rf.zeros([batch_dim, feat])
        with pytest.raises(rf.FrontendError, match="new state"):
            rf.while_loop(lambda s: rf.reduce_sum(s, axis=[batch_dim, feat]) < 3.0,
                          lambda s: rf.reduce_sum(s, axis=feat), x)
    assert all(d.get("class") for d in builder.net_dict.values()) and not any(k.startswith("loop") for k in
                                                                            builder.net_dict)


def test_scan_inside_cond_branch():
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        init = rf.zeros([batch_dim, feat])

        def true_fn():  # the rec layer is built inside tf.cond's branch; base:base: refs to the outer layers
            _, last, _ = rf.scan(spatial_dim=time_dim, xs=x, initial=init, ys=None,
                                 body=lambda x_t, s: (s + x_t, s + x_t))
            return last

        rf.cond(time_dim.get_dim_value_tensor() > 2, true_fn, lambda: init).mark_as_output("y", shape=(batch_dim, feat))

    res, net_dict = _run_layers(step)
    assert net_dict["cond"]["true_layer"]["subnetwork"]["loop"]["class"] == "rec"
    np.testing.assert_allclose(res["y"], [X[0].sum(0), X[1, :2].sum(0)], rtol=1e-5)


def test_scan_body_with_modules_and_ops_both_backends():
    hid = Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lin = rf.Linear(feat + hid, hid)
            self.norm = rf.LayerNorm(hid)

    def step(*, model, extern_data, **_):
        def body(x_t, s):
            h_in, _ = rf.concat((x_t, feat), (s, hid), out_dim=feat + hid)
            h = rf.tanh(model.norm(model.lin(h_in)))
            h = rf.where(h > 0.5, h * 0.5, h)
            m = rf.reduce_max(rf.softmax(h, axis=hid), axis=hid)
            y = rf.expand_dim(m + rf.gather(h, indices=0, axis=hid), hid) * h
            return y, h + rf.cast(rf.cast(m * 10.0, "int32"), "float32")

        ys, last, _ = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=rf.zeros([batch_dim, hid]),
                              ys=None, body=body)
        ys.mark_as_output("ys", shape=(batch_dim, time_dim, hid))
        last.mark_as_output("last", shape=(batch_dim, hid))

    results, _ = _both(step, Model)
    if len(results) == 2:
        layers, torch_res = results
        np.testing.assert_allclose(layers["ys"][0], torch_res["ys"][0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(layers["ys"][1, :2], torch_res["ys"][1, :2], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(layers["last"], torch_res["last"], rtol=1e-4, atol=1e-5)
