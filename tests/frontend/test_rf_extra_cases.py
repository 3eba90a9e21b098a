"""
Extra rf conformance cases (tests/data/frontend_cases, written by tools/make_frontend_cases.py with expected values
from independent numpy references) on both backends through the frontend checker, plus gather clipping and bad
input on both backends: one FrontendError naming the model code's file:line and the dims.
"""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "tests", "data", "frontend_cases")
CHECKER = os.path.join(ROOT, "..", "shared", "conformance", "frontend", "check_frontend.py")
needs_checker = pytest.mark.skipif(not os.path.exists(CHECKER), reason="../shared/conformance/frontend is missing")


@needs_checker
def test_extra_frontend_cases_pass_on_both_backends():
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, CHECKER, "--cases", CASES], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    n_cases = len([n for n in os.listdir(CASES) if os.path.isfile(os.path.join(CASES, n, "case.json"))])
    assert n_cases >= 9
    assert proc.returncode == 0 and lines[-1] == "%i passed, 0 failed" % n_cases, proc.stdout + proc.stderr[-2000:]


def _checker():
    spec = importlib.util.spec_from_file_location("_check_frontend_for_tests", CHECKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SRC = '''
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim
time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")
extern_data = {"x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(in_dim, out_dim)


def get_model(**_):
    return Model()


def %s(*, model, extern_data, **_):
    x = extern_data["x"]
%s
'''
_X = np.random.RandomState(0).randn(3, 7, 3).astype("float32")
INPUTS = {"x": _X, "size:time": np.array([7, 5, 4], "int32")}
BACKENDS = ["layers", pytest.param("torch", marks=pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"))]


def _run(backend, body, *, task="forward", outputs=("y",), name="case"):
    cf = _checker()
    source = SRC % ("forward_step" if task == "forward" else "train_step", body)
    case = {"task": task, "outputs": {o: {} for o in outputs}}
    res, _ = cf.run_backend(cf.Api("returnn_lite"), backend, name, source, case, None, INPUTS)
    return res


@needs_checker
@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_clip_to_valid_int_index(backend):
    # negative int index clipped to 0 on a static axis (not wrapped around to the last entry)
    res = _run(backend, "    rf.gather(x, axis=in_dim, indices=-1, clip_to_valid=True).mark_as_output("
                        "'y', shape=(batch_dim, time_dim))\n"
                        "    rf.gather(x, axis=in_dim, indices=5, clip_to_valid=True).mark_as_output("
                        "'z', shape=(batch_dim, time_dim))", outputs=("y", "z"))
    np.testing.assert_array_equal(res["out:y"], _X[:, :, 0])
    np.testing.assert_array_equal(res["out:z"], _X[:, :, 2])


@needs_checker
@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_clip_to_valid_per_sequence(backend):
    # [B,T] indices t - 2 and t + 2: clipped into [0, len - 1] of each sequence
    body = ("    pos = rf.range_over_dim(time_dim)\n"
            "    idx = rf.combine(pos + 2, '+', rf.zeros([batch_dim], dtype='int32'), allow_broadcast_all_sources=True)\n"
            "    rf.gather(x, axis=time_dim, indices=idx, clip_to_valid=True).mark_as_output("
            "'y', shape=(batch_dim, time_dim, in_dim))\n"
            "    idx2 = rf.combine(pos - 2, '+', rf.zeros([batch_dim], dtype='int32'), allow_broadcast_all_sources=True)\n"
            "    rf.gather(x, axis=time_dim, indices=idx2, clip_to_valid=True).mark_as_output("
            "'z', shape=(batch_dim, time_dim, in_dim))")
    res = _run(backend, body, outputs=("y", "z"))
    for b, n in enumerate([7, 5, 4]):
        for t in range(n):
            np.testing.assert_array_equal(res["out:y"][b, t], _X[b, min(t + 2, n - 1)])
            np.testing.assert_array_equal(res["out:z"][b, t], _X[b, max(t - 2, 0)])


@needs_checker
@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_dynamic_dim_default_handle_dynamic_dims(backend):
    # handle_dynamic_dims=False (the default at behavior version 0): each length grows by left + right; the pad
    # values follow the padded end, the frames between a sequence's end and the padded end keep the source's values
    res = _run(backend, "    y, (o,) = rf.pad(x, axes=[time_dim], padding=[(1, 2)], value=9.)\n"
                        "    y.mark_as_output('y', shape=(batch_dim, o, in_dim))")
    np.testing.assert_array_equal(res["out:y:size1"], [10, 8, 7])
    expected = np.concatenate([np.full((3, 1, 3), 9.0), _X, np.full((3, 2, 3), 9.0)], axis=1)
    for b, n in enumerate([10, 8, 7]):
        np.testing.assert_array_equal(res["out:y"][b, :n], expected[b, :n])


@needs_checker
@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_initial_set_to_an_rf_tensor(backend, monkeypatch):
    # Parameter.initial = <rf Tensor computed in __init__> (layers backend: the variable's init_by_layer)
    model = ("        self.scale = rf.Parameter([in_dim])\n"
             "        self.scale.initial = rf.range_over_dim(in_dim, dtype='float32') + 2.0\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", SRC.replace(
        "        self.lin = rf.Linear(in_dim, out_dim)\n", "        self.lin = rf.Linear(in_dim, out_dim)\n" + model))
    res = _run(backend, "    (x * model.scale).mark_as_output('y', shape=(batch_dim, time_dim, in_dim))")
    for b, n in enumerate([7, 5, 4]):
        np.testing.assert_allclose(res["out:y"][b, :n], _X[b, :n] * np.array([2.0, 3.0, 4.0]), rtol=1e-6)


@needs_checker
@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_simple_rnn_with_the_batch_dim_in_the_state(backend):
    body = ("    hid = Dim(4, name='hid')\n"
            "    w = rf.ones([in_dim, hid], dtype='float32') * 0.1\n"
            "    def body(x_t, h):\n"
            "        h = rf.tanh(rf.matmul(x_t, w, reduce=in_dim) + h)\n"
            "        return h, h\n"
            "    ys, last, _ = rf.scan(spatial_dim=time_dim, initial=rf.zeros([batch_dim, hid]), xs=x, ys=Tensor(\n"
            "        'y', dims=[batch_dim, hid], dtype='float32'), body=body)\n"
            "    ys.mark_as_output('y', shape=(batch_dim, time_dim, hid))")
    res = _run(backend, body)
    h, ref = np.zeros((3, 4)), []
    for t in range(7):
        h = np.tanh(_X[:, t] @ np.full((3, 4), 0.1) + h)
        ref.append(h)
    ref = np.stack(ref, axis=1)
    for b, n in enumerate([7, 5, 4]):
        np.testing.assert_allclose(res["out:y"][b, :n], ref[b, :n], rtol=1e-5, atol=1e-6)


BAD = {
    "clip_int_dynamic": ("    rf.gather(x, axis=time_dim, indices=-1, clip_to_valid=True).mark_as_output('y')",
                         r"rf\.gather at <clip_int_dynamic/model\.py>:22: clip_to_valid with the int index -1 on "
                         r"the dynamic axis 'time'"),
    "float_indices": ("    rf.gather(x, axis=in_dim, indices=rf.reduce_sum(x, axis=in_dim)).mark_as_output('y')",
                      r"rf\.gather at <float_indices/model\.py>:22: indices must be int, got dtype float32"),
    "reduce_missing_dim": ("    rf.reduce_max(x, axis=out_dim).mark_as_output('y')",
                           r"rf\.reduce_max at <reduce_missing_dim/model\.py>:22: axis 'out'\(2\) is not a dim of "
                           r"x \[B, 'time'\(\?\), 'in'\(3\)\]"),
    "dims_mismatch": ("    (model.lin(x) + x).mark_as_output('y')",
                      r"rf\.combine\('add'\) at <dims_mismatch/model\.py>:22: dims do not match: .*'out'\(2\).*"
                      r"'in'\(3\)"),
    "concat_wrong_axis": ("    rf.concat((x, in_dim), (model.lin(x), in_dim))[0].mark_as_output('y')",
                          r"rf\.concat at <concat_wrong_axis/model\.py>:22: axis 'in'\(3\) is not a dim of"),
}


@needs_checker
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_names_call_site_and_dims(backend, name):
    import returnn_lite.frontend as rf

    body, match = BAD[name]
    with pytest.raises(rf.FrontendError, match=match):
        _run(backend, body, name=name)


@needs_checker
@pytest.mark.parametrize("backend", BACKENDS)
def test_loss_marked_twice_names_both_sites(backend):
    import returnn_lite.frontend as rf

    body = "    rf.reduce_sum(x, axis=in_dim).mark_as_loss('l')\n    x.mark_as_loss('l')"
    with pytest.raises(rf.FrontendError, match=r"mark_as_loss at <twice/model\.py>:23: loss 'l' was already marked "
                                               r"at <twice/model\.py>:22 \(dims \[B, 'time'\(\?\)\]\)"):
        _run(backend, body, task="train", outputs=(), name="twice")
