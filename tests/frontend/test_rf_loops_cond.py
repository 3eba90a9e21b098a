"""rf loops ended by a condition: rf.scan(cond=...) (a new dim with per-sequence lengths), rf.Loop with
loop.end(include_eos=False) and a Tensor max_seq_len, on the layers backend (a rec layer with an end sub-layer) and,
for rf.scan, on the torch backend; the numbers against a numpy reference."""

import numpy as np
import pytest

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.tensor import Dim, Tensor, batch_dim

from test_rf_loops import LENS, X, _Empty, _both, _run_layers, extern_data, feat, time_dim


def _lengths(extern_data_):
    """The time lengths as float32 [batch] (4, 2)."""
    return rf.reduce_sum(extern_data_["data"] * 0.0 + 1.0, axis=[time_dim, feat]) / 3.0


def _scan_count_down(before, max_seq_len=None):
    """v starts at the time length - 2 (2, 0); body: v -= 1, y = v * 10; cond: v > 0."""

    def step(*, model, extern_data, **_):
        start = _lengths(extern_data) - 2.0
        msl = max_seq_len(extern_data) if callable(max_seq_len) else max_seq_len
        ys, last, dim = rf.scan(initial={"v": start, "n": rf.convert_to_tensor(0)}, cond_dims=[batch_dim],
                                cond=lambda _x, s: s["v"] > 0.0, cond_before_body=before, max_seq_len=msl,
                                body=lambda _x, s: (s["v"] * 10.0 - 10.0, {"v": s["v"] - 1.0, "n": s["n"] + 1}),
                                ys=rf.zeros([batch_dim]))
        assert dim not in (time_dim, feat) and dim in ys.dims
        ys.mark_as_output("ys", shape=(batch_dim, dim))
        rf.reduce_sum(ys * 0.0 + 1.0, axis=dim).mark_as_output("len", shape=(batch_dim,))
        last["v"].mark_as_output("v", shape=(batch_dim,))
        last["n"].mark_as_output("n", shape=())

    return step


@pytest.mark.parametrize("before,max_seq_len,lens", [
    (True, None, [2, 0]), (False, None, [2, 1]), (True, 1, [1, 0]), (False, 1, [1, 1]),
    (True, "tensor", [1, 0]), (False, 0, [0, 0])])
def test_scan_with_cond_lengths_states_both_backends(before, max_seq_len, lens):
    if max_seq_len == "tensor":  # an int Tensor derived from an input: the time lengths - 3 (1, -1)
        max_seq_len = lambda ed: rf.cast(_lengths(ed), "int32") - 3  # noqa: E731
    results, net_dict = _both(_scan_count_down(before, max_seq_len))
    rec = net_dict["loop"]
    assert rec["class"] == "rec" and "end" in rec["unit"] and isinstance(rec["max_seq_len"], int)
    for res in results:
        assert res["len"].tolist() == lens, res
        for b, n in enumerate(lens):
            np.testing.assert_allclose(res["ys"][b, :n], [10.0 * (LENS[b] - 2 - k) - 10.0 for k in range(n)])
        np.testing.assert_allclose(res["v"], [LENS[b] - 2 - n for b, n in enumerate(lens)])
        assert int(res["n"]) == max(lens)  # a state without the cond dims: after all loop steps


def test_scan_with_cond_zero_steps_for_all():
    def step(*, model, extern_data, **_):
        x = rf.reduce_sum(extern_data["data"], axis=time_dim)
        ys, last, dim = rf.scan(initial=x, cond_dims=[batch_dim], body=lambda _x, s: (s, s * 2.0),
                                cond=lambda _x, s: rf.reduce_sum(s, axis=feat) > 1e9)
        rf.reduce_sum(ys, axis=[dim, feat]).mark_as_output("sum", shape=(batch_dim,))
        last.mark_as_output("last", shape=(batch_dim, feat))

    for res in _both(step)[0]:
        np.testing.assert_allclose(res["sum"], [0.0, 0.0])
        np.testing.assert_allclose(res["last"], [X[0].sum(0), X[1, :2].sum(0)], rtol=1e-5)


@pytest.mark.parametrize("with_ys", [False, True])
def test_scan_with_cond_scalar_cond(with_ys):
    def step(*, model, extern_data, **_):
        s0 = rf.reduce_sum(extern_data["data"], axis=time_dim) * 0.0 + 1.0  # [B, F] ones
        ys, last, dim = rf.scan(initial=(rf.convert_to_tensor(0), s0), cond_dims=[], cond=lambda _x, s: s[0] < 5,
                                body=lambda _x, s: (s[1] if with_ys else None, (s[0] + 1, s[1] * 2.0)))
        last[1].mark_as_output("s", shape=(batch_dim, feat))
        if with_ys:
            rf.reduce_sum(ys, axis=dim).mark_as_output("sum", shape=(batch_dim, feat))

    for res in _both(step)[0]:
        np.testing.assert_allclose(res["s"], np.full([2, 3], 32.0))
        if with_ys:
            np.testing.assert_allclose(res["sum"], np.full([2, 3], 31.0))


def test_scan_with_cond_no_body_call_after_cond_is_false():
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        n = time_dim.get_dim_value_tensor()

        def body(_x, s):  # a gather at the counter: out of range (an error on CPU) if it ran once more
            return rf.gather(x, indices=s, axis=time_dim), s + 1

        ys, last, dim = rf.scan(initial=rf.convert_to_tensor(0), cond_dims=[], cond=lambda _x, s: s < n, body=body)
        rf.reduce_sum(ys, axis=dim).mark_as_output("sum", shape=(batch_dim, feat))
        last.mark_as_output("t", shape=())

    for res in _both(step)[0]:
        np.testing.assert_allclose(res["sum"], X.sum(1), rtol=1e-5)  # all (padded) frames
        assert int(res["t"]) == 4


def test_loop_end_exclude_eos_and_tensor_max_seq_len():
    def step(*, model, extern_data, **_):
        start = _lengths(extern_data) - 2.0  # 2, 0
        loop = rf.Loop(max_seq_len=rf.cast(_lengths(extern_data), "int32") - 1)  # 3, 1
        loop.state.v = start
        with loop:
            loop.end(loop.state.v <= 0.0, include_eos=False)  # the frame where v <= 0 is not part of the sequence
            y = loop.stack(loop.state.v * 10.0)
            last = loop.last(loop.state.v + 100.0)
            loop.state.v = loop.state.v - 1.0
        rf.reduce_sum(y * 0.0 + 1.0, axis=loop.axis).mark_as_output("len", shape=(batch_dim,))
        y.mark_as_output("y", shape=(batch_dim, loop.axis))
        last.mark_as_output("last", shape=(batch_dim,))
        loop.state.v.mark_as_output("v", shape=(batch_dim,))

    res, net_dict = _run_layers(step)
    assert res["len"].tolist() == [2, 0]
    np.testing.assert_allclose(res["y"][0, :2], [20.0, 10.0])
    np.testing.assert_allclose(res["last"], [101.0, 0.0])  # the last frame within the sequence (zeros if empty)
    np.testing.assert_allclose(res["v"], [0.0, 0.0])  # the state after the frames of the sequence


def test_loop_end_exclude_eos_int_max_seq_len():
    def step(*, model, extern_data, **_):
        loop = rf.Loop(max_seq_len=2)
        loop.state.v = _lengths(extern_data) - 3.0  # 1, -1
        with loop:
            loop.end(loop.state.v > 5.0, include_eos=False)  # never: cut by max_seq_len
            y = loop.stack(loop.state.v)
            loop.state.v = loop.state.v + 1.0
        rf.reduce_sum(y, axis=loop.axis).mark_as_output("sum", shape=(batch_dim,))
        loop.state.v.mark_as_output("v", shape=(batch_dim,))

    res, _ = _run_layers(step)
    np.testing.assert_allclose(res["sum"], [3.0, -1.0])  # 1 + 2, -1 + 0: two frames
    np.testing.assert_allclose(res["v"], [3.0, 1.0])


def test_loop_end_include_eos_tensor_max_seq_len_cuts():
    def step(*, model, extern_data, **_):
        loop = rf.Loop(max_seq_len=rf.cast(_lengths(extern_data), "int32") - 1)  # 3, 1
        loop.state.v = _lengths(extern_data)  # 4, 2
        with loop:
            loop.state.v = loop.state.v - 1.0
            y = loop.stack(loop.state.v)
            loop.end(loop.state.v <= 0.0, include_eos=True)
        rf.reduce_sum(y * 0.0 + 1.0, axis=loop.axis).mark_as_output("len", shape=(batch_dim,))
        loop.state.v.mark_as_output("v", shape=(batch_dim,))

    res, _ = _run_layers(step)
    assert res["len"].tolist() == [3, 1]  # cut by max_seq_len (v would reach 0 after 4 and 2 frames)
    np.testing.assert_allclose(res["v"], [1.0, 1.0])


@pytest.mark.parametrize("case", ["xs", "no_cond_dims", "known_dim", "known_dyn_dim", "no_spatial",
                                  "cond_dims", "max_without_cond"])
def test_scan_cond_errors(case):
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        init = rf.zeros([batch_dim])
        kw = dict(initial=init, body=lambda _x, s: (s, s), cond=lambda _x, s: s < 1.0, cond_dims=[batch_dim])
        if case == "xs":
            kw["xs"] = x
        elif case == "no_cond_dims":
            del kw["cond_dims"]
        elif case == "known_dim":
            kw["spatial_dim"] = feat
        elif case == "known_dyn_dim":
            kw["spatial_dim"] = time_dim
        elif case == "no_spatial":
            del kw["cond"], kw["cond_dims"]
        elif case == "cond_dims":
            kw["cond_dims"] = [batch_dim, feat]
            kw["initial"] = rf.zeros([batch_dim, feat])
        elif case == "max_without_cond":
            del kw["cond"], kw["cond_dims"]
            kw.update(spatial_dim=time_dim, xs=x, max_seq_len=3)
        rf.scan(**kw)

    config = Config({"extern_data": extern_data, "get_model": lambda **_: _Empty(), "task": "forward",
                     "forward_step": step})
    match = {"xs": "xs must be None", "no_cond_dims": "cond_dims .* must be given", "known_dim": "new dynamic dim",
             "known_dyn_dim": "already has sizes",
             "no_spatial": "needs spatial_dim",
             "cond_dims": "only \\[\\] or \\[batch\\]", "max_without_cond": "only for a loop with cond"}[case]
    with global_config_ctx(config), pytest.raises(rf.FrontendError, match=match) as exc:
        get_net_dict(epoch=1, step=0)
    assert "test_rf_loops_cond.py" in str(exc.value)


@pytest.mark.parametrize("limit", [100, -1])
def test_while_loop_cond_before_body_cum_concat_state(limit):
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        hist_dim = Dim(0, name="hist")
        n = rf.minimum(time_dim.get_dim_value_tensor(), limit)  # -1: cond(initial) is False, no iteration

        def body(s):
            t, h, h_dim = s
            h, h_dim = rf.cum_concat_step(rf.gather(x, indices=t, axis=time_dim), prev_accum=h, axis=h_dim)
            return t + 1, h, h_dim

        t, hist, hist_dim = rf.while_loop(lambda s: s[0] < n, body, (rf.convert_to_tensor(0), rf.zeros(
            [batch_dim, hist_dim, feat]), hist_dim))
        rf.reduce_sum(hist, axis=hist_dim).mark_as_output("sum", shape=(batch_dim, feat))
        rf.reduce_sum(hist * 0.0 + 1.0, axis=[hist_dim, feat]).mark_as_output("n", shape=(batch_dim,))
        t.mark_as_output("t", shape=())

    for res in _both(step)[0]:
        if limit > 0:
            np.testing.assert_allclose(res["sum"], X.sum(1), rtol=1e-5)
            assert res["n"].tolist() == [12, 12] and int(res["t"]) == 4
        else:
            np.testing.assert_allclose(res["sum"], np.zeros([2, 3]))
            assert res["n"].tolist() == [0, 0] and int(res["t"]) == 0


def test_nested_scan_is_a_rec_layer_in_the_unit():
    def step(*, model, extern_data, **_):
        def body(x_t, s):  # an inner scan over feat: s + the running sum over the features of the frame
            _, last_in, _ = rf.scan(spatial_dim=feat, xs=x_t, initial=s, ys=None, body=lambda v, s2: (v + s2, v + s2))
            return last_in, last_in

        ys, last, _ = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=rf.zeros([batch_dim]), ys=None,
                              body=body)
        ys.mark_as_output("ys", shape=(batch_dim, time_dim))
        last.mark_as_output("last", shape=(batch_dim,))

    results, net_dict = _both(step)
    inner = [d for d in net_dict["loop"]["unit"].values() if d.get("class") == "rec"]
    assert len(inner) == 1 and inner[0]["axis"] is feat
    for res in results:
        np.testing.assert_allclose(res["ys"][0], np.cumsum(X[0].sum(-1)), rtol=1e-5)
        np.testing.assert_allclose(res["ys"][1, :2], np.cumsum(X[1, :2].sum(-1)), rtol=1e-5)
        np.testing.assert_allclose(res["last"], [X[0].sum(), X[1, :2].sum()], rtol=1e-5)


def test_nested_while_loop_and_scan_with_cond_both_backends():
    def step(*, model, extern_data, **_):
        def body(x_t, s):
            out = rf.while_loop(lambda st: st["i"] < 3, lambda st: {"i": st["i"] + 1, "v": st["v"] * 2.0 + x_t},
                                {"i": rf.convert_to_tensor(0), "v": s})
            ys_in, last_in, d_in = rf.scan(
                initial=out["v"], cond_dims=[batch_dim], cond=lambda _x, v: rf.reduce_sum(v, axis=feat) < 100.0,
                body=lambda _x, v: (v, v + 10.0))
            return rf.reduce_sum(ys_in, axis=[d_in, feat]), last_in * 0.01

        ys, last, _ = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=rf.zeros([batch_dim, feat]),
                              ys=None, body=body)
        ys.mark_as_output("ys", shape=(batch_dim, time_dim))
        last.mark_as_output("last", shape=(batch_dim, feat))

    ref_ys, ref_last = np.zeros([2, 4]), np.zeros([2, 3])
    for b in range(2):
        s = np.zeros([3])
        for t in range(LENS[b]):
            v = s
            for _ in range(3):
                v = v * 2.0 + X[b, t]
            total = 0.0
            while v.sum() < 100.0:
                total, v = total + v.sum(), v + 10.0
            ref_ys[b, t], s = total, v * 0.01
        ref_last[b] = s
    for res in _both(step)[0]:
        for b in range(2):
            np.testing.assert_allclose(res["ys"][b, :LENS[b]], ref_ys[b, :LENS[b]], rtol=1e-4)
        np.testing.assert_allclose(res["last"], ref_last, rtol=1e-4)


def test_loop_refused_on_torch_as_in_the_original():
    pytest.importorskip("torch")
    rf.select_backend_torch()
    try:
        with pytest.raises(rf.FrontendError, match="as in the original, rf.Loop is the loop of the layers backend"):
            rf.Loop(axis=time_dim)
    finally:
        rf.select_backend_returnn_layers_tf()


def test_scan_with_cond_greedy_decoder_both_backends():
    vocab, hid = Dim(5, name="vocab"), Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.emb = rf.Embedding(vocab, hid)
            self.lin = rf.Linear(hid + feat, vocab)

    def step(*, model, extern_data, **_):
        enc = rf.reduce_mean(extern_data["data"], axis=time_dim)  # [B, F]
        bos = rf.reduce_argmax(rf.zeros([batch_dim, vocab]), axis=vocab)  # 0, sparse

        def body(_x, s):
            h, _ = rf.concat((model.emb(s["label"]), hid), (enc + s["score"], feat), out_dim=hid + feat)
            logits = model.lin(h)
            label = rf.reduce_argmax(logits, axis=vocab)
            score = s["score"] + rf.reduce_max(logits, axis=vocab)
            return (logits, label), {"label": label, "score": score}

        (logits, labels), last, dim = rf.scan(
            initial={"label": bos, "score": rf.zeros([batch_dim])}, cond_dims=[batch_dim], cond_before_body=False,
            cond=lambda _x, s: rf.not_equal(s["label"], 0), body=body,
            max_seq_len=rf.cast(_lengths(extern_data), "int32") + 2)
        rf.reduce_sum(logits, axis=[dim, vocab]).mark_as_output("logits", shape=(batch_dim,))
        rf.reduce_sum(rf.reduce_max(logits, axis=vocab) * 0.0 + 1.0, axis=dim).mark_as_output("len", shape=(batch_dim,))
        rf.reduce_max(rf.cast(labels, "float32"), axis=dim).mark_as_output("max_label", shape=(batch_dim,))
        last["label"].mark_as_output("label", shape=(batch_dim,))
        last["score"].mark_as_output("score", shape=(batch_dim,))

    results, _ = _both(step, Model)
    if len(results) == 2:
        layers, torch_res = results
        assert layers["len"].tolist() == torch_res["len"].tolist()
        assert layers["label"].tolist() == torch_res["label"].tolist()
        assert layers["max_label"].tolist() == torch_res["max_label"].tolist()
        for key in ("logits", "score"):
            np.testing.assert_allclose(layers[key], torch_res[key], rtol=1e-4, atol=1e-5)
    assert all(1 <= n <= m for n, m in zip(results[0]["len"], LENS + 2))


def test_state_and_loop_state_api():
    a, b = Tensor("a", dims=[], dtype="float32"), Tensor("b", dims=[], dtype="float32")
    st = rf.State(h=a, c={"x": [b, a]})
    assert st.h is a and st["c"]["x"][0] is b and repr(st).startswith("State(h=")
    assert st.deep_tensors() == [a, b]  # each once, in order
    assert rf.State({"h": a}) == {"h": a} and rf.State(a) == {"state": a}
    with pytest.raises(AttributeError, match="has no 'y'"):
        st.y  # noqa: B018
    with pytest.raises(TypeError, match="either keyword arguments or one positional"):
        rf.State(a, h=b)

    def step(*, model, extern_data, **_):
        loop = rf.Loop(axis=time_dim)
        loop.state["acc"] = rf.zeros([batch_dim, feat])
        loop.state.n = rf.State(i=rf.zeros([batch_dim]))
        assert loop.state.keys() == ["acc", "n"] and len(loop.state) == 2 and len(loop.state.deep_tensors()) == 2
        with loop:
            loop.state["acc"] = loop.state["acc"] + loop.unstack(extern_data["data"])
            loop.state.n = rf.State(i=loop.state.n.i + 1.0)
        loop.state["acc"].mark_as_output("acc", shape=(batch_dim, feat))
        assert isinstance(loop.state.n, rf.State)
        loop.state.n.i.mark_as_output("n", shape=(batch_dim,))

    res, _ = _run_layers(step)
    np.testing.assert_allclose(res["acc"], [X[0].sum(0), X[1, :2].sum(0)], rtol=1e-5)
    np.testing.assert_allclose(res["n"], LENS)


def test_loop_end_exclude_eos_cum_concat_state():
    def step(*, model, extern_data, **_):
        loop = rf.Loop(max_seq_len=6)
        loop.state.v = _lengths(extern_data) - 2.0  # 2, 0
        loop.state.hist = rf.zeros([batch_dim, Dim(0, name="hist0")])
        loop.state.hist_dim = loop.state.hist.dims[1]
        with loop:
            loop.end(loop.state.v <= 0.0, include_eos=False)
            loop.state.hist, loop.state.hist_dim = rf.cum_concat_step(
                loop.state.v, prev_accum=loop.state.hist, axis=loop.state.hist_dim)
            loop.state.v = loop.state.v - 1.0
        assert loop.state.hist_dim is loop.axis
        rf.reduce_sum(loop.state.hist, axis=loop.axis).mark_as_output("sum", shape=(batch_dim,))
        rf.reduce_sum(loop.state.hist * 0.0 + 1.0, axis=loop.axis).mark_as_output("n", shape=(batch_dim,))

    res, _ = _run_layers(step)
    assert res["n"].tolist() == [2, 0]
    np.testing.assert_allclose(res["sum"], [3.0, 0.0])  # 2 + 1


def test_nested_scan_gradients_match_unrolled_inner_loop():
    from test_rf_loops import _values_and_grads

    two, hid = Dim(2, name="two"), Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = rf.Linear(feat, hid), rf.Linear(hid, feat)

        def lin(self, h):
            return self.b(rf.tanh(self.a(h)))

    def step(*, model, extern_data, **_):
        x = extern_data["data"]

        def inner(x_t, s):
            _, h, _ = rf.scan(spatial_dim=two, xs=None, initial=s, ys=None,
                              body=lambda _x, h_: (h_, rf.tanh(model.lin(h_) + x_t)))
            return h, h

        def unrolled(x_t, s):
            for _ in range(2):
                s = rf.tanh(model.lin(s) + x_t)
            return s, s

        for name, body in (("nested", inner), ("ref", unrolled)):
            ys, _, _ = rf.scan(spatial_dim=time_dim, xs=x, initial=rf.zeros([batch_dim, feat]), ys=None, body=body)
            rf.reduce_sum(ys, axis=[batch_dim, time_dim, feat]).mark_as_output(name, shape=())

    (v, g), (v_ref, g_ref) = _values_and_grads(Model, step, ["nested", "ref"])
    np.testing.assert_allclose(v, v_ref, rtol=1e-5)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_nested_loop_with_end_uses_outer_prev_state():
    def step(*, model, extern_data, **_):
        def body(x_t, s):
            loop = rf.Loop(max_seq_len=5)
            loop.state.v = rf.reduce_sum(x_t, axis=feat) * 0.0 + 3.0
            with loop:
                loop.end(loop.state.v <= 0.0, include_eos=False)  # frames with v = 3, 2, 1
                y = loop.stack(loop.state.v + s)  # s: the outer loop's previous state (via a copy layer)
                last = loop.last(loop.state.v)
                loop.state.v = loop.state.v - 1.0
            return rf.reduce_sum(y, axis=loop.axis) + last, s + 1.0

        ys, _, _ = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=rf.zeros([batch_dim]), ys=None,
                           body=body)
        ys.mark_as_output("ys", shape=(batch_dim, time_dim))

    res, net_dict = _run_layers(step)
    assert net_dict["loop"]["unit"]["state_prev"] == {"class": "copy", "from": ["prev:state"]}
    np.testing.assert_allclose(res["ys"][0], [7.0, 10.0, 13.0, 16.0])  # 3 + 2 + 1 + 3 * t, last v: 1
    np.testing.assert_allclose(res["ys"][1, :2], [7.0, 10.0])


def test_loop_last_of_sparse_tensor_without_end_frame():
    def step(*, model, extern_data, **_):
        loop = rf.Loop(max_seq_len=3)
        loop.state.v = rf.reduce_sum(extern_data["data"], axis=time_dim)
        with loop:
            loop.end(rf.reduce_sum(loop.state.v, axis=feat) > 1e9, include_eos=False)  # never: 3 frames
            last = loop.last(rf.reduce_argmax(loop.state.v, axis=feat))
            loop.state.v = loop.state.v * -1.0
        assert last.sparse_dim == feat
        rf.cast(last, "int32").mark_as_output("last", shape=(batch_dim,))

    res, _ = _run_layers(step)
    assert res["last"].tolist() == [np.argmax(X[0].sum(0)), np.argmax(X[1, :2].sum(0))]  # frame 2: v * (-1) ** 2
