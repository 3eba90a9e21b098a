"""
The options every layer of the original's current version has beyond seed 004 (tools/audit_layer_options.py found
them not accepted): ``out_dim`` (the output feature Dim), ``in_dim`` (the input feature Dim),
``param_dropout_min_ndim``. Checked by numbers (numpy) and by the errors naming the option.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.data import FeatureDim, SpatialDim, batch_dim
from returnn_lite.network import NetworkLayerException
from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1
IN = FeatureDim("in", 5)  # static: may be shared by the graphs of the tests


def _extern():
    """A new time Dim per graph (its sequence lengths belong to one graph)."""
    return {"data": {"dim_tags": [batch_dim, SpatialDim("time"), IN]}, "classes": {"dim": 4, "sparse": True}}


def _run(net_dict, fetch_layers=("output",), train_flag=False, extern=None):
    with tf.Graph().as_default():
        net = build_network(net_dict, extern or _extern(), train_flag=train_flag)
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
            build_network(net_dict, extern or _extern())
    return str(info.value)


def test_linear_out_dim_gives_n_out_and_the_dim_tag():
    model = FeatureDim("model", 3)
    net, x, (y, z), params = _run({
        "lin": {"class": "linear", "out_dim": model, "in_dim": IN, "activation": "tanh", "from": "data"},
        "output": {"class": "reduce", "mode": "sum", "axis": model, "from": "lin"}}, ("lin", "output"))
    lin = net.get_layer("lin").output
    assert lin.dims[lin.feature_dim_axis] is model and lin.dim == 3
    ref = np.tanh(x @ params["lin/W"] + params["lin/b"])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, ref.sum(axis=-1), rtol=1e-5, atol=1e-5)  # reduce over the Dim object


def test_softmax_out_dim_with_loss_and_n_out():
    classes = FeatureDim("classes", 4)
    net, x, (y,), params = _run({"output": {"class": "softmax", "out_dim": classes, "n_out": 4, "from": "data",
                                            "loss": "ce", "target": "classes"}})
    logits = x @ params["output/W"] + params["output/b"]
    ref = np.exp(logits - logits.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    assert net.get_layer("output").output.feature_dim is classes


def test_out_dim_in_rec_unit():
    model = FeatureDim("model", 2)
    net, x, (y,), params = _run({"output": {"class": "rec", "from": "data", "unit": {
        "output": {"class": "linear", "out_dim": model, "activation": None, "from": ["data:source", "prev:output"]}}}})
    out = net.get_layer("output").output
    assert out.dims[out.feature_dim_axis] is model
    w, b = params["output/rec/output/W"], params["output/rec/output/b"]
    h = np.zeros((x.shape[0], 2), "float32")
    ys = []
    for t in range(x.shape[1]):
        h = np.concatenate([x[:, t], h], axis=-1) @ w + b
        ys.append(h)
    ref = np.stack(ys, axis=0)  # [T, B, F]
    got = y if y.shape[0] == x.shape[1] else np.transpose(y, (1, 0, 2))
    np.testing.assert_allclose(got[:2], ref[:2], rtol=1e-4, atol=1e-5)  # frames within both seqs


def test_layer_norm_and_pool_take_in_dim_out_dim():
    out = FeatureDim("normed", 5)
    net, x, (y, p), params = _run({
        "ln": {"class": "layer_norm", "in_dim": IN, "out_dim": out, "from": "data"},
        "output": {"class": "pool", "mode": "max", "pool_size": (2,), "padding": "same", "in_dim": out,
                   "out_dim": out, "from": "ln"}}, ("ln", "output"))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(var + 1e-6) * params["ln/scale"] + params["ln/bias"]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert net.get_layer("ln").output.feature_dim is out and net.get_layer("output").output.feature_dim is out
    np.testing.assert_allclose(p[:, 0], np.maximum(ref[:, 0], ref[:, 1]), rtol=1e-5, atol=1e-6)


def test_conv_in_dim_checked():
    net, x, (y,), params = _run({"output": {"class": "conv", "in_dim": IN, "out_dim": FeatureDim("ch", 2),
                                            "filter_size": (1,), "padding": "same", "with_bias": True, "from": "data"}})
    np.testing.assert_allclose(y, x @ params["output/W"][0] + params["output/bias"], rtol=1e-5, atol=1e-6)
    msg = _error({"output": {"class": "conv", "in_dim": FeatureDim("other", 3), "n_out": 2, "filter_size": (1,),
                             "padding": "same", "from": "data"}})
    assert "'output'" in msg and "in_dim" in msg and "feature dim" in msg


def test_in_dim_of_an_unnamed_feature_dim_of_that_size():
    net, x, (y,), params = _run({"output": {"class": "linear", "in_dim": FeatureDim("x", 5), "n_out": 2,
                                            "activation": None, "from": "data"}}, extern={"data": {"dim": 5}})
    np.testing.assert_allclose(y, x @ params["output/W"] + params["output/b"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opts, words", [
    ({"class": "linear", "in_dim": FeatureDim("x", 4), "n_out": 2}, ["in_dim", "feature dim"]),
    ({"class": "linear", "in_dim": "TIME", "n_out": 2}, ["in_dim", "another axis"]),
    ({"class": "linear", "in_dim": 5, "n_out": 2}, ["in_dim", "must be a Dim"]),
    ({"class": "linear", "out_dim": FeatureDim("x", 4), "n_out": 3}, ["out_dim", "does not match"]),
    ({"class": "copy", "out_dim": FeatureDim("x", 4)}, ["out_dim", "does not match"]),
])
def test_dim_option_errors(opts, words):
    extern = _extern()
    if opts.get("in_dim") == "TIME":
        opts = dict(opts, in_dim=extern["data"]["dim_tags"][1])
    msg = _error({"output": dict(opts, **{"from": "data"})}, extern)
    assert "'output'" in msg, msg
    for w in words:
        assert w in msg, msg


def test_copy_out_dim_same_size_takes_the_dim():
    d = FeatureDim("copied", 5)
    net, x, (y,), _ = _run({"output": {"class": "copy", "out_dim": d, "from": "data"}})
    assert net.get_layer("output").output.feature_dim is d
    np.testing.assert_array_equal(y, x)


def test_param_dropout_min_ndim():
    """W zeros and b ones: the output is b (dropped out or not)."""
    def out(min_ndim):
        opts = {"class": "linear", "activation": None, "n_out": 64, "forward_weights_init": 0.0, "bias_init": 1.0,
                "param_dropout": 0.5, "from": "data"}
        if min_ndim is not None:
            opts["param_dropout_min_ndim"] = min_ndim
        return _run({"output": opts}, train_flag=True)[2][0]

    np.testing.assert_array_equal(out(2), 1.0)  # only W (2 dims) gets dropout: b stays
    y = out(None)  # all params, also b: each entry dropped (0) or scaled by 1 / (1 - 0.5)
    assert set(np.unique(y)) <= {0.0, 2.0} and (y == 0).any() and (y == 2).any()


# ---- Dim options of the current original beyond the seeds (KNOWN_CURRENT in the audit tool) ----

def test_constant_sparse_dim_and_feature_dim():
    classes = FeatureDim("classes", 7)
    net, _, (y,), _ = _run({"output": {"class": "constant", "value": 3, "sparse_dim": classes}})
    out = net.get_layer("output").output
    assert out.sparse_dim is classes and out.dim == 7 and y == 3
    a, b = SpatialDim("a", 2), FeatureDim("b", 3)
    net, _, (y,), _ = _run({"output": {"class": "constant", "value": 1.5, "shape": [b, a], "feature_dim": b}})
    out = net.get_layer("output").output
    assert out.dims == (b, a) and out.feature_dim_axis == 0 and out.dim == 3
    np.testing.assert_array_equal(y, np.full((3, 2), 1.5, "float32"))


def test_split_out_dims():
    d1, d2 = FeatureDim("p1", 2), FeatureDim("p2", 3)
    net, x, (y1, y2), _ = _run({"s": {"class": "split", "out_dims": [d1, d2], "from": "data"},
                                "output": {"class": "copy", "from": "s/0"}, "o2": {"class": "copy", "from": "s/1",
                                                                                   "is_output_layer": True}},
                               ("output", "o2"))
    assert net.get_layer("output").output.feature_dim is d1 and net.get_layer("o2").output.feature_dim is d2
    np.testing.assert_array_equal(y1, x[..., :2])
    np.testing.assert_array_equal(y2, x[..., 2:])


def test_stack_out_spatial_dim():
    s = SpatialDim("stack", 2)
    net, x, (y,), _ = _run({"neg": {"class": "eval", "eval": "-source(0)", "from": "data"},
                            "output": {"class": "stack", "out_spatial_dim": s, "from": ["data", "neg"]}})
    out = net.get_layer("output").output
    a = out.dims.index(s)
    np.testing.assert_array_equal(np.take(y, 0, axis=a), x)
    np.testing.assert_array_equal(np.take(y, 1, axis=a), -x)
    assert "out_spatial_dim" in _error({"output": {"class": "stack", "out_spatial_dim": SpatialDim("x", 3),
                                                   "from": ["data", "data"]}})


def test_tile_out_dims():
    f2 = FeatureDim("f2", 10)
    net, x, (y,), _ = _run({"output": {"class": "tile", "multiples": {"F": 2}, "out_dims": {"F": f2},
                                       "from": "data"}})
    assert net.get_layer("output").output.feature_dim is f2
    np.testing.assert_array_equal(y, np.tile(x, (1, 1, 2)))
    assert "out_dims" in _error({"output": {"class": "tile", "multiples": {"F": 2}, "out_dims": {"F": FeatureDim(
        "f3", 3)}, "from": "data"}})


def test_slice_nd_out_spatial_dim():
    s = SpatialDim("slice", 2)
    net, x, (y,), _ = _run({"start": {"class": "constant", "value": 1, "with_batch_dim": True},
                            "output": {"class": "slice_nd", "start": "start", "size": 2, "out_spatial_dim": s,
                                       "from": "data"}})
    out = net.get_layer("output").output
    assert s in out.dims
    np.testing.assert_array_equal(y[0], x[0, 1:3])  # seq 0 (length 4)
    np.testing.assert_array_equal(y[1], x[1, 1:3] * np.array([[1], [0]], "float32"))  # seq 1 (length 2): 1 frame


def test_unflatten_nd_out_dims():
    d1, d2 = SpatialDim("u1"), SpatialDim("u2")
    extern = {"data": {"dim": 5}, "sizes": {"shape": (2,), "dtype": "int32", "batch_dim_axis": 0,
                                            "time_dim_axis": None, "feature_dim_axis": None}}
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "unflatten_nd", "sizes": "data:sizes", "num_axes": 2,
                                        "out_dims": [d1, d2], "from": "data"}}, extern)
        out = net.get_layer("output").output
        assert out.dims[1] is d1 and out.dims[2] is d2
        x = np.arange(2 * 6 * 5, dtype="float32").reshape(2, 6, 5)
        with tf1.Session() as session:
            y, l1, l2 = session.run([out.placeholder, d1.dyn_size, d2.dyn_size], feed_dict={
                net.extern_data.data["data"].placeholder: x,
                net.extern_data.data["data"].size_placeholder[0]: [6, 4],
                net.extern_data.data["sizes"].placeholder: [[2, 3], [2, 2]]})
    np.testing.assert_array_equal(l1, [2, 2])
    np.testing.assert_array_equal(l2, [3, 2])
    np.testing.assert_array_equal(y[0], x[0].reshape(2, 3, 5))
    np.testing.assert_array_equal(y[1, :2, :2], x[1, :4].reshape(2, 2, 5))


def test_combine_allow_broadcast_all_sources():
    net, x, (y,), _ = _run({"output": {"class": "combine", "kind": "add", "allow_broadcast_all_sources": True,
                                       "from": ["data", "data"]}})
    np.testing.assert_allclose(y, 2 * x)


@pytest.mark.parametrize("opts, option", [
    ({"class": "variable", "shape": (3,), "saveable": False}, "saveable"),
    ({"class": "rec", "unit": {"output": {"class": "copy", "from": "data:source"}}, "max_seq_len_via": "data",
      "from": "data"}, "max_seq_len_via"),
])
def test_refused_options_named(opts, option):
    msg = _error({"output": opts})
    assert "'output'" in msg and "option %s=" % option in msg and "not supported" in msg, msg


def test_rnn_cell_out_dim_gives_the_units():
    out = FeatureDim("lstm", 3)
    net, x, (y,), params = _run({"output": {"class": "rnn_cell", "unit": "GRU", "out_dim": out, "from": "data"}})
    assert net.get_layer("output").output.feature_dim is out and y.shape[-1] == 3
    assert {v.shape[-1] for v in params.values()} == {3, 6}  # candidate (3 units), gates (2 * 3)


def test_out_dim_not_a_dim():
    msg = _error({"output": {"class": "linear", "out_dim": 3, "from": "data"}})
    assert "'output'" in msg and "option out_dim must be a Dim, got 3" in msg
