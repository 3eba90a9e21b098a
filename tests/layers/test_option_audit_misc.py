"""
Options tools/audit_layer_options.py found accepted but dropped, refused without need or not accepted, now honoured
(checked by numbers) or refused with an error naming layer, class and option.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.data import FeatureDim, SpatialDim, batch_dim
from returnn_lite.network import NetworkLayerException
from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1
EXTERN = {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}


def _run(net_dict, fetch_layers=("output",), extern=None, train_flag=False):
    with tf.Graph().as_default():
        net = build_network(net_dict, extern or EXTERN, train_flag=train_flag)
        with tf1.Session() as session:
            net.initialize_params(session)
            feed = random_feed(net, [4, 2], seed=1)
            x = feed[net.extern_data.data["data"].placeholder]
            outs = session.run([net.get_layer(n).output.placeholder for n in fetch_layers], feed_dict=feed)
            params = {p.op.name: v for p, v in zip(net.get_params_list(), session.run(net.get_params_list()))}
    return net, x, outs, params


def _error(net_dict, extern=None):
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException) as info:
            build_network(net_dict, extern or EXTERN)
    return str(info.value)


@pytest.mark.parametrize("unit", ["LSTMBlock", "GRU"])
def test_rnn_cell_weights_init(unit):
    """weights_init: the cell's weight matrices (params without an own initializer); biases keep theirs."""
    _, _, _, params = _run({"output": {"class": "rnn_cell", "unit": unit, "n_out": 3, "weights_init": 0.25,
                                       "from": "data"}})
    weights = {k: v for k, v in params.items() if v.ndim == 2}
    biases = {k: v for k, v in params.items() if v.ndim == 1}
    assert weights and biases
    for k, v in weights.items():
        np.testing.assert_array_equal(v, 0.25, err_msg=k)
    for k, v in biases.items():
        assert not np.all(v == 0.25), k


def test_rnn_cell_default_weights_init_is_glorot_uniform():
    _, _, _, params = _run({"output": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": 3, "from": "data"}})
    (w,) = [v for v in params.values() if v.ndim == 2]
    limit = np.sqrt(6.0 / sum(w.shape))
    assert np.abs(w).max() <= limit and w.std() > limit / 4


@pytest.mark.parametrize("opts, option", [
    ({"class": "accumulate_mean", "exp_average": 0.1, "mode": "sum"}, "mode"),
    ({"class": "accumulate_mean", "exp_average": 0.1, "keep_dims": True}, "keep_dims"),
    ({"class": "combine_dims", "axes": "BT", "keep_order": False}, "keep_order"),
])
def test_refused_instead_of_dropped(opts, option):
    msg = _error({"output": dict(opts, **{"from": "data"})})
    assert "'output'" in msg and "option %s=" % option in msg and "not supported" in msg and opts["class"] in msg


def test_accumulate_mean_mode_mean_accepted():
    net, x, (y,), _ = _run({"output": {"class": "accumulate_mean", "exp_average": 0.1, "mode": "mean",
                                       "from": "data"}})
    np.testing.assert_array_equal(y, 0.0)  # the initial running mean


def test_linear_grad_filter_removes_sequences_with_large_grads():
    """
    grad_filter (the original's filter_grad): per sequence, the gradient through the linear output is kept where
    max(grad**2) over the other axes is below the threshold, else zero. The output grads here are c[b] per sequence.
    """
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "linear", "activation": None, "n_out": 2, "grad_filter": 4.0,
                                        "from": "data"}}, EXTERN, train_flag=True)
        layer = net.get_layer("output")
        c = tf.constant([1.0, 3.0])  # seq 0: grad**2 = 1 < 4 (kept); seq 1: 9 >= 4 (removed)
        x_in = net.extern_data.data["data"]
        g_x, g_w = tf.gradients(tf.reduce_sum(layer.output.placeholder * c[:, None, None]), [x_in.placeholder,
                                                                                          layer.params["W"]])
        with tf1.Session() as session:
            net.initialize_params(session)
            feed = random_feed(net, [4, 4], seed=2)
            gx, gw, w = session.run([g_x, g_w, layer.params["W"]], feed_dict=feed)
            x = feed[x_in.placeholder]
    np.testing.assert_allclose(gx[0], np.tile(w.sum(axis=1), (4, 1)), rtol=1e-5)
    np.testing.assert_array_equal(gx[1], 0.0)
    np.testing.assert_allclose(gw, np.tile(x[0].sum(axis=0)[:, None], (1, 2)), rtol=1e-5)


@pytest.mark.parametrize("rep_layer", [{"class": "constant", "value": 2},
                                       {"class": "constant", "value": 2, "with_batch_dim": True}])
def test_repeat_scalar_or_batch_repetitions_layer(rep_layer):
    net, x, (y,), _ = _run({"r": rep_layer, "output": {"class": "repeat", "repetitions": "r", "axis": "T",
                                                       "from": "data"}})
    np.testing.assert_array_equal(y[0], np.repeat(x[0], 2, axis=0))  # seq 0: 4 frames -> 8
    np.testing.assert_array_equal(y[1, :4], np.repeat(x[1, :2], 2, axis=0))  # seq 1: 2 frames -> 4


@pytest.mark.parametrize("noise_shape, same_over_batch, same_over_time", [
    (None, True, True),  # the original's default (Data.get_bc_shape): one mask for all batch entries and frames
    ({"*": None}, False, False),
    ({"T": None}, True, False),
    ({"B": None}, False, True),
    ({"F": 1, "*": None}, False, False),
])
def test_dropout_noise_shape_default_broadcasts_over_batch_and_time(noise_shape, same_over_batch, same_over_time):
    opts = {"class": "copy", "dropout": 0.5, "from": "data"}
    if noise_shape is not None:
        opts["dropout_noise_shape"] = noise_shape
    with tf.Graph().as_default():
        net = build_network({"output": opts}, {"data": {"dim": 16}}, train_flag=True)
        data = net.extern_data.data["data"]
        with tf1.Session() as session:
            y = session.run(net.get_layer("output").output.placeholder, {
                data.placeholder: np.ones((8, 6, 16), "float32"), data.size_placeholder[0]: [6] * 8})
    assert set(np.unique(y)) <= {0.0, 2.0}
    kept = y != 0
    assert (kept == kept[:1]).all() == same_over_batch
    assert (kept == kept[:, :1]).all() == same_over_time
    assert (kept == kept[:, :, :1]).all() == (noise_shape == {"F": 1, "*": None})


@pytest.mark.parametrize("axis, same_over_batch, same_over_time, same_over_feature", [
    ("T", True, False, True), (["B", "F"], False, True, False)])
def test_dropout_axis(axis, same_over_batch, same_over_time, same_over_feature):
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "copy", "dropout": 0.5, "dropout_axis": axis, "from": "data"}},
                            {"data": {"dim": 16}}, train_flag=True)
        data = net.extern_data.data["data"]
        with tf1.Session() as session:
            y = session.run(net.get_layer("output").output.placeholder, {
                data.placeholder: np.ones((8, 12, 16), "float32"), data.size_placeholder[0]: [12] * 8})
    assert set(np.unique(y)) <= {0.0, 2.0}
    kept = y != 0
    assert (kept == kept[:1]).all() == same_over_batch
    assert (kept == kept[:, :1]).all() == same_over_time
    assert (kept == kept[:, :, :1]).all() == same_over_feature


def test_mask_option_is_a_check():
    _, x, (y,), _ = _run({"output": {"class": "copy", "mask": "unity", "from": "data"}})
    np.testing.assert_array_equal(y, x)
    _, x, (y,), _ = _run({"output": {"class": "copy", "mask": "dropout", "dropout": 0.5, "from": "data"}})
    np.testing.assert_array_equal(y, x)  # (not training)
    for opts in ({"mask": "dropout"}, {"mask": "unity", "dropout": 0.1}, {"mask": "other"}):
        msg = _error({"output": dict({"class": "copy", "from": "data"}, **opts)})
        assert "'output'" in msg and "option mask=" in msg, msg
    msg = _error({"output": {"class": "copy", "dropout": 0.1, "dropout_axis": "T", "dropout_noise_shape": {"T": 1},
                             "from": "data"}})
    assert "dropout_axis" in msg and "dropout_noise_shape" in msg
