"""Layer variants real configs use (issue 11): numbers checked against numpy."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1


def _run(net_dict, extern_data, fetch=("output",), train_flag=False, seq_lens=(5, 3)):
    with tf.Graph().as_default():
        net = build_network(net_dict, extern_data, train_flag=train_flag)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            feed = random_feed(net, list(seq_lens))
            outs = session.run([net.get_layer(n).output.placeholder for n in fetch], feed_dict=feed)
            params = {p.op.name: v for p, v in zip(net.get_params_list(), session.run(net.get_params_list()))}
            return net, outs, feed, params


def test_combine_broadcasts_feature_dim_1():
    net, (a, b, out), _, _ = _run({
        "a": {"class": "linear", "n_out": 1, "from": "data"},
        "b": {"class": "linear", "n_out": 5, "from": "data"},
        "output": {"class": "combine", "kind": "add", "from": ["a", "b"]}}, {"data": {"dim": 3}},
        fetch=("a", "b", "output"))
    assert net.get_layer("output").output.batch_shape == (None, None, 5)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_eval_without_sources_as_cond_condition():
    # the original's cond test: a constant condition from the global train step, no sources
    net, (out, x), feed, _ = _run({
        "output": {"class": "cond", "from": [],
                   "condition": {"class": "eval", "from": [], "eval": "tf.equal(self.network.global_train_step % 2, 0)",
                                 "out_type": {"batch_dim_axis": None, "shape": (), "dtype": "bool"}},
                   "true_layer": {"class": "copy", "from": "data"},
                   "false_layer": {"class": "activation", "activation": "relu", "from": "data"}}},
        {"data": {"dim": 3}}, fetch=("output", "data"))
    np.testing.assert_allclose(out, x)  # step 0: true branch


def test_eval_without_sources_needs_out_type():
    with pytest.raises(Exception, match="eval layer without sources needs an out_type"):
        _run({"output": {"class": "eval", "from": [], "eval": "tf.constant(1.)"}}, {"data": {"dim": 3}})


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv_strides_and_dilation(padding):
    net, (out, x), feed, params = _run({"output": {
        "class": "conv", "from": "data", "filter_size": (3,), "strides": 2, "dilation_rate": 2, "padding": padding,
        "n_out": 2, "with_bias": False}}, {"data": {"dim": 3}}, fetch=("output", "data"), seq_lens=(9, 6))
    w = params["output/W"]  # (3, 3, 2)
    pad = 2 if padding == "same" else 0  # (k - 1) * dilation / 2 on each side
    xp = np.pad(x, [(0, 0), (pad, pad), (0, 0)])
    full = np.stack([sum(xp[:, t + 2 * k] @ w[k] for k in range(3)) for t in range(xp.shape[1] - 4)], axis=1)
    np.testing.assert_allclose(out, full[:, ::2], rtol=1e-5, atol=1e-5)
