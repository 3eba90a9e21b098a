"""Sequence and indexing layers: dim tags and sequence lengths (window, prefix/postfix, pad, chunking, ...)."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import NetworkLayerException, TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], dtype="int32")


def _run(net_dict, fetch, extern=None, lens=LENS, n_feat=3):
    """Build net_dict, feed random data with lengths lens, return (net, {name: (value, {axis: lens})})."""
    extern = extern or {"data": {"dim": n_feat}}
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(extern), train_flag=False)
        net.construct_from_dict(net_dict)
        data = net.extern_data.get_data("data")
        rnd = np.random.RandomState(1)
        x = rnd.normal(size=(len(lens), int(lens.max()), n_feat)).astype("float32")
        feed = {data.placeholder: x, data.size_placeholder[0]: lens}
        fetches = {}
        for name in fetch:
            out = net.get_layer(name).output
            fetches[name] = (out.placeholder, {i: d.dyn_size for i, d in enumerate(out.dims)
                                               if d.is_dynamic() and d.dyn_size is not None})
        with tf1.Session() as session:
            res = session.run(fetches, feed_dict=feed)
        return net, x, res


def test_window_same_keeps_tag_and_stride_lengths():
    net, x, res = _run({"w1": {"class": "window", "window_size": 3, "from": "data"},
                        "output": {"class": "window", "window_size": 3, "stride": 2, "from": "data"}},
                       ["w1", "output"])
    w1 = net.get_layer("w1").output
    data = net.extern_data.get_data("data")
    assert w1.dims[1] is data.dims[1]  # "same", stride 1: same time tag
    assert w1.batch_shape == (None, None, 3, 3) and w1.feature_dim_axis == 3
    out = net.get_layer("output").output
    assert out.dims[1] != data.dims[1]
    val, sizes = res["output"]
    assert list(sizes[1]) == [4, 3, 2]  # ceildiv(len, 2)
    assert val.shape[1] == 4
    np.testing.assert_allclose(val[0, 1, :, 0], x[0, 1:4, 0])  # window centered at frame 2
    np.testing.assert_allclose(val[0, 0, 0], 0.0)  # left zero padding


def test_window_valid_lengths():
    _, x, res = _run({"output": {"class": "window", "window_size": 3, "padding": "valid", "from": "data"}},
                     ["output"])
    val, sizes = res["output"]
    assert list(sizes[1]) == [5, 3, 2]
    np.testing.assert_allclose(val[1, 2, :, 1], x[1, 2:5, 1])


def test_prefix_postfix_lengths():
    net, x, res = _run({"pre": {"class": "prefix_in_time", "prefix": 1.5, "repeat": 2, "from": "data"},
                        "output": {"class": "postfix_in_time", "postfix": -1.0, "repeat": 3, "from": "data"}},
                       ["pre", "output"])
    val, sizes = res["pre"]
    assert list(sizes[1]) == [9, 7, 6]
    np.testing.assert_allclose(val[:, :2], 1.5)
    np.testing.assert_allclose(val[2, 2:6], x[2, :4])
    val, sizes = res["output"]
    assert list(sizes[1]) == [10, 8, 7]
    np.testing.assert_allclose(val[1, :5], x[1, :5])
    np.testing.assert_allclose(val[1, 5:8], -1.0)  # right after the sequence end, not after the padding
    data = net.extern_data.get_data("data")
    assert net.get_layer("pre").output.dims[1] != data.dims[1]
    assert net.get_layer("output").output.dims[1] != net.get_layer("pre").output.dims[1]


def test_prefix_per_seq_repeat():
    net, x, res = _run({"len": {"class": "length", "from": "data"},
                        "rep": {"class": "eval", "from": "len", "eval": "source(0) - 3"},
                        "output": {"class": "prefix_in_time", "prefix": 0.5, "repeat": "rep", "from": "data"}},
                       ["output"])
    val, sizes = res["output"]
    assert list(sizes[1]) == [7 + 4, 5 + 2, 4 + 1]
    np.testing.assert_allclose(val[1, :2], 0.5)
    np.testing.assert_allclose(val[1, 2:7], x[1, :5])


def test_pad_lengths_and_static():
    net, x, res = _run({"pt": {"class": "pad", "axes": "T", "padding": (1, 2), "value": 9.0, "from": "data"},
                        "output": {"class": "pad", "axes": "F", "padding": 1, "from": "data"},
                        "dyn": {"class": "pad", "axes": "T", "padding": (1, 2), "value": 9.0,
                                "handle_dynamic_dims": True, "from": "data"}},
                       ["pt", "output", "dyn"])
    val, sizes = res["pt"]
    assert list(sizes[1]) == [10, 8, 7]
    assert net.get_layer("output").output.batch_shape == (None, None, 5)
    assert net.get_layer("output").output.dims[1] is net.extern_data.get_data("data").dims[1]
    val, sizes = res["dyn"]
    assert list(sizes[1]) == [10, 8, 7]
    np.testing.assert_allclose(val[2, 0], 9.0)
    np.testing.assert_allclose(val[2, 1:5], x[2, :4])
    np.testing.assert_allclose(val[2, 5:7], 9.0)  # padded at each sequence's end


def test_pad_reflect_dynamic_per_seq():
    _, x, res = _run({"output": {"class": "pad", "axes": "T", "padding": (2, 1), "mode": "reflect",
                                 "handle_dynamic_dims": True, "from": "data"}}, ["output"])
    val, sizes = res["output"]
    assert list(sizes[1]) == [10, 8, 7]
    np.testing.assert_allclose(val[2, :7, 0], x[2, [2, 1, 0, 1, 2, 3, 2], 0])


def test_time_chunking_roundtrip():
    lens = np.array([8, 7, 3], dtype="int32")
    net, x, res = _run({"chunked": {"class": "time_chunking", "chunk_size": 4, "chunk_step": 2, "from": "data"},
                        "output": {"class": "time_unchunking", "chunking_layer": "chunked", "from": "chunked"}},
                       ["chunked", "output"], lens=lens)
    chunked = net.get_layer("chunked").output
    assert chunked.time_dim_axis == 0 and chunked.batch_dim_axis == 1
    val, sizes = res["chunked"]
    assert val.shape == (4, 3 * 3, 3)
    assert list(sizes[0]) == [4, 4, 4, 4, 4, 3, 3, 1, 0]
    out = net.get_layer("output").output
    assert out.dims[0] is net.extern_data.get_data("data").dims[1]
    val, sizes = res["output"]
    assert list(sizes[0]) == [8, 7, 3]
    for b, n in enumerate(lens):
        np.testing.assert_allclose(val[:n, b], x[b, :n], rtol=1e-5)


def test_shift_axis_lengths():
    _, _, res = _run({"l": {"class": "shift_axis", "from": "data", "amount": -2, "axis": "T"},
                      "output": {"class": "shift_axis", "from": "data", "amount": 2, "pad": False, "axis": "T"}},
                     ["l", "output"])
    assert list(res["l"][1][1]) == [5, 3, 2]
    assert list(res["output"][1][1]) == [5, 5, 4]


def test_range_in_axis_and_from_length_share_time_tag():
    net, _, res = _run({"r": {"class": "range_in_axis", "from": "data", "axis": "T"},
                        "len": {"class": "length", "from": "data"},
                        "output": {"class": "range_from_length", "from": "len"}}, ["r", "output"])
    t = net.extern_data.get_data("data").dims[1]
    assert net.get_layer("r").output.dims == (t,)
    assert net.get_layer("output").output.dims == (t,)
    assert list(res["r"][0]) == list(range(7))


def test_gather_float_position_error_names_layer():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}, "pos": {"shape": (), "time_dim_axis": None}}))
        with pytest.raises(NetworkLayerException, match="bad"):
            net.construct_from_dict({"bad": {"class": "gather", "from": "data", "axis": "T", "position": "data:pos"},
                                     "output": {"class": "copy", "from": "bad"}})


def test_axis_matching_nothing_is_error():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}}))
        with pytest.raises(NetworkLayerException, match="output"):
            net.construct_from_dict({"output": {"class": "cumsum", "from": "data", "axis": "stag:nonexisting"}})


def test_window_and_cumsum_inside_rec_loop_match_outside():
    net_dict = {
        "win_out": {"class": "window", "window_size": 3, "window_right": 0, "from": "data", "is_output_layer": True},
        "cs_out": {"class": "cumsum", "from": "data", "is_output_layer": True},
        "output": {"class": "rec", "from": "data", "optimize_move_layers_out": False, "unit": {
            "win": {"class": "window", "window_size": 3, "window_right": 0, "from": "data:source"},
            "cs": {"class": "cumsum", "from": "data:source", "is_output_layer": True},
            "output": {"class": "copy", "from": "win"}}},
    }
    net, x, res = _run(net_dict, ["win_out", "cs_out", "output"])
    rec_out = net.get_layer("output").output
    assert rec_out.batch_shape[-2:] == (3, 3)
    t = rec_out.time_dim_axis
    val = np.moveaxis(res["output"][0], [rec_out.batch_dim_axis, t], [0, 1])
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(val[b, :n], res["win_out"][0][b, :n], rtol=1e-6)


def test_gather_by_layer_and_scatter_back():
    net_dict = {
        "pos": {"class": "range_in_axis", "from": "data", "axis": "T"},
        "rev": {"class": "eval", "from": ["pos", "len"], "eval": "tf.maximum(source(1) - 1 - source(0), 0)",
                "out_type": {"dtype": "int32"}},
        "rev_neg": {"class": "eval", "from": ["pos", "len"], "eval": "source(1) - 1 - source(0)",
                    "out_type": {"dtype": "int32"}},  # negative in padded frames: filtered out
        "len": {"class": "length", "from": "data"},
        "g": {"class": "gather", "from": "data", "axis": "T", "position": "rev"},
        "output": {"class": "scatter_nd", "from": "g", "position": "rev_neg", "position_axis": "T",
                   "output_dim_via_time_from": "data", "filter_invalid_indices": True},
    }
    net, x, res = _run(net_dict, ["g", "output"])
    data = net.extern_data.get_data("data")
    g = net.get_layer("g").output
    assert g.dims == data.dims  # [B,T,F]: shared batch axis, position's time axis, input's feature axis
    val = res["g"][0]
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(val[b, :n], x[b, :n][::-1])
    out = net.get_layer("output").output
    assert out.dims == data.dims
    val = res["output"][0]
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(val[b, :n], x[b, :n])


def test_gather_clip_to_valid_per_sequence():
    net_dict = {"big": {"class": "length", "from": "data"},
                "p": {"class": "eval", "from": "big", "eval": "source(0) + 3"},
                "output": {"class": "gather", "from": "data", "axis": "T", "position": "p", "clip_to_valid": True}}
    net, x, res = _run(net_dict, ["output"])
    assert net.get_layer("output").output.batch_shape == (None, 3)
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(res["output"][0][b], x[b, n - 1])  # clipped to the last frame of each sequence


def test_window_over_feature_keeps_feature_tag():
    # the input's feature axis was not set explicitly: as the original (copy_add_dim_by_tag keeps only explicitly set
    # feature axes), the feature axis is the default of the new layout, the last static axis (the window axis)
    net, _, res = _run({"output": {"class": "window", "window_size": 3, "axis": "F", "from": "data"}}, ["output"])
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 3, 3)
    assert out.dims[2] is net.extern_data.get_data("data").dims[2] and out.feature_dim_axis == 3


def test_same_operation_on_same_axis_gives_same_tag():
    net, x, res = _run({"a": {"class": "pad", "axes": "T", "padding": (1, 1), "from": "data"},
                        "b": {"class": "pad", "axes": "T", "padding": (1, 1), "value": 1.0, "from": "data"},
                        "c": {"class": "pad", "axes": "T", "padding": (2, 0), "from": "data"},
                        "output": {"class": "combine", "kind": "add", "from": ["a", "b"]}}, ["output", "c"])
    a, b, c = [net.get_layer(n).output for n in "abc"]
    assert a.dims[1] == b.dims[1] and a.dims[1] != c.dims[1]
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 3)
    assert list(res["output"][1][1]) == [9, 7, 6]


def test_window_and_cumsum_without_batch_axis():
    net, _, res = _run({"r": {"class": "range", "limit": 5, "from": []},
                        "w": {"class": "window", "window_size": 3, "axis": "F", "from": "r"},
                        "output": {"class": "cumsum", "axis": "F", "from": "r"}}, ["w", "output"])
    assert net.get_layer("w").output.batch_shape == (5, 3)
    np.testing.assert_array_equal(res["w"][0][0], [0, 0, 1])
    np.testing.assert_array_equal(res["output"][0], [0, 1, 3, 6, 10])
