"""
Normalization layers (returnn_lite/layers/norm.py): param names of the batch_norm param versions, running
statistics (updated in training through the network's post control dependencies, used at eval), layer_norm
and norm against numpy.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")
RNG = np.random.RandomState(5)


@pytest.fixture(autouse=True)
def _graph():
    with tf.Graph().as_default():
        yield


def _net(net_dict, train_flag):
    net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}}), train_flag=train_flag)
    net.construct_from_dict(net_dict)
    return net


def _feed(net, x):
    data = net.extern_data.get_data("data")
    return {data.placeholder: x, data.size_placeholder[0]: LENS}


@pytest.mark.parametrize("param_version,names", [
    (0, ["output/batch_norm/output_output_output_%s" % n for n in ("mean", "variance", "gamma", "beta")]),
    (1, ["output/batch_norm/%s" % n for n in ("mean", "variance", "gamma", "beta")]),
    (2, ["output/batch_norm/v2_%s" % n for n in ("mean", "variance", "gamma", "beta")]),
])
def test_batch_norm_param_names(param_version, names):
    net = _net({"output": {"class": "batch_norm", "from": "data", "param_version": param_version,
                           "masked_time": True}}, train_flag=False)
    params = {p.op.name: p.shape.as_list() for p in net.get_params_list()}
    assert sorted(params) == sorted(names)
    assert all(s == ([1, 1, 3] if param_version < 2 else [3]) for s in params.values())
    trainable = {p.op.name for p in net.get_trainable_params()}
    assert trainable == {n for n in names if n.endswith(("gamma", "beta"))}


def test_batch_norm_running_stats_update_in_training_and_used_at_eval():
    x = (RNG.randn(3, 7, 3) * 2.0 + 1.0).astype("float32")
    valid = x[np.arange(7)[None, :] < LENS[:, None]]  # [N,3], the frames inside the seq lens
    momentum, eps = 0.3, 1e-3
    opts = {"class": "batch_norm", "from": "data", "momentum": momentum, "epsilon": eps, "param_version": 2,
            "masked_time": True, "update_sample_only_in_training": True}
    # training: normalized with the batch statistics; the update op is a post control dependency
    net = _net({"output": dict(opts)}, train_flag=True)
    out = net.get_layer("output").output.placeholder
    updates = net.get_post_control_dependencies()
    assert updates
    params = net.get_layer("output").params
    with tf1.Session() as session:
        net.initialize_params(session)
        y, _ = session.run([out, updates], feed_dict=_feed(net, x))
        mean, var = session.run([params["batch_norm/v2_mean"], params["batch_norm/v2_variance"]])
    np.testing.assert_allclose(y[0], (x[0] - valid.mean(0)) / np.sqrt(valid.var(0) + eps), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mean, momentum * valid.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(var, 1.0 + momentum * (valid.var(0) - 1.0), rtol=1e-4, atol=1e-6)
    # eval (no update): uses the running statistics
    with tf.Graph().as_default():
        net = _net({"output": dict(opts)}, train_flag=False)
        out = net.get_layer("output").output.placeholder
        params = net.get_layer("output").params
        with tf1.Session() as session:
            net.initialize_params(session)
            params["batch_norm/v2_mean"].load(mean, session)
            params["batch_norm/v2_variance"].load(var, session)
            y = session.run(out, feed_dict=_feed(net, x))
            np.testing.assert_allclose(session.run(params["batch_norm/v2_mean"]), mean)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + eps), rtol=1e-4, atol=1e-5)


def test_batch_norm_eval_updates_with_behavior_version_0_defaults():
    x = RNG.randn(3, 7, 3).astype("float32")
    valid = x[np.arange(7)[None, :] < LENS[:, None]]
    net = _net({"output": {"class": "batch_norm", "from": "data", "masked_time": True}}, train_flag=False)
    out = net.get_layer("output").output.placeholder
    with tf1.Session() as session:
        net.initialize_params(session)
        y = session.run(out, feed_dict=_feed(net, x))
    mean = 0.99 * valid.mean(0)  # running mean 0 updated with momentum 0.99, then used
    var = 1.0 + 0.99 * (valid.var(0) - 1.0)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-5)


def test_layer_norm_and_norm():
    x = RNG.randn(3, 7, 3).astype("float32")
    net = _net({
        "ln": {"class": "layer_norm", "from": "data", "is_output_layer": True},
        "nt": {"class": "norm", "axes": "T", "bias": False, "from": "data", "is_output_layer": True},
    }, train_flag=False)
    assert sorted(p.op.name for p in net.get_params_list()) == ["ln/bias", "ln/scale", "nt/scale"]
    with tf1.Session() as session:
        net.initialize_params(session)
        ln, nt = session.run([net.get_layer("ln").output.placeholder, net.get_layer("nt").output.placeholder],
                             feed_dict=_feed(net, x))
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(ln, ref, rtol=1e-4, atol=1e-5)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(nt, ref, rtol=1e-4, atol=1e-5)


def test_batch_norm_option_of_any_layer():
    x = RNG.randn(3, 7, 3).astype("float32")
    net = _net({"output": {"class": "copy", "from": "data", "batch_norm": {"param_version": 1}}}, train_flag=True)
    assert sorted(p.op.name for p in net.get_params_list()) == [
        "output/batch_norm/%s" % n for n in ("beta", "gamma", "mean", "variance")]
    valid = x[np.arange(7)[None, :] < LENS[:, None]]
    with tf1.Session() as session:
        net.initialize_params(session)
        y = session.run(net.get_layer("output").output.placeholder, feed_dict=_feed(net, x))
    np.testing.assert_allclose(y, (x - valid.mean(0)) / np.sqrt(valid.var(0) + 1e-3), rtol=1e-4, atol=1e-5)


def _fused_net_run(train_flag, x, mean0, var0, gamma, beta, extra_opts=None):
    """batch_norm with param_version 2 and masked_time False (the original's fused kernel): output and the running
    statistics after one run (with the post control dependencies)."""
    opts = {"class": "batch_norm", "from": "data", "param_version": 2, "masked_time": False, "momentum": 0.3,
            "epsilon": 1e-3}
    opts.update(extra_opts or {})
    net = _net({"output": opts}, train_flag=train_flag)
    params = net.get_layer("output").params
    with tf1.Session() as session:
        net.initialize_params(session)
        for key, value in (("mean", mean0), ("variance", var0), ("gamma", gamma), ("beta", beta)):
            params["batch_norm/v2_" + key].load(value, session)
        y, _ = session.run([net.get_layer("output").output.placeholder, net.get_post_control_dependencies()],
                           feed_dict=_feed(net, x))
        mean, var = session.run([params["batch_norm/v2_mean"], params["batch_norm/v2_variance"]])
    return y, mean, var


def test_batch_norm_fused_param_version_2_eval_reads_running_stats_without_update():
    # eval, default update_sample_only_in_training=False: the non-fused path would update and use the updated
    # statistics; the fused one (param_version 2, no masking) only reads them
    x = RNG.randn(3, 7, 3).astype("float32")
    mean0, var0 = np.array([0.5, -1.0, 2.0], "float32"), np.array([2.0, 0.5, 1.5], "float32")
    gamma, beta = np.array([1.5, 0.5, -1.0], "float32"), np.array([0.1, 0.2, 0.3], "float32")
    y, mean, var = _fused_net_run(False, x, mean0, var0, gamma, beta)
    np.testing.assert_allclose(y, (x - mean0) / np.sqrt(var0 + 1e-3) * gamma + beta, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(mean, mean0)
    np.testing.assert_array_equal(var, var0)


def test_batch_norm_fused_param_version_2_train_updates_with_unbiased_variance():
    x = RNG.randn(3, 7, 3).astype("float32")
    mean0, var0 = np.array([0.5, -1.0, 2.0], "float32"), np.array([2.0, 0.5, 1.5], "float32")
    gamma, beta = np.array([1.5, 0.5, -1.0], "float32"), np.array([0.1, 0.2, 0.3], "float32")
    y, mean, var = _fused_net_run(True, x, mean0, var0, gamma, beta)
    flat = x.reshape(-1, 3)  # all frames, padding included (masked_time False)
    np.testing.assert_allclose(y, (x - flat.mean(0)) / np.sqrt(flat.var(0) + 1e-3) * gamma + beta,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, 0.7 * mean0 + 0.3 * flat.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(var, 0.7 * var0 + 0.3 * flat.var(0, ddof=1), rtol=1e-4, atol=1e-5)


def test_batch_norm_param_version_2_masked_time_is_not_fused_in_eval():
    # masked_time (or no beta, or use_sample) keeps the plain path: eval updates the running stats first
    x = RNG.randn(3, 7, 3).astype("float32")
    valid = x[np.arange(7)[None, :] < LENS[:, None]]
    mean0, var0 = np.array([0.5, -1.0, 2.0], "float32"), np.array([2.0, 0.5, 1.5], "float32")
    ones, zeros = np.ones(3, "float32"), np.zeros(3, "float32")
    y, mean, _ = _fused_net_run(False, x, mean0, var0, ones, zeros, {"masked_time": True})
    np.testing.assert_allclose(mean, mean0 + 0.3 * (valid.mean(0) - mean0), rtol=1e-4, atol=1e-5)
