"""
A native op that cannot be built never breaks a run (returnn_lite/native_op.py, "auto" mode): with no compiler, with a
compiler that fails, and with flags that do not fit, the 12AX LSTM config still trains (on the pure-TF loop: the same
numbers as with native_ops=False), says so in exactly one stderr line, and a second process does not try the build
again (the failure is recorded in the cache). Forced mode ("1") fails with one ``rnn.py: error:`` line naming the
compiler's first error line and the command. These paths run on every CPU: the failures are made, not found.

rnn.py runs in subprocesses with a temporary cache and model dir, on a small train set for one epoch.
"""

import json
import os
import re
import stat
import subprocess
import sys

import pytest

from returnn_lite import native_op

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "12ax_lstm.config")
FAKE_ERROR = "lstm.cc:1:1: error: this compiler always fails"


def _env(**overrides):
    env = dict(os.environ)
    for k in ("CXX", native_op.ENV_MODE, native_op.ENV_EXTRA_FLAGS, native_op.ENV_CACHE):
        env.pop(k, None)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def _train(tmp_path, tag, **env):
    """One epoch of configs/12ax_lstm.config on 100 train seqs. :return: (dev (score, error), returnn_lite stderr lines)"""
    model_dir = tmp_path / tag
    cmd = [sys.executable, os.path.join(REPO, "rnn.py"), CONFIG, "++num_epochs", "1",
           "++train", "{'class': 'Task12AXDataset', 'num_seqs': 100}",
           "++model", str(model_dir / "model"), "++learning_rate_file", str(model_dir / "lr")]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(**env), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    dev = re.search(r"dev: score ([0-9.]+) error ([0-9.]+)", proc.stdout)
    assert dev, proc.stdout[-2000:]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("returnn_lite")]
    return (float(dev.group(1)), float(dev.group(2))), ours


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The pure-TF loop by choice (native_ops off): what every fallback must reproduce."""
    dev, lines = _train(tmp_path_factory.mktemp("ref"), "ref", **{native_op.ENV_MODE: "0"})
    assert lines == []
    assert dev[1] < 0.5  # it learns something in one epoch
    return dev


def _fake_cxx(tmp_path):
    """A compiler that prints a gcc-style error and exits 1 (--version works); it logs every call."""
    log = tmp_path / "cxx.log"
    script = tmp_path / "fake-g++"
    script.write_text('#!/bin/sh\necho "$@" >> "%s"\nif [ "$1" = "--version" ]; then echo "fake-g++ 1.0"; exit 0; '
                      'fi\necho "%s" >&2\necho "compilation terminated." >&2\nexit 1\n' % (log, FAKE_ERROR))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script, log


def _compile_calls(log):
    return [line for line in log.read_text().splitlines() if "--version" not in line] if log.exists() else []


def _assert_one_fallback_line(lines, *expected):
    assert len(lines) == 1, lines
    line = lines[0]
    assert "pure-TF loop" in line and "RETURNN_LITE_NATIVE_OPS=0" in line and "native_ops=False" in line, line
    for text in expected:
        assert text in line, line


def _entries(cache):
    """{entry name: meta record} of the cache dir"""
    out = {}
    for name in (os.listdir(cache) if os.path.isdir(cache) else []):
        meta = os.path.join(cache, name, "meta.json")
        if os.path.isfile(meta):
            with open(meta) as f:
                out[name] = json.load(f)
    return out


def test_compiler_missing(tmp_path, reference):
    cache = tmp_path / "cache"
    dev, lines = _train(tmp_path, "first", CXX="/nonexistent/g++", **{native_op.ENV_CACHE: cache})
    assert dev == reference
    _assert_one_fallback_line(lines, "no C++ compiler found ($CXX=/nonexistent/g++ is not an executable)")
    assert _entries(cache) == {}  # nothing was tried (and so nothing to retry in the next run)


def test_no_compiler_on_path(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert native_op.find_compiler() is None
    monkeypatch.setenv("CXX", "g++")  # a name, looked up on the PATH
    assert native_op.find_compiler() is None


def test_compiler_failing(tmp_path, reference):
    cxx, log = _fake_cxx(tmp_path)
    cache = tmp_path / "cache"
    dev, lines = _train(tmp_path, "first", CXX=cxx, **{native_op.ENV_CACHE: cache})
    assert dev == reference
    _assert_one_fallback_line(lines, "compiling native op lstm.cc (first use, cached afterwards)... failed: "
                              + FAKE_ERROR, "recorded in", "delete it to retry")
    assert len(_compile_calls(log)) == 2  # the glue and the kernel, at once
    (entry,) = _entries(cache).values()
    assert entry["status"] == "failed" and entry["error"] == FAKE_ERROR and entry["command"][0] == str(cxx)

    dev, lines = _train(tmp_path, "second", CXX=cxx, **{native_op.ENV_CACHE: cache})
    assert dev == reference
    _assert_one_fallback_line(lines, "building native op lstm.cc failed: " + FAKE_ERROR, "recorded in")
    assert len(_compile_calls(log)) == 2  # not tried again


def test_flags_that_do_not_fit(tmp_path, reference):
    """
    -mavx512fp16 added: on a CPU without AVX512-FP16 the library crashes in its self-test (or a compiler that does not
    know the flag fails): fall back. On a CPU that has it, the op is built and used.
    """
    if not native_op.find_compiler():
        pytest.skip("no C++ compiler found")
    cache = tmp_path / "cache"
    env = {native_op.ENV_CACHE: cache, native_op.ENV_EXTRA_FLAGS: "-mavx512fp16"}
    dev, lines = _train(tmp_path, "first", **env)
    (entry,) = _entries(cache).values()
    if entry["status"] == "ok":  # this CPU runs AVX512-FP16 code
        assert lines == ["returnn_lite: compiling native op lstm.cc (first use, cached afterwards)... done in %.1f s"
                         % entry["seconds"]]
        assert dev == pytest.approx(reference, abs=1e-3)  # the op: the same math up to float rounding
        dev, lines = _train(tmp_path, "second", **env)
        assert lines == [] and dev == pytest.approx(reference, abs=1e-3)
        return
    assert dev == reference
    _assert_one_fallback_line(lines, entry["error"], "recorded in")
    assert "-mavx512fp16" in entry["command"] or "crashed in its self-test" in entry["error"]

    dev, lines = _train(tmp_path, "second", **env)
    assert dev == reference
    _assert_one_fallback_line(lines, entry["error"])
    assert not any("compiling native op" in line for line in lines)


def test_library_that_crashes_on_this_cpu(tmp_path, reference):
    """
    A library with instructions the CPU lacks dies with SIGILL: made here on every CPU by a test hook that traps in the
    self-test. The crash stays in the self-test's process; the run trains on the pure-TF loop, and the next does not
    rebuild.
    """
    if not native_op.find_compiler():
        pytest.skip("no C++ compiler found")
    cache = tmp_path / "cache"
    env = {native_op.ENV_CACHE: cache, native_op.ENV_EXTRA_FLAGS: "-DRETURNN_LITE_LSTM_SELFTEST_TRAP"}
    for run in ("first", "second"):
        dev, lines = _train(tmp_path, run, **env)
        assert dev == reference
        _assert_one_fallback_line(lines, "the built library crashed in its self-test", "flags do not fit this CPU")
        assert ("compiling native op" in lines[0]) == (run == "first")
    (entry,) = _entries(cache).values()
    assert entry["status"] == "failed" and entry["command"][1] == "-c"


def test_forced_mode_fails_with_one_line(tmp_path):
    cxx, log = _fake_cxx(tmp_path)
    cache = tmp_path / "cache"
    cmd = [sys.executable, os.path.join(REPO, "rnn.py"), CONFIG, "++num_epochs", "1", "++model",
           str(tmp_path / "m" / "model"), "++learning_rate_file", str(tmp_path / "m" / "lr")]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(CXX=cxx, **{native_op.ENV_CACHE: cache, native_op.ENV_MODE: "1"}),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rnn.py: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert FAKE_ERROR in errors[0] and "command: %s -c " % cxx in errors[0], errors[0]
    assert not (tmp_path / "m" / "model.001.index").exists()


def test_forced_mode_retries_a_recorded_failure(tmp_path, monkeypatch):
    cxx, log = _fake_cxx(tmp_path)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv(native_op.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(native_op, "_modules", {})
    monkeypatch.setattr(native_op, "_unavailable", {})
    monkeypatch.setenv(native_op.ENV_MODE, "auto")
    assert native_op.lstm_module() is None and native_op.lstm_module() is None  # tried once
    assert len(_compile_calls(log)) == 2
    monkeypatch.setenv(native_op.ENV_MODE, "1")
    with pytest.raises(native_op.NativeOpError) as exc:
        native_op.lstm_module()
    assert len(_compile_calls(log)) == 4  # forced: the recorded failure is tried again
    first_line = str(exc.value).splitlines()[0]
    assert first_line.startswith("building native op lstm.cc failed: " + FAKE_ERROR + "; command: ")
    assert "compilation terminated." in str(exc.value)  # the full output follows for --debug


_KERNEL_SRC = 'extern "C" int returnn_lite_kernel() { return 7; }\n'
_GLUE_SRC = 'extern "C" int returnn_lite_kernel();\nextern "C" int returnn_lite_glue() { return returnn_lite_kernel(); }\n'


def test_kernel_retried_without_march_native(tmp_path):
    """A compiler that refuses -march=native (e.g. one that does not know this CPU): the kernel gets portable flags."""
    real = native_op.find_compiler()
    if not real:
        pytest.skip("no C++ compiler found")
    wrapper = tmp_path / "picky-g++"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = "-march=native" ] && { echo "cc1plus: error: bad value '
                       '(\'native\') for -march= switch" >&2; exit 1; }; done\nexec "%s" "$@"\n' % real)
    wrapper.chmod(0o755)
    (tmp_path / "glue.cc").write_text(_GLUE_SRC)
    (tmp_path / "kernel.cc").write_text(_KERNEL_SRC)
    units = [(str(tmp_path / "glue.cc"), ["-fPIC"], None),
             (str(tmp_path / "kernel.cc"), ["-fPIC", "-march=native"], ["-fPIC"])]
    out = tmp_path / "out"
    out.mkdir()
    lib, cmds = native_op._compile_units(str(wrapper), units, ["-shared"], str(out))
    assert os.path.isfile(lib)
    assert "-march=native" not in cmds[1] and cmds[1][2] == str(tmp_path / "kernel.cc")
    import ctypes

    assert ctypes.CDLL(lib).returnn_lite_glue() == 7
    units[0] = (units[0][0], ["-fPIC", "-march=native"], None)  # the glue has no fallback: its error is reported
    with pytest.raises(Exception) as exc:
        native_op._compile_units(str(wrapper), units, ["-shared"], str(out))
    assert "bad value ('native') for -march= switch" in exc.value.cause and exc.value.cmd[2].endswith("glue.cc")


def test_first_error_line():
    out = ("In file included from tensorflow/core/platform/errors.h:1,\n                 from lstm.cc:3:\nb.h:740:49: "
           "error: expected initializer before '<' token\nb.h:800:1: error: second\n")
    assert native_op.first_error_line(out) == "b.h:740:49: error: expected initializer before '<' token"
    assert native_op.first_error_line("ld: cannot find -lfoo\n") == "ld: cannot find -lfoo"
    assert native_op.first_error_line("") == ""


def test_compiler_without_output(tmp_path, monkeypatch):
    """CXX=/bin/false: no error line to quote, so the cause names the compiler and its exit code."""
    if not os.path.exists("/bin/false"):
        pytest.skip("no /bin/false")
    monkeypatch.setenv("CXX", "/bin/false")
    monkeypatch.setenv(native_op.ENV_CACHE, str(tmp_path / "cache"))
    with pytest.raises(native_op.NativeOpError) as exc:
        native_op.build("lstm.cc", quiet=True)
    assert exc.value.cause == "/bin/false exited with code 1 and no output"
    with pytest.raises(native_op.NativeOpError, match="failed earlier .*recorded in"):
        native_op.build("lstm.cc", quiet=True)  # recorded: not run again
