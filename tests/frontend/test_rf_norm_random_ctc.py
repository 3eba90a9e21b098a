"""rf.BatchNorm, rf.random, rf.ctc_loss and cross entropy with dense targets on the layers backend (issue 16):
ordinary layers (batch_norm, random, ctc_loss, softmax_over_spatial + dot), checked against numpy / TF."""

import numpy as np
import pytest
import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.errors import NetworkLayerException
from returnn_lite.frontend._utils import FrontendError
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, batch_dim
from rf_harness import extern_feed  # noqa: E402 (tests/frontend/rf_harness.py)

tf1 = tf.compat.v1


def _run(extern_data, model, step, inputs, *, train_flag=False, params=None, grads_of=(), runs=1):
    """
    rf code -> net dict -> TFNetwork; params (rf name -> value) assigned; ``runs`` session.runs of the outputs with
    the post control deps (as the engine's train step). Returns outputs, net dict, params after, param names, grads.
    """
    config = Config({"extern_data": extern_data, "get_model": lambda **_: model(), "task": "forward",
                     "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    for opts in extern_data.values():
        for d in opts["dims"]:
            d.reset_eager()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=train_flag)
        net.construct_from_dict(net_dict)
        fetches = {k: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for k, t in outputs.items()}
        by_name = {v.op.name[:-len("/param")].replace("/", "."): v for v in net.get_params_list()}
        session.run(tf1.global_variables_initializer())
        for name, value in (params or {}).items():
            by_name[name].load(value, session)
        feed = extern_feed(net, inputs)
        for key, out in grads_of:  # d sum(output) / d extern data
            fetches["grad:" + key] = tf.gradients(tf.reduce_sum(fetches[out]), net.extern_data.data[key].placeholder)[0]
        post = net.get_post_control_dependencies()
        for _ in range(runs):
            res = session.run(dict(fetches, _post=post), feed_dict=feed)
        res.pop("_post")
        after = session.run(by_name)
    return res, net_dict, after, sorted(by_name)


def _bn_model(feat, **opts):
    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.bn = rf.BatchNorm(feat, **opts)

    return Model


def _bn_ref(frames, mean, var, eps, gamma, beta):
    return (frames - mean) / np.sqrt(var + eps) * gamma + beta


def test_batch_norm_layer_train_step_and_eval():
    time_dim, feat = Dim(None, name="time"), Dim(3, name="feat")
    extern_data = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        model.bn(extern_data["data"]).mark_as_output("y", shape=(batch_dim, time_dim, feat))

    rng = np.random.RandomState(3)
    x = (rng.randn(2, 5, 3) * 3 + 1).astype("float32")
    lens = np.array([5, 3], "int32")
    x[1, 3:] = 1000.0  # padded frames must not count
    params = {"bn.running_mean": rng.randn(3).astype("float32"), "bn.running_variance": rng.rand(3).astype("float32") + 1,
              "bn.gamma": rng.randn(3).astype("float32"), "bn.beta": rng.randn(3).astype("float32")}
    inputs = {"data": x, "size:time": lens}
    model = _bn_model(feat, use_mask=True, momentum=0.3, eps=0.01)
    res, net_dict, after, names = _run(extern_data, model, step, inputs, train_flag=True, params=params)
    layer = net_dict["bn/batch_norm"]
    assert layer["class"] == "batch_norm" and layer["in_dim"] == feat and layer["momentum"] == 0.3
    assert layer["reuse_params"]["map"]["batch_norm/v2_mean"] == {"reuse_layer": "bn/running_mean",
                                                                  "param_name": "param"}
    assert not any(d["class"] == "frontend_op" for d in net_dict.values())
    assert names == ["bn.beta", "bn.gamma", "bn.running_mean", "bn.running_variance"]  # none of the layer's own
    frames = np.concatenate([x[0, :5], x[1, :3]])
    mean, var = frames.mean(axis=0), frames.var(axis=0)
    y = np.concatenate([res["y"][0, :5], res["y"][1, :3]])
    np.testing.assert_allclose(y, _bn_ref(frames, mean, var, 0.01, params["bn.gamma"], params["bn.beta"]),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(after["bn.running_mean"], 0.7 * params["bn.running_mean"] + 0.3 * mean, rtol=1e-5)
    np.testing.assert_allclose(after["bn.running_variance"], 0.7 * params["bn.running_variance"] + 0.3 * var,
                               rtol=1e-5)
    np.testing.assert_array_equal(after["bn.gamma"], params["bn.gamma"])

    # two steps: the second normalizes by the same batch stats and updates the running stats once more
    _, _, after2, _ = _run(extern_data, model, step, inputs, train_flag=True, params=params, runs=2)
    np.testing.assert_allclose(after2["bn.running_mean"], 0.49 * params["bn.running_mean"] + 0.51 * mean, rtol=1e-5)

    # eval: the running stats, no update
    res, _, after, _ = _run(extern_data, model, step, inputs, train_flag=False, params=params)
    ref = _bn_ref(x, params["bn.running_mean"], params["bn.running_variance"], 0.01, params["bn.gamma"],
                  params["bn.beta"])
    np.testing.assert_allclose(res["y"][0], ref[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(after["bn.running_mean"], params["bn.running_mean"])


def test_batch_norm_no_affine_unmasked_and_in_dim_not_feature_axis():
    """in_dim is not the default feature axis; two dynamic dims, both masked (use_mask), or none (use_mask=False)."""
    t1, t2, feat, extra = Dim(None, name="t1"), Dim(None, name="t2"), Dim(3, name="feat"), Dim(2, name="extra")
    extern_data = {"data": {"dims": (batch_dim, t1, feat, t2, extra), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        model.bn(extern_data["data"]).mark_as_output("y", shape=(batch_dim, t1, feat, t2, extra))

    rng = np.random.RandomState(5)
    x = rng.randn(2, 4, 3, 3, 2).astype("float32")
    l1, l2 = np.array([4, 2], "int32"), np.array([3, 1], "int32")
    inputs = {"data": x, "size:t1": l1, "size:t2": l2}
    for use_mask in (True, False):
        res, net_dict, after, names = _run(extern_data, _bn_model(feat, affine=False, use_mask=use_mask), step,
                                           inputs, train_flag=True)
        assert names == ["bn.running_mean", "bn.running_variance"]
        xt = np.moveaxis(x, 2, -1)  # [B, t1, t2, extra, feat]
        if use_mask:
            frames = np.concatenate([xt[b, :l1[b], :l2[b]].reshape(-1, 3) for b in range(2)])
        else:
            frames = xt.reshape(-1, 3)
        mean, var = frames.mean(0), frames.var(0)
        y = np.moveaxis(res["y"], 2, -1)
        np.testing.assert_allclose(y[0, :4, :3], (xt[0, :4, :3] - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(after["bn.running_mean"], 0.1 * mean, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(after["bn.running_variance"], 0.9 + 0.1 * var, rtol=1e-5)


def test_random_layers_statistics():
    time_dim, feat, big = Dim(None, name="time"), Dim(2, name="feat"), Dim(2000, name="big")
    classes = Dim(5, name="classes")
    extern_data = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        dims = [batch_dim, time_dim, big]
        rf.random_normal(dims, mean=1.0, stddev=2.0).mark_as_output("normal", shape=dims)
        rf.random_uniform(dims, minval=-1.0, maxval=3.0).mark_as_output("uniform", shape=dims)
        rf.random(dims=dims, distribution="truncated_normal", stddev=0.5).mark_as_output("trunc", shape=dims)
        rf.random(dims=[big], distribution="uniform", bound=0.5).mark_as_output("bound", shape=[big])
        rf.random_uniform(dims, minval=0, maxval=5, dtype="int32", sparse_dim=classes).mark_as_output(
            "ints", shape=dims)

    inputs = {"data": np.zeros((3, 4, 2), "float32"), "size:time": np.array([4, 2, 1], "int32")}
    res, net_dict, _, _ = _run(extern_data, rf.Module, step, inputs)
    randoms = [d for d in net_dict.values() if d["class"] == "random"]
    assert len(randoms) == 5 and not any(d["class"] == "frontend_op" for d in net_dict.values())
    assert randoms[0]["shape"] == [batch_dim, time_dim, big] and randoms[0]["shape_deps"] == ["data:data"]
    assert randoms[3]["bound"] == 0.5 and "shape_deps" not in randoms[3]
    for key in ("normal", "uniform", "trunc", "ints"):
        assert res[key].shape == (3, 4, 2000)
    n = res["normal"]
    assert abs(n.mean() - 1.0) < 0.05 and abs(n.std() - 2.0) < 0.05
    u = res["uniform"]
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
    t = res["trunc"]
    assert np.abs(t).max() <= 1.0 and 0.4 < t.std() < 0.5  # cut at 2 stddev: std 0.88 * 0.5
    assert res["bound"].min() >= -0.5 and res["bound"].max() < 0.5
    ints = res["ints"]
    assert ints.dtype == np.int32 and set(np.unique(ints).tolist()) == {0, 1, 2, 3, 4}


def test_random_int_without_maxval_is_refused():
    time_dim, feat = Dim(None, name="time"), Dim(2, name="feat")
    extern_data = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        rf.random(dims=[batch_dim], distribution="normal", dtype="int32").mark_as_output("r", shape=[batch_dim])

    with pytest.raises(NetworkLayerException, match="random layer .*dtype 'int32' needs distribution 'uniform'"):
        _run(extern_data, rf.Module, step, {"data": np.zeros((1, 1, 2), "float32"), "size:time": np.array([1])})


def _ctc_ref(logits_btc, labels, logit_lens, label_lens, blank):
    with tf.Graph().as_default(), tf1.Session() as session:
        loss = tf.nn.ctc_loss(labels=labels, logits=logits_btc, label_length=label_lens, logit_length=logit_lens,
                              logits_time_major=False, blank_index=blank)
        return session.run(loss)


@pytest.mark.parametrize("class_first,blank", [(False, 0), (True, 0), (False, -1)])
def test_ctc_loss_named_dims_and_blank_index(class_first, blank):
    """blank 0 or -1 (last), targets with the logits' classes (blank included); logits [B,T,C] or [B,C,T]."""
    time_dim, label_time, classes = Dim(None, name="time"), Dim(None, name="label-time"), Dim(5, name="classes")
    dims = (batch_dim, classes, time_dim) if class_first else (batch_dim, time_dim, classes)
    extern_data = {"logits": {"dims": dims, "dtype": "float32"},
                   "targets": {"dims": (batch_dim, label_time), "dtype": "int32", "sparse_dim": classes}}

    def step(*, model, extern_data, **_):
        loss = rf.ctc_loss(logits=extern_data["logits"], targets=extern_data["targets"], input_spatial_dim=time_dim,
                           targets_spatial_dim=label_time, blank_index=blank)
        loss.mark_as_output("ctc", shape=[batch_dim])

    rng = np.random.RandomState(7)
    logits = rng.randn(3, 6, 5).astype("float32")
    labels = rng.randint(1, 5, (3, 3)).astype("int32") - (1 if blank == -1 else 0)  # not the blank
    lens, label_lens = np.array([6, 5, 3], "int32"), np.array([3, 2, 1], "int32")
    feed_logits = np.transpose(logits, (0, 2, 1)) if class_first else logits
    res, net_dict, _, _ = _run(extern_data, rf.Module, step, {
        "logits": feed_logits, "targets": labels, "size:time": lens, "size:label-time": label_lens},
        grads_of=[("logits", "ctc")])
    layer = net_dict["ctc_loss"]
    assert layer["class"] == "ctc_loss" and layer["blank_index"] == blank % 5 and layer["input_spatial_dim"] == time_dim
    np.testing.assert_allclose(res["ctc"], _ctc_ref(logits, labels, lens, label_lens, blank % 5), rtol=1e-5)
    grad = np.transpose(res["grad:logits"], (0, 2, 1)) if class_first else res["grad:logits"]
    assert np.all(grad[2, 3:] == 0) and np.all(np.isfinite(grad))  # nothing beyond the lengths


def test_ctc_loss_refuses_dense_targets():
    time_dim, classes = Dim(None, name="time"), Dim(5, name="classes")
    extern_data = {"logits": {"dims": (batch_dim, time_dim, classes), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        x = extern_data["logits"]
        rf.ctc_loss(logits=x, targets=rf.reduce_sum(x, axis=classes), input_spatial_dim=time_dim,
                    targets_spatial_dim=time_dim, blank_index=0).mark_as_output("ctc", shape=[batch_dim])

    with pytest.raises(FrontendError, match=r"rf.ctc_loss at .*test_rf_norm_random_ctc.py:\d+: targets must be sparse"):
        _run(extern_data, rf.Module, step, {})


def test_cross_entropy_dense_targets_values_and_gradients():
    time_dim, classes = Dim(None, name="time"), Dim(4, name="classes")
    extern_data = {"logits": {"dims": (batch_dim, time_dim, classes), "dtype": "float32"},
                   "soft": {"dims": (batch_dim, time_dim, classes), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        ce = rf.cross_entropy(estimated=extern_data["logits"], estimated_type="logits", target=extern_data["soft"],
                              axis=classes)
        ce.mark_as_output("ce", shape=(batch_dim, time_dim))

    rng = np.random.RandomState(9)
    logits = rng.randn(2, 3, 4).astype("float32")
    soft = rng.rand(2, 3, 4).astype("float32")
    soft /= soft.sum(-1, keepdims=True)
    res, net_dict, _, _ = _run(extern_data, rf.Module, step, {
        "logits": logits, "soft": soft, "size:time": np.array([3, 3], "int32")},
        grads_of=[("logits", "ce"), ("soft", "ce")])
    assert {d["class"] for d in net_dict.values()} <= {"softmax_over_spatial", "dot", "activation", "transpose"}
    log_sm = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(res["ce"], -(soft * log_sm).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(res["grad:logits"], np.exp(log_sm) - soft, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(res["grad:soft"], -log_sm, rtol=1e-5)


def test_batch_norm_in_loop_body_train_step():
    """Inside rf.scan (a rec unit): the running stats update runs with the output (per step, batch statistics)."""
    time_dim, feat = Dim(None, name="time"), Dim(3, name="feat")
    extern_data = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}

    def step(*, model, extern_data, **_):
        def body(x_t, s):
            return model.bn(x_t) + rf.random_normal([batch_dim, feat], stddev=0.0), s

        ys, _, _ = rf.scan(spatial_dim=time_dim, xs=extern_data["data"], initial=rf.zeros([batch_dim]), ys=None,
                           body=body)
        ys.mark_as_output("ys", shape=(batch_dim, time_dim, feat))

    x = np.random.RandomState(11).randn(3, 4, 3).astype("float32")
    res, net_dict, after, _ = _run(extern_data, _bn_model(feat), step, {"data": x, "size:time": np.array([4, 4, 4])},
                                   train_flag=True)
    assert net_dict["loop"]["unit"]["bn/batch_norm"]["reuse_params"]["map"]["batch_norm/v2_mean"]["reuse_layer"] == \
        "base:bn/running_mean"
    mean, var = x.mean(0), x.var(0)  # [T, F]: per step over the batch
    np.testing.assert_allclose(res["ys"], (x - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
    running = np.zeros(3)
    for t in range(4):
        running = 0.9 * running + 0.1 * mean[t]
    np.testing.assert_allclose(after["bn.running_mean"], running, rtol=1e-4, atol=1e-6)


def test_random_statistics_on_the_torch_backend_too():
    """The torch backend draws with the same statistics (not the same numbers), truncated normal cut at 2 stddev."""
    torch = pytest.importorskip("torch")
    big = Dim(20000, name="big")
    rf.select_backend_torch()
    try:
        t = rf.random(dims=[big], distribution="truncated_normal", mean=1.0, stddev=0.5).raw_tensor.numpy()
        n = rf.random_normal([big], mean=1.0, stddev=2.0).raw_tensor.numpy()
        u = rf.random_uniform([big], minval=-1.0, maxval=3.0).raw_tensor.numpy()
        assert isinstance(rf.random_normal([big]).raw_tensor, torch.Tensor)
    finally:
        rf.select_backend_returnn_layers_tf()
    assert t.min() >= 0.0 and t.max() <= 2.0 and abs(t.mean() - 1.0) < 0.02 and 0.42 < t.std() < 0.46
    assert abs(n.mean() - 1.0) < 0.05 and abs(n.std() - 2.0) < 0.05
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
