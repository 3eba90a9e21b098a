"""rf API that the original's published modules use and that we lacked (found by running them as user code, see
test_rf_original_modules.py): each case here is a minimal example of its own, checked against numpy on both
backends."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import run_layers, run_torch  # noqa: E402

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")
table_dim = Dim(9, name="table")
extern_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
LENS = np.array([4, 2], dtype="int32")


def _inputs():
    return {"data": np.random.RandomState(0).randn(2, 4, 3).astype("float32"), "size:time": LENS}


class _Table(rf.Module):
    def __init__(self):
        super().__init__()
        self.table = rf.Parameter((table_dim, feat_dim))


TABLE = np.arange(27, dtype="float32").reshape(9, 3)


def _run(backend, step):
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(extern_data, _Table, step, _inputs(), {"table": TABLE}, [time_dim])
    return res


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_slice_with_a_scalar_tensor_start_and_a_dim_size(backend):
    """table[4 - T_max : 4 - T_max + (2T - 1)] (a learned rel-pos table cut around its center)."""
    def step(*, model, extern_data, **_):
        out_dim = time_dim - 1 + time_dim
        start = 4 - time_dim.get_dim_value_tensor() + 1
        cut, dim = rf.slice(model.table, axis=table_dim, start=start, size=out_dim)
        assert dim is out_dim
        cut.mark_as_output("y", shape=[out_dim, feat_dim])

    got = _run(backend, step)["y"]
    np.testing.assert_array_equal(got, TABLE[1:1 + 7])


def test_slice_refuses_a_tensor_start_without_a_dim_size():
    rf.select_backend_torch()
    x = rf.convert_to_tensor(np.zeros((9, 3), "float32"), dims=[table_dim, feat_dim])
    start = rf.convert_to_tensor(np.array(2, "int32"), dims=[])
    with pytest.raises(Exception, match="Tensor start"):
        rf.slice(x, axis=table_dim, start=start, size=3)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_concat_of_dynamic_parts_without_batch_is_padded(backend):
    """Parts [T - 2, F] (no batch dim, lengths per sequence) concatenated as padded tensors, on both backends."""
    def step(*, model, extern_data, **_):
        rest = time_dim - 2
        left = rf.expand_dim(rf.gather(model.table, axis=table_dim, indices=0), dim=rest)
        right = rf.expand_dim(rf.gather(model.table, axis=table_dim, indices=8), dim=rest)
        y, out_dim = rf.concat((left, rest), (model.table, table_dim), (right, rest))
        y.mark_as_output("y", shape=[out_dim, feat_dim])

    got = _run(backend, step)["y"]
    want = np.concatenate([TABLE[:1].repeat(2, 0), TABLE, TABLE[8:].repeat(2, 0)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_scalar_plus_range_over_dim(backend):
    """-T_max + range(T - 1) + 1 (negative rel positions): int arithmetic with a sparse range on both backends."""
    def step(*, model, extern_data, **_):
        pos = -time_dim.get_dim_value_tensor() + rf.range_over_dim(time_dim - 1) + 1
        assert pos.sparse_dim is None
        rf.cast(pos, "float32").mark_as_output("y", shape=[time_dim - 1])

    np.testing.assert_array_equal(_run(backend, step)["y"], [-3, -2, -1])


def test_cum_concat_step_into_a_fresh_dim_has_its_lengths():
    """cum_concat_step with a caller's new Dim(None) (the original's kv-history): the dim gets axis + 1 lengths, so
    a masked softmax over it works from a zero-length initial state on."""
    rf.select_backend_torch()
    head = Dim(2, name="head")
    init_dim = Dim(0, name="init")
    batch_dim.dyn_size_ext = rf.convert_to_tensor(np.array(2, "int32"), dims=[])
    accum = rf.zeros([batch_dim, init_dim, head])
    axis = init_dim
    try:
        for t in range(3):
            frame = rf.convert_to_tensor(np.ones((2, 2), "float32"), dims=[batch_dim, head])
            hist = Dim(None, name="history")
            accum, out = rf.cum_concat_step(frame, prev_accum=accum, axis=axis, out_spatial_dim=hist)
            assert out is hist and int(hist.get_dim_value()) == t + 1
            weights = rf.softmax(accum, axis=hist)
            np.testing.assert_allclose(weights.raw_tensor.numpy(), np.full((2, t + 1, 2), 1.0 / (t + 1)), rtol=1e-6)
            axis = hist
    finally:
        batch_dim.reset_eager()


def test_util_py_compat_gives_protocol():
    from typing import Protocol

    from returnn_lite.util.py_compat import Protocol as P

    assert P is Protocol

