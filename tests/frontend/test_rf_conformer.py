"""The rf Conformer / Conformer v2 / E-Branchformer modules: the original's param names and shapes, and outputs
against numpy references written from the papers (conv module, FF, subsampling, a whole layer), on both backends
where the layers backend runs them."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.frontend.encoder.base import ISeqDownsamplingEncoder, ISeqFramewiseEncoder  # noqa: E402
from returnn_lite.frontend.encoder.conformer import (  # noqa: E402
    ConformerConvBlock, ConformerConvSubsample, ConformerEncoder, ConformerEncoderLayer,
    ConformerPositionwiseFeedForward)
from returnn_lite.frontend.encoder.conformer_v2 import ConformerEncoderV2, ConformerFrontend  # noqa: E402
from returnn_lite.frontend.encoder.e_branchformer import EBranchformerLayer  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import in_order, random_params, run_layers, run_torch  # noqa: E402

time_dim = Dim(None, name="time")
model_dim = Dim(8, name="model")
ff_dim = Dim(12, name="ff")
feat_dim = Dim(10, name="feat")
extern_data = {"data": {"dims": (batch_dim, time_dim, model_dim), "dtype": "float32"}}
feat_extern_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
LENS = np.array([7, 5, 4], dtype="int32")
VALID = np.arange(7)[None, :] < LENS[:, None]


def _inputs(n_feat=8, seed=1):
    return {"data": np.random.RandomState(seed).randn(3, 7, n_feat).astype("float32"), "size:time": LENS}


# ---- numpy references (from the papers' definitions) ----
def _join(prefix, name):
    return prefix + "." + name if prefix else name


def np_linear(x, params, name, bias=True):
    y = x @ params[name + ".weight"]
    return y + params[name + ".bias"] if bias else y


def np_layer_norm(x, params, name, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * params[name + ".scale"] + params[name + ".bias"]


def np_swish(x):
    return x / (1 + np.exp(-x))


def np_depthwise_same(x, w, b):
    """x [B, T, C], w [C, 1, K]: each channel convolved with its own kernel, (K - 1) // 2 zeros left."""
    k = w.shape[-1]
    left = (k - 1) // 2
    xp = np.pad(x, [(0, 0), (left, k - 1 - left), (0, 0)])
    y = np.stack([(xp[:, t:t + k, :] * w[:, 0, :].T[None]).sum(1) for t in range(x.shape[1])], axis=1)
    return y + b


def np_ff(x, params, name):
    return np_linear(np_swish(np_linear(x, params, _join(name, "linear_ff"))), params, _join(name, "linear_out"))


def np_conv_block(x, params, name, eps=1e-3):
    h = np_linear(x, params, _join(name, "positionwise_conv1"))
    d = h.shape[-1] // 2
    h = h[..., :d] / (1 + np.exp(-h[..., d:]))  # GLU
    h = np_depthwise_same(h, params[_join(name, "depthwise_conv.filter")], params[_join(name, "depthwise_conv.bias")])
    h = (h - params[_join(name, "norm.running_mean")]) / np.sqrt(params[_join(name, "norm.running_variance")] + eps)
    h = h * params[_join(name, "norm.gamma")] + params[_join(name, "norm.beta")]
    return np_linear(np_swish(h), params, _join(name, "positionwise_conv2"))


def np_self_attention(x, params, name, num_heads, lens):
    """Standard MHSA: qkv per head (q, k, v), softmax(q k / sqrt(d_head)) over the valid frames, proj."""
    n_b, n_t, _ = x.shape
    qkv = np_linear(x, params, name + ".qkv").reshape(n_b, n_t, num_heads, -1)
    d_k = (qkv.shape[-1]) // 3
    q, k, v = qkv[..., :d_k], qkv[..., d_k:2 * d_k], qkv[..., 2 * d_k:]
    energy = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(d_k)
    energy = np.where((np.arange(n_t)[None, :] < lens[:, None])[:, None, None, :], energy, -np.inf)
    att = np.exp(energy - energy.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    out = np.einsum("bhts,bshd->bthd", att, v).reshape(n_b, n_t, -1)
    return np_linear(out, params, name + ".proj")


def np_conformer_layer(x, params, num_heads, lens, name=""):
    p = name + "." if name else ""
    x = x + 0.5 * np_ff(np_layer_norm(x, params, p + "ffn1_layer_norm"), params, p + "ffn1")
    x = x + np_self_attention(np_layer_norm(x, params, p + "self_att_layer_norm"), params, p + "self_att",
                              num_heads, lens)
    x = x + np_conv_block(np_layer_norm(x, params, p + "conv_layer_norm"), params, p + "conv_block")
    x = x + 0.5 * np_ff(np_layer_norm(x, params, p + "ffn2_layer_norm"), params, p + "ffn2")
    return np_layer_norm(x, params, p + "final_layer_norm")


# ---- models ----
def _conv_block_model():
    return ConformerConvBlock(model_dim, kernel_size=3, norm=rf.BatchNorm(model_dim, use_mask=False))


def _conv_block_step(*, model, extern_data, **_):
    y = model(extern_data["data"], spatial_dim=time_dim)
    y.mark_as_output("y", shape=[batch_dim, time_dim, model_dim])


def _layer_model():
    return ConformerEncoderLayer(model_dim, ff_dim=ff_dim, num_heads=2, conv_kernel_size=3,
                                 self_att=rf.SelfAttention)


def _layer_step(*, model, extern_data, **_):
    y = model(extern_data["data"], spatial_dim=time_dim)
    y.mark_as_output("y", shape=[batch_dim, time_dim, model_dim])


def test_param_names_and_shapes_as_the_original():
    rf.select_backend_torch()
    layer = ConformerEncoderLayer(model_dim, ff_dim=ff_dim, num_heads=2, conv_kernel_size=5)
    shapes = {n: tuple(d.dimension for d in p.dims) for n, p in layer.named_parameters()}
    assert shapes["ffn1.linear_ff.weight"] == (8, 12) and shapes["ffn2.linear_out.bias"] == (8,)
    assert shapes["conv_block.positionwise_conv1.weight"] == (8, 16)
    assert shapes["conv_block.depthwise_conv.filter"] == (8, 1, 5)
    assert shapes["conv_block.norm.running_variance"] == (8,) and "conv_block.norm.gamma" in shapes
    assert shapes["self_att.qkv.weight"] == (8, 24) and shapes["self_att.linear_pos.weight"] == (8, 8)
    assert shapes["self_att.pos_bias_u"] == (2, 4)
    for name in ("ffn1_layer_norm", "self_att_layer_norm", "conv_layer_norm", "ffn2_layer_norm",
                 "final_layer_norm"):
        assert shapes[name + ".scale"] == (8,)
    assert layer.conv_block.norm.use_mask is False  # the conv block's BatchNorm default, as the original
    enc = ConformerEncoder(feat_dim, model_dim, num_layers=2, num_heads=2, ff_dim=ff_dim, conv_kernel_size=3,
                           input_layer=ConformerConvSubsample(feat_dim, out_dims=[Dim(4, name="c0")],
                                                              filter_sizes=[(3, 3)], pool_sizes=[(1, 2)]))
    names = [n for n, _ in enc.named_parameters()]
    assert "input_layer.conv_layers.0.filter" in names and "input_projection.weight" in names
    assert "input_projection.bias" not in names
    assert "layers.1.conv_block.depthwise_conv.filter" in names
    assert isinstance(enc, ISeqDownsamplingEncoder) and enc.input_layer.out_dim.dimension == 5 * 4
    v2 = ConformerEncoderV2(model_dim, num_layers=1, num_heads=2, ff_dim=ff_dim, conv_kernel_size=3)
    assert isinstance(v2, ISeqFramewiseEncoder)
    assert {n for n, _ in v2.named_parameters()} == {"layers.0." + n for n in shapes}
    eb = EBranchformerLayer(model_dim, ff_dim=ff_dim, num_heads=2, cgmlp_ff_dim=Dim(6, name="cg"),
                            cgmlp_conv_kernel=3)
    eb_shapes = {n: tuple(d.dimension for d in p.dims) for n, p in eb.named_parameters()}
    assert eb_shapes["cgmlp.linear_ff.weight"] == (8, 12) and eb_shapes["cgmlp.conv.filter"] == (6, 1, 3)
    assert eb_shapes["merge.depthwise_conv_fusion.filter"] == (16, 1, 3)
    assert eb_shapes["merge.merge_proj.weight"] == (16, 8) and eb_shapes["cgmlp.norm.scale"] == (6,)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_conv_block_matches_numpy(backend):
    inputs, params = _inputs(), random_params(_conv_block_model)
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(extern_data, _conv_block_model, _conv_block_step, inputs, params, [time_dim])
    ref = np_conv_block(inputs["data"].astype("float64"), params, "")
    got = in_order(res, "y", [batch_dim, time_dim, model_dim])
    np.testing.assert_allclose(got[VALID], ref[VALID], rtol=1e-4, atol=1e-4)


def test_positionwise_feed_forward_is_swish_ff():
    def model():
        return ConformerPositionwiseFeedForward(model_dim, ff_dim=ff_dim, dropout=0.1)

    def step(*, model, extern_data, **_):
        model(extern_data["data"]).mark_as_output("y", shape=[batch_dim, time_dim, model_dim])

    inputs, params = _inputs(), random_params(model)
    res, _ = run_torch(extern_data, model, step, inputs, params, [time_dim])
    ref = np_ff(inputs["data"].astype("float64"), params, "")
    np.testing.assert_allclose(in_order(res, "y", [batch_dim, time_dim, model_dim]), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_conformer_layer_matches_numpy(backend):
    inputs, params = _inputs(), random_params(_layer_model)
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(extern_data, _layer_model, _layer_step, inputs, params, [time_dim])
    ref = np_conformer_layer(inputs["data"].astype("float64"), params, 2, LENS)
    got = in_order(res, "y", [batch_dim, time_dim, model_dim])
    np.testing.assert_allclose(got[VALID], ref[VALID], rtol=1e-4, atol=1e-4)


def test_conv_subsample_shapes_and_values():
    c0, c1 = Dim(3, name="c0"), Dim(4, name="c1")

    def model():
        return ConformerConvSubsample(feat_dim, out_dims=[c0, c1], filter_sizes=[(3, 3), (3, 3)],
                                      pool_sizes=[(2, 2)])

    def step(*, model, extern_data, **_):
        y, out_spatial = model(extern_data["data"], in_spatial_dim=time_dim)
        y.mark_as_output("y", shape=[batch_dim, out_spatial, model.out_dim])

    inputs, params = _inputs(n_feat=10), random_params(model)
    res, m = run_torch(feat_extern_data, model, step, inputs, params, [time_dim])
    assert m.out_dim.dimension == 5 * 4  # feat 10 -> pool 2 -> 5, times 4 channels
    y = res["y"]
    assert y.shape == (3, 4, 20)  # time 7 -> ceil(7 / 2)
    # numpy: conv2d 'same' (1 -> 3 channels) + relu, max pool (2, 2) 'same', conv2d (3 -> 4) + relu, merge (f, c)
    x = inputs["data"][:, :, :, None].astype("float64")  # [B, T, F, C]

    def conv2d_same(x, w, b):  # w [out, in, kt, kf]
        kt, kf = w.shape[2:]
        xp = np.pad(x, [(0, 0), ((kt - 1) // 2, kt // 2), ((kf - 1) // 2, kf // 2), (0, 0)])
        out = np.zeros(x.shape[:3] + (w.shape[0],))
        for t in range(x.shape[1]):
            for f in range(x.shape[2]):
                out[:, t, f] = np.einsum("btfi,oitf->bo", xp[:, t:t + kt, f:f + kf], w)
        return out + b

    h = np.maximum(conv2d_same(x, params["conv_layers.0.filter"], params["conv_layers.0.bias"]), 0)
    h = np.pad(h, [(0, 0), (0, 1), (0, 0), (0, 0)], constant_values=-np.inf)  # T 7 -> 8 for 'same' pooling
    h = h.reshape(3, 4, 2, 5, 2, 3).max(axis=(2, 4))
    h = np.maximum(conv2d_same(h, params["conv_layers.1.filter"], params["conv_layers.1.bias"]), 0)
    ref = h.reshape(3, 4, 20)
    valid = np.arange(4)[None, :] < ((LENS + 1) // 2)[:, None]
    # the frames whose conv windows stay within each seq (no masking at behavior version 0)
    inner = valid & (np.arange(4)[None, :] < (LENS // 2 - 1)[:, None])
    np.testing.assert_allclose(y[inner], ref[inner], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y[0], ref[0], rtol=1e-4, atol=1e-5)  # the longest seq: all frames


def test_encoder_copies_layers_with_their_dims_and_v2_is_frontend_plus_layers():
    rf.select_backend_torch()

    def v1():
        return ConformerEncoder(feat_dim, model_dim, num_layers=2, num_heads=2, ff_dim=ff_dim, conv_kernel_size=3,
                                input_layer=ConformerConvSubsample(feat_dim, out_dims=[Dim(2, name="c0")],
                                                                   filter_sizes=[3], pool_sizes=[(1, 1)]),
                                input_embedding_scale=2.0)

    def step(*, model, extern_data, **_):
        y, out_spatial = model(extern_data["data"], in_spatial_dim=time_dim)
        y.mark_as_output("y", shape=[batch_dim, out_spatial, model_dim])

    inputs, params = _inputs(n_feat=10), random_params(v1)
    res, enc = run_torch(feat_extern_data, v1, step, inputs, params, [time_dim])
    assert enc.layers[0].out_dim is enc.layers[1].out_dim is model_dim

    class V2(rf.Module):
        def __init__(self):
            super().__init__()
            self.frontend = ConformerFrontend(feat_dim, model_dim, input_layer=ConformerConvSubsample(
                feat_dim, out_dims=[Dim(2, name="c0")], filter_sizes=[3], pool_sizes=[(1, 1)]),
                input_embedding_scale=2.0)
            self.encoder = ConformerEncoderV2(model_dim, num_layers=2, num_heads=2, ff_dim=ff_dim,
                                              conv_kernel_size=3)

    def step2(*, model, extern_data, **_):
        x, out_spatial = model.frontend(extern_data["data"], in_spatial_dim=time_dim)
        model.encoder(x, spatial_dim=out_spatial).mark_as_output("y", shape=[batch_dim, out_spatial, model_dim])

    params2 = {}
    for name, value in params.items():
        params2[name.replace("input_layer", "frontend.input_layer").replace("input_projection",
                                                                            "frontend.input_projection")
                .replace("layers.", "encoder.layers.", 1) if name.startswith("layers.") else
                name.replace("input_layer", "frontend.input_layer").replace("input_projection",
                                                                            "frontend.input_projection")] = value
    res2, _ = run_torch(feat_extern_data, V2, step2, inputs, params2, [time_dim])
    np.testing.assert_allclose(res2["y"], res["y"], rtol=1e-5, atol=1e-6)


def test_deepcopy_of_a_layer_accepts_the_same_input():
    rf.select_backend_torch()
    layer = _layer_model()
    copied = copy.deepcopy(layer)
    assert copied.out_dim is model_dim
    assert [n for n, _ in copied.named_parameters()] == [n for n, _ in layer.named_parameters()]


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_e_branchformer_layer_runs_and_keeps_shape(backend):
    def model():
        return EBranchformerLayer(model_dim, ff_dim=ff_dim, num_heads=2, cgmlp_ff_dim=Dim(6, name="cg"),
                                  cgmlp_conv_kernel=3, self_att=rf.SelfAttention)

    inputs, params = _inputs(), random_params(model)
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(extern_data, model, _layer_step, inputs, params, [time_dim])
    got = in_order(res, "y", [batch_dim, time_dim, model_dim])
    # numpy: macaron FF, the two branches (MHSA, cgMLP) merged by concat + depthwise conv + Linear
    x = inputs["data"].astype("float64")
    x = x + 0.5 * np_ff(np_layer_norm(x, params, "ffn1_layer_norm"), params, "ffn1")
    att = np_self_attention(np_layer_norm(x, params, "self_att_layer_norm"), params, "self_att", 2, LENS)
    h = np_linear(np_layer_norm(x, params, "cgmlp_layer_norm"), params, "cgmlp.linear_ff")
    h = 0.5 * h * (1 + _erf(h / np.sqrt(2)))  # gelu
    gate, rest = h[..., :6], h[..., 6:]
    gate = np_depthwise_same(np_layer_norm(gate, params, "cgmlp.norm"), params["cgmlp.conv.filter"],
                             params["cgmlp.conv.bias"])
    local = np_linear(gate * rest, params, "cgmlp.linear_out")
    cat = np.concatenate([att, local], -1)
    merged = np_linear(cat + np_depthwise_same(cat, params["merge.depthwise_conv_fusion.filter"],
                                               params["merge.depthwise_conv_fusion.bias"]), params, "merge.merge_proj")
    x = x + merged
    x = x + 0.5 * np_ff(np_layer_norm(x, params, "ffn2_layer_norm"), params, "ffn2")
    ref = np_layer_norm(x, params, "final_layer_norm")
    np.testing.assert_allclose(got[VALID], ref[VALID], rtol=1e-4, atol=1e-4)


def _erf(x):
    import math

    return np.vectorize(math.erf)(x)
