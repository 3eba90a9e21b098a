"""rf.where (the switch layer) and rf.matmul (the dot layer) on inputs with different feature dims or without the
batch dim, on both backends against numpy (found while writing rf.scatter)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import in_order, run_layers, run_torch  # noqa: E402

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")
other_dim = Dim(5, name="other")
extern_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
LENS = np.array([4, 2], dtype="int32")
DATA = np.random.RandomState(0).randn(2, 4, 3).astype("float32")
TABLE = np.random.RandomState(1).randn(3, 5).astype("float32")  # [feat, other]


class _Table(rf.Module):
    def __init__(self):
        super().__init__()
        self.table = rf.Parameter((feat_dim, other_dim))


def _run(backend, step):
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(extern_data, _Table, step, {"data": DATA, "size:time": LENS}, {"table": TABLE}, [time_dim])
    return res


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_where_cond_and_values_with_other_feature_dims(backend):
    """cond [B, T, other] (feature: other), values [B, T, feat] and [feat, other] (a param without batch)."""
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        cond = rf.range_over_dim(other_dim) < 2  # [other]
        cond = rf.combine(cond, "logical_and", rf.reduce_sum(x, axis=feat_dim) > 0,
                          allow_broadcast_all_sources=True)  # [B, T, other]
        y = rf.where(cond, x, model.table, allow_broadcast_all_sources=True)
        y.mark_as_output("y", shape=[batch_dim, time_dim, feat_dim, other_dim])

    got = in_order(_run(backend, step), "y", [batch_dim, time_dim, feat_dim, other_dim])
    cond = (np.arange(5) < 2)[None, None, :] & (DATA.sum(-1) > 0)[:, :, None]  # [B, T, other]
    want = np.where(cond[:, :, None, :], DATA[..., None], TABLE[None, None])
    mask = np.arange(4)[None, :] < LENS[:, None]
    np.testing.assert_allclose(got[mask], want[mask], rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_where_without_batch_dim(backend):
    """All inputs without batch: cond [other], values [feat, other] and a scalar."""
    def step(*, model, extern_data, **_):
        cond = rf.range_over_dim(other_dim) < 2
        y = rf.where(cond, model.table, 0.0)
        y.mark_as_output("y", shape=[feat_dim, other_dim])

    got = in_order(_run(backend, step), "y", [feat_dim, other_dim])
    np.testing.assert_allclose(got, np.where(np.arange(5) < 2, TABLE, 0.0), rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_matmul_without_batch_dim(backend):
    """[feat, other] . [feat, other] over feat (no batch on either side; other is kept as a shared dim)."""
    def step(*, model, extern_data, **_):
        t2 = rf.copy(model.table)
        y = rf.matmul(model.table, rf.exp(t2), reduce=feat_dim)
        y.mark_as_output("y", shape=[other_dim])

    got = in_order(_run(backend, step), "y", [other_dim])
    np.testing.assert_allclose(got, (TABLE * np.exp(TABLE)).sum(0), rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_matmul_of_inputs_with_other_feature_dims(backend):
    """x [B, T, feat] . hit [B, T, other] over T (the scatter sum): the result [B, feat, other]."""
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        hit = rf.compare(rf.range_over_dim(other_dim), "less_equal",
                         rf.cast(rf.reduce_sum(x, axis=feat_dim) > 0, "int32"), allow_broadcast_all_sources=True)
        hit = rf.cast(hit, "float32")  # [B, T, other]
        y = rf.matmul(x, hit, reduce=time_dim, use_mask=True)
        y.mark_as_output("y", shape=[batch_dim, feat_dim, other_dim])

    got = in_order(_run(backend, step), "y", [batch_dim, feat_dim, other_dim])
    hit = (np.arange(5)[None, None] <= (DATA.sum(-1) > 0)[..., None]).astype("float32")
    mask = (np.arange(4)[None, :] < LENS[:, None]).astype("float32")
    want = np.einsum("btf,bto,bt->bfo", DATA, hit, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_where_cond_with_another_feature_dim_than_the_value(backend):
    """cond [B, T, other], x [B, T, feat], a scalar: the switch layer would refuse the two feature axes (its classic
    common data); the layers backend then takes the where that matches by Dim."""
    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        hit = rf.compare(rf.range_over_dim(other_dim), "less_equal",
                         rf.cast(rf.reduce_sum(x, axis=feat_dim) > 0, "int32"), allow_broadcast_all_sources=True)
        y = rf.where(hit, x, 0.0, allow_broadcast_all_sources=True)
        y.mark_as_output("y", shape=[batch_dim, time_dim, other_dim, feat_dim])

    got = in_order(_run(backend, step), "y", [batch_dim, time_dim, other_dim, feat_dim])
    hit = np.arange(5)[None, None] <= (DATA.sum(-1) > 0)[..., None]  # [B, T, other]
    want = np.where(hit[..., None], DATA[:, :, None, :], 0.0)
    mask = np.arange(4)[None, :] < LENS[:, None]
    np.testing.assert_allclose(got[mask], want[mask], rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_matmul_outer_product_of_dims_of_equal_size(backend):
    """reduce=[]: the outer product, also of two dims of the same size (never paired by size)."""
    same_dim = Dim(3, name="same3")

    def step(*, model, extern_data, **_):
        y = rf.matmul(extern_data["data"], rf.range_over_dim(same_dim, dtype="float32"), reduce=[])
        y.mark_as_output("y", shape=[batch_dim, time_dim, feat_dim, same_dim])

    got = in_order(_run(backend, step), "y", [batch_dim, time_dim, feat_dim, same_dim])
    mask = np.arange(4)[None, :] < LENS[:, None]
    np.testing.assert_allclose(got[mask], (DATA[..., None] * np.arange(3.0))[mask], rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_matmul_masking_lengths_of_a_batch_dim_that_no_operand_has(backend):
    """Reduce over T (lengths per sequence) of [T, feat] operands without batch: refused with a clear error."""
    def step(*, model, extern_data, **_):
        x = rf.reduce_sum(extern_data["data"], axis=batch_dim)  # [T, feat]
        rf.matmul(x, x, reduce=time_dim).mark_as_output("y", shape=[feat_dim])

    with pytest.raises(Exception, match="lengths .*(batch|B)"):
        _run(backend, step)
