"""eval's source(i, as_data=True / enforce_batch_major=True): the source in the output's layout, matching feature axes
whatever their sizes, as the original (a Tacotron-style stop-token target: an eval with out_type dim 1 over a
window/merge_dims target of dim window*features)."""

import numpy as np
import tensorflow as tf

from returnn_lite.config import Config
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1
F, K, RAMP = 2, 3, 2


def _stop_ramp(data):
    """Per frame of the (windowed) target: 0 until RAMP+1 frames before the end, then rising to 1."""
    t = data.get_dynamic_axes()[0]
    stop = tf.expand_dims(data.get_dynamic_size(t), 1) - (RAMP + 1)
    ramp = tf.tile(tf.expand_dims(tf.range(tf.shape(data.placeholder)[1]), 0), [tf.shape(data.placeholder)[0], 1])
    return tf.cast(tf.expand_dims(tf.minimum(tf.maximum(ramp - stop, 0), RAMP), 2), "float32") / RAMP


def test_eval_as_data_over_window_merge_dims_with_out_type_dim_1():
    net_dict = {
        "windowed": {"class": "window", "from": "data", "window_size": K, "window_right": K - 1, "stride": K},
        "target": {"class": "merge_dims", "from": "windowed", "axes": "static", "n_out": F * K},
        "stop": {"class": "eval", "from": "target", "out_type": {"shape": (None, 1), "dim": 1},
                 "eval": "self.network.get_config().typed_value('_stop_ramp')(source(0, as_data=True))"},
        "sum": {"class": "eval", "from": "target", "out_type": {"shape": (None, 1), "dim": 1},
                "eval": "tf.reduce_sum(source(0, enforce_batch_major=True), axis=-1, keepdims=True)"},
    }
    lens = np.array([10, 7], dtype="int32")
    with tf.Graph().as_default():
        net = TFNetwork(config=Config({"_stop_ramp": _stop_ramp}), extern_data=ExternData({"data": {"dim": F}}),
                        train_flag=False)
        net.construct_from_dict(net_dict)
        stop, total = net.get_layer("stop").output, net.get_layer("sum").output
        assert stop.batch_shape == total.batch_shape == (None, None, 1)
        assert stop.dims[1] == net.get_layer("target").output.dims[1]  # the windowed time axis
        data = net.extern_data.get_data("data")
        x = np.random.RandomState(0).normal(size=(2, 10, F)).astype("float32")
        with tf1.Session() as session:
            stop_v, total_v, out_len = session.run(
                [stop.placeholder, total.placeholder, stop.dims[1].dyn_size],
                {data.placeholder: x, data.size_placeholder[0]: lens})
    n_out = -(-lens // K)
    np.testing.assert_array_equal(out_len, n_out)
    for b in range(2):
        ref = np.clip(np.arange(n_out.max()) - (n_out[b] - RAMP - 1), 0, RAMP) / RAMP
        np.testing.assert_allclose(stop_v[b, :n_out[b], 0], ref[:n_out[b]])
        padded = np.concatenate([x[b], np.zeros((K * n_out.max() - 10, F), "float32")])
        np.testing.assert_allclose(total_v[b, :n_out[b], 0],
                                   padded[:K * n_out[b]].reshape(n_out[b], K * F).sum(-1), rtol=1e-5)


def test_eval_source_as_layer():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": F}}), train_flag=False)
        net.construct_from_dict({"output": {"class": "eval", "from": "data",
                                            "eval": "source(0, as_layer=True).output.placeholder * 2.0"}})
        data = net.extern_data.get_data("data")
        x = np.random.RandomState(0).normal(size=(2, 3, F)).astype("float32")
        with tf1.Session() as session:
            y = session.run(net.get_layer("output").output.placeholder,
                            {data.placeholder: x, data.size_placeholder[0]: [3, 2]})
    np.testing.assert_allclose(y, 2 * x)
