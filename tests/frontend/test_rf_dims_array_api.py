"""The original's rf.dims / rf.array_ functions beyond the basics, on both backends against numpy: shift_right,
reverse_sequence, one_hot / sparse_to_dense, window, range_over_dim_strided, range_over_merged_dims,
linspace_over_dim, set_sparse_dim, num_elements_of_shape / masked_fraction_of_shape, split_dims(pad_to_multiples=),
convert_to_tensor(shape=), replace_dim_v2."""

import numpy as np
import pytest

import returnn_lite.frontend as rf
from returnn_lite.tensor import Dim, batch_dim

from test_tensor_dims import LENS, _inputs, _run_layers, _run_torch, feat_dim, time_dim

torch = pytest.importorskip("torch")
BACKENDS = ["torch", "layers"]
MASK = np.arange(5)[None, :] < LENS[:, None]  # [B, T]


def _run(backend, step):
    run = _run_torch if backend == "torch" else _run_layers
    res, _ = run(lambda **_: rf.Module(), step, _inputs(), {})
    return res


@pytest.mark.parametrize("backend", BACKENDS)
def test_shift_right_and_reverse_sequence(backend):
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        rf.shift_right(x, axis=time_dim, pad_value=0.0, amount=2).mark_as_output(
            "shifted", shape=[batch_dim, time_dim, feat_dim])
        rf.reverse_sequence(x, axis=time_dim).mark_as_output("rev", shape=[batch_dim, time_dim, feat_dim])
        rf.reverse_sequence(x, axis=time_dim, handle_dynamic_dims=False).mark_as_output(
            "flip", shape=[batch_dim, time_dim, feat_dim])

    x = _inputs()
    res = _run(backend, step)
    shifted = np.concatenate([np.zeros((2, 2, 4), "float32"), x[:, :3]], axis=1)
    np.testing.assert_allclose(res["shifted"][MASK], shifted[MASK], rtol=1e-6)
    rev = np.stack([np.concatenate([x[b, :LENS[b]][::-1], x[b, LENS[b]:]]) for b in range(2)])
    np.testing.assert_allclose(res["rev"][MASK], rev[MASK], rtol=1e-6)
    np.testing.assert_allclose(res["flip"][MASK], x[:, ::-1][MASK], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_and_sparse_to_dense(backend):
    other = Dim(6, name="other")

    def step(*, model, extern_data, **_):
        idx = rf.reduce_argmax(extern_data["data"], axis=feat_dim)  # [B, T] -> feat
        rf.one_hot(idx).mark_as_output("one_hot", shape=[batch_dim, time_dim, feat_dim])
        rf.sparse_to_dense(idx, label_value=5.0, other_value=-1.0, axis=other).mark_as_output(
            "dense", shape=[batch_dim, time_dim, other])

    x = _inputs()
    res = _run(backend, step)
    idx = x.argmax(-1)
    np.testing.assert_array_equal(res["one_hot"][MASK], np.eye(4)[idx][MASK])
    np.testing.assert_array_equal(res["dense"][MASK], (np.eye(6)[idx] * 6 - 1)[MASK])


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_same_and_valid_and_strided(backend):
    win = Dim(3, name="win")
    win2 = Dim(2, name="win2")
    out = {}

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        y, d = rf.window(x, spatial_dim=time_dim, window_dim=win)
        assert d == time_dim
        y.mark_as_output("same", shape=[batch_dim, time_dim, win, feat_dim])
        y, d = rf.window(x, spatial_dim=time_dim, window_dim=win2, padding="valid", pad_value=7.0)
        y.mark_as_output("valid", shape=[batch_dim, d, win2, feat_dim])
        d.get_size_tensor().mark_as_output("valid_len", shape=[batch_dim])
        y, d = rf.window(x, spatial_dim=time_dim, window_dim=win, stride=2)
        out["strided_dim"] = d
        y.mark_as_output("strided", shape=[batch_dim, d, win, feat_dim])
        d.get_size_tensor().mark_as_output("strided_len", shape=[batch_dim])

    x = _inputs()
    res = _run(backend, step)

    def ref(b, t, w, left, pad):
        pos = t + w - left
        return x[b, pos] if 0 <= pos < LENS[b] else np.full(4, pad, "float32")

    for b in range(2):
        for t in range(LENS[b]):
            for w in range(3):
                np.testing.assert_allclose(res["same"][b, t, w], ref(b, t, w, 1, 0.0), rtol=1e-6)
        np.testing.assert_array_equal(res["valid_len"], LENS - 1)
        for t in range(LENS[b] - 1):
            for w in range(2):
                np.testing.assert_allclose(res["valid"][b, t, w], ref(b, t, w, 0, 7.0), rtol=1e-6)
        np.testing.assert_array_equal(res["strided_len"], -(-LENS // 2))
        for t in range(-(-LENS[b] // 2)):
            for w in range(3):
                np.testing.assert_allclose(res["strided"][b, t, w], ref(b, 2 * t, w, 1, 0.0), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ranges_over_dims(backend):
    a, b_ = Dim(2, name="a"), Dim(3, name="b")

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        starts, d = rf.range_over_dim_strided(time_dim, stride=2)
        rf.gather(x, indices=starts, axis=time_dim).mark_as_output("strided", shape=[batch_dim, d, feat_dim])
        d.get_size_tensor().mark_as_output("strided_len", shape=[batch_dim])
        merged = rf.range_over_merged_dims([a, b_])
        rf.expand_dim(merged, batch_dim).mark_as_output("merged", shape=[batch_dim, a, b_])
        rf.linspace_over_dim(time_dim, 1.0, 3.0).mark_as_output("lin", shape=[batch_dim, time_dim])
        idx = rf.set_sparse_dim(rf.range_over_dim(feat_dim), Dim(9, name="vocab"))
        assert idx.sparse_dim.dimension == 9 and idx.dims == (feat_dim,)

    x = _inputs()
    res = _run(backend, step)
    lens2 = -(-LENS // 2)
    np.testing.assert_array_equal(res["strided_len"], lens2)
    for b in range(2):
        np.testing.assert_allclose(res["strided"][b, :lens2[b]], x[b, 0:LENS[b]:2], rtol=1e-6)
    np.testing.assert_array_equal(res["merged"], np.tile(np.arange(6).reshape(1, 2, 3), (2, 1, 1)))
    lin = 1.0 + 2.0 * np.arange(5)[None, :] / LENS[:, None]
    np.testing.assert_allclose(res["lin"][MASK], lin[MASK], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_num_elements_and_masked_fraction_of_shape(backend):
    def step(*, model, extern_data, **_):
        dims = [batch_dim, time_dim, feat_dim]
        rf.cast(rf.num_elements_of_shape(dims), "int32").mark_as_output("n", shape=[])
        rf.cast(rf.num_elements_of_shape(dims, use_mask=False), "int32").mark_as_output("n_padded", shape=[])
        rf.masked_fraction_of_shape(dims).mark_as_output("frac", shape=[])
        rf.masked_fraction_of_shape(dims, inverse=True).mark_as_output("inv", shape=[])
        assert rf.num_elements_of_shape(feat_dim) == 4 and rf.masked_fraction_of_shape([feat_dim]) == 1

    res = _run(backend, step)
    assert int(res["n"]) == 8 * 4 and int(res["n_padded"]) == 10 * 4
    np.testing.assert_allclose(res["frac"], 0.8, rtol=1e-6)
    np.testing.assert_allclose(res["inv"], 1.25, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_dims_pad_to_multiples(backend):
    two, three = Dim(2, name="two"), Dim(3, name="three")

    def step(*, model, extern_data, **_):
        x = extern_data["data"]  # feat 4 -> padded to 6 = 2 * 3
        rf.split_dims(x, axis=feat_dim, dims=[two, three], pad_to_multiples=True, pad_value=-1.0).mark_as_output(
            "y", shape=[batch_dim, time_dim, two, three])

    x = _inputs()
    res = _run(backend, step)
    ref = np.concatenate([x, -np.ones((2, 5, 2), "float32")], axis=-1).reshape(2, 5, 2, 3)
    np.testing.assert_allclose(res["y"][MASK], ref[MASK], rtol=1e-6)


def test_split_dims_pad_value_without_pad_to_multiples_is_refused():
    rf.select_backend_torch()
    x = rf.convert_to_tensor(torch.zeros(6), dims=[Dim(6, name="six")])
    with pytest.raises(rf.FrontendError, match="pad_value"):
        rf.split_dims(x, axis=x.dims[0], dims=[Dim(2, name="two"), Dim(3, name="three")], pad_value=1.0)


def test_convert_to_tensor_shape_alias_and_inferred_dims_torch():
    rf.select_backend_torch()
    d = Dim(3, name="three")
    t = rf.convert_to_tensor(torch.arange(3), shape=[d])
    assert t.dims == (d,)
    t = rf.convert_to_tensor(np.zeros((2, 3), "float32"))
    assert [x.dimension for x in t.dims] == [2, 3]
    assert rf.convert_to_tensor(5, keep_scalar_on_cpu=True).dims == ()


def test_replace_dim_v2_expand_and_shrink_torch():
    rf.select_backend_torch()
    a, longer, shorter = Dim(3, name="a"), Dim(5, name="longer"), Dim(2, name="shorter")
    x = rf.convert_to_tensor(torch.tensor([1.0, 2.0, 3.0]), dims=[a])
    np.testing.assert_array_equal(rf.replace_dim_v2(x, in_dim=a, out_dim=longer).raw_tensor.numpy(), [1, 2, 3, 0, 0])
    np.testing.assert_array_equal(rf.replace_dim_v2(x, in_dim=a, out_dim=shorter).raw_tensor.numpy(), [1, 2])
    with pytest.raises(rf.FrontendError, match="not allowed to shrink"):
        rf.replace_dim_v2(x, in_dim=a, out_dim=shorter, allow_shrink=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_select_and_scatter_per_sequence(backend):
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        mask = rf.reduce_sum(x, axis=feat_dim) > 0.0  # [B, T]
        per_seq, per_seq_dim = rf.masked_select(x, mask=mask, dims=[time_dim])  # [B, T' (per sequence), F]
        per_seq.mark_as_output("per_seq", shape=[batch_dim, per_seq_dim, feat_dim])
        per_seq_dim.get_size_tensor().mark_as_output("per_seq_len", shape=[batch_dim])
        packed, packed_dim = rf.pack_padded(x, dims=[time_dim])  # (per sequence: the frames within its length)
        back = rf.masked_scatter(packed, mask=rf.sequence_mask([batch_dim, time_dim]), dims=[time_dim],
                                 in_dim=packed_dim)
        back.mark_as_output("back", shape=[batch_dim, time_dim, feat_dim])

    x = _inputs()
    res = _run(backend, step)
    sel = (x.sum(-1) > 0) & MASK
    np.testing.assert_array_equal(res["per_seq_len"], sel.sum(-1))
    for b in range(2):
        np.testing.assert_allclose(res["per_seq"][b, :sel[b].sum()], x[b][sel[b]], rtol=1e-6)
    np.testing.assert_allclose(res["back"][MASK], x[MASK], rtol=1e-6)


def test_pack_padded_over_batch_and_time_and_back_torch():
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        packed, packed_dim = rf.pack_padded(x, dims=[batch_dim, time_dim])  # [B*T within lengths, F]
        packed.mark_as_output("packed", shape=[packed_dim, feat_dim])
        back = rf.masked_scatter(packed, mask=rf.sequence_mask([batch_dim, time_dim]), dims=[batch_dim, time_dim],
                                 in_dim=packed_dim)
        back.mark_as_output("back", shape=[batch_dim, time_dim, feat_dim])

    x = _inputs()
    res = _run("torch", step)
    np.testing.assert_allclose(res["packed"], x[MASK], rtol=1e-6)
    np.testing.assert_allclose(res["back"][MASK], x[MASK], rtol=1e-6)
    with pytest.raises(Exception, match="packing the batch dim"):
        _run("layers", step)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_modes_argmax_and_search_sorted(backend):
    three = Dim(3, name="three")
    two, three_b = Dim(2, name="two"), Dim(3, name="three_b")

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        idx = rf.set_sparse_dim(rf.range_over_dim(time_dim) % 3, three)  # [T] -> frame t goes to t % 3
        rf.scatter(x, indices=idx, indices_dim=time_dim).mark_as_output("sum", shape=[batch_dim, three, feat_dim])
        rf.scatter(x, indices=idx, indices_dim=time_dim, mode="max").mark_as_output(
            "max", shape=[batch_dim, three, feat_dim])
        rf.scatter(x, indices=idx + 1, indices_dim=time_dim, out_dim=[two, three_b], fill_value=0.5).mark_as_output(
            "two_dims", shape=[batch_dim, two, three_b, feat_dim])
        score = rf.reduce_sum(x, axis=feat_dim)  # [B, T]
        rf.scatter_argmax(score, indices=idx, indices_dim=time_dim).mark_as_output("argmax", shape=[batch_dim, three])
        sorted_seq = rf.cast(rf.range_over_dim(feat_dim), "float32") * 0.5  # 0, 0.5, 1, 1.5
        for side in ("left", "right"):
            rf.search_sorted(sorted_seq, rf.round(score * 2.0) * 0.5, axis=feat_dim, side=side).mark_as_output(
                side, shape=[batch_dim, time_dim])

    x = _inputs()
    res = _run(backend, step)
    score = x.sum(-1)
    for b in range(2):
        for o in range(3):
            ts = [t for t in range(LENS[b]) if t % 3 == o]
            np.testing.assert_allclose(res["sum"][b, o], x[b, ts].sum(0), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(res["max"][b, o], x[b, ts].max(0), rtol=1e-6)
            assert res["argmax"][b, o] == ts[int(np.argmax(score[b, ts]))]
        flat = np.full((6, 4), 0.5, "float32")
        for t in range(LENS[b]):
            flat[t % 3 + 1] += x[b, t]
        np.testing.assert_allclose(res["two_dims"][b], flat.reshape(2, 3, 4), rtol=1e-5)
    values = np.round(score * 2.0) * 0.5
    grid = np.arange(4) * 0.5
    np.testing.assert_array_equal(res["left"][MASK], np.searchsorted(grid, values, side="left")[MASK])
    np.testing.assert_array_equal(res["right"][MASK], np.searchsorted(grid, values, side="right")[MASK])
