"""rf.scan / rf.while_loop over a simple RNN whose state has the batch dim ([B, hidden]), in the ways user code
writes it (the original's loop tests as user code, state as a Tensor / dict / rf.State / nested tuple, ys as
templates or None, a loop with cond over cond_dims=[batch] and no spatial_dim, return_tensor_arrays): the layers
backend and torch give the same values, which match a numpy reference."""

import numpy as np
import pytest

import returnn_lite.frontend as rf
from returnn_lite.tensor import Dim, Tensor, batch_dim

from test_rf_loops import INPUTS, LENS, X, _run_layers, _run_torch, feat, time_dim

pytest.importorskip("torch")
hid = Dim(5, name="hid")


class _RNN(rf.Module):
    def __init__(self):
        super().__init__()
        self.ff = rf.Linear(feat, hid)
        self.rec = rf.Linear(hid, hid)

    def step(self, x_t, h):
        return rf.tanh(self.ff(x_t) + self.rec(h))


def _y_template():
    return Tensor("y", [batch_dim, hid], "float32")  # (positional dims and dtype, as the original's Tensor)


def _plain(model, x):
    def body(x_t, h):
        h = model.step(x_t, h)
        return h, h
    return rf.scan(spatial_dim=time_dim, xs=x, initial=rf.zeros([batch_dim, hid]), ys=_y_template(), body=body)


def _ys_none(model, x):
    def body(x_t, h):
        h = model.step(x_t, h)
        return h, h
    return rf.scan(spatial_dim=time_dim, xs=x, initial=rf.zeros((batch_dim, hid)), body=body)


def _dicts(model, x):
    def body(xs, s):
        h = model.step(xs["x"], s["h"])
        return {"y": h}, {"h": h}
    ys, s, d = rf.scan(spatial_dim=time_dim, xs={"x": x}, initial={"h": rf.zeros([batch_dim, hid])},
                       ys={"y": _y_template()}, body=body)
    return ys["y"], s["h"], d


def _rf_state(model, x):
    def body(x_t, s):
        h = model.step(x_t, s.h)
        return h, rf.State(h=h)
    ys, s, d = rf.scan(spatial_dim=time_dim, xs=x, initial=rf.State(h=rf.zeros([batch_dim, hid])), ys=_y_template(),
                       body=body)
    return ys, s.h, d


def _nested(model, x):
    def body(x_t, s):
        h, (n,) = s
        h = model.step(x_t, h)
        return (h, [n + 1.0]), (h, (n + 1.0,))
    (ys, _), (h, _), d = rf.scan(
        spatial_dim=time_dim, xs=x, initial=(rf.zeros([batch_dim, hid]), (rf.zeros([batch_dim]),)),
        ys=(_y_template(), [Tensor("n", dims=[batch_dim], dtype="float32")]), body=body)
    return ys, h, d


def _tensor_arrays(model, x):
    def body(x_t, h):
        h = model.step(x_t, h)
        return h, h
    ys, h, d = rf.scan(spatial_dim=time_dim, xs=x, initial=rf.zeros([batch_dim, hid]), ys=_y_template(), body=body,
                       return_tensor_arrays=True)
    assert isinstance(ys, rf.TensorArray)
    return ys.stack(axis=d), h, d


def _cond_no_spatial_dim(model, x):
    """cond over [batch] and no spatial_dim: the scan's new dim has per-sequence lengths (here the input's)."""
    def body(_, s):
        h, t = s
        h = model.step(rf.gather(x, axis=time_dim, indices=t, clip_to_valid=True), h)
        return h, (h, t + 1)

    def cond(_, s):
        return s[1] < time_dim.get_size_tensor()

    initial = (rf.zeros([batch_dim, hid]), rf.zeros([batch_dim], dtype=rf.get_default_array_index_dtype()))
    ys, (h, _), d = rf.scan(cond_dims=[batch_dim], initial=initial, ys=_y_template(), cond=cond, body=body)
    return ys, h, d


VARIANTS = {f.__name__.lstrip("_"): f for f in (_plain, _ys_none, _dicts, _rf_state, _nested, _tensor_arrays,
                                                  _cond_no_spatial_dim)}


def _step(variant):
    def step(*, model, extern_data, **_):
        ys, h, d = VARIANTS[variant](model, extern_data["data"])
        ys.mark_as_output("ys", shape=[batch_dim, d, hid])
        h.mark_as_output("h", shape=[batch_dim, hid])
        d.get_size_tensor().mark_as_output("len", shape=[batch_dim])
    return step


def _reference(params):
    """numpy: per sequence, h_t = tanh(x_t W + b + h_{t-1} R + c) over its own frames; its final h at its length."""
    hs, finals = np.zeros((2, 4, 5), "float32"), []
    for b in range(2):
        h = np.zeros(5, "float32")
        for t in range(LENS[b]):
            h = np.tanh(X[b, t] @ params["ff.weight"] + params["ff.bias"] + h @ params["rec.weight"] +
                        params["rec.bias"])
            hs[b, t] = h
        finals.append(h)
    return hs, np.stack(finals)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_scan_rnn_with_batch_state_both_backends(variant):
    params = {}
    res_layers, _ = _run_layers(_step(variant), model_cls=_RNN, params_out=params)
    res_torch = _run_torch(_step(variant), model_cls=_RNN, params=params)
    hs, final = _reference(params)
    mask = np.arange(4)[None, :] < LENS[:, None]
    for res in (res_layers, res_torch):
        np.testing.assert_array_equal(res["len"], LENS)
        np.testing.assert_allclose(res["ys"][mask], hs[mask], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(res["h"], final, rtol=1e-5, atol=1e-6)


# ---- the original's loop tests (tests/test_rf_loop.py) as user code ----
def _orig_while_loop(*, model, extern_data, **_):
    x = extern_data["data"]

    def _cond(s):
        t, s_ = s
        return rf.logical_and(rf.reduce_sum(s_, axis=s_.dims) < 50, t < time_dim.get_dim_value_tensor())

    def _body(s):
        t, s_ = s
        return t + 1, s_ + rf.abs(rf.gather(x, indices=t, axis=time_dim))

    _, final_s = rf.while_loop(_cond, _body, initial=(
        rf.zeros((), dtype=rf.get_default_array_index_dtype()), rf.zeros((batch_dim, feat))))
    final_s.mark_as_default_output(shape=(batch_dim, feat))


def _orig_scan_unknown_len(*, model, extern_data, **_):
    x = extern_data["data"]

    def _cond(_, s):
        t, s_ = s
        return rf.logical_and(rf.reduce_sum(s_, axis=feat) < 3, t < time_dim.get_dim_value_tensor())

    def _body(_, s):
        t, s_ = s
        y_ = s_ + rf.abs(rf.gather(x, indices=t, axis=time_dim))
        return y_, (t + 1, y_)

    y, _, out_time_dim = rf.scan(
        cond=_cond, body=_body, cond_dims=[batch_dim],
        initial=(rf.zeros((), dtype=rf.get_default_array_index_dtype()), rf.zeros((batch_dim, feat))),
        ys=Tensor("y", dims=(batch_dim, feat), dtype=x.dtype))
    y.mark_as_default_output(shape=(batch_dim, out_time_dim, feat))
    out_time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])


def test_original_while_loop_test_as_user_code():
    absx = np.abs(X)
    s, t = np.zeros((2, 3), "float32"), 0
    while s.sum() < 50 and t < 4:  # (the sum over all of the state, as the original's test)
        s, t = s + absx[:, t], t + 1
    for run in (_run_layers, _run_torch):
        res = run(_orig_while_loop)
        res = res[0] if isinstance(res, tuple) else res
        np.testing.assert_allclose(res["output"], s, rtol=1e-5)


def test_original_scan_unknown_len_test_as_user_code():
    absx = np.abs(X)
    lens, frames = [], []
    for b in range(2):
        s, t, ys = np.zeros(3, "float32"), 0, []
        while s.sum() < 3 and t < 4:  # (t < the padded length: frames beyond the length are the input's padding)
            s, t = s + absx[b, t], t + 1
            ys.append(s)
        lens.append(t)
        frames.append(ys)
    for run in (_run_layers, _run_torch):
        res = run(_orig_scan_unknown_len)
        res = res[0] if isinstance(res, tuple) else res
        np.testing.assert_array_equal(res["len"], lens)
        for b in range(2):
            np.testing.assert_allclose(res["output"][b, :lens[b]], np.stack(frames[b]), rtol=1e-5)


def test_tensor_array_push_back_getitem_stack_torch():
    import torch

    rf.select_backend_torch()
    try:
        ta = rf.TensorArray(Tensor("y", dims=[hid], dtype="float32"))
        for i in range(3):
            ta = ta.push_back(rf.convert_to_tensor(torch.full((5,), float(i)), dims=[hid]))
        assert len(ta) == 3
        np.testing.assert_array_equal(ta[1].raw_tensor.numpy(), np.full(5, 1.0))
        frames_dim = Dim(3, name="frames")
        stacked = ta.stack(axis=frames_dim)
        assert set(stacked.dims) == {frames_dim, hid}
        stacked = stacked.copy_transpose_by_dims([frames_dim, hid])
        back = rf.TensorArray.unstack(stacked, axis=frames_dim)
        np.testing.assert_array_equal(back[2].raw_tensor.numpy(), np.full(5, 2.0))
        with pytest.raises(rf.FrontendError, match="push_back"):
            back.push_back(ta[0])
    finally:
        rf.select_backend_returnn_layers_tf()
