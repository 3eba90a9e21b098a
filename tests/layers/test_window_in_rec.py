"""window (and cumsum) inside a rec unit, with the original's semantics: per step the state is the last window_size
frames (a window into the past only, zeros before the first frame); moved out of the loop the layer windows over the
time axis with its own options. Checked against numpy references."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.data import single_step_dim
from returnn_lite.extern_data import ExternData
from returnn_lite.network import NetworkLayerException, TFNetwork

tf1 = tf.compat.v1
LENS = np.array([5, 3, 4], dtype="int32")


def _run_rec(unit, optimize=True, n_feat=2):
    """rec layer 'output' over data with the given unit; returns (output template, x [B,T,F], output [B,T,...])."""
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": n_feat}}), train_flag=False)
        net.construct_from_dict({"output": {"class": "rec", "from": "data", "unit": unit,
                                            "optimize_move_layers_out": optimize}})
        data = net.extern_data.get_data("data")
        x = np.random.RandomState(3).normal(size=(len(LENS), int(LENS.max()), n_feat)).astype("float32")
        out = net.get_layer("output").output.copy_as_batch_spatial_major()
        with tf1.Session() as session:
            val = session.run(out.placeholder, {data.placeholder: x, data.size_placeholder[0]: LENS})
        return out, x, val


def _windows(x, size, right):
    """numpy reference: [B,T,size,F], frame t sees x[t-left .. t+right], zeros outside."""
    b, t, f = x.shape
    left = size - right - 1
    padded = np.concatenate([np.zeros((b, left, f), x.dtype), x, np.zeros((b, right, f), x.dtype)], axis=1)
    return np.stack([padded[:, i:i + size] for i in range(t)], axis=1)


def _assert_frames_close(val, ref):
    for b, n in enumerate(LENS):
        np.testing.assert_allclose(val[b, :n], ref[b, :n], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("past_opt", [{"window_right": 0}, {"window_left": 3}, {"window_left": 3, "window_right": 0}])
def test_window_over_steps_is_window_into_the_past(optimize, past_opt):
    unit = {"win": dict({"class": "window", "window_size": 4, "from": "data:source"}, **past_opt),
            "output": {"class": "copy", "from": "win"}}
    out, x, val = _run_rec(unit, optimize)
    assert out.batch_shape == (None, None, 4, 2)
    _assert_frames_close(val, _windows(x, 4, right=0))  # the same in the loop and moved out


@pytest.mark.parametrize("optimize", [True, False])
def test_window_in_loop_by_prev_dependency_then_merge_dims(optimize):
    # acc depends on prev:acc, so it (and the window over it) stays in the loop also with optimize
    unit = {"acc": {"class": "combine", "kind": "add", "from": ["data:source", "prev:acc"]},
            "win": {"class": "window", "window_size": 3, "window_left": 2, "from": "acc"},
            "merged": {"class": "merge_dims", "axes": "except_time", "from": "win"},
            "output": {"class": "copy", "from": "merged"}}
    out, x, val = _run_rec(unit, optimize)
    assert out.batch_shape == (None, None, 6)
    _assert_frames_close(val, _windows(np.cumsum(x, axis=1), 3, right=0).reshape(3, 5, 6))


def test_window_moved_out_without_left_right_is_centered():
    # as the original: moved out of the loop, it is an ordinary window over the time axis (window_right=size//2)
    unit = {"win": {"class": "window", "window_size": 4, "from": "data:source"},
            "output": {"class": "copy", "from": "win"}}
    out, x, val = _run_rec(unit, optimize=True)
    _assert_frames_close(val, _windows(x, 4, right=2))


@pytest.mark.parametrize("opts, match", [
    ({}, "window_right=0 or window_left=window_size-1"),
    ({"window_right": 1}, "window_right=1"),
    ({"window_left": 1}, "window_left=1"),
    ({"window_right": 0, "stride": 2}, "stride"),
    ({"window_right": 0, "padding": "valid"}, "padding"),
])
def test_window_over_steps_refuses_what_needs_future_frames(opts, match):
    unit = {"win": dict({"class": "window", "window_size": 3, "from": "data:source"}, **opts),
            "output": {"class": "copy", "from": "win"}}
    with pytest.raises(NetworkLayerException, match="win") as info:
        _run_rec(unit, optimize=False)
    assert match in str(info.value)


@pytest.mark.parametrize("optimize", [True, False])
def test_window_axis_single_step_dim(optimize):
    # single_step_dim: over the steps in the loop; moved out: over the loop's time axis
    unit = {"win": {"class": "window", "window_size": 3, "window_right": 0, "axis": single_step_dim,
                    "from": "data:source"},
            "output": {"class": "copy", "from": "win"}}
    out, x, val = _run_rec(unit, optimize)
    _assert_frames_close(val, _windows(x, 3, right=0))


@pytest.mark.parametrize("optimize", [True, False])
def test_cumsum_over_steps(optimize):
    unit = {"output": {"class": "cumsum", "from": "data:source"}}
    _, x, val = _run_rec(unit, optimize)
    _assert_frames_close(val, np.cumsum(x, axis=1))


def test_cumsum_reverse_moved_out_sums_from_the_end():
    # as the original: moved out, reverse=True is a reverse cumsum over the time axis (per step it is refused)
    _, x, val = _run_rec({"output": {"class": "cumsum", "reverse": True, "from": "data:source"}}, optimize=True)
    full = LENS.max()
    ref = np.cumsum(x[:, ::-1], axis=1)[:, ::-1]  # the padded frames are summed too, as tf.cumsum does
    np.testing.assert_allclose(val[0, :full], ref[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(NetworkLayerException, match="reverse"):
        _run_rec({"output": {"class": "cumsum", "reverse": True, "from": "data:source"}}, optimize=False)


def test_window_valid_padding_refuses_left_right():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 2}}), train_flag=False)
        with pytest.raises(NetworkLayerException, match="window_left/window_right"):
            net.construct_from_dict({"output": {"class": "window", "window_size": 3, "window_right": 0,
                                                "padding": "valid", "from": "data"}})
