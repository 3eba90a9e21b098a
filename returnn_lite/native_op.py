"""
Native (C++) TensorFlow ops of returnn_lite, compiled on first use.

The sources live in ``native_ops/`` (top level of a checkout; shipped as package data ``returnn_lite/native_ops/``
in an installed wheel). On first use a source is compiled with the flags of the installed TF
(``tf.sysconfig.get_compile_flags()/get_link_flags()``, ``-std=c++17 -O2 -march=native -fPIC -shared``) into a
cache directory (``$RETURNN_LITE_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/returnn_lite/native_ops``, else
``~/.cache/returnn_lite/native_ops``), in an entry keyed by the hash of the source, the TF version, the compiler
(path and version), the flags and the CPU (as built with ``-march=native``). Concurrent processes serialise the
build with a file lock, and the library is written to a temp file and renamed into place, so that no process loads
a half-written file; an entry whose recorded checksum does not match its library, or which TF cannot load, is
rebuilt.

Which path is used: the environment variable ``RETURNN_LITE_NATIVE_OPS`` ("1": always the op, an error if it can't
be built; "0": never, the pure-TF loop; "auto" or unset: the op when a C++ compiler is found), else the config
option ``native_ops`` (True/False/"auto") of the network's config, else "auto". Without a compiler (auto) it says
so once and the pure-TF loop is used (same results).

CUDA: the sources here are CPU kernels. A CUDA build would be decided only by :func:`with_cuda`
(TF built with CUDA *and* an nvcc found); with a CPU build of TF (as here) nothing is compiled for CUDA.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ENV_MODE = "RETURNN_LITE_NATIVE_OPS"
ENV_CACHE = "RETURNN_LITE_NATIVE_CACHE"
CONFIG_KEY = "native_ops"

_lock = threading.RLock()
_modules = {}  # source name -> loaded module (or None when unavailable in auto mode)
_said_no_compiler = False
_grad_registered = False


class NativeOpError(RuntimeError):
    """The native op could not be built or loaded (message includes the compiler's output and command)."""


# ---------------------------------------------------------------------------------------------------------------
# which path


def _parse_mode(value, origin):
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    s = str(value).strip().lower()
    if s in ("", "auto", "none"):
        return "auto"
    if s in ("1", "true", "yes", "on"):
        return "1"
    if s in ("0", "false", "no", "off"):
        return "0"
    raise ValueError("%s=%r: expected 1/0/true/false/auto" % (origin, value))


class _Disabled:
    """Context: graphs built inside use no native op, whatever the env var/config say (see :func:`disabled`)."""

    depth = 0

    def __enter__(self):
        _Disabled.depth += 1
        return self

    def __exit__(self, *exc):
        _Disabled.depth -= 1
        return False


def disabled():
    """
    Context manager: networks built inside use the pure-TF path, e.g. for an exported graph that must load with
    TensorFlow alone (a graph with the custom op needs its library).
    """
    return _Disabled()


def get_mode(config=None):
    """
    "1" (force the op), "0" (force the pure-TF loop) or "auto": "0" inside :func:`disabled`, else the env var,
    else the config option.
    """
    if _Disabled.depth:
        return "0"
    mode = _parse_mode(os.environ.get(ENV_MODE), "environment variable %s" % ENV_MODE)
    if mode is None and config is not None and config.has(CONFIG_KEY):
        mode = _parse_mode(config.typed_value(CONFIG_KEY) if config.is_typed(CONFIG_KEY) else config.value(CONFIG_KEY),
                           "config option %s" % CONFIG_KEY)
    if mode is None:
        from .config import get_global_config

        cfg = get_global_config(raise_exception=False)
        if cfg is not None and cfg is not config and cfg.has(CONFIG_KEY):
            mode = _parse_mode(cfg.typed_value(CONFIG_KEY) if cfg.is_typed(CONFIG_KEY) else cfg.value(CONFIG_KEY),
                               "config option %s" % CONFIG_KEY)
    return mode or "auto"


def with_cuda():
    """The one place that decides whether a CUDA kernel would be built: TF built with CUDA and nvcc found."""
    import tensorflow as tf

    if not tf.test.is_built_with_cuda():
        return False
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                    if os.environ.get("CUDA_HOME") else None)
    return bool(nvcc and os.path.exists(nvcc))


# ---------------------------------------------------------------------------------------------------------------
# sources, compiler, cache


def source_path(name):
    """Path of native_ops/<name> (package data of an installed wheel, or the top-level dir of a checkout)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "native_ops"), os.path.join(os.path.dirname(here), "native_ops")):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    raise NativeOpError("native op source %r not found (looked in returnn_lite/native_ops/ and native_ops/)" % name)


def find_compiler():
    """The C++ compiler: $CXX, else g++, c++ or clang++ on the PATH; None if there is none."""
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx) or (cxx if os.path.isfile(cxx) else None)
    for c in ("g++", "c++", "clang++"):
        p = shutil.which(c)
        if p:
            return p
    return None


def _compiler_version(cxx):
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.strip().splitlines()[0] if out.strip() else "?"


def cache_dir():
    d = os.environ.get(ENV_CACHE)
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "returnn_lite", "native_ops")
    return d


def _compile_flags():
    import tensorflow as tf

    cflags = [f for f in tf.sysconfig.get_compile_flags() if not f.startswith("--std=") and not f.startswith("-std=")]
    # -march=native: Eigen's GEMM and packet math use the CPU's vector units (2x faster than the SSE2 default);
    # the entry is therefore keyed by the CPU too (_cpu_id)
    cflags = ["-std=c++17", "-O2", "-march=native", "-fPIC", "-shared", "-w"] + cflags
    return cflags, list(tf.sysconfig.get_link_flags())


def _cpu_id():
    """Machine type and CPU feature flags (the cache key: libraries are built with -march=native)."""
    import platform

    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features", "model name")):
                    flags += line
    except OSError:
        flags = platform.processor()
    return platform.machine() + "\n" + flags


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _entry_valid(lib, meta_path, key):
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        return meta.get("key") == key and os.path.isfile(lib) and meta.get("sha256") == _sha256_file(lib)
    except (OSError, ValueError):
        return False


class _FileLock:
    def __init__(self, path):
        self.path = path
        self.f = None

    def __enter__(self):
        self.f = open(self.path, "a+")
        try:
            import fcntl

            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX)
        except ImportError:  # not POSIX: the temp file + rename still keeps entries whole
            pass
        return self

    def __exit__(self, *exc):
        self.f.close()  # releases the lock
        return False


def _write_atomic(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def build(name, cxx=None, force=False, src=None):
    """
    Compiles native_ops/<name> (or the file src) if not cached.
    :return: (path of the library, compile seconds; 0.0 when cached)
    :raises NativeOpError: no compiler, or the compiler failed (message with its output and the command)
    """
    import tensorflow as tf

    cxx = cxx or find_compiler()
    if not cxx:
        raise NativeOpError("no C++ compiler found (set $CXX or install g++) to build native op %s" % name)
    src = src or source_path(name)
    with open(src, "rb") as f:
        source = f.read()
    cflags, lflags = _compile_flags()
    version = _compiler_version(cxx)
    key = hashlib.sha256(b"\0".join([source, tf.__version__.encode(), cxx.encode(), version.encode(),
                                     " ".join(cflags + lflags).encode(), _cpu_id().encode()])).hexdigest()[:20]
    base = os.path.splitext(name)[0]
    entry = os.path.join(cache_dir(), "%s-%s" % (base, key))
    lib = os.path.join(entry, "lib%s.so" % base)
    meta_path = os.path.join(entry, "meta.json")
    if not force and _entry_valid(lib, meta_path, key):
        return lib, 0.0
    os.makedirs(entry, exist_ok=True)
    with _FileLock(os.path.join(entry, ".lock")):
        if not force and _entry_valid(lib, meta_path, key):  # another process built it meanwhile
            return lib, 0.0
        fd, tmp = tempfile.mkstemp(dir=entry, prefix=".tmp-", suffix=".so")
        os.close(fd)
        cmd = [cxx, src, "-o", tmp] + cflags + lflags
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise NativeOpError("compiling native op %s failed (exit code %i):\n%s\ncommand: %s" % (
                    name, proc.returncode, (proc.stderr + proc.stdout).strip()[-8000:], " ".join(cmd)))
            elapsed = time.perf_counter() - t0
            digest = _sha256_file(tmp)
            os.replace(tmp, lib)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        _write_atomic(meta_path, json.dumps({"key": key, "sha256": digest, "source": src, "tf": tf.__version__,
                                             "compiler": version, "command": cmd}, indent=1))
    return lib, elapsed


def load(name="lstm.cc"):
    """Builds (if needed) and loads native_ops/<name>; returns the module of op wrappers. :raises NativeOpError:"""
    import tensorflow as tf

    with _lock:
        mod = _modules.get(name)
        if mod is not None:
            return mod
        lib, secs = build(name)
        try:
            mod = tf.load_op_library(lib)
        except Exception as exc:  # a corrupt or stale entry: rebuild once
            print("returnn_lite.native_op: cached %s could not be loaded (%s); rebuilding" % (lib, exc),
                  file=sys.stderr)
            lib, secs = build(name, force=True)
            mod = tf.load_op_library(lib)
        if secs:
            print("returnn_lite.native_op: compiled %s in %.1f s (cache: %s)" % (name, secs, os.path.dirname(lib)),
                  file=sys.stderr)
        else:
            print("returnn_lite.native_op: %s loaded from cache (0 s compile): %s" % (name, lib), file=sys.stderr)
        _modules[name] = mod
        _register_gradients()
        return mod


def lstm_module(config=None):
    """
    The loaded NativeLstm2 module if the op path is chosen (see module doc), else None (pure-TF loop).
    :raises NativeOpError: forced ("1") but it cannot be built, or the compiler failed
    """
    global _said_no_compiler
    mode = get_mode(config)
    if mode == "0":
        return None
    if mode == "auto" and "lstm.cc" not in _modules and not find_compiler():
        if not _said_no_compiler:
            print("returnn_lite.native_op: no C++ compiler found ($CXX, g++, c++, clang++); the LSTM units use the "
                  "pure-TF loop (same results, slower). Set %s=0 to silence this." % ENV_MODE, file=sys.stderr)
            _said_no_compiler = True
        return None
    return load("lstm.cc")


# ---------------------------------------------------------------------------------------------------------------
# NativeLstm2


def _register_gradients():
    global _grad_registered
    if _grad_registered:
        return
    import tensorflow as tf

    @tf.RegisterGradient("NativeLstm2")
    def _native_lstm2_grad(op, dy, dc_all, dgates, dc_final, dh_final):  # noqa: unused dc_all/dgates (internal)
        w_re, c0, h0, seq_len = op.inputs[1:5]
        y, c, gates = op.outputs[:3]
        dy = tf.zeros_like(y) if dy is None else dy
        dc_final = tf.zeros_like(c0) if dc_final is None else dc_final
        dh_final = tf.zeros_like(h0) if dh_final is None else dh_final
        dz, dw_re, dc0, dh0 = _modules["lstm.cc"].native_lstm2_grad(
            w_re, c0, h0, seq_len, y, c, gates, dy, dc_final, dh_final, reverse=op.get_attr("reverse"))
        return dz, dw_re, dc0, dh0, None

    _grad_registered = True


def native_lstm2(module, z, w_re, c0, h0, seq_len, reverse=False, name=None):
    """
    Fused LSTM (NativeLstm2 layout, gates j, i, f, o) over time-major z [T, B, 4n] (= x W + b); frames at
    t >= seq_len keep the state and output 0; reverse: each sequence is processed from its end.
    :return: (y [T, B, n], c_final [B, n], h_final [B, n])
    """
    import tensorflow as tf

    y, _c, _gates, c_final, h_final = module.native_lstm2(
        z, w_re, c0, h0, tf.cast(seq_len, tf.int32), reverse=bool(reverse), name=name or "NativeLstm2")
    return y, c_final, h_final
