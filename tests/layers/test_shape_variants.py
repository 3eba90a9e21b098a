"""
Variants of the shape layers (expand_dims, stack, concat, squeeze, merge/split, reinterpret_data, ...) that the
public conformance cases do not cover: time-major inputs, sparse inputs, inputs without time axis, int axes.
Checks the output template (where batch/time/feature axes are, dims) against the original's rules and the values
against numpy.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.data import Dim
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")
BM = {"data": {"dim": 5}}
TM = {"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}}
SPARSE = {"data": {"dim": 5, "sparse": True}}
NO_TIME = {"data": {"shape": (6,)}}


def _kinds(data):
    return "".join("B" if i == data.batch_dim_axis else "F" if i == data.feature_dim_axis else
                   "T" if i == data.time_dim_axis else "s" for i in range(data.batch_ndim))


def _run(extern, net_dict, layers=("output",), seed=0):
    """Builds and runs the net; returns ({layer: (template, value)}, {extern key: input value})."""
    rng = np.random.RandomState(seed)
    with tf.Graph().as_default() as graph:
        ed = ExternData(extern)
        net = TFNetwork(extern_data=ed, train_flag=False)
        net.construct_from_dict(net_dict)
        feed, inputs = {}, {}
        for key, d in ed.data.items():
            shape = [3 if dim.is_batch_dim() else 7 if dim.dimension is None else dim.dimension for dim in d.dims]
            if d.sparse:
                x = rng.randint(0, d.sparse_dim.dimension, shape).astype(d.dtype)
            elif d.dtype.startswith("int"):
                x = rng.randint(0, 4, shape).astype(d.dtype)
            else:
                x = rng.randn(*shape).astype(d.dtype)
            feed[d.placeholder] = inputs[key] = x
            for ph in d.size_placeholder.values():
                feed[ph] = LENS
        outs = {name: net.get_layer(name).output for name in layers}
        with tf1.Session(graph=graph) as session:
            net.initialize_params(session)
            values = session.run({name: o.placeholder for name, o in outs.items()}, feed_dict=feed)
    for name, o in outs.items():
        assert len(values[name].shape) == o.batch_ndim
        assert all(s is None or s == v for s, v in zip(o.batch_shape, values[name].shape)), (o, values[name].shape)
    return {name: (outs[name], values[name]) for name in layers}, inputs


# ---- expand_dims: like adding a dim tag (explicit feature stays, unspecified feature is derived anew) -------

@pytest.mark.parametrize("extern, axis, kinds, dim", [
    (BM, "F", "BTsF", 1), (BM, "feature", "BTsF", 1), (BM, "T", "BTsF", 5), (BM, "spatial", "BTsF", 5),
    (BM, 0, "sBTF", 5), (BM, 1, "BsTF", 5), (BM, -1, "BTsF", 1),  # int: last static axis becomes the feature
    (TM, "F", "TBsF", 1), (TM, "T", "TBsF", 5), (TM, -1, "BTsF", 1),  # int axis: batch-major first
    (SPARSE, "T", "BTs", 5), (SPARSE, -1, "BTs", 5),
    (NO_TIME, "T", "BTF", 6), (NO_TIME, "F", "BsF", 1), (NO_TIME, 1, "BsF", 6),
])
def test_expand_dims_axes(extern, axis, kinds, dim):
    res, inputs = _run(extern, {"output": {"class": "expand_dims", "from": "data", "axis": axis}})
    out, value = res["output"]
    assert (_kinds(out), out.dim) == (kinds, dim)
    x = inputs["data"]
    if isinstance(axis, int) and extern is TM:
        x = x.transpose(1, 0, 2)
    a = out.dims.index([d for d in out.dims if "expand_dims" in (d.description or "")][0])
    np.testing.assert_array_equal(value, np.expand_dims(x, a))


def test_expand_dims_sparse_feature_fails():
    with pytest.raises(Exception, match="output"):
        _run(SPARSE, {"output": {"class": "expand_dims", "from": "data", "axis": "F"}})


# ---- stack: default axis after the last spatial axis; axis=-1 appends (then it is the derived feature axis) --

@pytest.mark.parametrize("extern, axis, kinds, stack_axis", [
    (BM, None, "BTsF", 2), (TM, None, "TsBF", 1), (NO_TIME, None, "BsF", 1), (SPARSE, None, "BTs", 2),
    (BM, 0, "sBTF", 0), (BM, -1, "BTsF", 3), (TM, -1, "TBsF", 3),
])
def test_stack_axis(extern, axis, kinds, stack_axis):
    layer = {"class": "stack", "from": ["data", "lin"]}
    if axis is not None:
        layer["axis"] = axis
    net = {"lin": {"class": "copy", "from": "data"}, "output": layer}
    res, inputs = _run(extern, net)
    out, value = res["output"]
    assert _kinds(out) == kinds
    assert out.dims[stack_axis].dimension == 2
    x = inputs["data"]
    np.testing.assert_array_equal(value, np.stack([x, x], axis=stack_axis))


# ---- concat: sources in different layouts are aligned to the first one ------------------------------------

def test_concat_mixed_layouts():
    net = {"bm": {"class": "swap_axes", "from": "data", "axis1": "B", "axis2": "T"},
           "lin": {"class": "linear", "activation": None, "n_out": 3, "from": "data"},
           "output": {"class": "concat", "from": [("bm", "F"), ("data", "F"), ("lin", "F")]}}
    res, inputs = _run(TM, net, layers=("output", "bm"))
    out, value = res["output"]
    assert _kinds(out) == "BTF" and out.dim == 13
    x = inputs["data"].transpose(1, 0, 2)
    np.testing.assert_allclose(value[..., :5], x)
    np.testing.assert_allclose(value[..., 5:10], x)


def test_concat_time_lengths_add():
    res, inputs = _run(BM, {"output": {"class": "concat", "from": [("data", "T"), ("data", "T")]}})
    out, value = res["output"]
    assert _kinds(out) == "BTF" and value.shape == (3, 14, 5)
    np.testing.assert_array_equal(value, np.concatenate([inputs["data"]] * 2, axis=1))


# ---- merge_dims / split_dims / others on time-major and special inputs ------------------------------------

@pytest.mark.parametrize("extern, opts, shape, kinds", [
    ({"data": {"shape": (4, None, 7), "time_dim_axis": None}}, {"axes": "static"}, (None, 28), "BsF"),
    ({"data": {"shape": (4, None, 7), "time_dim_axis": 2}}, {"axes": "static"}, (None, 28), "BTF"),
    ({"data": {"shape": (3, 5), "time_dim_axis": 1}}, {"axes": "static"}, (15,), "BF"),
    ({"data": {"shape": (None, 8, 2, 3), "feature_dim_axis": 2}}, {"axes": ["F", "static:1"]}, (None, 16, 3),
     "BTFs"),
    ({"data": {"shape": (None, 5, 3), "time_dim_axis": 0, "batch_dim_axis": 1}}, {"axes": "BT"}, (5, 3), "BsF"),
    (TM, {"axes": ["T", "F"]}, (None,), "BF"),
])
def test_merge_dims_variants(extern, opts, shape, kinds):
    res, _ = _run(extern, {"output": dict({"class": "merge_dims", "from": "data"}, **opts)})
    out, _ = res["output"]
    assert (out.shape, _kinds(out)) == (shape, kinds)


def test_merge_dims_keep_order_batch_not_first():
    extern = {"data": {"shape": (None, None, 2)}}
    res, inputs = _run(extern, {"output": {"class": "merge_dims", "from": "data", "axes": ["T", "B"],
                                           "keep_order": True}})
    out, value = res["output"]
    x = inputs["data"]  # [B,T,T2,2]
    np.testing.assert_array_equal(value, x.transpose(1, 0, 2, 3).reshape(-1, 7, 2))  # index t * B + b
    res, _ = _run(extern, {"output": {"class": "merge_dims", "from": "data", "axes": ["T", "B"]}})
    np.testing.assert_array_equal(res["output"][1], x.reshape(-1, 7, 2))  # sorted, batch first: b * T + t


def test_combine_dims_keeps_given_order():
    extern = {"data": {"shape": (None, 3, 4)}}
    res, inputs = _run(extern, {"output": {"class": "combine_dims", "from": "data", "axes": ["dim:4", "dim:3"]}})
    out, value = res["output"]
    assert out.shape == (None, 12)
    np.testing.assert_array_equal(value, inputs["data"].transpose(0, 1, 3, 2).reshape(3, 7, 12))


def test_merge_dims_time_major_values():
    res, inputs = _run(TM, {"output": {"class": "merge_dims", "from": "data", "axes": ["T", "F"]}})
    np.testing.assert_array_equal(res["output"][1], inputs["data"].transpose(1, 0, 2).reshape(3, -1))


def test_split_dims_remaining_one_keeps_tag():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(BM), train_flag=False)
        net.construct_from_dict({"output": {"class": "split_dims", "from": "data", "axis": "F", "dims": (-1, 1)}})
        out, data = net.get_layer("output").output, net.extern_data.get_data("data")
        assert out.dims[2] is data.dims[2] and out.feature_dim_axis == 3 and out.dim == 1


def test_split_dims_time_major_time():
    res, inputs = _run({"data": {"dim": 6, "time_dim_axis": 0, "batch_dim_axis": 1}},
                       {"output": {"class": "split_dims", "from": "data", "axis": "T", "dims": (-1, 2)}})
    out, value = res["output"]
    assert _kinds(out) == "TsBF" and value.shape == (4, 2, 3, 6)
    x = np.concatenate([inputs["data"], np.zeros((1, 3, 6), "float32")], axis=0)
    np.testing.assert_array_equal(value, x.reshape(4, 2, 3, 6))


@pytest.mark.parametrize("opts, kinds, dim", [
    ({"switch_axes": "TF"}, "BFT", None), ({"switch_axes": ["T", "F"]}, "BFT", None),
    ({"switch_axes": ["time_dim_axis", "feature_dim_axis"]}, "BFT", None),
    ({"set_axes": {"T": None}}, "BsF", 5), ({"set_axes": {"F": None}}, "BTs", None),
    ({"enforce_time_major": True}, "TBF", 5),
])
def test_reinterpret_data_axes(opts, kinds, dim):
    res, _ = _run(BM, {"output": dict({"class": "reinterpret_data", "from": "data"}, **opts)})
    out, _ = res["output"]
    assert (_kinds(out), out.dim) == (kinds, dim)


def test_reinterpret_data_set_axes_int_needs_enforced_layout():
    with pytest.raises(Exception, match="enforce_batch_major"):
        _run(BM, {"output": {"class": "reinterpret_data", "from": "data", "set_axes": {"T": 2}}})
    res, _ = _run(TM, {"output": {"class": "reinterpret_data", "from": "data", "set_axes": {"T": 2},
                                  "enforce_batch_major": True}})
    assert _kinds(res["output"][0]) == "BFT"


def test_squeeze_without_matching_axis_is_no_op():
    res, inputs = _run(BM, {"output": {"class": "squeeze", "from": "data", "axis": "auto"}})
    assert _kinds(res["output"][0]) == "BTF"
    np.testing.assert_array_equal(res["output"][1], inputs["data"])


def test_squeeze_time_major_int_axis():
    extern = {"data": {"shape": (None, 1, 5), "time_dim_axis": 0, "batch_dim_axis": 1}}
    res, inputs = _run(extern, {"output": {"class": "squeeze", "from": "data", "axis": 2}})
    out, value = res["output"]
    assert _kinds(out) == "TBF"
    np.testing.assert_array_equal(value, inputs["data"][:, :, 0])
    res, _ = _run(extern, {"output": {"class": "squeeze", "from": "data", "axis": 2, "enforce_batch_dim_axis": 0}})
    assert _kinds(res["output"][0]) == "BTF"


def test_slice_nd_start_with_time_axis_and_min_size():
    net = {"s0": {"class": "range_in_axis", "from": "data", "axis": "b"},
           "s1": {"class": "range_in_axis", "from": "data", "axis": "t"},
           "start": {"class": "combine", "kind": "add", "from": ["s0", "s1"]},
           "output": {"class": "slice_nd", "from": "data", "start": "start", "size": None}}
    res, inputs = _run({"data": {"dim": 3}}, net, layers=("start", "output"))
    out, value = res["output"]
    assert _kinds(out) == "BTsF" and out.dims[1] == res["start"][0].dims[1]
    x, start = inputs["data"], res["start"][1]
    for b in range(3):
        for t in range(7):
            for k in range(value.shape[2]):
                p = start[b, t] + k
                np.testing.assert_array_equal(value[b, t, k], x[b, p] if p < LENS[b] else 0)
    extern = {"data": {"dim": 3, "time_dim_axis": 0, "batch_dim_axis": 1},
              "start": {"shape": (), "dtype": "int32", "time_dim_axis": None}}
    res, _ = _run(extern, {"output": {"class": "slice_nd", "from": "data", "start": "data:start", "size": None,
                                      "min_size": 9}}, layers=("output",))
    assert _kinds(res["output"][0]) == "BTF" and res["output"][1].shape == (3, 9, 3)


@pytest.mark.parametrize("extern", [BM, TM])
def test_slice_nd_feature_axis_keeps_axes_before(extern):
    extern = dict(extern, start={"shape": (), "dtype": "int32", "time_dim_axis": None})
    res, inputs = _run(extern, {"output": {"class": "slice_nd", "from": "data", "start": "data:start", "size": 2,
                                           "axis": "F"}})
    out, value = res["output"]
    assert value.shape == (3, 7, 2) and out.batch_dim_axis == 0 and out.time_dim_axis == 1
    x = inputs["data"] if extern["data"].get("batch_dim_axis") is None else inputs["data"].transpose(1, 0, 2)
    for b in range(3):
        for k in range(2):
            p = inputs["start"][b] + k
            np.testing.assert_array_equal(value[b, :, k], x[b, :, p] if 0 <= p < 5 else 0)


def test_slice_nd_min_size_clips_lengths():
    extern = {"data": {"dim": 3}, "start": {"shape": (), "dtype": "int32", "time_dim_axis": None}}
    with tf.Graph().as_default() as graph:
        ed = ExternData(extern)
        net = TFNetwork(extern_data=ed, train_flag=False)
        net.construct_from_dict({"output": {"class": "slice_nd", "from": "data", "start": "data:start", "size": None,
                                            "min_size": 3}})
        out = net.get_layer("output").output
        d = ed.get_data("data")
        with tf1.Session(graph=graph) as session:
            lens = session.run(out.dims[1].dyn_size, feed_dict={
                d.placeholder: np.zeros((3, 7, 3), "float32"), d.size_placeholder[0]: LENS,
                ed.get_data("start").placeholder: [1, 4, 0]})
    np.testing.assert_array_equal(lens, [6, 3, 4])  # max(len - start, min_size)


def test_slice_nd_start_without_batch_fails_clearly():
    net = {"start": {"class": "range_in_axis", "from": "data", "axis": "t"},
           "output": {"class": "slice_nd", "from": "data", "start": "start", "size": 2}}
    with pytest.raises(Exception, match="needs a batch axis"):
        _run({"data": {"dim": 3}}, net)


def test_split_time_major_sub_layers():
    extern = {"data": {"dim": 6, "time_dim_axis": 0, "batch_dim_axis": 1}}
    net = {"split": {"class": "split", "from": "data", "size_splits": (2, 4)},
           "output": {"class": "copy", "from": "split/1"}}
    res, inputs = _run(extern, net, layers=("split/0", "output"))
    assert _kinds(res["split/0"][0]) == "TBF" and res["split/0"][0].dim == 2
    np.testing.assert_array_equal(res["output"][1], inputs["data"][..., 2:])


def test_repeat_input_without_batch_gets_batch_of_repetitions():
    extern = {"data": {"shape": (None, 5), "batch_dim_axis": None, "time_dim_axis": 0, "dim": 5},
              "rep": {"shape": (None,), "dtype": "int32"}}
    net = {"output": {"class": "repeat", "from": "data", "repetitions": "data:rep", "axis": "T"}}
    rng = np.random.RandomState(1)
    x, reps = rng.randn(7, 5).astype("float32"), rng.randint(0, 3, (3, 7)).astype("int32")
    with tf.Graph().as_default() as graph:
        ed = ExternData(extern)
        net_ = TFNetwork(extern_data=ed, train_flag=False)
        net_.construct_from_dict(net)
        out = net_.get_layer("output").output
        assert _kinds(out) == "BTF"
        d, r = ed.get_data("data"), ed.get_data("rep")
        with tf1.Session(graph=graph) as session:
            value, lens = session.run((out.placeholder, out.dims[1].dyn_size), feed_dict={
                d.placeholder: x, d.size_placeholder[0]: 7, r.placeholder: reps, r.size_placeholder[0]: [7, 7, 7]})
    for b in range(3):
        ref = np.repeat(x, reps[b], axis=0)
        assert lens[b] == len(ref)
        np.testing.assert_allclose(value[b, :len(ref)], ref)


def test_split_batch_time_default_base_is_data():
    net = {"merged": {"class": "merge_dims", "from": "data", "axes": "BT"},
           "output": {"class": "split_batch_time", "from": "merged"}}
    res, inputs = _run(TM, net)
    out, value = res["output"]
    assert _kinds(out) == "BTF"
    np.testing.assert_array_equal(value, inputs["data"].transpose(1, 0, 2))


def test_get_default_new_axis_for_dim_tag():
    with tf.Graph().as_default():
        ed = ExternData({"bm": {"dim": 5}, "tm": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1},
                         "bf": {"shape": (5, None), "dim": 5}, "nt": {"shape": (6,)}})
        tag = Dim(2, kind=Dim.Types.Spatial, description="new")
        assert ed.get_data("bm").get_default_new_axis_for_dim_tag(tag) == 2
        assert ed.get_data("tm").get_default_new_axis_for_dim_tag(tag) == 1  # after the last spatial axis
        assert ed.get_data("bf").get_default_new_axis_for_dim_tag(tag) == 3
        assert ed.get_data("nt").get_default_new_axis_for_dim_tag(tag) == 1  # before the feature axis
