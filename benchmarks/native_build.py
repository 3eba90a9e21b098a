#!/usr/bin/env python3
"""
First-build time of the native LSTM op (returnn_lite/native_op.py), as a new user pays it on first use: per repeat a
fresh temporary cache directory and ``native_op.build("lstm.cc")`` (TF already imported, not counted). Prints the
wall seconds and the CPU seconds of the compiler processes (best repeat), against the goal of 15 s on 2 cores.

Also, in the same process, each unit compiled alone (CPU seconds): the TF glue (C API), the plain C++ kernel, the
link; and the baseline: a unit that only includes TF's C++ ``op_kernel.h`` (the floor of a glue written against TF's
C++ API, as the op's glue was before). On a busy
machine the wall time is inflated by the load; the critical path (the slowest unit, as the units compile in
parallel, plus the link) is what the build costs on 2 idle cores.

    python benchmarks/native_build.py [--repeats 3]
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GOAL_S = 15.0


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn):
    """:return: (result, wall seconds, CPU seconds of the child processes)"""
    w0, c0 = time.perf_counter(), children_cpu()
    res = fn()
    return res, time.perf_counter() - w0, children_cpu() - c0


def first_build(native_op):
    cache = tempfile.mkdtemp(prefix="returnn-lite-native-bench-")
    os.environ[native_op.ENV_CACHE] = cache
    try:
        (_, secs), wall, cpu = timed(lambda: native_op.build("lstm.cc", quiet=True))
        assert secs > 0, "expected a fresh build"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return wall, cpu


def compile_alone(cxx, src, flags, out_dir):
    obj = os.path.join(out_dir, os.path.basename(src) + ".o")
    (proc, wall, cpu) = timed(lambda: subprocess.run([cxx, "-c", src, "-o", obj] + flags, capture_output=True,
                                                     text=True))
    if proc.returncode != 0:
        raise SystemExit("compiling %s failed:\n%s" % (src, proc.stdout + proc.stderr))
    return obj, cpu


def units_alone(native_op):
    cxx = native_op.find_compiler()
    units, _, _ = native_op._sources("lstm.cc", None)
    glue_flags, kernel_flags, _, link_flags = native_op._compile_flags()
    out = tempfile.mkdtemp(prefix="returnn-lite-native-bench-")
    try:
        floor_src = os.path.join(out, "floor.cc")
        with open(floor_src, "w") as f:
            f.write('#include "tensorflow/core/framework/op_kernel.h"\n')
        _, floor_cpu = compile_alone(cxx, floor_src, glue_flags, out)
        glue_obj, glue_cpu = compile_alone(cxx, units[0], glue_flags, out)
        kernel_obj, kernel_cpu = compile_alone(cxx, units[1], kernel_flags, out)
        lib = os.path.join(out, "lib.so")
        proc, _, link_cpu = timed(lambda: subprocess.run([cxx, glue_obj, kernel_obj, "-o", lib] + link_flags,
                                                         capture_output=True, text=True))
        if proc.returncode != 0:
            raise SystemExit("linking failed:\n%s" % (proc.stdout + proc.stderr))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return dict(floor=floor_cpu, glue=glue_cpu, kernel=kernel_cpu, link=link_cpu)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import tensorflow as tf  # noqa: F401 (imported before timing, as in a real run)

    from returnn_lite import native_op

    if not native_op.find_compiler():
        raise SystemExit("no C++ compiler found: nothing to measure")
    os.environ.pop(native_op.ENV_EXTRA_FLAGS, None)
    runs = [first_build(native_op) for _ in range(args.repeats)]
    best_wall, best_cpu = min(w for w, _ in runs), min(c for _, c in runs)
    units = min((units_alone(native_op) for _ in range(args.repeats)), key=lambda u: u["glue"] + u["kernel"])
    critical = max(units["glue"], units["kernel"]) + units["link"]
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print("cores: %s, load average: %.1f" % (os.cpu_count(), load))
    print("first build of lstm.cc (fresh cache, %i repeats, best): %.1f s wall, %.1f s compiler CPU" % (
        args.repeats, best_wall, best_cpu))
    print("units alone (CPU s): TF glue %.1f, kernel %.1f, link %.1f; baseline: a unit with only op_kernel.h %.1f" % (
        units["glue"], units["kernel"], units["link"], units["floor"]))
    print("critical path (units in parallel + link): %.1f s CPU = %.2fx the op_kernel.h baseline" % (
        critical, critical / units["floor"]))
    print("goal: first build <= %.0f s on 2 cores: wall %.1f s (%s), critical path %.1f s (%s)" % (
        GOAL_S, best_wall, "met" if best_wall <= GOAL_S else "NOT met", critical,
        "met" if critical <= GOAL_S else "NOT met"))


if __name__ == "__main__":
    sys.exit(main())
