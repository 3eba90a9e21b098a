"""conv / pool / transposed_conv / dct and the signal layers: dim tags, lengths, param layout, errors."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import NetworkLayerException, TFNetwork

tf1 = tf.compat.v1
LENS = np.array([7, 5, 4], "int32")


def _build(net_dict, extern=None):
    net = TFNetwork(extern_data=ExternData(extern or {"data": {"dim": 6}}), train_flag=False)
    net.construct_from_dict(net_dict)
    return net


def _run(net, fetches, x=None):
    data = net.extern_data.get_data("data")
    if x is None:
        x = np.random.RandomState(1).randn(3, 7, *data.shape[1:]).astype("float32")
    feed = {data.placeholder: x, data.size_placeholder[0]: LENS}
    with tf1.Session() as session:
        net.initialize_params(session)
        return session.run(fetches, feed_dict=feed)


def _params(net):
    return sorted((p.op.name, tuple(p.shape.as_list())) for p in net.get_params_list())


def test_conv_same_keeps_time_tag_and_matches_numpy():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "conv", "n_out": 4, "filter_size": (3,), "padding": "same",
                                 "with_bias": True, "from": "data"}})
        out = net.get_layer("output").output
        data = net.extern_data.get_data("data")
        assert out.dims[1] is data.dims[1]  # same padding, stride 1: the same time axis
        assert out.batch_shape == (None, None, 4) and out.feature_dim_axis == 2
        assert _params(net) == [("output/W", (3, 6, 4)), ("output/bias", (4,))]
        layer = net.get_layer("output")
        x = np.random.RandomState(0).randn(3, 7, 6).astype("float32")
        y, w, b = _run(net, [out.placeholder, layer.params["W"], layer.params["bias"]], x)
    xp = np.pad(x, [(0, 0), (1, 1), (0, 0)])
    ref = sum(np.einsum("btf,fo->bto", xp[:, k:k + 7], w[k]) for k in range(3)) + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_conv_valid_strided_dilated_lengths():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "conv", "n_out": 2, "filter_size": [2], "strides": 2, "padding": "valid",
                                 "from": "data"},
                      "dil": {"class": "conv", "n_out": 2, "filter_size": [3], "dilation_rate": 2, "padding": "valid",
                              "from": "data", "is_output_layer": True}})
        out = net.get_layer("output").output
        dil = net.get_layer("dil").output
        assert out.dims[1] is not net.extern_data.get_data("data").dims[1]
        y, lens, dlens = _run(net, [out.placeholder, out.dims[1].dyn_size, dil.dims[1].dyn_size])
    assert list(lens) == [3, 2, 2]  # ceil((n - 1) / 2)
    assert list(dlens) == [3, 1, 0]  # n - 4, not negative
    assert y.shape == (3, 3, 2)


def test_conv_2d_add_feature_dim_and_groups():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "conv", "n_out": 4, "filter_size": (3, 3), "padding": "same",
                                 "input_add_feature_dim": True, "from": "data"},
                      "grp": {"class": "conv", "n_out": 4, "filter_size": (1,), "padding": "valid", "groups": 2,
                              "from": "data", "is_output_layer": True}})
        out = net.get_layer("output").output
        assert out.batch_shape == (None, None, 6, 4)
        assert dict(_params(net)) == {"output/W": (3, 3, 1, 4), "grp/W": (1, 3, 4)}
        y = _run(net, out.placeholder)
        assert y.shape == (3, 7, 6, 4)


def test_conv_filter_size_wrong_rank_names_option():
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException) as exc:
            _build({"output": {"class": "conv", "n_out": 4, "filter_size": (3, 3), "padding": "same",
                               "from": "data"}})
    assert "filter_size" in str(exc.value) and "'output'" in str(exc.value)


def test_pool_lengths_and_static_axis_too_short():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "pool", "mode": "avg", "pool_size": (3,), "padding": "valid",
                                 "from": "data"}})
        out = net.get_layer("output").output
        y, lens = _run(net, [out.placeholder, out.dims[1].dyn_size])
        assert list(lens) == [2, 1, 1]
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException) as exc:
            _build({"output": {"class": "pool", "mode": "max", "pool_size": (2, 5), "padding": "valid",
                               "in_spatial_dims": ["T", "dim:4"], "from": "data"}},
                   extern={"data": {"shape": (None, 4, 3)}})
    assert "pool_size" in str(exc.value) and "'output'" in str(exc.value)


def test_transposed_conv_lengths_and_params():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "transposed_conv", "n_out": 2, "filter_size": [3], "strides": [2],
                                 "padding": "valid", "remove_padding": 1, "from": "data"}})
        out = net.get_layer("output").output
        assert _params(net) == [("output/W_native_transposed_conv", (3, 1, 2, 6)), ("output/bias", (2,))]
        y, lens = _run(net, [out.placeholder, out.dims[1].dyn_size])
    assert list(lens) == [n * 2 + 1 - 2 for n in LENS]
    assert y.shape == (3, 7 * 2 + 1 - 2, 2)


def test_dct_and_signal_layers():
    with tf.Graph().as_default():
        net = _build({"dct": {"class": "dct", "norm": "ortho", "from": "data", "is_output_layer": True},
                      "stft": {"class": "stft", "frame_shift": 2, "frame_size": 4, "fft_size": 4, "from": "wave"},
                      "wave": {"class": "copy", "from": "data:wave"},
                      "istft": {"class": "istft", "frame_shift": 2, "frame_size": 4, "fft_size": 4, "from": "stft"},
                      "output": {"class": "mel_filterbank", "fft_size": 4, "nr_of_filters": 2, "sampling_rate": 8000,
                                 "from": "stft_abs"},
                      "stft_abs": {"class": "activation", "activation": "abs", "from": "stft"},
                      "istft_out": {"class": "copy", "from": "istft", "is_output_layer": True}},
                     extern={"data": {"dim": 6}, "wave": {"shape": (None, 1)}})
        stft = net.get_layer("stft").output
        istft = net.get_layer("istft").output
        assert stft.dtype == "complex64" and stft.dim == 3
        assert net.get_layer("output").output.dim == 2
        wave = net.extern_data.get_data("wave")
        data = net.extern_data.get_data("data")
        rng = np.random.RandomState(0)
        feed = {wave.placeholder: rng.randn(3, 12, 1).astype("float32"), wave.size_placeholder[0]: [12, 10, 8],
                data.placeholder: rng.randn(3, 7, 6).astype("float32"), data.size_placeholder[0]: LENS}
        with tf1.Session() as session:
            slens, ilens, y = session.run([stft.dims[1].dyn_size, istft.dims[1].dyn_size, istft.placeholder], feed)
    assert list(slens) == [5, 4, 3]  # (n - 4) // 2 + 1
    assert list(ilens) == [12, 10, 8]
    assert y.shape[-1] == 1


def test_conv_and_pool_on_input_without_feature_axis():
    extern = {"data": {"shape": (None,), "dim": None}}
    x = np.random.RandomState(2).randn(3, 9).astype("float32")
    with tf.Graph().as_default():
        net = _build({"output": {"class": "conv", "n_out": 2, "filter_size": (3,), "strides": 2, "padding": "valid",
                                 "from": "data"},
                      "pool": {"class": "pool", "mode": "max", "pool_size": (2,), "from": "data",
                               "is_output_layer": True}}, extern=extern)
        assert _params(net) == [("output/W", (3, 1, 2))]
        conv, pool = net.get_layer("output").output, net.get_layer("pool").output
        assert conv.batch_shape == (None, None, 2) and pool.batch_shape == (None, None)
        data = net.extern_data.get_data("data")
        with tf1.Session() as session:
            net.initialize_params(session)
            clens, p, plens = session.run([conv.dims[1].dyn_size, pool.placeholder, pool.dims[1].dyn_size],
                                          {data.placeholder: x, data.size_placeholder[0]: [9, 5, 4]})
    assert list(clens) == [4, 2, 1] and list(plens) == [4, 2, 2]
    np.testing.assert_allclose(p, x[:, :8].reshape(3, 4, 2).max(-1))


def test_conv_and_pool_new_spatial_dims_have_the_original_descriptions():
    # "<layer>:conv:s<i>" (pool outputs too): configs refer to them as "stag:conv0p:conv:s1"
    with tf.Graph().as_default():
        net = _build({
            "split": {"class": "split_dims", "axis": "F", "dims": (-1, 1), "from": "data"},
            "conv0": {"class": "conv", "from": "split", "padding": "same", "filter_size": (3, 3), "n_out": 2,
                      "strides": (2, 1)},
            "conv0p": {"class": "pool", "from": "conv0", "pool_size": (1, 2), "mode": "max", "padding": "same"},
            "output": {"class": "merge_dims", "from": "conv0p", "axes": ["stag:conv0p:conv:s1", "f"]}})
        assert net.get_layer("conv0").output.dims[1].description == "conv0:conv:s0"
        assert net.get_layer("conv0p").output.dims[2].description == "conv0p:conv:s1"
        out = net.get_layer("output").output
        assert out.batch_shape == (None, None, 3 * 2)
        y, x = _run(net, [out.placeholder, net.get_layer("conv0p").output.placeholder])
        np.testing.assert_array_equal(y, x.reshape(x.shape[:2] + (-1,)))
