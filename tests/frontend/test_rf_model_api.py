"""The rf API that model code written for the original uses: containers (ModuleList/Sequential items, keywords,
collected outputs), build_from_dict/build_dict, stack, combine_bc, last_frame_position_of_dim, defaults, the
``returnn_lite.util.basic`` / ``.math`` modules, and the original's reshape-based relative shift on rf ops (torch)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, Tensor, batch_dim  # noqa: E402


def _time_dim(lens):
    rf.select_backend_torch()
    time_dim = Dim(None, name="time")
    batch_dim.reset_eager()
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(len(lens)))
    time_dim.dyn_size_ext = Tensor("size", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor(lens))
    return time_dim


class _AddSpatial(rf.Module):
    """Adds its offset and counts the calls; needs the spatial_dim keyword as the original's encoder layers."""

    def __init__(self, offset):
        super().__init__()
        self.offset = offset

    def __call__(self, x, *, spatial_dim):
        assert isinstance(spatial_dim, Dim)
        return x + self.offset


def test_sequential_passes_keywords_to_each_module_and_collects_outputs():
    time_dim = _time_dim(np.array([2, 1], "int32"))
    seq = rf.Sequential(_AddSpatial(1.0) for _ in range(3))
    assert [k for k, _ in seq.items()] == ["0", "1", "2"] and len(seq) == 3
    collected = {}
    x = rf.zeros([batch_dim, time_dim])
    y = seq(x, spatial_dim=time_dim, collected_outputs=collected)
    assert float(y.raw_tensor.max()) == 3.0
    assert sorted(collected) == ["0", "1", "2"] and float(collected["1"].raw_tensor.max()) == 2.0
    # sub lists keep the names; functions become Functional modules
    assert [k for k, _ in seq[1:].items()] == ["0", "1"]
    funcs = rf.Sequential(rf.relu, lambda v: v * 2.0)
    assert float(funcs(rf.ones([batch_dim])).raw_tensor.max()) == 2.0


def test_module_list_api():
    d = Dim(2, name="d")
    layers = rf.ModuleList([rf.Linear(d, d), rf.Linear(d, d)])
    layers.append(rf.Linear(d, d)).extend([rf.Linear(d, d)])
    assert len(layers) == 4 and [k for k, _ in layers.items()] == ["0", "1", "2", "3"]
    del layers[1]
    assert [k for k, _ in layers.items()] == ["0", "1", "2"]
    named = rf.ModuleList({"a": rf.Linear(d, d), "b": rf.Linear(d, d)})
    assert [k for k, _ in named.items()] == ["a", "b"]
    assert sorted(n for n, _ in named.named_parameters()) == ["a.bias", "a.weight", "b.bias", "b.weight"]
    params = rf.ParameterList(rf.Parameter([d]), rf.Parameter([d]))
    assert len(params) == 2 and [n for n, _ in params.named_parameters()] == ["0", "1"]


def test_build_from_dict_and_build_dict():
    a, b = Dim(2, name="a"), Dim(3, name="b")
    lin = rf.build_from_dict({"class": "rf.Linear", "with_bias": False}, a, b)
    assert isinstance(lin, rf.Linear) and not lin.with_bias and lin.out_dim is b
    assert rf.build_dict(rf.Linear, with_bias=False) == {"class": "rf.Linear", "with_bias": False}
    from returnn_lite.frontend.decoder.transformer import FeedForward

    d = rf.build_dict(FeedForward, dropout=0.0)
    assert d["class"] == "returnn_lite.frontend.decoder.transformer.FeedForward"
    ff = rf.build_from_dict(d, a)
    assert isinstance(ff, FeedForward) and ff.linear_ff.out_dim.dimension == 8
    # the original's module path is mapped
    ff2 = rf.build_from_dict({"class": "returnn.frontend.decoder.transformer.FeedForward", "ff_dim": 4}, a)
    assert ff2.linear_ff.out_dim.dimension == 4
    with pytest.raises(ValueError, match="class"):
        rf.build_from_dict({"with_bias": False})


def test_stack_combine_bc_last_frame_and_defaults():
    time_dim = _time_dim(np.array([3, 1], "int32"))
    f = Dim(2, name="f")
    x = rf.range_over_dim(f)
    stacked, n = rf.stack([x, x * 10])
    np.testing.assert_array_equal(stacked.copy_transpose([n, f]).raw_tensor.numpy(), [[0, 1], [0, 10]])
    prod = rf.combine_bc(rf.range_over_dim(time_dim), "*", rf.range_over_dim(f))
    assert set(prod.dims) == {time_dim, f}
    np.testing.assert_array_equal(rf.last_frame_position_of_dim(time_dim).raw_tensor.numpy(), [2, 0])
    assert rf.last_frame_position_of_dim(f) == 1
    assert rf.get_default_float_dtype() == "float32" and rf.get_default_device() is None
    with rf.control_flow_ctx(None):
        assert rf.copy_to_device(x, None) is x
    assert rf.dropout_broadcast_default() in (True, False)
    g = Dim(4, name="g")
    y, out = rf.gating(rf.ones([g]), axis=g)
    assert out.dimension == 2 and y.dims == (out,)


def test_util_basic_and_math_modules_of_the_original():
    from returnn_lite.util.basic import BehaviorVersion, NotSpecified
    from returnn_lite.util.math import ceil_div

    import returnn_lite.util

    assert NotSpecified is returnn_lite.util.NotSpecified
    assert isinstance(BehaviorVersion.get(), int)
    assert ceil_div(7, 2) == 4 and ceil_div(8, 2) == 4


def test_reshape_based_rel_shift_on_rf_equals_rel_pos_attention_shift():
    """The original's Transformer-XL shift via pad/reshape/slice on rf ops (dynamic dims) equals ours."""
    time_dim = _time_dim(np.array([4, 2], "int32"))
    pos_dim = time_dim - 1 + time_dim
    x = Tensor("x", dims=[batch_dim, time_dim, pos_dim], dtype="float32",
               raw_tensor=torch.tensor(np.random.RandomState(0).randn(2, 4, 7).astype("float32")))
    hist_dim = Dim(None, name="hist")
    hist_dim.dyn_size_ext = time_dim.dyn_size_ext
    padded, (pos_dim_,) = rf.pad(x, axes=[pos_dim], padding=[(1, 0)], value=0.0)
    padded = rf.reshape(padded, (time_dim, pos_dim_), (pos_dim_, time_dim))
    padded, pos_dim_ = rf.slice(padded, axis=pos_dim_, start=1)
    padded = rf.reshape(padded, (pos_dim_, time_dim), (time_dim, pos_dim_))
    shifted, _ = rf.slice(padded, axis=pos_dim_, size=hist_dim)
    ours = rf.RelPosSelfAttention._rel_shift(x, time_dim, pos_dim, hist_dim)
    dims = [batch_dim, time_dim, hist_dim]
    np.testing.assert_allclose(ours.copy_transpose(dims).raw_tensor.numpy(),
                               shifted.copy_transpose(dims).raw_tensor.numpy())
    # by definition: out[b, i, j] = x[b, i, j - i + T - 1]
    raw = x.raw_tensor.numpy()
    ref = np.array([[[raw[b, i, j - i + 3] for j in range(4)] for i in range(4)] for b in range(2)])
    np.testing.assert_allclose(ours.copy_transpose(dims).raw_tensor.numpy(), ref)


def test_causal_history_as_dim_of_size_tensor_and_concat_rel_positions():
    """Formulations model code uses with rf: a causal history Dim(range + 1) (lengths per query frame) for
    dot_attention, and relative positions as concat of [-(T-1)..-1] and [0..T-1] over dynamic dims; both give what
    rf.CausalSelfAttention / rf.relative_positional_encoding give."""
    time_dim = _time_dim(np.array([4, 2], "int32"))
    d = Dim(4, name="d")
    att = rf.CausalSelfAttention(d, d, key_dim_total=d, value_dim_total=d, num_heads=2, att_dropout=0.0)
    x = Tensor("x", dims=[batch_dim, time_dim, d], dtype="float32",
               raw_tensor=torch.tensor(np.random.RandomState(0).randn(2, 4, 4).astype("float32")))
    ours, _ = att(x, axis=time_dim)
    q, k, v = att.forward_qkv(x)
    hist_dim = Dim(rf.range_over_dim(time_dim, device="cpu") + 1, name="hist")
    k, _ = rf.replace_dim(k, in_dim=time_dim, out_dim=hist_dim)
    v, _ = rf.replace_dim(v, in_dim=time_dim, out_dim=hist_dim)
    theirs = att.attention(q, k, v, kv_axis=hist_dim)
    dims = [batch_dim, time_dim, d]
    np.testing.assert_allclose(ours.copy_transpose(dims).raw_tensor.detach().numpy(),
                               theirs.copy_transpose(dims).raw_tensor.detach().numpy(), rtol=1e-5, atol=1e-6)

    feat = Dim(6, name="feat")
    m1 = time_dim - 1
    indices, pos_dim = rf.concat((rf.range_over_dim(m1) - m1.get_dim_value_tensor(), m1),
                                 (rf.range_over_dim(time_dim), time_dim))
    np.testing.assert_array_equal(indices.raw_tensor.numpy(), np.arange(-3, 4))
    enc, enc_dim = rf.relative_positional_encoding(query_spatial_dim=time_dim, key_value_spatial_dim=time_dim,
                                                   feat_dim=feat)
    assert enc.copy_transpose([enc_dim, feat]).raw_tensor.shape == (7, 6)
    np.testing.assert_allclose(enc.copy_transpose([enc_dim, feat]).raw_tensor.numpy()[:, 0],
                               np.sin(np.arange(-3, 4)), rtol=1e-5, atol=1e-6)
