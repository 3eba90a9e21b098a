"""
Variants of the math / norm / conv layers (time-major inputs, inputs without time axis, int axes, masking,
strides/dilation/groups, input_* options of conv, pool modes): output templates and values vs numpy.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")
MASK = np.arange(7)[None, :] < LENS[:, None]  # [B,T]
TIME_MAJOR = {"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}}


@pytest.fixture(autouse=True)
def _graph():
    with tf.Graph().as_default():
        yield


def _kinds(out):
    return ["batch" if i == out.batch_dim_axis else "feature" if i == out.feature_dim_axis else "spatial"
            for i in range(out.batch_ndim)]


def _run(extern, net_dict, names, seed=1, train_flag=False):
    """Construct (all named layers as output layers), feed random inputs, fetch outputs in their own layout."""
    net = TFNetwork(extern_data=ExternData(extern), train_flag=train_flag)
    net.construct_from_dict({k: dict(v, is_output_layer=True) if k in names else v for k, v in net_dict.items()})
    rng = np.random.RandomState(seed)
    feed, inputs = {}, {}
    for key, data in net.extern_data.data.items():
        shape = [3 if i == data.batch_dim_axis else (7 if s is None else s) for i, s in enumerate(data.batch_shape)]
        value = rng.randn(*shape).astype(data.dtype)
        inputs[key] = value
        feed[data.placeholder] = value
        for _, size in data.size_placeholder.items():
            feed[size] = LENS
    fetch = {name: net.get_layer(name).output.placeholder for name in names}
    params = {p.op.name: p for p in net.get_params_list()}
    with tf1.Session(graph=tf1.get_default_graph()) as session:
        net.initialize_params(session)
        values, param_values = session.run([fetch, params], feed_dict=feed)
    return net, inputs, values, param_values


# ---------------------------------------------------------------------------------------------------------------
# reduce


def test_reduce_time_major_variants():
    net, inputs, v, _ = _run(TIME_MAJOR, {
        "mean_t": {"class": "reduce", "mode": "mean", "axes": "T", "from": "data"},
        "max_t_kd": {"class": "reduce", "mode": "max", "axes": "T", "keep_dims": True, "from": "data"},
        "argmax_t": {"class": "reduce", "mode": "argmax", "axes": "T", "from": "data"},
        "argmin_t": {"class": "reduce", "mode": "argmin", "axis": "T", "from": "data"},
        "sum_int1": {"class": "reduce", "mode": "sum", "axes": 1, "from": "data"},  # int axes: batch-major first
        "mean_bt": {"class": "reduce", "mode": "mean", "axes": ["B", "T"], "from": "data"},
        "lse_t": {"class": "reduce", "mode": "logsumexp", "axes": "T", "from": "data"},
        "sum_nomask": {"class": "reduce", "mode": "sum", "axes": "T", "use_time_mask": False, "from": "data"},
        "sum_f": {"class": "reduce", "mode": "sum", "axes": "F", "from": "data"},
    }, ["mean_t", "max_t_kd", "argmax_t", "argmin_t", "sum_int1", "mean_bt", "lse_t", "sum_nomask", "sum_f"])
    x = inputs["data"].transpose(1, 0, 2)  # [B,T,F]
    m = MASK[:, :, None]
    out = {k: net.get_layer(k).output for k in v}
    assert _kinds(out["mean_t"]) == ["batch", "feature"]
    assert _kinds(out["max_t_kd"]) == ["spatial", "batch", "feature"] and out["max_t_kd"].batch_shape == (1, None, 5)
    assert out["max_t_kd"].time_dim_axis == 0
    assert out["argmax_t"].sparse and out["argmax_t"].dtype == "int32" and _kinds(out["argmax_t"]) == ["batch", "spatial"]
    assert out["argmax_t"].sparse_dim is net.extern_data.get_data("data").dims[0]
    assert _kinds(out["sum_f"]) == ["spatial", "batch"] and out["sum_f"].time_dim_axis == 0
    assert out["mean_bt"].batch_shape == (5,) and not out["mean_bt"].have_batch_axis()
    np.testing.assert_allclose(v["mean_t"], (x * m).sum(1) / LENS[:, None], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v["max_t_kd"][0], np.where(m, x, -np.inf).max(1), rtol=1e-6)
    # padded frames are masked for argmax/argmin too
    np.testing.assert_array_equal(v["argmax_t"], np.where(m, x, -np.inf).argmax(1))
    np.testing.assert_array_equal(v["argmin_t"], np.where(m, x, np.inf).argmin(1))
    np.testing.assert_allclose(v["sum_int1"], (x * m).sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v["mean_bt"], (x * m).sum((0, 1)) / LENS.sum(), rtol=1e-5, atol=1e-6)
    lse = np.log(np.where(m, np.exp(x), 0.0).sum(1))
    np.testing.assert_allclose(v["lse_t"], lse, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v["sum_nomask"], x.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v["sum_f"], inputs["data"].sum(-1), rtol=1e-5, atol=1e-6)


def test_reduce_no_time_axis_and_invalid_mode():
    net, inputs, v, _ = _run({"data": {"shape": (4, 6)}}, {
        "max_s": {"class": "reduce", "mode": "max", "axes": "spatial", "from": "data"},
        "avg_f": {"class": "reduce", "mode": "avg", "axes": "F", "keep_dims": True, "from": "data"},
    }, ["max_s", "avg_f"])
    assert _kinds(net.get_layer("max_s").output) == ["batch", "feature"]
    assert net.get_layer("avg_f").output.batch_shape == (None, 4, 1)
    np.testing.assert_allclose(v["max_s"], inputs["data"].max(1))
    np.testing.assert_allclose(v["avg_f"], inputs["data"].mean(-1, keepdims=True), rtol=1e-5)
    with pytest.raises(Exception, match="median"):
        _run({"data": {"dim": 5}}, {"r": {"class": "reduce", "mode": "median", "axes": "T", "from": "data"}}, ["r"])


# ---------------------------------------------------------------------------------------------------------------
# softmax_over_spatial, math_norm, dot, gating, batch_softmax on time-major input


def test_math_layers_time_major():
    net, inputs, v, _ = _run(TIME_MAJOR, {
        "som": {"class": "softmax_over_spatial", "from": "data"},
        "mn": {"class": "math_norm", "p": 2, "axes": "T", "from": "data"},
        "dot": {"class": "dot", "from": ["data", "data"], "red1": "F", "red2": "F", "var1": "T", "var2": "T"},
        "dot_tt": {"class": "dot", "from": ["data", "data"], "red1": "T", "red2": "T", "var1": "F", "var2": "F"},
        "gat": {"class": "gating", "activation": "tanh", "from": ["data", "data"]},
        "bsm": {"class": "batch_softmax", "from": "data"},
    }, ["som", "mn", "dot", "dot_tt", "gat", "bsm"])
    x = inputs["data"].transpose(1, 0, 2)
    m = MASK[:, :, None]
    out = {k: net.get_layer(k).output for k in v}
    assert _kinds(out["som"]) == ["batch", "feature", "spatial"] and out["som"].time_dim_axis == 2
    assert _kinds(out["dot"]) == ["batch", "spatial", "feature"] and out["dot"].batch_shape == (None, None, None)
    assert _kinds(out["dot_tt"]) == ["batch", "spatial", "feature"] and out["dot_tt"].batch_shape == (None, 5, 5)
    assert _kinds(out["gat"]) == ["spatial", "batch", "feature"]
    e = np.where(m, x, -np.inf)
    sm = np.exp(e - e.max(1, keepdims=True))
    sm /= sm.sum(1, keepdims=True)
    np.testing.assert_allclose(v["som"].transpose(0, 2, 1) * m, sm * m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v["mn"], np.sqrt((x ** 2 * m).sum(1)), rtol=1e-5)
    mm = MASK[:, :, None] & MASK[:, None, :]
    np.testing.assert_allclose(v["dot"] * mm, np.einsum("btf,bsf->bts", x, x) * mm, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v["dot_tt"], np.einsum("btf,btg->bfg", x * m, x * m), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v["gat"].transpose(1, 0, 2) * m, np.tanh(x) / (1 + np.exp(-x)) * m, rtol=1e-5,
                               atol=1e-6)
    e = e.reshape(3, -1)
    bs = np.exp(e - e.max(1, keepdims=True))
    bs = (bs / bs.sum(1, keepdims=True)).reshape(3, 7, 5)
    np.testing.assert_allclose(v["bsm"] * m, bs * m, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# norms


@pytest.mark.parametrize("time_major", [False, True])
def test_norms_train(time_major):
    extern = TIME_MAJOR if time_major else {"data": {"shape": (6,)}}
    net, inputs, v, p = _run(extern, {
        "bn": {"class": "batch_norm", "from": "data"},
        "ln": {"class": "layer_norm", "from": "data"},
        "nm": {"class": "norm", "axes": "F", "from": "data"},
    }, ["bn", "ln", "nm"], train_flag=True)
    x = inputs["data"]
    if time_major:
        assert p["bn/batch_norm/bn_bn_output_mean"].shape == (1, 1, 5)
        x = x.transpose(1, 0, 2)
        valid, m = x[MASK], MASK[:, :, None]
        for k in v:
            v[k] = v[k].transpose(1, 0, 2)
    else:
        assert p["bn/batch_norm/bn_bn_output_mean"].shape == (1, 6)
        valid, m = x, 1
    ref_bn = (x - valid.mean(0)) / np.sqrt(valid.var(0) + 1e-3)
    np.testing.assert_allclose(v["bn"] * m, ref_bn * m, rtol=1e-4, atol=1e-5)
    ref_ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(v["ln"] * m, ref_ln * m, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v["nm"] * m, ref_ln * m, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# conv / pool


def _out_len(n, k, s, d, padding):
    if padding == "same":
        out = -(-n // s)
        return out, max((out - 1) * s + (k - 1) * d + 1 - n, 0) // 2
    return -(-(n - (k - 1) * d) // s), 0


def _np_conv(x, w, strides, dilation, padding, groups=1):
    """x [B, *S, I], w [*K, I/groups, O] -> [B, *S', O] like tf.nn.convolution."""
    n_sp = x.ndim - 2
    outs, pads = zip(*[_out_len(x.shape[1 + i], w.shape[i], strides[i], dilation[i], padding) for i in range(n_sp)])
    xp = np.zeros((x.shape[0],) + tuple(s + 2 * k * d + 2 * st for s, k, d, st in zip(
        x.shape[1:-1], w.shape[:n_sp], dilation, strides)) + (x.shape[-1],))
    xp[(slice(None),) + tuple(slice(p, p + s) for p, s in zip(pads, x.shape[1:-1]))] = x
    ig, o = w.shape[-2], w.shape[-1]
    og = o // groups
    y = np.zeros((x.shape[0],) + tuple(outs) + (o,))
    for pos in np.ndindex(*outs):
        for kpos in np.ndindex(*w.shape[:n_sp]):
            xi = xp[(slice(None),) + tuple(p * s + k * d for p, s, k, d in zip(pos, strides, kpos, dilation))]
            for g in range(groups):
                y[(slice(None),) + pos + (slice(g * og, (g + 1) * og),)] += \
                    xi[:, g * ig:(g + 1) * ig] @ w[kpos][:, g * og:(g + 1) * og]
    return y


@pytest.mark.parametrize("name,extern,opts,prep,strides,dilation", [
    ("time_major_same", TIME_MAJOR, {"filter_size": (3,), "padding": "same"},
     lambda x: x.transpose(1, 0, 2), (1,), (1,)),
    ("valid_stride2", {"data": {"dim": 5}}, {"filter_size": (3,), "padding": "valid", "strides": 2},
     lambda x: x, (2,), (1,)),
    ("same_stride3", {"data": {"dim": 5}}, {"filter_size": (4,), "padding": "same", "strides": 3},
     lambda x: x, (3,), (1,)),
    ("valid_dilation2", {"data": {"dim": 5}}, {"filter_size": (2,), "padding": "valid", "dilation_rate": 2},
     lambda x: x, (1,), (2,)),
    ("add_feature_dim", {"data": {"dim": 5}}, {"filter_size": (3, 3), "padding": "same",
                                               "input_add_feature_dim": True},
     lambda x: x[..., None], (1, 1), (1, 1)),
    ("split_feature_dim", {"data": {"dim": 6}}, {"filter_size": (3, 2), "padding": "valid",
                                                 "input_split_feature_dim": 2},
     lambda x: x.reshape(3, 7, 3, 2), (1, 1), (1, 1)),
    ("expand_dims", {"data": {"dim": 5}}, {"filter_size": (3, 1), "padding": "same", "input_expand_dims": 1},
     lambda x: x[:, :, None, :], (1, 1), (1, 1)),
    ("image_time_major", {"data": {"shape": (None, 6, 3), "time_dim_axis": 0, "batch_dim_axis": 1}},
     {"filter_size": (2, 3), "padding": "same", "strides": (1, 2)}, lambda x: x.transpose(1, 0, 2, 3), (1, 2), (1, 1)),
])
def test_conv_variants(name, extern, opts, prep, strides, dilation):
    net, inputs, v, p = _run(extern, {"c": dict(opts, **{"class": "conv", "n_out": 4, "from": "data"})}, ["c"])
    out = net.get_layer("c").output
    assert out.batch_dim_axis == 0 and out.feature_dim_axis == out.batch_ndim - 1 and out.dim == 4
    assert out.time_dim_axis == 1
    y = _np_conv(prep(inputs["data"]), p["c/W"], strides, dilation, opts["padding"])
    assert v["c"].shape == y.shape, name
    t_len = y.shape[1]
    with tf1.Session() as session:
        feed = {net.extern_data.get_data("data").size_placeholder[0]: LENS}
        lens = session.run(out.dims[1].dyn_size, feed_dict=feed)
    k, s, d = opts["filter_size"][0], strides[0], dilation[0]
    np.testing.assert_array_equal(lens, [_out_len(n, k, s, d, opts["padding"])[0] for n in LENS])
    m = (np.arange(t_len)[None, :] < lens[:, None]).reshape((3, t_len) + (1,) * (y.ndim - 2))
    np.testing.assert_allclose(v["c"] * m, y * m, rtol=1e-5, atol=1e-5)


def test_conv_groups_bias_activation():
    net, inputs, v, p = _run({"data": {"dim": 4}}, {"c": {
        "class": "conv", "filter_size": (3,), "padding": "same", "groups": 2, "n_out": 6, "with_bias": True,
        "activation": "relu", "from": "data"}}, ["c"])
    assert p["c/W"].shape == (3, 2, 6) and p["c/bias"].shape == (6,)
    y = np.maximum(_np_conv(inputs["data"], p["c/W"], (1,), (1,), "same", groups=2) + p["c/bias"], 0)
    np.testing.assert_allclose(v["c"] * MASK[:, :, None], y * MASK[:, :, None], rtol=1e-5, atol=1e-5)


def _np_pool(x, k, s, padding, mode):
    n = x.shape[1]
    out, pad = _out_len(n, k, s, 1, padding)
    y = np.zeros((x.shape[0], out) + x.shape[2:])
    for t in range(out):
        idx = [t * s + j - pad for j in range(k) if 0 <= t * s + j - pad < n]
        y[:, t] = x[:, idx].max(1) if mode == "max" else x[:, idx].mean(1)
    return y


@pytest.mark.parametrize("extern,opts,prep,k,s", [
    (TIME_MAJOR, {"mode": "max", "pool_size": (3,), "padding": "same"}, lambda x: x.transpose(1, 0, 2), 3, 3),
    ({"data": {"dim": 5}}, {"mode": "avg", "pool_size": (3,), "strides": 2, "padding": "same"}, lambda x: x, 3, 2),
    ({"data": {"dim": 5}}, {"mode": "avg", "pool_size": [2], "strides": 1, "padding": "VALID"}, lambda x: x, 2, 1),
    ({"data": {"dim": 5}}, {"mode": "MAX", "pool_size": (2,), "padding": "valid"}, lambda x: x, 2, 2),
])
def test_pool_variants(extern, opts, prep, k, s):
    net, inputs, v, _ = _run(extern, {"p": dict(opts, **{"class": "pool", "from": "data"})}, ["p"])
    out = net.get_layer("p").output
    assert _kinds(out) == ["batch", "spatial", "feature"] and out.dims[-1] is net.extern_data.get_data("data").dims[-1]
    y = _np_pool(prep(inputs["data"]), k, s, opts["padding"].lower(), opts["mode"].lower())
    lens = np.array([_out_len(n, k, s, 1, opts["padding"].lower())[0] for n in LENS])
    m = (np.arange(y.shape[1])[None, :] < lens[:, None])[:, :, None]
    np.testing.assert_allclose(v["p"] * m, y * m, rtol=1e-5, atol=1e-6)


def test_conv_pool_in_spatial_dims_keep_batch_like_axes_order():
    extern = {"data": {"shape": (None, 6, 3), "time_dim_axis": 0, "batch_dim_axis": 1}}
    net, inputs, v, p = _run(extern, {
        "c": {"class": "conv", "filter_size": (2,), "padding": "valid", "n_out": 4, "in_spatial_dims": ["dim:6"],
              "from": "data"},
        "p": {"class": "pool", "mode": "max", "pool_size": (2,), "in_spatial_dims": ["T"], "from": "data"},
    }, ["c", "p"])
    c, pl = net.get_layer("c").output, net.get_layer("p").output
    # the axes not convolved over (incl. the batch axis) keep their order in front, as in the original
    assert _kinds(c) == ["spatial", "batch", "spatial", "feature"] and c.batch_shape == (None, None, 5, 4)
    assert _kinds(pl) == ["batch", "spatial", "spatial", "feature"] and pl.batch_shape == (None, 6, None, 3)
    x, w = inputs["data"], p["c/W"]  # x [T,B,6,3]
    y = np.einsum("tbsi,io->tbso", x[:, :, :-1], w[0]) + np.einsum("tbsi,io->tbso", x[:, :, 1:], w[1])
    np.testing.assert_allclose(v["c"], y, rtol=1e-5, atol=1e-5)


def test_norm_param_shape_order_and_no_params():
    net, inputs, v, p = _run({"data": {"shape": (4, 5)}}, {
        "n": {"class": "norm", "axes": ["F", "spatial"], "param_shape": ["F", "spatial"], "from": "data"},
        "n2": {"class": "norm", "axes": "F", "param_shape": (), "from": "data"},
        "n3": {"class": "norm", "axes": "F", "scale": False, "bias": False, "from": "data"},
    }, ["n", "n2", "n3"])
    assert p["n/scale"].shape == (5, 4) and p["n2/scale"].shape == () and "n3/scale" not in p
    x = inputs["data"]
    ref = (x - x.mean((1, 2), keepdims=True)) / np.sqrt(x.var((1, 2), keepdims=True) + 1e-6)
    np.testing.assert_allclose(v["n"], ref, rtol=1e-4, atol=1e-5)
