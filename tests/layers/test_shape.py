"""
Shape and axis layers (returnn_lite/layers/shape.py, shape_split.py): dim-tag bookkeeping (new tags with
sequence lengths, tags preserved through transposes), values, and template == real output for every layer.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.data import Dim, batch_dim
from returnn_lite.extern_data import ExternData
from returnn_lite.network import NetworkLayerException, TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")
EXTERN = {"data": {"dim": 6}, "classes": {"dim": 4, "sparse": True}, "rep": {"shape": (None,), "dtype": "int32"},
          "start": {"shape": (), "dtype": "int32", "time_dim_axis": None},
          "sizes": {"shape": (2,), "dtype": "int32", "time_dim_axis": None, "feature_dim_axis": None}}


def _feed(net, seed=0):
    rng = np.random.RandomState(seed)
    ed = net.extern_data
    d, c, r = ed.get_data("data"), ed.get_data("classes"), ed.get_data("rep")
    x = rng.randn(3, 7, 6).astype("float32")
    return {
        d.placeholder: x, d.size_placeholder[0]: LENS,
        c.placeholder: rng.randint(0, 4, (3, 7)).astype("int32"), c.size_placeholder[0]: LENS,
        r.placeholder: rng.randint(0, 3, (3, 7)).astype("int32"), r.size_placeholder[0]: LENS,
        ed.get_data("start").placeholder: np.array([2, -1, 5], "int32"),
        ed.get_data("sizes").placeholder: np.array([[2, 3], [2, 2], [1, 2]], "int32"),
    }


def _run(net_dict, fetch_layers=("output",), extra=None):
    """Builds the network, returns (net, {layer: value}, {layer: {axis: seq lens}}, feed values by key)."""
    graph = tf.Graph()
    with graph.as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=False)
        net.construct_from_dict(net_dict)
        feed = _feed(net)
        fetches, sizes = {}, {}
        for name in fetch_layers:
            out = net.get_layer(name).output
            fetches[name] = out.placeholder
            sizes[name] = {i: d.dyn_size for i, d in enumerate(out.dims) if d.is_dynamic() and d.dyn_size is not None}
        with tf1.Session(graph=graph) as session:
            values, size_values = session.run((fetches, sizes), feed_dict=feed)
        inputs = {ph.name.split("/")[-1].split(":")[0]: v for ph, v in feed.items()}
    return net, values, size_values, inputs


def _x(inputs):
    return inputs["data"]


# ---- dim-tag bookkeeping -------------------------------------------------------------------------

def test_slice_time_step_lengths():
    net, v, s, inp = _run({"output": {"class": "slice", "axis": "T", "slice_start": 1, "slice_step": 2}})
    out = net.get_layer("output").output
    in_t = net.extern_data.get_data("data").get_time_dim_tag()
    assert out.get_time_dim_tag() != in_t
    np.testing.assert_array_equal(s["output"][1], [3, 2, 2])  # ceil((len - 1) / 2)
    np.testing.assert_allclose(v["output"], _x(inp)[:, 1::2])


def test_slice_negative_end_and_static_range():
    net, v, s, _ = _run({"output": {"class": "slice", "axis": "T", "slice_end": -2},
                         "st": {"class": "slice", "axis": "T", "slice_start": 1, "slice_end": 3,
                                "is_output_layer": True}}, ("output", "st"))
    np.testing.assert_array_equal(s["output"][1], LENS - 2)
    st = net.get_layer("st").output
    assert st.batch_shape == (None, 2, 6) and st.time_dim_axis is None


def test_split_dims_time_pad_lengths_and_pad_value():
    net, v, s, inp = _run({"output": {"class": "split_dims", "axis": "T", "dims": (-1, 3), "pad_value": -9.0}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 3, 6) and out.time_dim_axis == 1 and out.feature_dim_axis == 3
    np.testing.assert_array_equal(s["output"][1], [3, 2, 2])  # ceil(len / 3)
    assert v["output"].shape == (3, 3, 3, 6)
    np.testing.assert_allclose(v["output"][:, 2, 1:], -9.0)  # frames 7, 8 are the padding to a multiple of 3
    np.testing.assert_allclose(v["output"].reshape(3, 9, 6)[:, :7], _x(inp))


def test_split_dims_keeps_time_tag_when_rest_is_one():
    net, _, _, _ = _run({"output": {"class": "split_dims", "axis": "T", "dims": (1, -1)}})
    out = net.get_layer("output").output
    assert out.dims[2] is net.extern_data.get_data("data").get_time_dim_tag()
    assert out.time_dim_axis == 2


def test_split_dims_feature():
    net, v, _, inp = _run({"output": {"class": "split_dims", "axis": "F", "dims": (2, -1)}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 2, 3) and out.feature_dim_axis == 3
    assert out.dims[1] is net.extern_data.get_data("data").get_time_dim_tag()
    np.testing.assert_allclose(v["output"], _x(inp).reshape(3, 7, 2, 3))


def test_flatten_unflatten_batch_roundtrip():
    for batch_major in (True, False):
        net, v, s, inp = _run({"flat": {"class": "flatten_batch", "batch_major": batch_major},
                               "output": {"class": "unflatten_batch", "from": "flat"}}, ("flat", "output"))
        flat = net.get_layer("flat").output
        assert flat.batch_dim_axis == 0 and flat.dims[0] is not batch_dim and flat.time_dim_axis is None
        assert v["flat"].shape == (LENS.sum(), 6)
        x = _x(inp)
        if batch_major:
            expected = np.concatenate([x[b, :n] for b, n in enumerate(LENS)])
        else:
            expected = np.stack([x[b, t] for t in range(7) for b in range(3) if t < LENS[b]])
        np.testing.assert_allclose(v["flat"], expected)
        out = net.get_layer("output").output
        assert out.get_time_dim_tag() is net.extern_data.get_data("data").get_time_dim_tag()
        assert out.dims[0] is batch_dim
        mask = np.arange(7)[None, :] < LENS[:, None]
        np.testing.assert_allclose(v["output"][mask], x[mask])


def test_merge_dims_batch_time_and_split_batch_time():
    net, v, s, inp = _run({"merge": {"class": "merge_dims", "axes": "BT"},
                           "output": {"class": "split_batch_time", "base": "data", "from": "merge"}},
                          ("merge", "output"))
    merge = net.get_layer("merge").output
    assert merge.batch_shape == (None, 6) and merge.dims[0] is not batch_dim
    np.testing.assert_allclose(v["merge"], _x(inp).reshape(21, 6))
    out = net.get_layer("output").output
    assert out.get_time_dim_tag() is net.extern_data.get_data("data").get_time_dim_tag()
    np.testing.assert_allclose(v["output"], _x(inp))


def test_merge_dims_dynamic_lengths_product():
    net, v, s, inp = _run({"ex": {"class": "expand_dims", "axis": "spatial", "dim": 2},
                           "output": {"class": "merge_dims", "axes": ["T", "dim:2"], "from": "ex"}}, ("output",))
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 6) and out.time_dim_axis == 1
    np.testing.assert_array_equal(s["output"][1], LENS * 2)


def test_merge_dims_feature_time_has_no_time_axis():
    net, v, s, _ = _run({"sw": {"class": "swap_axes", "axis1": "T", "axis2": "F"},
                         "output": {"class": "merge_dims", "axes": ["F", "T"], "from": "sw"}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None) and out.feature_dim_axis == 1 and out.time_dim_axis is None


def test_transpose_swap_reinterpret_keep_tags():
    net, v, _, inp = _run({
        "tr": {"class": "transpose", "perm": {"T": "F", "F": "T"}},
        "sw": {"class": "swap_axes", "axis1": "T", "axis2": "F"},
        "re": {"class": "reinterpret_data", "from": "sw", "enforce_batch_major": True, "is_output_layer": True},
        "output": {"class": "copy", "from": "tr"}}, ("tr", "sw", "re"))
    d = net.extern_data.get_data("data")
    for name in ("tr", "sw", "re"):
        out = net.get_layer(name).output
        assert out.dims[1] is d.dims[2] and out.dims[2] is d.dims[1], name
        assert out.time_dim_axis == 2 and out.feature_dim_axis == 1, name
        np.testing.assert_allclose(v[name], _x(inp).transpose(0, 2, 1))


def test_reinterpret_data_size_base_and_sparse():
    net, v, s, _ = _run({
        "re": {"class": "reinterpret_data", "from": "data:classes", "size_base": "data", "increase_sparse_dim": 2},
        "dense": {"class": "reinterpret_data", "from": "re", "set_sparse": False, "is_output_layer": True},
        "output": {"class": "copy", "from": "re"}}, ("re", "dense"))
    re = net.get_layer("re").output
    assert re.get_time_dim_tag() is net.extern_data.get_data("data").get_time_dim_tag()
    assert re.sparse and re.dim == 6
    dense = net.get_layer("dense").output
    assert not dense.sparse and dense.dim is None and dense.dtype == "int32"


def test_slice_nd_lengths_and_zero_padding():
    net, v, s, inp = _run({"output": {"class": "slice_nd", "start": "data:start", "size": None}})
    # start [2, -1, 5], lens [7, 5, 4]
    np.testing.assert_array_equal(s["output"][1], [5, 6, 0])
    x = _x(inp)
    np.testing.assert_allclose(v["output"][0, :5], x[0, 2:7])
    np.testing.assert_allclose(v["output"][1, 0], 0.0)
    np.testing.assert_allclose(v["output"][1, 1:6], x[1, 0:5])


def test_repeat_with_layer_lengths():
    net, v, s, inp = _run({"output": {"class": "repeat", "repetitions": "data:rep", "axis": "T"}})
    rep = inp["rep"] * (np.arange(7)[None, :] < LENS[:, None])
    np.testing.assert_array_equal(s["output"][1], rep.sum(axis=1))
    x = _x(inp)
    for b in range(3):
        np.testing.assert_allclose(v["output"][b, :rep[b].sum()], np.repeat(x[b], rep[b], axis=0))


def test_tile_and_resize_lengths():
    net, v, s, _ = _run({"output": {"class": "tile", "multiples": {"T": 2}},
                         "rs": {"class": "resize", "axis": "T", "factor": 3, "kind": "fill", "fill_value": 1,
                                "from": "data:classes", "is_output_layer": True}}, ("output", "rs"))
    np.testing.assert_array_equal(s["output"][1], LENS * 2)
    np.testing.assert_array_equal(s["rs"][1], LENS * 3)
    assert (v["rs"][:, 1::3] == 1).all()


def test_remove_symbol():
    net, v, s, inp = _run({"output": {"class": "remove", "symbol": 0, "from": "data:classes"}})
    c = inp["classes"]
    for b in range(3):
        kept = [x for x in c[b, :LENS[b]] if x != 0]
        assert s["output"][1][b] == len(kept)
        np.testing.assert_array_equal(v["output"][b, :len(kept)], kept)


def test_unflatten_nd_lengths():
    net, v, s, inp = _run({"output": {"class": "unflatten_nd", "sizes": "data:sizes", "num_axes": 2}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, None, 6)
    np.testing.assert_array_equal(s["output"][1], [2, 2, 1])
    np.testing.assert_array_equal(s["output"][2], [3, 2, 2])
    x = _x(inp)
    np.testing.assert_allclose(v["output"][0, 1, 2], x[0, 1 * 3 + 2])
    np.testing.assert_allclose(v["output"][1, 1, 1], x[1, 1 * 2 + 1])


def test_split_sub_layers():
    net, v, _, inp = _run({"split": {"class": "split", "size_splits": [1, 3, 2]},
                           "output": {"class": "copy", "from": ["split/2", "split/0"]}})
    np.testing.assert_allclose(v["output"], _x(inp)[..., [4, 5, 0]])


def test_stack_broadcast_axis():
    net, v, _, inp = _run({"red": {"class": "reduce", "mode": "max", "axis": "T"},
                           "output": {"class": "stack", "from": ["data", "red"]}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 2, 6)
    np.testing.assert_allclose(v["output"][:, :, 0], _x(inp))


# ---- errors name the layer and say what is wrong --------------------------------------------------

@pytest.mark.parametrize("layer, words", [
    ({"class": "split", "axis": "F", "size_splits": [2, 2]}, ["size_splits", "6"]),
    ({"class": "split_dims", "axis": "F", "dims": (4, -1)}, ["multiple of 4"]),
    ({"class": "split_dims", "axis": "T", "dims": (2, 3)}, ["dynamic", "-1"]),
    ({"class": "merge_dims", "axes": ["dim:9", "F"]}, ["dim:9"]),
    ({"class": "squeeze", "axis": "F"}, ["size 6"]),
    ({"class": "swap_axes", "axis1": "T", "axis2": "T"}, ["same axis"]),
    ({"class": "unflatten_batch"}, ["flatten_batch"]),
])
def test_errors_name_layer(layer, words):
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=False)
        with pytest.raises(NetworkLayerException) as info:
            net.construct_from_dict({"bad": dict(layer), "output": {"class": "copy", "from": "bad"}})
    msg = str(info.value)
    assert "'bad'" in msg
    for w in words:
        assert w in msg, msg


def test_combine_mismatching_split_dims_fails():
    net_dict = {"a": {"class": "split_dims", "axis": "F", "dims": (2, 3)},
                "b": {"class": "split_dims", "axis": "F", "dims": (3, 2)},
                "bad": {"class": "combine", "kind": "add", "from": ["a", "b"]},
                "output": {"class": "copy", "from": "bad"}}
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=False)
        with pytest.raises(NetworkLayerException, match="'bad'"):
            net.construct_from_dict(net_dict)


# ---- every shape layer: template == real output ---------------------------------------------------

CASES = [
    {"class": "slice", "axis": "T", "slice_start": 1, "slice_end": -1},
    {"class": "slice", "axis": "F", "slice_step": 2},
    {"class": "slice_nd", "start": "data:start", "size": 3},
    {"class": "merge_dims", "axes": "BT"},
    {"class": "merge_dims", "axes": ["T", "F"], "keep_order": True},
    {"class": "combine_dims", "axes": "except_batch"},
    {"class": "split_dims", "axis": "T", "dims": (-1, 2)},
    {"class": "split", "num_splits": 3},
    {"class": "flatten_batch"},
    {"class": "expand_dims", "axis": "T", "dim": 2},
    {"class": "expand_dims", "axis": 1},
    {"class": "squeeze", "axis": "auto", "allow_no_op": True},
    {"class": "transpose", "perm": {"B": "T", "T": "B"}},
    {"class": "swap_axes", "axis1": "B", "axis2": "F"},
    {"class": "reinterpret_data", "enforce_time_major": True, "set_axes": {"F": "T"}},
    {"class": "remove", "symbol": -1, "from": "data:classes"},
    {"class": "stack", "from": ["data", "data", "data"], "axis": 0},
    {"class": "tile", "multiples": {"B": 2, "F": 3}},
    {"class": "tile", "multiples": {"B": 2, "T": 2}},
    {"class": "repeat", "repetitions": 2, "axis": "F"},
    {"class": "resize", "axis": "T", "factor": 2, "kind": "linear"},
    {"class": "split_concatenated_multichannel", "nr_of_channels": 3},
    {"class": "unflatten_nd", "sizes": "data:sizes", "num_axes": 2},
]


@pytest.mark.parametrize("desc", CASES, ids=lambda d: "%s-%s" % (d["class"], len(d)))
def test_template_matches_output(desc):
    net, v, s, _ = _run({"output": dict(desc)})
    out = net.get_layer("output").output
    value = v["output"]
    assert value.ndim == out.batch_ndim, (value.shape, out)
    for axis, dim in enumerate(out.batch_shape):
        if dim is not None:
            assert value.shape[axis] == dim, (value.shape, out)
    assert value.dtype == np.dtype(out.dtype)
    for axis, lens in s["output"].items():
        assert np.asarray(lens).max() <= value.shape[axis], (axis, lens, value.shape)
        b = out.batch_dim_axis
        if b is not None and np.ndim(lens) == 1:
            assert len(lens) == value.shape[b]
    for d in out.dims:
        assert isinstance(d, Dim)


def test_new_batch_axis_rebatches_other_lengths():
    """Dynamic axes that stay get new tags whose lengths follow the new batch axis."""
    net, v, s, _ = _run({
        "ex": {"class": "expand_dims", "axis": 1, "dim": 2},  # [B,2,T,F]
        "output": {"class": "merge_dims", "axes": ["B", "dim:2"], "from": "ex"},
        "tile": {"class": "tile", "multiples": {"B": 2}, "is_output_layer": True},
        "sw": {"class": "swap_axes", "axis1": "T", "axis2": "F", "from": "ex"},
        "flat": {"class": "flatten_batch", "axis": "dim:2", "from": "ex", "is_output_layer": True}},
        ("output", "tile", "flat"))
    np.testing.assert_array_equal(s["output"][1], np.repeat(LENS, 2))
    np.testing.assert_array_equal(s["tile"][1], np.tile(LENS, 2))
    np.testing.assert_array_equal(s["flat"][1], np.repeat(LENS, 2))
    assert v["output"].shape[0] == 6 and v["flat"].shape[0] == 6
