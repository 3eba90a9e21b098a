"""rf.ZoneoutLSTM (eval: (1 - p) * new + p * prev), rf.edit_distance on both backends, rf.hooks, rf dtype helpers,
rf.init distributions and rf.Parameter options; numpy references."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import in_order, random_params, run_layers, run_torch  # noqa: E402

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(4, name="out")
LENS = np.array([5, 3, 4], dtype="int32")
extern_data = {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lstm = rf.ZoneoutLSTM(in_dim, out_dim, zoneout_factor_cell=0.15, zoneout_factor_output=0.05,
                                   forget_bias=1.0, parts_order="icfo")


def _step(*, model, extern_data, **_):
    x = extern_data["data"]
    y, state = model.lstm(x, state=model.lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=time_dim)
    y.mark_as_output("y", shape=[batch_dim, time_dim, out_dim])
    state.c.mark_as_output("c", shape=[batch_dim, out_dim])


def _np_zoneout(x, params):
    w_ff, w_rec, b = params["lstm.ff_weight"], params["lstm.rec_weight"], params["lstm.bias"]  # [4o, in], [4o, o]
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    ys, cs = np.zeros((3, 5, 4)), np.zeros((3, 4))
    for bi, n in enumerate(LENS):
        h, c = np.zeros(4), np.zeros(4)
        for t in range(n):
            g = w_ff @ x[bi, t] + b + w_rec @ h
            i, j, f, o = np.split(g, 4)  # parts_order "icfo" (c: the cell input j)
            new_c = sig(f + 1.0) * c + sig(i) * np.tanh(j)
            new_h = sig(o) * np.tanh(new_c)
            c = 0.85 * new_c + 0.15 * c
            h = 0.95 * new_h + 0.05 * h
            ys[bi, t] = h
        cs[bi] = c
    return ys, cs


def _inputs():
    return {"data": np.random.RandomState(5).randn(3, 5, 3).astype("float32"), "size:time": LENS}


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_zoneout_lstm_eval_matches_numpy(backend):
    if backend == "layers":
        pytest.importorskip("tensorflow")
    params = random_params(Model)
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(extern_data, Model, _step, _inputs(), params, [time_dim])
    ys, cs = _np_zoneout(_inputs()["data"], params)
    y = in_order(res, "y", [batch_dim, time_dim, out_dim])
    for bi, n in enumerate(LENS):
        np.testing.assert_allclose(y[bi, :n], ys[bi, :n], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(in_order(res, "c", [batch_dim, out_dim]), cs, rtol=1e-4, atol=1e-5)


a_time = Dim(None, name="a_time")
b_time = Dim(None, name="b_time")
vocab = Dim(10, name="vocab")
ed_extern = {"a": {"dims": (batch_dim, a_time), "dtype": "int32", "sparse_dim": vocab},
             "b": {"dims": (batch_dim, b_time), "dtype": "int32", "sparse_dim": vocab}}


def _ed_step(*, model, extern_data, **_):
    rf.edit_distance(extern_data["a"], a_time, extern_data["b"], b_time).mark_as_output("ed", shape=[batch_dim])


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_edit_distance(backend):
    if backend == "layers":
        pytest.importorskip("tensorflow")
    a = np.array([[1, 2, 3, 4, 9], [5, 5, 5, 0, 0], [1, 2, 3, 0, 0]], dtype="int32")
    b = np.array([[1, 3, 4, 7], [5, 5, 0, 0], [0, 0, 0, 0]], dtype="int32")
    inputs = {"a": a, "b": b, "size:a_time": np.array([5, 3, 3], "int32"), "size:b_time": np.array([4, 2, 0], "int32")}
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(ed_extern, rf.Module, _ed_step, inputs, {}, [a_time, b_time])
    # [1,2,3,4,9] -> [1,3,4,7]: delete 2, substitute 9; [5,5,5] -> [5,5]: one deletion; [1,2,3] -> []: 3
    assert res["ed"].tolist() == [2, 1, 3]


def test_hooks_on_module_call_and_method():
    rf.select_backend_torch()

    class Mod(rf.Module):
        def __call__(self, x):
            return x + 1

        def other(self, x):
            return x * 2

    m, m2 = Mod(), Mod()
    seen = []
    h1 = rf.hooks.setup_post_hook_on_method(m, "__call__", lambda obj, args, kwargs, res: res * 10)
    h2 = rf.hooks.setup_post_hook_on_method(m, "other", lambda obj, args, kwargs, res: seen.append(res))
    assert m(1) == 20 and m2(1) == 2 and m.other(3) == 6 and seen == [6]
    h1.remove()
    h2.remove()
    assert m(1) == 2 and m.other(3) == 6 and seen == [6]


def test_dtype_helpers_init_and_parameter_options():
    rf.select_backend_torch()
    assert rf.get_default_int_dtype() == "int32" == rf.get_default_array_index_dtype()
    assert rf.is_float_dtype("float16") and not rf.is_float_dtype("int32")
    d1, d2 = Dim(400, name="d1"), Dim(300, name="d2")
    p = rf.Parameter([d1, d2], non_critical_for_restore=True)
    assert p.non_critical_for_restore
    for dist, std in [("normal", np.sqrt(1 / 350) / 0.87962566103423978), ("untruncated_normal", np.sqrt(1 / 350))]:
        p.initial = rf.init.VarianceScaling(scale=1.0, mode="fan_avg", distribution=dist)
        assert abs(float(p.raw_tensor.std()) - std) < 0.05 * std
    with pytest.raises(rf.FrontendError, match="weight_decay"):
        rf.Parameter([d1], weight_decay=0.01)
    with pytest.raises(rf.FrontendError, match="distribution"):
        rf.init.VarianceScaling(distribution="laplace")


def test_module_api_as_the_original():
    rf.select_backend_torch()

    class Block(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(in_dim, out_dim)
            self.lin = rf.Linear(out_dim, out_dim)

    class Net(rf.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.final = rf.Linear(out_dim, in_dim)

    net = Net()
    # breadth first, as the original: the direct children before the grandchildren
    assert [n for n, _ in net.named_modules()] == ["", "block", "final", "block.lstm", "block.lin"]
    assert [n for n, _ in net.named_parameters()][:2] == ["final.weight", "final.bias"]
    assert [n for n, _ in net.named_children()] == ["block", "final"]
    assert net.get_deep("block.lin.weight") is net.block.lin.weight
    new_lin = rf.Linear(out_dim, out_dim)
    net.set_deep("block.lin", new_lin)
    assert net.block.lin is new_lin and net.has_parameters
    order = []
    net.apply(lambda m: order.append(type(m).__name__))
    assert order == ["LSTM", "Linear", "Block", "Linear", "Net"]
    state = net.default_initial_state(batch_dims=[Dim(2, name="b")])
    assert list(state.keys()) == ["block"] and sorted(state.block.lstm.keys()) == ["c", "h"]
    assert rf.Linear(in_dim, out_dim).default_initial_state(batch_dims=[]) is None
    assert Block().get_default_name() == "block" and repr(net) == "<Net>"


samples_dim = Dim(4000, name="samples")
class_dim = Dim(3, name="classes")
probs_extern = {"probs": {"dims": (batch_dim, class_dim), "dtype": "float32"},
                "x": {"dims": (batch_dim, time_dim), "dtype": "float32"}}


def _choice_step(*, model, extern_data, **_):
    s = rf.random_choice_with_replacement([batch_dim, samples_dim], probs=extern_data["probs"], axis=class_dim)
    s.mark_as_output("samples", shape=[batch_dim, samples_dim])
    rf.fill(dims=[batch_dim, class_dim], fill_value=2.5).mark_as_output("filled", shape=[batch_dim, class_dim])


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_random_choice_with_replacement_frequencies(backend):
    if backend == "layers":
        pytest.importorskip("tensorflow")
    probs = np.array([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0]], dtype="float32")
    inputs = {"probs": probs, "x": np.zeros((2, 3), "float32"), "size:time": np.array([3, 2], "int32")}
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(probs_extern, rf.Module, _choice_step, inputs, {}, [time_dim])
    s = in_order(res, "samples", [batch_dim, samples_dim])
    for b in range(2):
        freq = np.bincount(s[b], minlength=3) / s.shape[1]
        np.testing.assert_allclose(freq, probs[b], atol=0.03)
    assert (res["filled"] == 2.5).all()
