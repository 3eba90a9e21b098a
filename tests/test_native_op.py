"""
The fused NativeLstm2 op (native_ops/lstm.cc via returnn_lite.native_op): forward and gradient against the pure-TF
cell loop and finite differences, both directions, unequal lengths; the compile cache; the path switch.
The op is compiled once per test session (and cached across sessions); skipped when there is no C++ compiler.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite import native_op
from returnn_lite.layers.rec.cells import NativeLstm2Cell, run_cell_loop

tf1 = tf.compat.v1


@pytest.fixture(scope="module")
def mod():
    if not native_op.find_compiler():
        pytest.skip("no C++ compiler found ($CXX, g++, c++, clang++): the native op cannot be built")
    return native_op.load()


def _ref_cell(w_re, n):
    cell = NativeLstm2Cell.__new__(NativeLstm2Cell)
    cell.W_re, cell.n_out, cell.opts, cell.layer = w_re, n, {}, None
    return cell


def _inputs(rng, n_time, n_batch, n):
    return (rng.randn(n_time, n_batch, 4 * n), rng.randn(n, 4 * n) * 0.5, rng.randn(n_batch, n),
            rng.randn(n_batch, n))


def _loss_and_outputs(mod_or_false, z, w, c0, h0, lens, reverse):
    y, st = run_cell_loop(_ref_cell(w, w.shape[0]), z, lens, {"c": c0, "h": h0}, reverse=reverse,
                          native=mod_or_false)
    weights = tf.reshape(tf.sin(tf.range(tf.size(y), dtype=y.dtype)), tf.shape(y))
    loss = tf.reduce_sum(y * weights) + tf.reduce_sum(st["c"] * 1.3) + tf.reduce_sum(st["h"] * st["h"])
    return loss, [y, st["c"], st["h"]]


@pytest.mark.parametrize("reverse", [False, True])
def test_forward_backward_vs_pure_tf_loop(mod, reverse):
    rng = np.random.RandomState(1)
    n_time, n_batch, n = 7, 4, 5
    lens = np.array([7, 4, 0, 1], "int32")  # unequal lengths, one empty sequence
    with tf.Graph().as_default():
        z, w, c0, h0 = [tf.constant(a) for a in _inputs(rng, n_time, n_batch, n)]
        res = {}
        for key, native in (("op", mod), ("loop", False)):
            loss, outs = _loss_and_outputs(native, z, w, c0, h0, tf.constant(lens), reverse)
            res[key] = outs + tf.gradients(loss, [z, w, c0, h0])
        assert any(op.type == "NativeLstm2" for op in tf1.get_default_graph().get_operations())
        with tf1.Session() as session:
            got, want = session.run([res["op"], res["loop"]])
    names = ["y", "c_final", "h_final", "dz", "dW_re", "dc0", "dh0"]
    for name, a, b in zip(names, got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=name)
    y = got[0]
    assert np.all(y[4:, 1] == 0) and np.all(y[:, 2] == 0) and np.all(y[1:, 3] == 0)  # 0 past the length
    np.testing.assert_allclose(got[1][2], c0_val(rng_seed=1, n_time=n_time, n_batch=n_batch, n=n)[2], rtol=0)


def c0_val(rng_seed, n_time, n_batch, n):
    """c0 of _inputs(RandomState(rng_seed)): an empty sequence's final state is its initial state."""
    return _inputs(np.random.RandomState(rng_seed), n_time, n_batch, n)[2]


@pytest.mark.parametrize("reverse", [False, True])
def test_gradient_finite_differences(mod, reverse):
    rng = np.random.RandomState(2)
    n_time, n_batch, n = 5, 3, 3
    vals = _inputs(rng, n_time, n_batch, n)
    lens = np.array([5, 2, 3], "int32")
    with tf.Graph().as_default():
        phs = [tf1.placeholder(tf.float64, v.shape) for v in vals]
        loss, _ = _loss_and_outputs(mod, *phs, tf.constant(lens), reverse)
        grads = tf.gradients(loss, phs)
        with tf1.Session() as session:
            def f(xs):
                return session.run(loss, dict(zip(phs, xs)))

            g = session.run(grads, dict(zip(phs, vals)))
            for _ in range(3):  # directional derivatives along random directions of all inputs at once
                dirs = [rng.randn(*v.shape) for v in vals]
                eps = 1e-6
                num = (f([v + eps * d for v, d in zip(vals, dirs)]) - f([v - eps * d for v, d in zip(vals, dirs)])) / (
                    2 * eps)
                ana = sum(float(np.sum(gi * d)) for gi, d in zip(g, dirs))
                assert abs(num - ana) <= 1e-6 * max(1.0, abs(ana)), (num, ana)


def test_float32_and_shape_error(mod):
    rng = np.random.RandomState(3)
    z, w, c0, h0 = [a.astype("float32") for a in _inputs(rng, 4, 2, 3)]
    with tf.Graph().as_default():
        y, cf, hf = native_op.native_lstm2(mod, z, w, c0, h0, [4, 2])
        assert y.shape.as_list() == [4, 2, 3] and cf.dtype == tf.float32
        bad = native_op.native_lstm2(mod, tf1.placeholder(tf.float32, [None, None, 12]), w[:2, :8],
                                     c0[:, :2], h0[:, :2], [4, 2])[0]
        with tf1.Session() as session:
            assert session.run(y).shape == (4, 2, 3)
            with pytest.raises(tf.errors.InvalidArgumentError, match="input projection has dim 12"):
                session.run(bad, {"Placeholder:0": z})


_BW_NET = {"output": {"class": "rec", "unit": "nativelstm2", "n_out": 4, "direction": -1, "from": "data",
                      "initial_state": "var"}}
_CHUNKED_NET = {"chunks": {"class": "time_chunking", "chunk_size": 4, "chunk_step": 2, "from": "data"},
                "lstm": {"class": "rec", "unit": "lstm", "n_out": 4, "from": "chunks"},
                "output": {"class": "time_unchunking", "chunking_layer": "chunks", "from": "lstm"}}


def _rec_net_output(mode, monkeypatch, net_dict):
    from returnn_lite.testing import build_network

    monkeypatch.setenv(native_op.ENV_MODE, mode)
    rng = np.random.RandomState(4)
    x = rng.randn(2, 7, 3).astype("float32")
    with tf.Graph().as_default():
        net = build_network(net_dict, {"data": {"dim": 3}}, train_flag=True)
        data = net.extern_data.get_data("data")
        out = net.get_default_output_layer().output.placeholder
        params = net.get_params_list()
        grads = tf.gradients(tf.reduce_sum(out * out), params)
        types = {op.type for op in tf1.get_default_graph().get_operations()}
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            for p in params:
                p.load(np.cos(np.arange(np.prod(p.shape.as_list()))).reshape(p.shape.as_list()) * 0.3, session)
            res = session.run([out] + grads, {data.placeholder: x, data.size_placeholder[0]: [7, 3]})
    return res, types


@pytest.mark.parametrize("net_dict", [_BW_NET, _CHUNKED_NET], ids=["bw_initial_var", "time_chunking"])
def test_rec_layer_env_switch(mod, monkeypatch, net_dict):
    res_op, types_op = _rec_net_output("1", monkeypatch, net_dict)
    res_loop, types_loop = _rec_net_output("0", monkeypatch, net_dict)
    assert "NativeLstm2" in types_op and "NativeLstm2" not in types_loop
    assert "NativeLstm2Grad" in types_op
    for a, b in zip(res_op, res_loop):  # output and the gradients of all params
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_mode_parsing(monkeypatch):
    from returnn_lite.config import Config

    monkeypatch.delenv(native_op.ENV_MODE, raising=False)
    assert native_op.get_mode(Config({"native_ops": False})) == "0"
    assert native_op.get_mode(Config({"native_ops": True})) == "1"
    assert native_op.get_mode(Config({})) == "auto"
    monkeypatch.setenv(native_op.ENV_MODE, "0")
    assert native_op.get_mode(Config({"native_ops": True})) == "0"  # the environment wins
    monkeypatch.setenv(native_op.ENV_MODE, "1")
    with native_op.disabled():  # e.g. export: no custom op in the graph, whatever the env says
        assert native_op.get_mode(Config({"native_ops": True})) == "0"
    assert native_op.get_mode() == "1"
    monkeypatch.setenv(native_op.ENV_MODE, "maybe")
    with pytest.raises(ValueError, match="RETURNN_LITE_NATIVE_OPS"):
        native_op.get_mode()
    assert not native_op.with_cuda() or tf.test.is_built_with_cuda()


_TINY = 'extern "C" int returnn_lite_tiny() { return %i; }\n'


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    if not native_op.find_compiler():
        pytest.skip("no C++ compiler found")
    monkeypatch.setenv(native_op.ENV_CACHE, str(tmp_path / "cache"))
    src = tmp_path / "tiny.cc"
    src.write_text(_TINY % 1)
    return src


def test_cache_reuse_and_corrupt_entry(tiny):
    lib, secs = native_op.build("tiny.cc", src=str(tiny))
    assert secs > 0 and os.path.isfile(lib)
    assert native_op.build("tiny.cc", src=str(tiny)) == (lib, 0.0)  # cached
    with open(lib, "r+b") as f:  # corrupt (e.g. half-written by a killed process): rebuilt, not loaded
        f.truncate(100)
    lib2, secs2 = native_op.build("tiny.cc", src=str(tiny))
    assert lib2 == lib and secs2 > 0 and os.path.getsize(lib) > 100
    tiny.write_text(_TINY % 2)  # another source: another entry
    lib3, secs3 = native_op.build("tiny.cc", src=str(tiny))
    assert lib3 != lib and secs3 > 0


def test_compile_error_shows_message_and_command(tiny):
    tiny.write_text("int broken( {\n")
    with pytest.raises(native_op.NativeOpError) as exc:
        native_op.build("tiny.cc", src=str(tiny))
    msg = str(exc.value)
    assert "building native op tiny.cc failed" in msg and "error" in msg and "command: " in msg
    assert str(tiny) in msg


def _build_tiny(src, queue):
    queue.put(native_op.build("tiny.cc", src=src)[0])


def test_concurrent_builds(tiny):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # two processes building the same entry at once
    queue = ctx.Queue()
    procs = [ctx.Process(target=_build_tiny, args=(str(tiny), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    libs = {queue.get(timeout=120) for _ in procs}
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs) and len(libs) == 1
    lib = libs.pop()
    assert native_op.build("tiny.cc", src=str(tiny)) == (lib, 0.0)
    assert [f for f in os.listdir(os.path.dirname(lib)) if f.startswith(".tmp-")] == []  # no temp files left


def test_no_compiler_falls_back(monkeypatch, capsys):
    monkeypatch.setattr(native_op, "find_compiler", lambda: None)
    monkeypatch.setattr(native_op, "_modules", {})
    monkeypatch.setattr(native_op, "_unavailable", {})
    monkeypatch.setenv(native_op.ENV_MODE, "auto")
    assert native_op.lstm_module() is None and native_op.lstm_module() is None
    assert capsys.readouterr().err.count("no C++ compiler found") == 1  # said once
    monkeypatch.setenv(native_op.ENV_MODE, "1")
    with pytest.raises(native_op.NativeOpError, match="no C\\+\\+ compiler"):
        native_op.lstm_module()


def test_initial_state_dim_mismatch_names_layer():
    from returnn_lite.testing import build_network

    with tf.Graph().as_default():
        with pytest.raises(Exception, match="'lstm'.*initial state 'h' has dim 3, the cell needs 4"):
            build_network({"init": {"class": "linear", "activation": None, "n_out": 3, "from": "data"},
                           "lstm": {"class": "rec", "unit": "nativelstm2", "n_out": 4, "from": "data",
                                    "initial_state": {"c": "zeros", "h": "init"}},
                           "output": {"class": "copy", "from": "lstm"}}, {"data": {"dim": 3}})


def test_large_steps_on_the_thread_pool(mod):
    """Batch x units large enough that every step's GEMM and gate math are split over TF's intra-op pool."""
    rng = np.random.RandomState(5)
    n_time, n_batch, n = 3, 64, 256  # 64 * 256 * 1024 >= 2^24: the per-step pool path
    lens = np.array([3] * 60 + [2, 1, 0, 3], "int32")
    with tf.Graph().as_default():
        z, w, c0, h0 = [tf.constant(a) for a in _inputs(rng, n_time, n_batch, n)]
        w = w * 0.1
        res = {}
        for key, native in (("op", mod), ("loop", False)):
            loss, outs = _loss_and_outputs(native, z, w, c0, h0, tf.constant(lens), False)
            res[key] = outs + tf.gradients(loss, [z, w, c0, h0])
        with tf1.Session(config=tf1.ConfigProto(intra_op_parallelism_threads=2)) as session:
            got, want = session.run([res["op"], res["loop"]])
    for name, a, b in zip(["y", "c_final", "h_final", "dz", "dW_re", "dc0", "dh0"], got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11, err_msg=name)
