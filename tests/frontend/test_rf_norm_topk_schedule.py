"""rf.moments / RMSNorm / GroupNorm / normalize, LayerNorm over several dims, BatchNorm(track_running_stats=False),
rf.top_k (one and several axes), rf.reduce_out, PiecewiseLinear(StepwiseScheduler), parametrizations (weight
dropout / noise), rf.Parameter(tensor) / assign_add, rf.random options; numpy references, both backends where the
op builds layers."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import in_order, random_params, run_layers, run_torch  # noqa: E402

time_dim = Dim(None, name="time")
feat_dim = Dim(8, name="feat")
extern_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
LENS = np.array([5, 3, 4], dtype="int32")


def _inputs(seed=1):
    rng = np.random.RandomState(seed)
    return {"data": rng.randn(3, 5, 8).astype("float32"), "size:time": LENS}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.rms = rf.RMSNorm(feat_dim)
        self.group = rf.GroupNorm(feat_dim, num_groups=2)
        self.bn = rf.BatchNorm(feat_dim, track_running_stats=False, use_mask=True)


def _step(*, model, extern_data, **_):
    x = extern_data["data"]
    model.rms(x).mark_as_output("rms", shape=[batch_dim, time_dim, feat_dim])
    model.group(x).mark_as_output("group", shape=[batch_dim, time_dim, feat_dim])
    model.bn(x).mark_as_output("bn", shape=[batch_dim, time_dim, feat_dim])
    mean, var = rf.moments(x, axis=time_dim, correction=1)
    var.mark_as_output("var_unbiased", shape=[batch_dim, feat_dim])
    rf.normalize(x, axis=feat_dim).mark_as_output("normalized", shape=[batch_dim, time_dim, feat_dim])
    values, indices, k_dim = rf.top_k(x, axis=feat_dim, k=3)
    values.mark_as_output("top_values", shape=[batch_dim, time_dim, k_dim])
    indices.mark_as_output("top_indices", shape=[batch_dim, time_dim, k_dim])
    _, (i_t, i_f), k2 = rf.top_k(x, axis=[time_dim, feat_dim], k=2)
    i_t.mark_as_output("top2_time", shape=[batch_dim, k2])
    i_f.mark_as_output("top2_feat", shape=[batch_dim, k2])


def _np_refs(x):
    refs = {}
    refs["rms"] = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    g = x.reshape(3, 5, 2, 4)
    refs["group"] = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-6)).reshape(3, 5, 8)
    valid = np.concatenate([x[b, :n] for b, n in enumerate(LENS)])
    refs["bn"] = (x - valid.mean(0)) / np.sqrt(valid.var(0) + 1e-3)
    refs["var_unbiased"] = np.stack([x[b, :n].var(0, ddof=1) for b, n in enumerate(LENS)])
    refs["normalized"] = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    refs["top_values"] = -np.sort(-x, axis=-1)[..., :3]
    refs["top_indices"] = np.argsort(-x, axis=-1, kind="stable")[..., :3]
    flat = np.where(np.arange(5)[None, :, None] < LENS[:, None, None], x, -np.inf).reshape(3, -1)
    top2 = np.argsort(-flat, axis=-1, kind="stable")[:, :2]
    refs["top2_time"], refs["top2_feat"] = top2 // 8, top2 % 8
    return refs


def _check(res):
    x = _inputs()["data"]
    refs = _np_refs(x)
    for name, ref in refs.items():
        dims = res[name + ":dims"]
        order = [d for d in [batch_dim, time_dim] if d in dims] + [d for d in dims if d not in (batch_dim, time_dim)]
        got = in_order(res, name, order)
        for b, n in enumerate(LENS):
            g, r = (got[b, :n], ref[b, :n]) if time_dim in dims else (got[b], ref[b])
            if name.startswith("top") and "values" not in name:
                np.testing.assert_array_equal(g, r, err_msg=name)
            else:
                np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4, err_msg=name)


def test_norms_and_top_k_torch():
    params = random_params(Model, scale=0.0)
    params = {k: (np.ones_like(v) if k.endswith(("scale", "gamma")) else v) for k, v in params.items()}
    res, _ = run_torch(extern_data, Model, _step, _inputs(), params, [time_dim])
    _check(res)


def test_norms_and_top_k_layers_backend():
    pytest.importorskip("tensorflow")
    params = random_params(Model, scale=0.0)
    params = {k: (np.ones_like(v) if k.endswith(("scale", "gamma")) else v) for k, v in params.items()}
    res, names = run_layers(extern_data, Model, _step, _inputs(), params, [time_dim])
    assert names == sorted(params)
    _check(res)


def test_layer_norm_over_two_dims_and_reduce_out():
    rf.select_backend_torch()
    a, b = Dim(3, name="a"), Dim(4, name="b")
    x_np = np.random.RandomState(0).randn(2, 3, 4).astype("float32")
    x = rf.convert_to_tensor(torch.tensor(x_np), dims=[Dim(2, name="n"), a, b])
    ln = rf.LayerNorm([a, b])
    assert [d for d in ln.scale.dims] == [a, b]
    y = ln(x).copy_transpose(x.dims).raw_tensor.detach().numpy()
    ref = (x_np - x_np.mean((1, 2), keepdims=True)) / np.sqrt(x_np.var((1, 2), keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    x.feature_dim = b
    out = rf.reduce_out(x, mode="max", num_pieces=2)
    np.testing.assert_allclose(out.copy_transpose([x.dims[0], a, out.dims[-1]]).raw_tensor.numpy(),
                               x_np.reshape(2, 3, 2, 2).max(-1))


def test_piecewise_linear_and_stepwise_scheduler():
    rf.select_backend_torch()
    pl = rf.PiecewiseLinear({0: 1.0, 10: 0.1, 20: 0.01})
    assert sorted(dict(pl.named_parameters())) == ["_keys", "_values"]
    for x, want in [(-5, 1.0), (0, 1.0), (5, 0.55), (10, 0.1), (15, 0.055), (20, 0.01), (30, 0.01)]:
        assert abs(float(pl(x).raw_tensor) - want) < 1e-6
    sched = rf.PiecewiseLinearStepwiseScheduler({0: 0.0, 100: 1.0})
    rf.init_train_step_run_ctx(train_flag=True, step=25)
    assert abs(float(sched().raw_tensor) - 0.25) < 1e-6


def test_weight_dropout_and_noise_only_in_training():
    rf.select_backend_torch()
    in_dim, out_dim = Dim(50, name="in"), Dim(40, name="out")
    lin = rf.Linear(in_dim, out_dim)
    weight = lin.weight
    rf.weight_dropout(lin, "weight", drop_prob=0.5)
    assert rf.is_parametrized(lin, "weight") and dict(lin.named_parameters())["weight"] is weight
    rf.init_train_step_run_ctx(train_flag=False)
    assert lin.weight is weight
    rf.init_train_step_run_ctx(train_flag=True)
    dropped = lin.weight.raw_tensor.detach().numpy()
    zero = dropped == 0
    assert 0.3 < zero.mean() < 0.7
    np.testing.assert_allclose(dropped[~zero], 2 * weight.raw_tensor.detach().numpy()[~zero], rtol=1e-6)
    rf.remove_parametrization(lin, "weight")
    assert not rf.is_parametrized(lin) and type(lin) is rf.Linear and lin.weight is weight
    rf.weight_noise(lin, "bias", std=0.1)
    noisy = lin.bias.raw_tensor.detach().numpy()
    assert 0.05 < noisy.std() < 0.2
    rf.init_train_step_run_ctx(train_flag=False)
    assert lin.bias is dict(lin.named_parameters())["bias"]


def test_parameter_from_tensor_assign_and_running_mean():
    rf.select_backend_torch()
    d = Dim(3, name="d")
    p = rf.Parameter(rf.convert_to_tensor(torch.tensor([1.0, 2.0, 3.0]), dims=[d]), auxiliary=True)
    assert not p.trainable and p.raw_tensor.tolist() == [1.0, 2.0, 3.0]
    p.assign_add(1.0)
    p.assign(rf.convert_to_tensor(torch.tensor([0.0, 1.0, 0.0]), dims=[d]) + p)
    assert p.raw_tensor.tolist() == [2.0, 4.0, 4.0]
    rm = rf.RunningMean(d, alpha=0.5)
    x = rf.convert_to_tensor(torch.tensor([[2.0, 4.0, 6.0], [4.0, 4.0, 4.0]]), dims=[Dim(2, name="n"), d])
    assert rm(x).raw_tensor.tolist() == [1.5, 2.0, 2.5]


def test_random_options():
    rf.select_backend_torch()
    d = Dim(1000, name="d")
    rf.set_random_seed(3)
    a = rf.random_normal([d], static=True).raw_tensor
    rf.reset_step_random_state()
    b = rf.random_normal([d], static=True).raw_tensor
    assert torch.equal(a, b)
    t = rf.random_truncated_normal([d], stddev=2.0).raw_tensor
    assert t.abs().max() <= 4.0
    u = rf.random_uniform([d], minval=2, maxval=5, dtype="int32").raw_tensor
    assert set(u.tolist()) == {2, 3, 4}
    with pytest.raises(rf.FrontendError, match="explicit_state"):
        rf.random_uniform([d], explicit_state=object())
    log_probs = rf.convert_to_tensor(torch.log(torch.tensor([0.7, 0.1, 0.1, 0.1])), dims=[Dim(4, name="c")])
    k_dim = Dim(4, name="k")
    idx = rf.random_choice_without_replacement(log_probs=log_probs, axis=log_probs.dims[0], num_samples_dim=k_dim)
    assert sorted(idx.raw_tensor.tolist()) == [0, 1, 2, 3]


x_time = Dim(None, name="x_time")
pl_extern = {"x": {"dims": (batch_dim, x_time), "dtype": "float32"}}


class _PlModel(rf.Module):
    def __init__(self):
        super().__init__()
        self.pl = rf.PiecewiseLinear({0: 1.0, 10: 0.1, 20: 0.01})


def _pl_step(*, model, extern_data, **_):
    model.pl(extern_data["x"]).mark_as_output("y", shape=[batch_dim, x_time])


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_piecewise_linear_both_backends(backend):
    if backend == "layers":
        pytest.importorskip("tensorflow")
    inputs = {"x": np.array([[-5, 0, 5, 10], [15, 20, 30, 0]], "float32"), "size:x_time": np.array([4, 3], "int32")}
    params = {"pl._keys": np.array([0, 10, 20], "float32"), "pl._values": np.array([1, 0.1, 0.01], "float32")}
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(pl_extern, _PlModel, _pl_step, inputs, params, [x_time])
    np.testing.assert_allclose(in_order(res, "y", [batch_dim, x_time])[:, :3],
                               [[1.0, 1.0, 0.55], [0.055, 0.01, 0.01]], rtol=1e-5)
