"""
Math / reduction layers (returnn_lite/layers/math.py): output templates and dim tags, masking of padded
frames, values against numpy, and the error for a missing reduce axis.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.network import NetworkLayerException
from returnn_lite.testing import build_network

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")
RNG = np.random.RandomState(3)


def _net(extern, net_dict, train_flag=False):
    return build_network(net_dict, extern, train_flag)


def _run(net, fetch, **arrays):
    feed = {}
    for key, value in arrays.items():
        data = net.extern_data.get_data(key)
        feed[data.placeholder] = value
        for _, size in data.size_placeholder.items():
            feed[size] = LENS
    with tf1.Session(graph=tf1.get_default_graph()) as session:
        net.initialize_params(session)
        return session.run(fetch, feed_dict=feed)


@pytest.fixture(autouse=True)
def _graph():
    with tf.Graph().as_default():
        yield


def _mask(t=7):
    return np.arange(t)[None, :] < LENS[:, None]  # [B,T]


def test_reduce_templates_and_masking():
    x = RNG.randn(3, 7, 5).astype("float32")
    net = _net({"data": {"dim": 5}}, {
        "sum_t": {"class": "reduce", "mode": "sum", "axis": "T", "from": "data", "is_output_layer": True},
        "max_t": {"class": "reduce", "mode": "max", "axis": "T", "from": "data", "is_output_layer": True},
        "mean_bt": {"class": "reduce", "mode": "mean", "axes": ["B", "T"], "from": "data", "is_output_layer": True},
        "mean_f": {"class": "reduce", "mode": "mean", "axis": "F", "keep_dims": True, "from": "data",
                   "is_output_layer": True},
        "argmax_f": {"class": "reduce", "mode": "argmax", "axis": "F", "from": "data", "is_output_layer": True},
    })
    data = net.extern_data.get_data("data")
    sum_t = net.get_layer("sum_t").output
    assert sum_t.batch_shape == (None, 5) and sum_t.time_dim_axis is None and sum_t.feature_dim_axis == 1
    assert sum_t.dims[1] is data.dims[2]  # the feature tag is kept
    mean_f = net.get_layer("mean_f").output
    assert mean_f.batch_shape == (None, None, 1) and mean_f.dims[1] is data.dims[1]
    argmax = net.get_layer("argmax_f").output
    assert argmax.dtype == "int32" and argmax.sparse and argmax.sparse_dim is data.dims[2]
    assert net.get_layer("mean_bt").output.batch_shape == (5,)
    names = ["sum_t", "max_t", "mean_bt", "mean_f", "argmax_f"]
    res = _run(net, [net.get_layer(n).output.placeholder for n in names], data=x)
    m = _mask()[:, :, None]
    np.testing.assert_allclose(res[0], np.where(m, x, 0).sum(1), rtol=1e-5)
    np.testing.assert_allclose(res[1], np.where(m, x, -np.inf).max(1), rtol=1e-5)
    np.testing.assert_allclose(res[2], x[_mask()].mean(0), rtol=1e-5)
    np.testing.assert_allclose(res[3], x.mean(2, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(res[4], x.argmax(2))


def test_reduce_missing_axis_names_layer_and_axis():
    with pytest.raises(NetworkLayerException) as exc:
        _net({"data": {"shape": (None, 5), "time_dim_axis": None, "batch_dim_axis": 0, "feature_dim_axis": 2}}, {
            "output": {"class": "reduce", "mode": "sum", "axis": "stag:nonexisting", "from": "data"}})
    msg = str(exc.value)
    assert "output" in msg and "stag:nonexisting" in msg


def test_dot_self_attention_energy_and_softmax_over_spatial():
    x = RNG.randn(3, 7, 4).astype("float32")
    net = _net({"data": {"dim": 4}}, {
        "energy": {"class": "dot", "from": ["data", "data"], "red1": "F", "red2": "F", "var1": "T", "var2": "T"},
        "output": {"class": "softmax_over_spatial", "from": "energy", "energy_factor": 0.5},
    })
    energy = net.get_layer("energy").output
    assert energy.batch_shape == (None, None, None)
    out = net.get_layer("output").output
    assert out.time_dim_axis == 2 and out.feature_dim_axis == 1
    e, y = _run(net, [energy.placeholder, out.placeholder], data=x)
    ref_e = np.einsum("bqf,bkf->bqk", x, x)
    valid = _mask()
    for b in range(3):
        n = LENS[b]
        np.testing.assert_allclose(e[b, :n, :n], ref_e[b, :n, :n], rtol=1e-4, atol=1e-5)
        # softmax over the first T axis (moved last), masked by the seq lens
        logits = 0.5 * ref_e[b, :n, :n].T  # [k, q]
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(y[b, :n, :n], p, rtol=1e-4, atol=1e-5)
        assert np.all(y[b, :n, n:] == 0.0)
    assert valid.shape == (3, 7)


def test_variable_and_gating_templates():
    net = _net({"data": {"dim": 6}}, {
        "var": {"class": "variable", "shape": (2, 3), "init": 1.5, "is_output_layer": True},
        "var_b": {"class": "variable", "shape": (3,), "add_batch_axis": True, "add_time_axis": True,
                  "is_output_layer": True},
        "output": {"class": "gating", "activation": "tanh", "from": "data"},
    })
    var = net.get_layer("var")
    assert var.output.batch_shape == (2, 3) and var.output.feature_dim_axis == 1
    assert [p.op.name for p in var.params.values()] == ["var/var"]
    vb = net.get_layer("var_b").output
    assert vb.batch_shape == (None, 1, 3) and vb.batch_dim_axis == 0
    assert net.get_layer("output").output.dim == 3
    x = RNG.randn(3, 7, 6).astype("float32")
    v, g = _run(net, [var.output.placeholder, net.get_layer("output").output.placeholder], data=x)
    np.testing.assert_allclose(v, np.full((2, 3), 1.5))
    np.testing.assert_allclose(g, np.tanh(x[..., :3]) / (1 + np.exp(-x[..., 3:])), rtol=1e-5, atol=1e-6)


def test_top_k_indices_sub_layer():
    net = _net({"data": {"dim": 5}}, {
        "top": {"class": "top_k", "axis": "F", "k": 2, "from": "data"},
        "output": {"class": "copy", "from": "top/indices"},
    })
    top = net.get_layer("top").output
    idx = net.get_layer("output").output
    assert top.batch_shape == (None, None, 2) and top.feature_dim_axis is None
    assert idx.sparse and idx.dim == 5
    x = RNG.randn(3, 7, 5).astype("float32")
    v, i = _run(net, [top.placeholder, idx.placeholder], data=x)
    np.testing.assert_allclose(v, -np.sort(-x, axis=-1)[..., :2], rtol=1e-6)
    np.testing.assert_array_equal(i, np.argsort(-x, axis=-1)[..., :2])


def test_dot_shared_axes_by_order_and_time_axis():
    net = _net({"a": {"shape": (2, 3, 4), "time_dim_axis": None},
                "b": {"shape": (2, 3, 4, 5), "batch_dim_axis": None, "time_dim_axis": None}}, {
        "output": {"class": "dot", "from": ["data:a", "data:b"], "red1": "F", "red2": "dim:4", "var1": "B",
                   "var2": "F"}})
    out = net.get_layer("output").output
    assert out.batch_shape == (2, 3, None, 5) and out.batch_dim_axis == 2 and out.feature_dim_axis == 3
    assert out.time_dim_axis is None
    a = RNG.randn(3, 2, 3, 4).astype("float32")
    b = RNG.randn(2, 3, 4, 5).astype("float32")
    y = _run(net, out.placeholder, a=a, b=b)
    np.testing.assert_allclose(y, np.einsum("nijf,ijfk->ijnk", a, b), rtol=1e-4, atol=1e-5)


def test_dot_masks_dynamic_reduce_axis():
    net = _net({"data": {"dim": 3}}, {
        "output": {"class": "dot", "from": ["data", "data"], "red1": "T", "red2": "T", "var1": "F", "var2": "F"}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, 3, 3)
    x = RNG.randn(3, 7, 3).astype("float32")
    y = _run(net, out.placeholder, data=x)
    xm = np.where(_mask()[:, :, None], x, 0.0)
    np.testing.assert_allclose(y, np.einsum("btf,btg->bfg", xm, xm), rtol=1e-4, atol=1e-5)


def test_reduce_keep_dims_time_and_int_axes():
    net = _net({"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}}, {
        "keep": {"class": "reduce", "mode": "sum", "axis": "T", "keep_dims": True, "from": "data",
                 "is_output_layer": True},
        "int_ax": {"class": "reduce", "mode": "max", "axes": 1, "from": "data", "is_output_layer": True},
    })
    keep = net.get_layer("keep").output
    assert keep.batch_shape == (1, None, 5) and keep.time_dim_axis == 0
    int_ax = net.get_layer("int_ax").output  # int axes count in batch-major layout: 1 is the time axis
    assert int_ax.batch_shape == (None, 5) and int_ax.batch_dim_axis == 0
    x = RNG.randn(7, 3, 5).astype("float32")
    k, m = _run(net, [keep.placeholder, int_ax.placeholder], data=x)
    mask = _mask().T[:, :, None]  # [T,B,1]
    np.testing.assert_allclose(k, np.where(mask, x, 0).sum(0, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(m, np.where(mask, x, -np.inf).max(0), rtol=1e-5)


_TEMPLATE_CASES = {
    "reduce_argmin_t": {"class": "reduce", "mode": "argmin", "axes": "T"},
    "reduce_any": {"class": "reduce", "mode": "any", "axes": "T", "from": "cmp"},
    "reduce_min_bt": {"class": "reduce", "mode": "min", "axes": ["B", "T"]},
    "math_norm_t": {"class": "math_norm", "p": 2, "axes": "T"},
    "elemwise_prod": {"class": "elemwise_prod", "axes": "F"},
    "weighted_sum_t": {"class": "weighted_sum", "axes": "T", "size": [3], "padding": "same"},
    "weighted_sum_f": {"class": "weighted_sum", "axes": "F"},
    "gating": {"class": "gating", "activation": "tanh"},
    "accumulate_mean": {"class": "accumulate_mean", "exp_average": 0.1, "is_prob_distribution": True},
    "sos_log": {"class": "softmax_over_spatial", "log_space": True, "energy_factor": 0.5},
    "sos_window": {"class": "softmax_over_spatial", "window_start": 1, "window_size": 3},
    "batch_softmax": {"class": "batch_softmax"},
    "top_k_t": {"class": "top_k", "axis": "T", "k": 2},
    "gradient": {"class": "gradient", "y": "cmp_f", "x": "data", "from": []},
    "synthetic_gradient": {"class": "synthetic_gradient", "gradient": "data"},
    "tikhonov": {"class": "tikhonov_regularization"},
    "clp": {"class": "complex_linear_projection", "nr_of_filters": 2},
    "norm_tf": {"class": "norm", "axes": "TF"},
    "variable_bt": {"class": "variable", "shape": (2, 3), "add_batch_axis": True, "add_time_axis": True,
                    "from": []},
    "train_flag": {"class": "train_flag", "from": []},
}


@pytest.mark.parametrize("case", sorted(_TEMPLATE_CASES))
@pytest.mark.parametrize("train_flag", [False, True])
def test_template_matches_output(case, train_flag):
    desc = dict(_TEMPLATE_CASES[case])
    desc.setdefault("from", "data")
    net = _net({"data": {"dim": 6}}, {
        "cmp": {"class": "compare", "kind": "greater", "value": 0.0, "from": "data"},
        "cmp_f": {"class": "reduce", "mode": "sum", "axes": ["B", "T", "F"], "from": "data"},
        "output": desc}, train_flag=train_flag)
    out = net.get_layer("output").output
    sizes = {i: d.dyn_size for i, d in enumerate(out.dims) if d.is_dynamic() and d.dyn_size is not None}
    value, size_values = _run(net, (out.placeholder, sizes), data=RNG.randn(3, 7, 6).astype("float32"))
    value = np.asarray(value)
    assert value.ndim == out.batch_ndim
    for axis, dim in enumerate(out.batch_shape):
        assert dim is None or value.shape[axis] == dim, (value.shape, out)
    if out.have_batch_axis():
        assert value.shape[out.batch_dim_axis] == 3
    assert value.dtype == np.dtype(out.dtype)
    for axis, lens in size_values.items():
        assert np.asarray(lens).max() <= value.shape[axis]


def test_top_k_over_time_moves_k_last():
    net = _net({"data": {"dim": 5}}, {
        "output": {"class": "top_k", "axis": "T", "k": 2, "from": "data"},
        "idx": {"class": "copy", "from": "output/indices", "is_output_layer": True}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, 5, 2) and out.feature_dim_axis == 1 and out.time_dim_axis is None
    x = RNG.randn(3, 7, 5).astype("float32")
    v, i = _run(net, [out.placeholder, net.get_layer("idx").output.placeholder], data=x)
    xt = x.transpose(0, 2, 1)
    np.testing.assert_allclose(v, -np.sort(-xt, axis=-1)[..., :2], rtol=1e-6)
    np.testing.assert_array_equal(i, np.argsort(-xt, axis=-1)[..., :2])


def test_dot_debug_prints_and_computes_the_same(capfd):
    x = RNG.randn(3, 7, 4).astype("float32")
    out = {}
    for debug in (False, True):
        with tf.Graph().as_default():
            net = _net({"data": {"dim": 4}}, {"output": {"class": "dot", "from": ["data", "data"], "red1": "F",
                                                         "red2": "F", "var1": "T", "var2": "T", "debug": debug}})
            out[debug] = _run(net, net.get_layer("output").output.placeholder, data=x)
    np.testing.assert_allclose(out[True], out[False])
    ref = np.einsum("btf,bsf->bts", x, x)
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(out[False][b, :n, :n], ref[b, :n, :n], rtol=1e-4, atol=1e-5)
    assert "dot layer 'output'" in capfd.readouterr().err


def test_combine_of_different_feature_dims_broadcasts_both():
    # a linear with n_out 3 and the data of dim 5: the output has both feature dims [B,T,3,5]
    x = RNG.randn(3, 7, 5).astype("float32")
    net = _net({"data": {"dim": 5}}, {"lin": {"class": "linear", "from": "data", "n_out": 3},
                                      "output": {"class": "combine", "kind": "add", "from": ["lin", "data"]}})
    out = net.get_layer("output").output
    assert out.batch_shape == (None, None, 3, 5) and out.dim == 5
    y, lin = _run(net, [out.placeholder, net.get_layer("lin").output.placeholder], data=x)
    np.testing.assert_allclose(y, lin[..., :, None] + x[..., None, :], rtol=1e-5, atol=1e-6)


def test_combine_mismatch_beyond_features_stays_an_error():
    with pytest.raises(NetworkLayerException, match="bad"):
        _net({"data": {"dim": 6}}, {
            "a": {"class": "split_dims", "axis": "F", "dims": (2, 3), "from": "data"},
            "b": {"class": "split_dims", "axis": "F", "dims": (3, 2), "from": "data"},
            "bad": {"class": "combine", "kind": "add", "from": ["a", "b"]},
            "output": {"class": "copy", "from": "bad"}})


def test_eval_given_as_a_function_gets_the_eval_namespace():
    # as the original: the function is called with the eval namespace as keyword args (tf, the TF util helpers such
    # as safe_log, source, self, eval_locals)
    x = np.abs(RNG.randn(3, 7, 5)).astype("float32") + 0.1

    def log_scaled(source, tf, safe_log, self, scale, **_kwargs):
        assert self.name == "output"
        return safe_log(source(0)) * tf.constant(scale)

    net = _net({"data": {"dim": 5}}, {"output": {"class": "eval", "from": "data", "eval": log_scaled,
                                                 "eval_locals": {"scale": 2.0}}})
    y = _run(net, net.get_layer("output").output.placeholder, data=x)
    np.testing.assert_allclose(y, 2.0 * np.log(x), rtol=1e-5)
