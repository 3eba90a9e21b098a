"""pad / valid conv dims as the original's dim math: pad (l, r) of T is ``l + T + r`` (sides kept apart, one Dim per
operands), a valid conv with stride 1 cuts its filter's frames off the sides again, so pad 2+2 then conv 5 valid is T
(location-aware attention in Tacotron-style decoders relies on it: the conv output adds to the encoder's [B,T,A])."""

import numpy as np
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1
LENS = np.array([5, 3], dtype="int32")


def test_pad_then_valid_conv_gives_the_input_time_dim_and_values():
    net_dict = {
        "left": {"class": "pad", "axes": "T", "padding": ((2, 0),), "value": 1.0, "from": "data"},
        "both": {"class": "pad", "axes": "T", "padding": ((0, 2),), "from": "left"},
        "direct": {"class": "pad", "axes": "T", "padding": ((2, 2),), "from": "data"},
        "other": {"class": "pad", "axes": "T", "padding": ((3, 1),), "from": "data"},
        "output": {"class": "conv", "from": "both", "filter_size": (5,), "padding": "valid", "n_out": 1,
                   "with_bias": False, "forward_weights_init": 1.0},
        "sum": {"class": "combine", "kind": "add", "from": ["output", "data"]},
    }
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 1}}), train_flag=False)
        net.construct_from_dict(net_dict)
        data = net.extern_data.get_data("data")
        time = data.dims[1]
        both, direct, other = (net.get_layer(n).output.dims[1] for n in ("both", "direct", "other"))
        assert both == direct and both != other  # 2 + T + 2 twice is one Dim; 3 + T + 1 is another
        assert both.offset_parts() == (2, time, 2)
        out = net.get_layer("output").output
        assert out.dims[1] == time and net.get_layer("sum").output.batch_shape == (None, None, 1)
        x = np.random.RandomState(0).normal(size=(2, 5, 1)).astype("float32")
        with tf1.Session() as session:
            net.initialize_params(session)
            y, lens = session.run([out.placeholder, both.dyn_size], {data.placeholder: x, data.size_placeholder[0]: LENS})
    np.testing.assert_array_equal(lens, LENS + 4)
    padded = np.concatenate([np.ones((2, 2, 1)), x, np.zeros((2, 2, 1))], axis=1)[..., 0]
    ref = np.stack([padded[:, t:t + 5].sum(-1) for t in range(5)], axis=1)
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(y[b, :n, 0], ref[b, :n], rtol=1e-5)


def test_location_feedback_in_rec_unit_builds_and_runs():
    # Tacotron-style location-aware attention: prev accumulated weights padded and convolved (valid) back to the
    # encoder's time axis, added to the encoder's keys
    unit = {
        "energy_in": {"class": "combine", "kind": "add", "from": ["base:enc_ctx", "loc"], "n_out": 4},
        "energy": {"class": "linear", "activation": None, "with_bias": False, "from": "energy_in", "n_out": 1},
        "weights": {"class": "softmax_over_spatial", "from": "energy"},
        "accum": {"class": "combine", "kind": "add", "from": ["prev:accum", "weights"]},
        "pad_left": {"class": "pad", "axes": "s:0", "padding": ((2, 0),), "value": 1, "from": "prev:accum"},
        "pad_right": {"class": "pad", "axes": "s:0", "padding": ((0, 2),), "from": "pad_left"},
        "conv": {"class": "conv", "from": "pad_right", "filter_size": (5,), "padding": "valid", "n_out": 3},
        "loc": {"class": "linear", "activation": None, "with_bias": False, "from": "conv", "n_out": 4},
        "att": {"class": "generic_attention", "base": "base:enc_ctx", "weights": "weights"},
        "output": {"class": "linear", "from": "att", "n_out": 2, "loss": "mse", "target": "tgt"},
    }
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}, "tgt": {"dim": 2}}), train_flag=True)
        net.construct_from_dict({"enc_ctx": {"class": "linear", "from": "data", "n_out": 4},
                                 "output": {"class": "rec", "from": [], "unit": unit, "target": "tgt"}})
        out = net.get_layer("output").output
        assert out.batch_shape[-1] == 2 and len(out.batch_shape) == 3
        data, tgt = net.extern_data.get_data("data"), net.extern_data.get_data("tgt")
        rnd = np.random.RandomState(1)
        feed = {data.placeholder: rnd.normal(size=(2, 5, 3)), data.size_placeholder[0]: LENS,
                tgt.placeholder: rnd.normal(size=(2, 4, 2)), tgt.size_placeholder[0]: [4, 2]}
        with tf1.Session() as session:
            net.initialize_params(session)
            y, loss = session.run([out.placeholder, net.get_objective()], feed)
    assert y.shape[-1] == 2 and np.isfinite(y).all() and np.isfinite(loss)
