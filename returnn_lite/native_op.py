"""
Native (C++) TensorFlow ops of returnn_lite, compiled on first use; a build that fails never breaks a run.

The sources live in ``native_ops/`` (top level of a checkout; shipped as package data ``returnn_lite/native_ops/``
in an installed wheel). An op is a thin TF glue unit written against TF's stable C API (``tensorflow/c/kernels.h``,
``ops.h``: plain C headers, no Eigen, so it compiles in well under a second with any flags) plus a kernel unit in
plain C++ (no TF or Eigen headers); both are compiled at once and linked into one library:

- the glue with TF's flags (``tf.sysconfig``) and ``-O2``;
- the kernel with ``-O3 -march=native``; if the compiler refuses that, again without ``-march=native``.

Right after the link, the library's self-test runs in a fresh process (ctypes, no TF import), so that a library
that does not fit this CPU fails there and not in the training process.
``$RETURNN_LITE_NATIVE_EXTRA_FLAGS`` (split like a shell line) adds flags to every compile and link (e.g. to try
flags that do not fit). The library goes into a cache directory (``$RETURNN_LITE_NATIVE_CACHE``, else
``$XDG_CACHE_HOME/returnn_lite/native_ops``, else ``~/.cache/returnn_lite/native_ops``), in an entry keyed by the hash
of the sources, the TF version, the compiler (path and version), the flags and the CPU. Concurrent processes
serialise the build with a file lock, and the library is written to a temp file and renamed into place, so that no
process loads a half-written file; an entry whose recorded checksum does not match its library, or which TF cannot
load, is rebuilt. A failed build is recorded in its entry too, so that later runs do not spend the time again.

Which path is used: the environment variable ``RETURNN_LITE_NATIVE_OPS`` ("1": always the op, an error if it cannot
be built, also retrying a recorded failure; "0": never, the pure-TF loop; "auto" or unset: the op if it builds), else
the config option ``native_ops`` (True/False/"auto") of the network's config, else "auto". In "auto", a missing
compiler or a failed build (now or recorded earlier) gives one line on stderr naming the cause, and the LSTM units
use the pure-TF loop (same results and params, slower).

CUDA: the sources here are CPU kernels. A CUDA build would be decided only by :func:`with_cuda`
(TF built with CUDA *and* an nvcc found); with a CPU build of TF (as here) nothing is compiled for CUDA.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ENV_MODE = "RETURNN_LITE_NATIVE_OPS"
ENV_CACHE = "RETURNN_LITE_NATIVE_CACHE"
ENV_EXTRA_FLAGS = "RETURNN_LITE_NATIVE_EXTRA_FLAGS"
CONFIG_KEY = "native_ops"
SILENCE_HINT = "set %s=0 or config native_ops=False to silence this" % ENV_MODE
BUILD_TIMEOUT_S = 900

# The translation units of each op: the TF glue (whose name names the op) first, then the plain C++ kernel units;
# the headers they include (part of the cache key); the library's self-test function (see _selftest).
OP_UNITS = {"lstm.cc": (("lstm.cc", "lstm_kernel.cc"), ("lstm_kernel.h",), "returnn_lite_lstm_selftest")}

_lock = threading.RLock()
_modules = {}  # op name -> loaded module
_unavailable = {}  # op name -> why not (auto mode; said once per process)
_grad_registered = False


class NativeOpError(RuntimeError):
    """
    The native op could not be built or loaded. The first line of the message names the cause (the compiler's first
    error line) and the command; the compiler's full output follows on the next lines.
    """

    def __init__(self, summary, cause=None, details="", entry=None):
        super().__init__(summary + ("\n" + details if details else ""))
        self.summary = summary
        self.cause = cause or summary
        self.entry = entry  # the cache entry that records the failure, if any
        self.line_open = False  # build(keep_line_open=True) left its "compiling ..." line on stderr for the caller


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
    """The C++ compiler: $CXX (a name on the PATH or a path), else g++, c++ or clang++ on the PATH; None if none."""
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx) or (cxx if os.path.isfile(cxx) and os.access(cxx, os.X_OK) else None)
    for c in ("g++", "c++", "clang++"):
        p = shutil.which(c)
        if p:
            return p
    return None


def _no_compiler_message():
    cxx = os.environ.get("CXX")
    if cxx:
        return "no C++ compiler found ($CXX=%s is not an executable)" % cxx
    return "no C++ compiler found ($CXX, g++, c++, clang++)"


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


def _extra_flags():
    return shlex.split(os.environ.get(ENV_EXTRA_FLAGS, ""))


def _compile_flags():
    """
    :return: (flags of the TF glue unit, flags of the plain kernel units, the kernel's fallback flags, link flags);
      the first three without the source, -c and -o
    """
    import tensorflow as tf

    tf_cflags = [f for f in tf.sysconfig.get_compile_flags() if not f.startswith(("--std=", "-std="))]
    # (no -march for the glue: nothing in it is hot, and TF's C++ headers, should a glue include them, pull in
    # Eigen, which does not compile under every -march=native, e.g. not with AVX512-FP16)
    abi = [f for f in tf_cflags if f.startswith("-D_GLIBCXX_USE_CXX11_ABI")]  # the kernel's std:: types match TF's
    common = ["-std=c++17", "-fPIC", "-w"]
    extra = _extra_flags()
    glue = common + ["-O2"] + tf_cflags + extra
    # -march=native: the kernel's GEMM and gate loops use the CPU's vector units (AVX2/AVX-512 vs the SSE2 default);
    # the entry is therefore keyed by the CPU too (_cpu_id)
    kernel = common + ["-O3", "-march=native"] + abi + extra
    kernel_portable = common + ["-O3"] + abi + extra
    link = ["-shared"] + list(tf.sysconfig.get_link_flags()) + extra
    return glue, kernel, kernel_portable, link


def _cpu_id():
    """Machine type and CPU feature flags (the cache key: the kernel is built with -march=native)."""
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


def _read_meta(meta_path, key):
    """The entry's record if it is for this key ({"status": "ok"|"failed", ...}), else None."""
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("key") == key else None


def _entry_ok(lib, meta):
    return bool(meta and meta.get("status", "ok") == "ok" and os.path.isfile(lib)
                and meta.get("sha256") == _sha256_file(lib))


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


def first_error_line(output):
    """The compiler's first line with "error:" (gcc, clang: "file:line:col: error: ..."), else its first line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    line = next((line for line in lines if "error:" in line.lower()), lines[0] if lines else "")
    return line if len(line) <= 500 else line[:500] + "..."


class _Failed(Exception):
    def __init__(self, cause, cmd, output):
        super().__init__(cause)
        self.cause, self.cmd, self.output = cause, cmd, output


def _run_parallel(cmds):
    """Runs the commands at once. :return: list of (exit code, output); exit code None: could not run / timed out"""
    procs = []
    for cmd in cmds:
        try:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        except OSError as exc:
            procs.append(exc)
    results = []
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    for p in procs:
        if isinstance(p, OSError):
            results.append((None, "cannot run the compiler: %s" % p))
            continue
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((p.returncode, out))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            results.append((None, (out or "") + "\nerror: the compiler did not finish in %i s" % BUILD_TIMEOUT_S))
    return results


def _compile_units(cxx, units, link_flags, tmp_dir):
    """
    Compiles the units in parallel and links them into tmp_dir/lib.so.
    :param units: list of (source path, flags, fallback flags or None)
    :return: (library path, the commands run)
    :raises _Failed: the first failing command with its output
    """
    objs = [os.path.join(tmp_dir, "%i-%s.o" % (i, os.path.basename(src))) for i, (src, _, _) in enumerate(units)]
    cmds = [[cxx, "-c", src, "-o", obj] + flags for (src, flags, _), obj in zip(units, objs)]
    results = _run_parallel(cmds)
    failed = [i for i, (rc, _) in enumerate(results) if rc != 0]
    retry = [i for i in failed if units[i][2] is not None]
    # e.g. a compiler that does not know -march=native for this CPU: the portable flags (unless another unit failed
    # for good: then the build fails anyway)
    if retry and len(retry) == len(failed):
        cmds_retry = [[cxx, "-c", units[i][0], "-o", objs[i]] + units[i][2] for i in retry]
        for i, cmd, res in zip(retry, cmds_retry, _run_parallel(cmds_retry)):
            if res[0] == 0:
                cmds[i], results[i] = cmd, res
    for cmd, (rc, out) in zip(cmds, results):
        if rc != 0:
            raise _Failed(first_error_line(out) or "%s exited with code %s and no output" % (cxx, rc), cmd, out)
    lib = os.path.join(tmp_dir, "lib.so")
    link_cmd = [cxx] + objs + ["-o", lib] + link_flags
    rc, out = _run_parallel([link_cmd])[0]
    if rc != 0:
        raise _Failed(first_error_line(out) or "%s exited with code %s and no output" % (cxx, rc), link_cmd, out)
    return lib, cmds + [link_cmd]


def _sources(name, src):
    """:return: (unit paths, header paths, self-test function or None) of the op (src: one file, e.g. in tests)"""
    if src:
        return [src], [], None
    units, headers, selftest = OP_UNITS.get(name, ((name,), (), None))
    return [source_path(u) for u in units], [source_path(h) for h in headers], selftest


_SELFTEST_SCRIPT = """
import ctypes, sys
lib, framework, symbol = sys.argv[1:4]
try:
    if framework:
        ctypes.CDLL(framework, mode=ctypes.RTLD_GLOBAL)
    fn = getattr(ctypes.CDLL(lib), symbol)
except (OSError, AttributeError) as exc:
    print("cannot load for the self-test: %s" % exc)
    sys.exit(5)
sys.exit(0 if fn() == 1 else 3)
"""


def _tf_framework_lib(link_flags):
    """The path of TF's framework library from its link flags (-L<dir> -l:<file>), or "" if not found."""
    dirs = [f[2:] for f in link_flags if f.startswith("-L")]
    files = [f[3:] for f in link_flags if f.startswith("-l:")]
    for d in dirs:
        for f in files:
            if os.path.isfile(os.path.join(d, f)):
                return os.path.join(d, f)
    return ""


def _selftest(lib, symbol, link_flags):
    """
    Runs the library's self-test in a fresh process (ctypes only, no TF import; ~0.2 s), so that a library that does
    not fit this CPU (e.g. extra flags for an instruction set it lacks: an illegal instruction) fails there and not
    in the training process. A library that cannot be loaded without TF's Python runtime is not tested (TF's own load
    reports real problems).
    :raises _Failed: it crashed or computed wrong results
    """
    cmd = [sys.executable, "-c", _SELFTEST_SCRIPT, lib, _tf_framework_lib(link_flags), symbol]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise _Failed("the self-test of the built library did not finish in 300 s", cmd, "") from None
    if proc.returncode in (0, 5):
        return
    out = proc.stdout + proc.stderr
    if proc.returncode < 0:
        import signal

        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = "signal %i" % -proc.returncode
        raise _Failed("the built library crashed in its self-test (%s): its flags do not fit this CPU" % sig, cmd, out)
    raise _Failed("the built library failed its self-test (wrong results, exit code %i)" % proc.returncode, cmd, out)


def build(name, cxx=None, force=False, src=None, quiet=False, retry_failed=False, keep_line_open=False):
    """
    Compiles the op (native_ops/<name> with its kernel units, or the one file src) if not cached. Says so on stderr
    in one line: "compiling native op NAME (first use, cached afterwards)... done in S s" (or "... failed").
    :param bool force: build even if the entry records a success or a failure
    :param bool retry_failed: build again if the entry records a failure (else that failure is raised at once)
    :param bool quiet: no line on stderr
    :param bool keep_line_open: on a failure, leave the stderr line unfinished (NativeOpError.line_open) for the
      caller to complete
    :return: (path of the library, build seconds; 0.0 when cached)
    :raises NativeOpError: no compiler, or the build failed now or before (recorded in the entry); the message's first
      line names the compiler's first error line and the command
    """
    import tensorflow as tf

    cxx = cxx or find_compiler()
    if not cxx:
        raise NativeOpError("%s to build native op %s" % (_no_compiler_message(), name), cause=_no_compiler_message())
    units, headers, selftest = _sources(name, src)
    glue_flags, kernel_flags, kernel_portable, link_flags = _compile_flags()
    version = _compiler_version(cxx)
    parts = []
    for p in units + headers:
        with open(p, "rb") as f:
            parts += [os.path.basename(p).encode(), f.read()]
    key = hashlib.sha256(b"\0".join(parts + [
        tf.__version__.encode(), cxx.encode(), version.encode(),
        " ".join(glue_flags + ["|"] + kernel_flags + ["|"] + kernel_portable + ["|"] + link_flags).encode(),
        _cpu_id().encode()])).hexdigest()[:20]
    base = os.path.splitext(name)[0]
    entry = os.path.join(cache_dir(), "%s-%s" % (base, key))
    lib = os.path.join(entry, "lib%s.so" % base)
    meta_path = os.path.join(entry, "meta.json")

    def cached():
        meta = _read_meta(meta_path, key)
        if force or not meta:
            return None
        if meta.get("status") == "failed":
            if retry_failed:
                return None
            raise NativeOpError(
                "building native op %s failed earlier (recorded in %s): %s; command: %s" % (
                    name, entry, meta.get("error"), " ".join(meta.get("command") or [])),
                cause=meta.get("error"), details=meta.get("output", ""), entry=entry)
        return (lib, 0.0) if _entry_ok(lib, meta) else None

    hit = cached()
    if hit:
        return hit
    os.makedirs(entry, exist_ok=True)
    with _FileLock(os.path.join(entry, ".lock")):
        hit = cached()  # another process built it meanwhile (or failed)
        if hit:
            return hit
        if not quiet:
            print("returnn_lite: compiling native op %s (first use, cached afterwards)..." % name, end="",
                  file=sys.stderr, flush=True)
        record = {"key": key, "tf": tf.__version__, "compiler": version, "units": units}
        t0 = time.perf_counter()
        tmp_dir = tempfile.mkdtemp(dir=entry, prefix=".tmp-")
        try:
            unit_specs = [(units[0], glue_flags, None)] + [(u, kernel_flags, kernel_portable) for u in units[1:]]
            try:
                built, cmds = _compile_units(cxx, unit_specs, link_flags, tmp_dir)
                if selftest:
                    _selftest(built, selftest, link_flags)
            except _Failed as failed:
                record.update(status="failed", error=failed.cause, command=failed.cmd, output=failed.output[-20000:])
                _write_atomic(meta_path, json.dumps(record, indent=1))
                exc = NativeOpError("building native op %s failed: %s; command: %s" % (
                    name, failed.cause, " ".join(failed.cmd)), cause=failed.cause, details=failed.output[-8000:],
                    entry=entry)
                exc.line_open = not quiet and keep_line_open
                raise exc from None
            elapsed = time.perf_counter() - t0
            digest = _sha256_file(built)
            os.replace(built, lib)
            record.update(status="ok", sha256=digest, commands=cmds, seconds=round(elapsed, 2))
            _write_atomic(meta_path, json.dumps(record, indent=1))
        except BaseException as exc:
            if not quiet and not getattr(exc, "line_open", False):
                print(" failed", file=sys.stderr, flush=True)
            raise
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        if not quiet:
            print(" done in %.1f s" % elapsed, file=sys.stderr, flush=True)
    return lib, elapsed


def record_failure(lib, cause):
    """Records in lib's entry that the built library cannot be loaded, so that later runs do not retry the build."""
    meta_path = os.path.join(os.path.dirname(lib), "meta.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        meta.update(status="failed", error=cause, command=["tf.load_op_library", lib], output="")
        _write_atomic(meta_path, json.dumps(meta, indent=1))
    except (OSError, ValueError):
        pass


def load(name="lstm.cc", required=True):
    """
    Builds (if needed) and loads the op; returns the module of op wrappers.
    :param bool required: False ("auto"): if the op cannot be built or loaded, say why in one stderr line (once per
      process) and return None
    :raises NativeOpError: required, and it cannot be built or loaded
    """
    import tensorflow as tf

    with _lock:
        mod = _modules.get(name)
        if mod is not None:
            return mod
        if not required and name in _unavailable:
            return None
        try:
            mod = _build_and_load(tf, name, retry_failed=required)
        except NativeOpError as exc:
            if required:
                if exc.line_open:
                    print(" failed", file=sys.stderr, flush=True)
                raise
            _unavailable[name] = exc.cause
            if not exc.entry:  # e.g. no compiler
                why = "returnn_lite: " + exc.cause
            else:
                why = "%s: %s (recorded in %s; delete it to retry)" % (
                    " failed" if exc.line_open else "returnn_lite: building native op %s failed" % name, exc.cause,
                    exc.entry)
            print("%s; the LSTM units use the pure-TF loop (same results, slower); %s." % (why, SILENCE_HINT),
                  file=sys.stderr, flush=True)
            return None
        _modules[name] = mod
        _unavailable.pop(name, None)
        _register_gradients()
        return mod


def _build_and_load(tf, name, retry_failed=False):
    lib, secs = build(name, retry_failed=retry_failed, keep_line_open=True)
    try:
        mod = tf.load_op_library(lib)
    except Exception as exc:
        if secs:  # just built and still not loadable: remember that
            cause = "cannot load %s: %s" % (lib, first_error_line(str(exc)))
            record_failure(lib, cause)
            raise NativeOpError("native op %s was built but %s" % (name, cause), cause=cause,
                                entry=os.path.dirname(lib)) from None
        # a corrupt or stale entry: rebuild once
        print("returnn_lite: cached %s could not be loaded (%s); rebuilding" % (lib, first_error_line(str(exc))),
              file=sys.stderr)
        lib, secs = build(name, force=True, keep_line_open=True)
        try:
            mod = tf.load_op_library(lib)
        except Exception as exc2:
            cause = "cannot load %s: %s" % (lib, first_error_line(str(exc2)))
            record_failure(lib, cause)
            raise NativeOpError("native op %s was built but %s" % (name, cause), cause=cause,
                                entry=os.path.dirname(lib)) from None
    return mod


def lstm_module(config=None):
    """
    The loaded NativeLstm2 module if the op path is chosen (see module doc), else None (pure-TF loop).
    :raises NativeOpError: forced ("1") but it cannot be built or loaded
    """
    mode = get_mode(config)
    if mode == "0":
        return None
    return load("lstm.cc", required=mode == "1")


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
