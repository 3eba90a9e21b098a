#!/usr/bin/env python3
"""
Checkpoint tool speed on big checkpoints: ``inspect`` of a 64M-param checkpoint (goal < 2 s) and ``average`` of 5
such checkpoints (goal < 10 s), each against a plain baseline in the same process (plain TF reader: shape and
dtype maps; plain numpy average of the tensors written with SaveV2). Prints wall and CPU seconds (min over
repeats) and the ratios. The checkpoints (5 x 256 MB) go to a temp directory that is removed at the end.

    python benchmarks/checkpoint_tool.py [--params 64e6] [--num 5] [--repeat 3]
"""

import argparse
import io
import os
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from returnn_lite.checkpoint_tool import main as tool_main, write_checkpoint  # noqa: E402


def timed(func, repeat):
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        func()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def make_checkpoints(directory, num_params, num, tensors=16):
    side = int(round((num_params / tensors) ** 0.5))
    paths = []
    for k in range(num):
        rng = np.random.default_rng(k)
        values = {"layer%02i/W" % i: rng.standard_normal((side, side), dtype=np.float32) for i in range(tensors)}
        values["global_step"] = np.int64(1000 * (k + 1))
        paths.append(write_checkpoint(os.path.join(directory, "model.%03i" % (k + 1)), values))
    return paths, tensors * side * side


def plain_inspect(path):
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    reader.get_variable_to_dtype_map()
    return sum(int(np.prod(s)) for s in shapes.values())


def plain_average(paths, out):
    readers = [tf.train.load_checkpoint(p) for p in paths]
    names = sorted(readers[0].get_variable_to_shape_map())
    result = {}
    for name in names:
        if name == "global_step":
            result[name] = readers[-1].get_tensor(name)
            continue
        acc = readers[0].get_tensor(name).astype(np.float64)
        for r in readers[1:]:
            acc += r.get_tensor(name)
        result[name] = (acc / len(readers)).astype(np.float32)
    tf.raw_ops.SaveV2(prefix=out, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(result[n]) for n in names])


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--params", type=float, default=64e6)
    parser.add_argument("--num", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="ckpt_bench_")
    try:
        paths, n = make_checkpoints(directory, args.params, args.num)
        print("%i checkpoints of %.1fM params (%.0f MB each)" % (
            len(paths), n / 1e6, os.path.getsize(paths[0] + ".data-00000-of-00001") / 1e6))

        def inspect():
            out = io.StringIO()
            assert tool_main(["inspect", paths[0]], out=out) == 0

        def average():
            assert tool_main(["average"] + paths + [os.path.join(directory, "avg")], out=io.StringIO()) == 0

        base = timed(lambda: plain_inspect(paths[0]), args.repeat)
        ours = timed(inspect, args.repeat)
        print("inspect  : %.3f s wall, %.3f s CPU; plain TF reader %.3f s wall, %.3f s CPU; ratio %.2f (CPU %.2f); "
              "goal < 2 s: %s" % (ours + base + (ours[0] / base[0], ours[1] / max(base[1], 1e-9),
                                                  "ok" if ours[0] < 2 else "MISSED")))
        base = timed(lambda: plain_average(paths, os.path.join(directory, "plain_avg")), args.repeat)
        ours = timed(average, args.repeat)
        print("average %i: %.3f s wall, %.3f s CPU; plain numpy %.3f s wall, %.3f s CPU; ratio %.2f (CPU %.2f); "
              "goal < 10 s: %s" % ((len(paths),) + ours + base + (
                  ours[0] / base[0], ours[1] / max(base[1], 1e-9), "ok" if ours[0] < 10 else "MISSED")))
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
