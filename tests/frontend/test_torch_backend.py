"""The rf torch backend: the same model with the same params gives the same outputs, loss and gradients as the
layers backend; params are torch.nn.Parameter with the rf names; training-mode ops; errors name the call site."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorflow as tf  # noqa: E402

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.config import Config, global_config_ctx  # noqa: E402
from returnn_lite.frontend_layers import get_net_dict  # noqa: E402
from returnn_lite.network import TFNetwork  # noqa: E402
from returnn_lite.tensor import Dim, Tensor, TensorDict, batch_dim  # noqa: E402
from rf_harness import extern_feed  # noqa: E402 (tests/frontend/rf_harness.py)

tf1 = tf.compat.v1

time_dim = Dim(None, name="time")
in_dim = Dim(5, name="in")
hid_dim = Dim(6, name="hid")
classes_dim = Dim(4, name="classes")
conv_dim = Dim(7, name="conv")
extern_data = {
    "data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.conv = rf.Conv1d(in_dim, conv_dim, 3, padding="same")
        self.lstm = rf.LSTM(conv_dim, hid_dim)
        self.norm = rf.LayerNorm(hid_dim)
        self.output = rf.Linear(hid_dim, classes_dim)

    def __call__(self, x):
        c, _ = self.conv(x, in_spatial_dim=time_dim)
        h, _ = self.lstm(rf.relu(c), state=self.lstm.default_initial_state(batch_dims=[batch_dim]),
                         spatial_dim=time_dim)
        h = self.norm(h) + rf.reduce_max(c, axis=conv_dim)
        return self.output(h)


def get_model(**_):
    return Model()


def train_step(*, model, extern_data, **_):
    logits = model(extern_data["data"])
    logits.mark_as_output("logits", shape=[batch_dim, time_dim, classes_dim])
    ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=extern_data["classes"], axis=classes_dim)
    ce.mark_as_loss("ce", use_normalized_loss=True)
    pooled = rf.reduce_mean(logits, axis=time_dim)
    pooled.mark_as_output("pooled", shape=[batch_dim, classes_dim])


def _inputs():
    rng = np.random.RandomState(1)
    lens = np.array([7, 5, 4], dtype="int32")
    return {"data": rng.randn(3, 7, 5).astype("float32"), "classes": rng.randint(0, 4, (3, 7)).astype("int32"),
            "size:time": lens}


def _params():
    rf.select_backend_torch()
    rng = np.random.RandomState(2)
    return {name: rng.uniform(-0.5, 0.5, tuple(d.dimension for d in p.dims)).astype("float32")
            for name, p in Model().named_parameters()}


def _run_torch(inputs, params):
    rf.select_backend_torch()
    td = TensorDict()
    td.update(extern_data, auto_convert=True)
    for d in (time_dim, batch_dim):
        d.reset_eager()
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(3, dtype=torch.int32))
    time_dim.dyn_size_ext = Tensor("time_size", dims=[batch_dim], dtype="int32",
                                   raw_tensor=torch.tensor(inputs["size:time"]))
    for key in ("data", "classes"):
        td.data[key].raw_tensor = torch.tensor(inputs[key])
    model = get_model()
    for name, p in model.named_parameters():
        with torch.no_grad():
            p.raw_tensor.copy_(torch.tensor(params[name]))
    rf.init_train_step_run_ctx(train_flag=False, step=0, epoch=1)
    train_step(model=model, extern_data=td)
    ctx = rf.get_run_ctx()
    total = ctx.total_loss()
    total.raw_tensor.backward()
    res = {name: t.raw_tensor.detach().numpy() for name, t in ctx.outputs.data.items()}
    res["loss"] = total.raw_tensor.detach().numpy()
    res.update({"grad:" + name: p.raw_tensor.grad.numpy() for name, p in model.named_parameters()})
    for d in (time_dim, batch_dim):
        d.reset_eager()
    return res


def _run_layers(inputs, params):
    config = Config({"extern_data": extern_data, "get_model": get_model, "task": "train", "train_step": train_step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, model = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=False, eval_flag=True)
        net.construct_from_dict(net_dict)
        fetches = {name: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for name, t in outputs.items()}
        param_vars = {v.op.name[:-len("/param")].replace("/", "."): v for v in net.get_params_list()}
        total = net.get_total_loss()
        fetches["loss"] = total
        names = sorted(param_vars)
        grads = tf.gradients(total, [param_vars[n] for n in names])  # before the first run (TF while loops)
        fetches.update({"grad:" + n: g for n, g in zip(names, grads)})
        session.run(tf1.global_variables_initializer())
        for name, v in param_vars.items():
            v.load(params[name], session)
        feed = extern_feed(net, inputs)
        res = session.run(fetches, feed_dict=feed)
        time_dim.reset_eager()
    return res


def test_same_model_same_params_same_outputs_loss_and_grads_on_both_backends():
    inputs, params = _inputs(), _params()
    res_torch = _run_torch(inputs, params)
    res_layers = _run_layers(inputs, params)
    assert set(res_torch) == set(res_layers)
    mask = np.arange(7)[None, :] < inputs["size:time"][:, None]
    np.testing.assert_allclose(res_torch["logits"][mask], res_layers["logits"][mask], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res_torch["pooled"], res_layers["pooled"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res_torch["loss"], res_layers["loss"], rtol=1e-5)
    assert res_torch["loss"] > 0.1
    for key in res_torch:
        if key.startswith("grad:"):
            np.testing.assert_allclose(res_torch[key], res_layers[key], rtol=1e-3, atol=1e-5, err_msg=key)


def test_params_are_torch_parameters_with_rf_names_in_the_state_dict():
    from returnn_lite.torch.frontend import rf_module_to_pt_module

    rf.select_backend_torch()
    model = Model()
    pt = rf_module_to_pt_module(model)
    assert isinstance(pt, torch.nn.Module)
    names = [n for n, _ in model.named_parameters()]
    assert list(pt.state_dict().keys()) == names
    assert "lstm.ff_weight" in names and "output.bias" in names
    assert all(isinstance(p.raw_tensor, torch.nn.Parameter) for p in model.parameters())
    assert tuple(pt.state_dict()["lstm.ff_weight"].shape) == (24, 7)
    assert float(pt.state_dict()["norm.scale"].sum()) == 6.0  # initial 1.0
    opt = torch.optim.SGD(pt.parameters(), lr=0.1)
    assert len(opt.param_groups[0]["params"]) == len(names)


def test_dropout_and_batch_norm_in_training():
    rf.select_backend_torch()
    rf.set_random_seed(1)
    feat = Dim(8, name="feat")
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(50, dtype=torch.int32))
    x = Tensor("x", dims=[batch_dim, feat], dtype="float32", raw_tensor=torch.randn(50, 8) * 3 + 2)
    rf.init_train_step_run_ctx(train_flag=True, step=0, epoch=1)
    y = rf.dropout(x, 0.5, axis=feat)
    zeros = (y.raw_tensor == 0).float().mean().item()
    assert 0.2 < zeros < 0.8
    kept = y.raw_tensor != 0
    torch.testing.assert_close(y.raw_tensor[kept], x.raw_tensor[kept] * 2)
    bn = rf.BatchNorm(feat, momentum=0.5)
    out = bn(x)
    assert abs(out.raw_tensor.mean().item()) < 1e-4
    assert abs(out.raw_tensor.std(unbiased=False).item() - 1.0) < 1e-2
    torch.testing.assert_close(bn.running_mean.raw_tensor, x.raw_tensor.mean(0) * 0.5)
    rf.init_train_step_run_ctx(train_flag=False, step=0, epoch=1)
    assert rf.dropout(x, 0.5) is x
    batch_dim.reset_eager()


def test_dim_mismatch_error_names_the_call_site():
    rf.select_backend_torch()
    a, b = Dim(3, name="a"), Dim(4, name="b")
    x = Tensor("x", dims=[a], dtype="float32", raw_tensor=torch.zeros(3))
    y = Tensor("y", dims=[b], dtype="float32", raw_tensor=torch.zeros(4))
    with pytest.raises(rf.FrontendError, match=r"test_torch_backend\.py:\d+.*dims do not match"):
        x + y
    with pytest.raises(rf.FrontendError, match="is not a dim of"):
        rf.reduce_sum(x, axis=b)
    z = rf.combine(x, "add", y, allow_broadcast_all_sources=True)
    assert z.dims == (a, b) and tuple(z.raw_tensor.shape) == (3, 4)


def test_random_state_is_seedable():
    rf.select_backend_torch()
    d = Dim(5, name="d")
    rf.set_random_seed(3)
    v1 = rf.random_normal([d]).raw_tensor
    state = rf.get_selected_backend().get_random_state()
    v2 = rf.random_normal([d]).raw_tensor
    rf.get_selected_backend().set_random_state(state)
    v3 = rf.random_normal([d]).raw_tensor
    rf.set_random_seed(3)
    torch.testing.assert_close(rf.random_normal([d]).raw_tensor, v1)
    torch.testing.assert_close(v2, v3)


def test_concat_dynamic_dims():
    rf.select_backend_torch()
    t1, t2, f = Dim(None, name="t1"), Dim(None, name="t2"), Dim(2, name="f")
    batch_dim.dyn_size_ext = Tensor("b", dims=[], dtype="int32", raw_tensor=torch.tensor(2, dtype=torch.int32))
    t1.dyn_size_ext = Tensor("s1", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor([3, 1], dtype=torch.int32))
    t2.dyn_size_ext = Tensor("s2", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor([2, 1], dtype=torch.int32))
    a = np.arange(12).reshape(2, 3, 2).astype("float32")
    b = -np.arange(1, 9).reshape(2, 2, 2).astype("float32")
    y, d = rf.concat((Tensor("a", dims=[batch_dim, t1, f], dtype="float32", raw_tensor=torch.tensor(a)), t1),
                     (Tensor("b", dims=[batch_dim, t2, f], dtype="float32", raw_tensor=torch.tensor(b)), t2))
    assert d.dyn_size_ext.raw_tensor.tolist() == [5, 2]
    res = y.raw_tensor.numpy()
    np.testing.assert_array_equal(res[0], np.concatenate([a[0], b[0]]))
    np.testing.assert_array_equal(res[1, :2], np.concatenate([a[1, :1], b[1, :1]]))
    for dim in (t1, t2, batch_dim):
        dim.reset_eager()


def test_scan_and_while_loop_eager():
    rf.select_backend_torch()
    t, feat, hid = Dim(None, name="t"), Dim(3, name="feat"), Dim(4, name="hid")
    batch_dim.dyn_size_ext = Tensor("b", dims=[], dtype="int32", raw_tensor=torch.tensor(2, dtype=torch.int32))
    t.dyn_size_ext = Tensor("s", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor([4, 2], dtype=torch.int32))
    xv = np.random.RandomState(4).randn(2, 4, 3).astype("float32")
    x = Tensor("x", dims=[batch_dim, t, feat], dtype="float32", raw_tensor=torch.tensor(xv))
    lstm = rf.LSTM(feat, hid)

    def body(x_t, s):
        acc = s["acc"] + x_t
        y_t, st = lstm(x_t, state=s["lstm"], spatial_dim=rf.single_step_dim)
        return (acc, y_t), {"acc": acc, "lstm": st}

    initial = {"acc": rf.zeros([batch_dim, feat]), "lstm": lstm.default_initial_state(batch_dims=[batch_dim])}
    (acc, ys), last, _ = rf.scan(spatial_dim=t, xs=x, initial=initial, ys=None, body=body)
    y_ref, st_ref = lstm(x, state=lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=t)
    np.testing.assert_allclose(acc.copy_transpose([batch_dim, t, feat]).raw_tensor.numpy()[0],
                               np.cumsum(xv[0], axis=0), rtol=1e-5)
    np.testing.assert_allclose(last["acc"].raw_tensor.numpy(), [xv[0].sum(0), xv[1, :2].sum(0)], rtol=1e-5)
    ys_np = ys.copy_transpose([batch_dim, t, hid]).raw_tensor.detach().numpy()
    ref = y_ref.copy_transpose([batch_dim, t, hid]).raw_tensor.detach().numpy()
    np.testing.assert_allclose(ys_np[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys_np[1, :2], ref[1, :2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last["lstm"]["h"].raw_tensor.detach().numpy(),
                               st_ref["h"].copy_transpose([batch_dim, hid]).raw_tensor.detach().numpy(), rtol=1e-5)
    out = rf.while_loop(lambda s: s["i"] < 3, lambda s: {"i": s["i"] + 1, "x": s["x"] * 2.0},
                        {"i": rf.convert_to_tensor(0), "x": last["acc"]})
    assert int(out["i"].raw_tensor) == 3
    np.testing.assert_allclose(out["x"].raw_tensor.numpy(), last["acc"].raw_tensor.numpy() * 8, rtol=1e-6)
    with pytest.raises(rf.FrontendError, match="rf.Loop.*torch backend"):
        rf.Loop(axis=t)
    for d in (t, batch_dim):
        d.reset_eager()
