"""
batch_norm against a numpy version of the original's documented formula: defaults by behavior version, the
running-statistics update (``new = old + (batch - old) * momentum``; eval updates first with the old defaults),
use_sample/force_sample mixing, delayed updates, masking, param versions, and the errors for bad options.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.compat.util_basic import BehaviorVersion
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")
MASK = np.arange(7)[None, :] < LENS[:, None]  # [B,T], the frames inside the seq lens
RNG = np.random.RandomState(11)
X = (RNG.randn(3, 7, 3) * 1.5 + 0.7).astype("float32")
MEAN0 = np.array([0.4, -0.8, 1.5], "float32")
VAR0 = np.array([1.7, 0.6, 1.2], "float32")
GAMMA = np.array([1.3, 0.7, -0.9], "float32")
BETA = np.array([0.2, -0.1, 0.5], "float32")


@pytest.fixture(autouse=True)
def _graph():
    with tf.Graph().as_default():
        yield


@pytest.fixture
def behavior_version():
    """Set the global behavior version for one test (restored afterwards)."""
    old = BehaviorVersion._version
    yield BehaviorVersion.set
    BehaviorVersion._version = old


def _reference(train, momentum=0.99, epsilon=1e-3, update_sample_only_in_training=False,
               delay_sample_update=False, masked_time=True, use_sample=0.0, force_sample=False, param_version=0):
    """The original's formula in numpy: (output, running mean after the run, running variance after the run)."""
    frames = X[MASK] if masked_time else X.reshape(-1, 3)
    mean_cur, var_cur = frames.mean(0), frames.var(0)
    if param_version >= 2 and not masked_time and use_sample == 0 and not force_sample:  # TF's fused kernel
        if not train:
            return (X - MEAN0) / np.sqrt(VAR0 + epsilon) * GAMMA + BETA, MEAN0, VAR0
        n = len(frames)  # the kernel updates with the unbiased variance
        new_var = VAR0 + (var_cur * n / (n - 1) - VAR0) * momentum
        return ((X - mean_cur) / np.sqrt(var_cur + epsilon) * GAMMA + BETA, MEAN0 + (mean_cur - MEAN0) * momentum,
                new_var)
    new_mean, new_var = MEAN0, VAR0
    if train or not update_sample_only_in_training:
        new_mean, new_var = MEAN0 + (mean_cur - MEAN0) * momentum, VAR0 + (var_cur - VAR0) * momentum
    run_mean, run_var = (MEAN0, VAR0) if delay_sample_update else (new_mean, new_var)
    if train or force_sample:
        mean = (1 - use_sample) * mean_cur + use_sample * run_mean
        var = (1 - use_sample) * var_cur + use_sample * run_var
    else:
        mean, var = run_mean, run_var
    return (X - mean) / np.sqrt(var + epsilon) * GAMMA + BETA, new_mean, new_var


def _run(train, layer_dict):
    """Build, load MEAN0/VAR0/GAMMA/BETA, one run with the post control dependencies: (output, mean, var, names)."""
    net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}}), train_flag=train)
    net.construct_from_dict({"output": layer_dict})
    layer = net.get_layer("output")
    by_kind = {name.split("/")[-1].split("_")[-1]: p for name, p in layer.params.items() if "batch_norm/" in name}
    with tf1.Session() as session:
        net.initialize_params(session)
        for kind, value in (("mean", MEAN0), ("variance", VAR0), ("gamma", GAMMA), ("beta", BETA)):
            by_kind[kind].load(value.reshape(by_kind[kind].shape.as_list()), session)
        data = net.extern_data.get_data("data")
        y, _ = session.run([layer.output.placeholder, net.get_post_control_dependencies()],
                           feed_dict={data.placeholder: X, data.size_placeholder[0]: LENS})
        mean, var = session.run([by_kind["mean"], by_kind["variance"]])
    names = sorted(p.op.name for p in net.get_params_list())
    return y, mean.reshape(-1), var.reshape(-1), names


def _check(train, opts, got):
    y, mean, var = got[:3]
    ref_y, ref_mean, ref_var = _reference(train, **opts)
    np.testing.assert_allclose(y[MASK], ref_y[MASK], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, ref_var, rtol=1e-5, atol=1e-6)


_OPTION_CASES = [
    dict(param_version=version, masked_time=masked, update_sample_only_in_training=only_train,
         delay_sample_update=delay, use_sample=use_sample, force_sample=force)
    for version, masked, only_train, delay, (use_sample, force) in itertools.product(
        (0, 2), (True, False), (False, True), (False, True), ((0.0, False), (0.5, False), (0.5, True)))
    if masked or use_sample == 0.0  # keep the matrix small: mixing only with masking
]


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("opts", _OPTION_CASES, ids=lambda o: "-".join("%s=%s" % kv for kv in sorted(o.items())))
def test_batch_norm_matches_the_documented_formula(train, opts):
    opts = dict(opts, momentum=0.3, epsilon=1e-3)
    _check(train, opts, _run(train, dict({"class": "batch_norm", "from": "data"}, **opts)))


@pytest.mark.parametrize("train", [False, True])
def test_batch_norm_behavior_version_0_defaults(train, behavior_version):
    # momentum 0.99, eval updates the running stats and normalizes with the updated ones, param_version 0 names
    behavior_version(0)
    got = _run(train, {"class": "batch_norm", "from": "data"})
    _check(train, dict(momentum=0.99, param_version=0), got)
    assert got[3] == ["output/batch_norm/output_output_output_%s" % k for k in ("beta", "gamma", "mean", "variance")]


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("masked_time", [True, False])
def test_batch_norm_behavior_version_12_defaults(train, masked_time, behavior_version):
    # momentum 0.1, running stats updated only in training and after the output, param_version 2 names
    behavior_version(12)
    got = _run(train, {"class": "batch_norm", "from": "data", "masked_time": masked_time})
    _check(train, dict(momentum=0.1, update_sample_only_in_training=True, delay_sample_update=True, param_version=2,
                       masked_time=masked_time), got)
    assert got[3] == ["output/batch_norm/v2_%s" % k for k in ("beta", "gamma", "mean", "variance")]


def test_batch_norm_behavior_version_12_requires_masked_time(behavior_version):
    behavior_version(12)
    net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}}), train_flag=True)
    with pytest.raises(Exception, match="bn.*masked_time"):
        net.construct_from_dict({"bn": {"class": "batch_norm", "from": "data"}, "output": {"class": "copy",
                                                                                          "from": "bn"}})


def test_batch_norm_option_of_a_layer_follows_the_same_defaults(behavior_version):
    # the generic ``batch_norm`` option normalizes the layer's output (after its activation), same semantics
    behavior_version(0)
    y, mean, var, names = _run(False, {"class": "copy", "from": "data", "batch_norm": {"momentum": 0.3}})
    _check(False, dict(momentum=0.3), (y, mean, var))
    assert names == ["output/batch_norm/output_output_output_%s" % k for k in ("beta", "gamma", "mean", "variance")]


def test_batch_norm_option_of_a_layer_refuses_unknown_keys():
    net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}}), train_flag=True)
    with pytest.raises(Exception, match="lin.*momentun"):
        net.construct_from_dict({"lin": {"class": "linear", "from": "data", "n_out": 3,
                                         "batch_norm": {"momentun": 0.1}},
                                 "output": {"class": "copy", "from": "lin"}})


@pytest.mark.parametrize("train", [False, True])
def test_batch_norm_in_dim_without_masking_takes_the_fused_kernel(train):
    # as the original's rf.BatchNorm on the layers backend (in_dim, param_version 2, no masking, affine): the fused
    # kernel, i.e. the running variance is updated with the unbiased batch variance, and eval does not update
    extern_data = ExternData({"data": {"dim": 3}})
    feat = extern_data.get_data("data").dims[-1]
    net = TFNetwork(extern_data=extern_data, train_flag=train)
    net.construct_from_dict({"output": {"class": "batch_norm", "from": "data", "in_dim": feat, "masked_time": False,
                                        "param_version": 2, "momentum": 0.3}})
    layer = net.get_layer("output")
    params = {name.split("_")[-1]: p for name, p in layer.params.items()}
    with tf1.Session() as session:
        net.initialize_params(session)
        for kind, value in (("mean", MEAN0), ("variance", VAR0), ("gamma", GAMMA), ("beta", BETA)):
            params[kind].load(value, session)
        data = net.extern_data.get_data("data")
        y, _ = session.run([layer.output.placeholder, net.get_post_control_dependencies()],
                           feed_dict={data.placeholder: X, data.size_placeholder[0]: LENS})
        mean, var = session.run([params["mean"], params["variance"]])
    _check(train, dict(momentum=0.3, masked_time=False, param_version=2), (y, mean, var))


@pytest.mark.parametrize("trainable", [True, False])
def test_batch_norm_gamma_beta_follow_the_layer_trainable_flag(trainable):
    net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}}), train_flag=True)
    net.construct_from_dict({"output": {"class": "batch_norm", "from": "data", "masked_time": True,
                                        "param_version": 2, "trainable": trainable}})
    assert sorted(p.op.name for p in net.get_params_list()) == [
        "output/batch_norm/v2_%s" % k for k in ("beta", "gamma", "mean", "variance")]
    expected = ["output/batch_norm/v2_beta", "output/batch_norm/v2_gamma"] if trainable else []
    assert sorted(p.op.name for p in net.get_trainable_params()) == expected
