"""
Variants of the basic / sequence / indexing layers against values computed in numpy from the original's semantics:
activation names (lookup order of the original), length of static/batch/dynamic axes, range dtype rules, switch
with a static condition, gather on time-major input, window on the feature axis, shift_axis, pad modes,
postfix/prefix on time-major input.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.activations import get_activation_function
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], dtype="int32")
TIME_MAJOR = {"dim": 3, "time_dim_axis": 0, "batch_dim_axis": 1}


def _run(net_dict, fetch=("output",), extern=None, seed=1):
    """Build net_dict, feed random inputs (lengths LENS), return (net, inputs, {name: (value, [dyn lens...])})."""
    extern = extern or {"data": {"dim": 3}}
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(extern), train_flag=False)
        net.construct_from_dict(net_dict)
        rnd = np.random.RandomState(seed)
        feed, inputs = {}, {}
        for key, data in net.extern_data.data.items():
            shape = [3 if d.is_batch_dim() else (int(LENS.max()) if d.dimension is None else d.dimension)
                     for d in data.dims]
            if data.sparse or data.dtype.startswith("int"):
                v = rnd.randint(0, data.dim or 4, size=shape).astype(data.dtype)
            else:
                v = rnd.normal(size=shape).astype(data.dtype)
            feed[data.placeholder] = v
            inputs[key] = v
            for d in data.dims:
                if d.dyn_size is not None and not d.is_batch_dim():
                    feed[d.dyn_size] = LENS
        fetches = {}
        for name in fetch:
            out = net.get_layer(name).output
            fetches[name] = [out.placeholder] + [d.dyn_size for d in out.dims if d.dyn_size is not None
                                                 and not d.is_batch_dim()]
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            res = session.run(fetches, feed_dict=feed)
    return net, inputs, {k: (v[0], v[1:]) for k, v in res.items()}


def _kinds(out):
    return ["batch" if i == out.batch_dim_axis else "feature" if i == out.feature_dim_axis else "spatial"
            for i in range(out.batch_ndim)]


# ---------------------------------------------------------------------------------------------------------------
# activations

def _act(name, x):
    with tf.Graph().as_default():
        with tf1.Session() as session:
            return session.run(get_activation_function(name)(tf.constant(x)))


X = np.linspace(-2.0, 2.0, 9).astype("float32")


def _erf(v):
    return np.array([math.erf(a) for a in v], dtype="float32")


def test_activation_gelu_is_tf_nn_gelu_exact():
    exact = 0.5 * X * (1.0 + _erf(X / math.sqrt(2.0)))
    np.testing.assert_allclose(_act("gelu", X), exact, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_act("gelu3", X), exact, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_act("gelu2", X), X / (1.0 + np.exp(-1.702 * X)), rtol=1e-5, atol=1e-6)


def test_activation_lookup_tf_and_tf_math_and_helpers():
    sig = 1.0 / (1.0 + np.exp(-X))
    np.testing.assert_allclose(_act("log_sigmoid", X), np.log(sig), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_act("neg", X), -X)
    np.testing.assert_allclose(_act("exp", X), np.exp(X), rtol=1e-5)
    np.testing.assert_allclose(_act("swish", X), X * sig, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_act("safe_log", np.abs(X)), np.log(np.maximum(np.abs(X), 1e-20)), rtol=1e-5)
    np.testing.assert_allclose(_act("erf", X), _erf(X), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_act("none", X), X)
    np.testing.assert_allclose(_act("log_softmax", X), X - np.log(np.exp(X).sum()), rtol=1e-5, atol=1e-6)


def test_activation_binary_ops_apply_both_sides_to_x():
    sig = 1.0 / (1.0 + np.exp(-X))
    np.testing.assert_allclose(_act("2 * sigmoid", X), 2 * sig, rtol=1e-5)
    np.testing.assert_allclose(_act("relu+tanh", X), np.maximum(X, 0) + np.tanh(X), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_act("1 - sigmoid", X), 1 - sig, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_act("3 + 2 * sigmoid", X), 3 + 2 * sig, rtol=1e-5)
    np.testing.assert_allclose(_act("tf.sqrt(tf.abs(x) + 1.0) * 2", X), np.sqrt(np.abs(X) + 1) * 2, rtol=1e-5)


def test_activation_unknown_raises():
    with pytest.raises(ValueError, match="logsumexp"):
        get_activation_function("logsumexp")


def test_activation_layer_on_time_major_softmax_last_axis():
    _, inp, res = _run({"output": {"class": "activation", "from": "data", "activation": "softmax"}},
                       extern={"data": TIME_MAJOR})
    x = inp["data"]
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(res["output"][0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# length, range, switch, combine, linear

def test_length_axis_variants():
    net, _, res = _run({"f": {"class": "length", "from": "data", "axis": "F"},
                        "b": {"class": "length", "from": "data", "axis": "B"},
                        "t": {"class": "length", "from": "data"},
                        "t1": {"class": "length", "from": "data", "add_time_axis": True}},
                       fetch=("f", "b", "t", "t1"), extern={"data": TIME_MAJOR})
    assert net.get_layer("f").output.batch_ndim == 0 and res["f"][0] == 3
    assert net.get_layer("b").output.batch_ndim == 0 and res["b"][0] == 3
    t = net.get_layer("t").output
    assert t.batch_ndim == 1 and t.batch_dim_axis == 0 and t.dtype == "int32"
    np.testing.assert_array_equal(res["t"][0], LENS)
    t1 = net.get_layer("t1").output
    assert t1.batch_shape == (None, 1) and t1.time_dim_axis == 1
    np.testing.assert_array_equal(res["t1"][0], LENS[:, None])


def test_range_dtype_and_sparse():
    net, _, res = _run({"i": {"class": "range", "limit": 5.0, "start": 1},
                        "f": {"class": "range", "limit": 2.5, "delta": 0.5},
                        "s": {"class": "range", "limit": 4, "sparse": True}}, fetch=("i", "f", "s"))
    assert net.get_layer("i").output.dtype == "int32"
    np.testing.assert_array_equal(res["i"][0], [1, 2, 3, 4])
    assert net.get_layer("f").output.dtype == "float32"
    np.testing.assert_allclose(res["f"][0], [0, 0.5, 1, 1.5, 2])
    s = net.get_layer("s").output
    assert s.sparse and s.dim is None and s.batch_shape == (4,)


def test_switch_static_condition_and_const_branch():
    net, inp, res = _run({"a": {"class": "switch", "condition": True, "true_from": "data", "false_from": "nonexistent"},
                          "b": {"class": "switch", "condition": False, "true_from": "data", "false_from": 3},
                          "c": {"class": "compare", "from": "data", "value": 0.0, "kind": "greater"},
                          "d": {"class": "switch", "condition": "c", "true_from": "data", "false_from": 1.5}},
                         fetch=("a", "b", "d"))
    np.testing.assert_allclose(res["a"][0], inp["data"])
    b = net.get_layer("b").output
    assert b.batch_ndim == 0 and b.dtype == "int32" and res["b"][0] == 3
    np.testing.assert_allclose(res["d"][0], np.where(inp["data"] > 0, inp["data"], 1.5))


def test_combine_mod_pow_and_eval_locals():
    _, inp, res = _run({"m": {"class": "combine", "kind": "mod", "from": ["data", "data"]},
                        "p": {"class": "combine", "kind": "pow", "from": ["data", "data"]},
                        "e": {"class": "combine", "kind": "eval", "from": ["data", "data"],
                              "eval": "source(0) * s + source(1)", "eval_locals": {"s": 2.0}}},
                       fetch=("m", "p", "e"))
    x = inp["data"]
    np.testing.assert_allclose(res["m"][0], np.mod(x, x), atol=1e-6)
    np.testing.assert_allclose(res["e"][0], 3 * x, rtol=1e-5)


def test_linear_grad_filter_forward_is_identity_and_zeroes_large_grads():
    """As the original's filter_grad: grads whose max(grad**2) is over the threshold are removed (here all: 1)."""
    extern = {"data": {"dim": 3}}
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(extern), train_flag=True)
        net.construct_from_dict({"output": {"class": "linear", "from": "data", "n_out": 2, "grad_filter": 0.5}})
        out = net.get_layer("output").output
        w = net.get_layer("output").params["W"]
        g = tf.gradients(tf.reduce_sum(out.placeholder), [w])[0]
        data = net.extern_data.get_data("data")
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            gv = session.run(g, feed_dict={data.placeholder: np.ones((3, 7, 3), "float32"),
                                           data.size_placeholder[0]: LENS})
    np.testing.assert_array_equal(gv, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# indexing

def test_gather_time_major_on_time_with_batch_positions():
    extern = {"data": TIME_MAJOR, "pos": {"shape": (), "dtype": "int32", "sparse": True, "dim": 4}}
    net, inp, res = _run({"output": {"class": "gather", "from": "data", "position": "data:pos", "axis": "T"}},
                         extern=extern)
    out = net.get_layer("output").output
    assert out.batch_shape == (None, 3) and _kinds(out) == ["batch", "feature"]
    np.testing.assert_allclose(res["output"][0], inp["data"][inp["pos"], np.arange(3)])


def test_gather_int_position_on_feature():
    net, inp, res = _run({"output": {"class": "gather", "from": "data", "position": 1, "axis": "F"}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None) and out.time_dim_axis == 1
    np.testing.assert_allclose(res["output"][0], inp["data"][:, :, 1])


# ---------------------------------------------------------------------------------------------------------------
# sequence layers

def test_window_time_major_even_size_pads_more_right():
    net, inp, res = _run({"output": {"class": "window", "from": "data", "window_size": 4}}, extern={"data": TIME_MAJOR})
    out = net.get_layer("output").output
    assert out.batch_dim_axis == 0 and out.batch_shape == (None, None, 4, 3)
    x = inp["data"].transpose(1, 0, 2)
    xp = np.pad(x, [(0, 0), (1, 2), (0, 0)])
    np.testing.assert_allclose(res["output"][0], np.stack([xp[:, t:t + 4] for t in range(7)], 1))


def test_window_on_feature_axis_default_feature_is_last_static():
    net, inp, res = _run({"output": {"class": "window", "from": "data", "window_size": 3, "axis": "F",
                                     "padding": "valid"}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 1, 3) and out.feature_dim_axis == 3
    np.testing.assert_allclose(res["output"][0], inp["data"][:, :, None, :])


def test_window_left_stride_lengths():
    _, inp, res = _run({"output": {"class": "window", "from": "data", "window_size": 3, "window_left": 2,
                                   "stride": 2}})
    xp = np.pad(inp["data"], [(0, 0), (2, 0), (0, 0)])
    np.testing.assert_allclose(res["output"][0], np.stack([xp[:, t:t + 3] for t in range(0, 7, 2)], 1))
    np.testing.assert_array_equal(res["output"][1][0], [4, 3, 2])


def test_cumsum_time_major_and_feature_reverse():
    _, inp, res = _run({"a": {"class": "cumsum", "from": "data"},
                        "b": {"class": "cumsum", "from": "data", "axis": "F", "reverse": True}},
                       fetch=("a", "b"), extern={"data": TIME_MAJOR})
    x = inp["data"]
    np.testing.assert_allclose(res["a"][0], np.cumsum(x, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res["b"][0], np.cumsum(x[..., ::-1], -1)[..., ::-1], rtol=1e-5, atol=1e-5)


def test_shift_axis_variants():
    _, inp, res = _run({"r": {"class": "shift_axis", "from": "data", "axis": "T", "amount": 2},
                        "np": {"class": "shift_axis", "from": "data", "axis": "T", "amount": 2, "pad": False},
                        "f": {"class": "shift_axis", "from": "data", "axis": "F", "amount": 1}},
                       fetch=("r", "np", "f"))
    x = inp["data"]
    np.testing.assert_allclose(res["r"][0], np.pad(x[:, :-2], [(0, 0), (2, 0), (0, 0)]))
    np.testing.assert_array_equal(res["r"][1][0], [7, 7, 6])
    assert res["np"][0].shape == (3, 5, 3)
    np.testing.assert_array_equal(res["np"][1][0], [5, 5, 4])
    np.testing.assert_allclose(res["f"][0], np.pad(x[..., :-1], [(0, 0), (0, 0), (1, 0)]))


@pytest.mark.parametrize("mode,np_mode", [("symmetric", "symmetric"), ("replication", "edge"), ("reflect", "reflect")])
def test_pad_modes_on_feature(mode, np_mode):
    _, inp, res = _run({"output": {"class": "pad", "from": "data", "axes": "F", "padding": (2, 1), "mode": mode}})
    np.testing.assert_allclose(res["output"][0], np.pad(inp["data"], [(0, 0), (0, 0), (2, 1)], mode=np_mode))


def test_pad_time_major_two_axes_constant_value():
    net, inp, res = _run({"output": {"class": "pad", "from": "data", "axes": ["T", "F"], "padding": [(1, 0), (0, 1)],
                                     "value": 1.5}}, extern={"data": TIME_MAJOR})
    out = net.get_layer("output").output
    assert out.time_dim_axis == 0 and out.batch_dim_axis == 1 and out.dim == 4
    np.testing.assert_allclose(res["output"][0], np.pad(inp["data"], [(1, 0), (0, 0), (0, 1)], constant_values=1.5))
    np.testing.assert_array_equal(res["output"][1][0], LENS + 1)


def test_prefix_postfix_time_major():
    _, inp, res = _run({"pre": {"class": "prefix_in_time", "from": "data", "prefix": 2.0, "repeat": 2},
                        "post": {"class": "postfix_in_time", "from": "data", "postfix": -1.0, "repeat": 2}},
                       fetch=("pre", "post"), extern={"data": TIME_MAJOR})
    x = inp["data"]
    np.testing.assert_allclose(res["pre"][0], np.pad(x, [(2, 0), (0, 0), (0, 0)], constant_values=2.0))
    np.testing.assert_array_equal(res["pre"][1][0], LENS + 2)
    y = res["post"][0]
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(y[:n, b], x[:n, b])
        np.testing.assert_allclose(y[n:n + 2, b], -1.0)


def test_time_chunking_chunk_lengths_batch_major_order():
    _, _, res = _run({"output": {"class": "time_chunking", "from": "data", "chunk_size": 3, "chunk_step": 2}})
    assert res["output"][0].shape == (3, 9, 3)
    np.testing.assert_array_equal(res["output"][1][0], [3, 3, 3, 3, 3, 1, 3, 2, 0])


def test_combine_any_tf_math_kind_and_eval_source_options():
    _, inp, res = _run({"a": {"class": "combine", "kind": "atan2", "from": ["data", "data"]},
                        "e": {"class": "eval", "from": "data", "eval": "source(0, auto_convert=False) + 1.0"},
                        "c": {"class": "eval", "from": "data", "eval": lambda source, self, k: source(0) * k,
                              "eval_locals": {"k": 3.0}}},
                       fetch=("a", "e", "c"), extern={"data": TIME_MAJOR})
    x = inp["data"]
    np.testing.assert_allclose(res["a"][0], np.arctan2(x, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["e"][0], x + 1.0, rtol=1e-6)
    np.testing.assert_allclose(res["c"][0], 3 * x, rtol=1e-6)


def test_combine_unknown_kind_and_scaled_grad_shift_raise():
    with pytest.raises(Exception, match="foo"):
        _run({"output": {"class": "combine", "kind": "foo", "from": ["data", "data"]}})
    with pytest.raises(Exception, match="shift"):
        _run({"output": {"class": "scaled_grad", "from": "data", "scale": 0.5, "shift": 1.0}})


def test_compare_is_a_chain():
    extern = {"data": {"dim": 3}}
    _, inp, res = _run({"c": {"class": "compare", "from": ["data", "data"], "value": 0.5, "kind": "less_equal"},
                        "s": {"class": "compare", "from": "data", "value": 0.0, "kind": "greater"}},
                       fetch=("c", "s"), extern=extern)
    x = inp["data"]
    np.testing.assert_array_equal(res["c"][0], (x <= x) & (x <= 0.5))
    np.testing.assert_array_equal(res["s"][0], x > 0.0)


def test_prefix_in_time_repeat_layer_time_major_gives_batch_major():
    extern = {"data": TIME_MAJOR, "r": {"shape": (), "dtype": "int32"}}
    net, inp, res = _run({"output": {"class": "prefix_in_time", "from": "data", "repeat": "data:r", "prefix": 1.5}},
                         extern=extern)
    out = net.get_layer("output").output
    assert out.batch_dim_axis == 0 and out.time_dim_axis == 1
    x, r = inp["data"].transpose(1, 0, 2), inp["r"]
    y = res["output"][0]
    np.testing.assert_array_equal(res["output"][1][0], LENS + r)
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(y[b, :r[b]], 1.5)
        np.testing.assert_allclose(y[b, r[b]:r[b] + n], x[b, :n])


def test_time_chunking_roundtrip_time_major():
    _, inp, res = _run({"c": {"class": "time_chunking", "from": "data", "chunk_size": 3, "chunk_step": 2, "axis": "T"},
                        "output": {"class": "time_unchunking", "from": "c", "chunking_layer": "c"}},
                       extern={"data": TIME_MAJOR})
    x, y = inp["data"], res["output"][0]
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(y[:n, b], x[:n, b], rtol=1e-6)


def test_shift_axis_pad_value_and_no_adjust_keeps_tag():
    net, inp, res = _run({"output": {"class": "shift_axis", "from": "data", "axis": "T", "amount": -1, "pad_value": 9.0,
                                     "adjust_size_info": False}})
    x = inp["data"]
    np.testing.assert_allclose(res["output"][0], np.pad(x[:, 1:], [(0, 0), (0, 1), (0, 0)], constant_values=9.0))
    assert net.get_layer("output").output.dims[1] is net.extern_data.get_data("data").dims[1]


def test_softmax_layer_over_feature_axis_not_last():
    extern = {"data": {"shape": (4, None), "feature_dim_axis": 1, "time_dim_axis": 2}}
    net, _, res = _run({"output": {"class": "softmax", "from": "data", "n_out": 3}}, extern=extern)
    out = net.get_layer("output").output
    assert out.feature_dim_axis == 1 and out.batch_shape == (None, 3, None)
    np.testing.assert_allclose(res["output"][0].sum(axis=1), 1.0, rtol=1e-5)


def test_scatter_nd_out_spatial_dim_static():
    from returnn_lite.data import Dim

    out_dim = Dim(6, kind=Dim.Types.Spatial, description="scatter-out")
    net, inp, res = _run({"r": {"class": "range_in_axis", "from": "data", "axis": "T"},
                          "pos": {"class": "eval", "from": "r", "eval": "(source(0) * 2 + 1) % 6"},
                          "output": {"class": "scatter_nd", "from": "data", "position": "pos", "position_axis": "T",
                                     "out_spatial_dim": out_dim}})
    out = net.get_layer("output").output
    assert out.batch_shape == (6, None, 3) and out.batch_dim_axis == 1
    x = inp["data"]
    exp = np.zeros((6, 3, 3), "float32")
    for t in range(x.shape[1]):
        exp[(t * 2 + 1) % 6] += x[:, t]
    np.testing.assert_allclose(res["output"][0], exp, rtol=1e-5, atol=1e-5)


def test_search_sorted_time_major_values_give_batch_first():
    extern = {"pos": {"shape": (None,)}, "values": {"shape": (None,), "time_dim_axis": 0, "batch_dim_axis": 1}}
    net, inp, res = _run({"abs": {"class": "activation", "activation": "abs", "from": "data:pos"},
                          "sorted": {"class": "cumsum", "axis": "T", "from": "abs"},
                          "output": {"class": "search_sorted", "sorted_sequence": "sorted", "values": "data:values",
                                     "axis": "T", "side": "right", "from": []}},
                         fetch=("sorted", "output"), extern=extern)
    out = net.get_layer("output").output
    assert out.batch_dim_axis == 0 and out.dtype == "int32"
    srt, vals = res["sorted"][0], inp["values"]
    for b, n in enumerate(LENS):
        exp = np.searchsorted(srt[b, :n], vals[:, b], side="right")
        np.testing.assert_array_equal(res["output"][0][b], exp)


def test_activation_softmax_feature_not_last_moves_feature_last_and_opts():
    extern = {"data": {"shape": (4, None), "feature_dim_axis": 1, "time_dim_axis": 2}}
    net, inp, res = _run({"output": {"class": "activation", "from": "data", "activation": "softmax"},
                          "sl": {"class": "activation", "from": "data", "activation": "safe_log", "opts": {"eps": 0.5}}},
                         fetch=("output", "sl"), extern=extern)
    out = net.get_layer("output").output
    assert out.feature_dim_axis == 2 and out.batch_shape == (None, None, 4)
    x = inp["data"].transpose(0, 2, 1)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(res["output"][0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["sl"][0], np.log(np.maximum(inp["data"], 0.5)), rtol=1e-5)


def test_activation_on_sparse_input_stays_sparse():
    net, inp, res = _run({"output": {"class": "activation", "from": "data:classes", "activation": "abs"}},
                         extern={"data": {"dim": 3}, "classes": {"dim": 4, "sparse": True}})
    out = net.get_layer("output").output
    assert out.sparse and out.dim == 4 and out.dtype == "int32"
    np.testing.assert_array_equal(res["output"][0], inp["classes"])


def test_rand_int_bounds_from_layers():
    net, _, res = _run({"lo": {"class": "constant", "value": 3}, "hi": {"class": "constant", "value": 6},
                        "output": {"class": "rand_int", "shape": (3, 50), "minval": "lo", "maxval": "hi"}})
    v = res["output"][0]
    assert v.shape == (3, 50) and v.min() >= 3 and v.max() <= 5


def test_seq_len_mask_const_window():
    _, inp, res = _run({"output": {"class": "seq_len_mask", "from": "data", "mask_value": -5.0, "window_start": 1,
                                   "window_size": 2}}, extern={"data": TIME_MAJOR})
    x, y = inp["data"], res["output"][0]
    np.testing.assert_allclose(y[1:3], x[1:3])
    np.testing.assert_allclose(y[0], -5.0)
    np.testing.assert_allclose(y[3:], -5.0)


@pytest.mark.parametrize("init", [
    "random_normal_initializer(mean=0.0, stddev=math.sqrt(0.1))", "xavier_initializer(uniform=False)",
    "VarianceScaling(scale=1.0)", "numpy.sqrt(2)", {"class": "VarianceScaling", "scale": 0.5, "mode": "fan_out"},
    "variance_scaling_initializer(scale=2.0, mode='fan_in')", "orthogonal", 0.5])
def test_linear_forward_weights_init_variants_build(init):
    net, _, res = _run({"output": {"class": "linear", "from": "data", "n_out": 4, "forward_weights_init": init,
                                   "bias_init": "constant_initializer(0.25)"}})
    assert res["output"][0].shape == (3, 7, 4)


def test_eval_must_use_all_sources():
    with pytest.raises(Exception, match="not used"):
        _run({"output": {"class": "eval", "from": ["data", "data"], "eval": "source(0) * 2"}})
