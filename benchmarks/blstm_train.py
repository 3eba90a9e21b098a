#!/usr/bin/env python3
"""
Training speed of a BLSTM acoustic model: 4 bidirectional LSTM layers x 256 units, 40-dim input, 500 classes,
sequences of ~200 frames, softmax + cross entropy, SGD. In the same process, each in its own graph and session:

- ``fused``: returnn_lite, unit "lstm" (NativeLstm2 layout) as the fused native op (returnn_lite.native_op),
- ``loop``: the same net on the pure-TF cell loop (config native_ops=False),
- ``plain``: a hand-written plain-TF equivalent (input projection for all frames, tf.while_loop over h @ W_re,
  masking),
- ``tfcell``: returnn_lite with a TF-cell unit (``--tf-cell-unit``, default "standardlstm"; "" to skip).

Prints per variant: frames/s (by wall time and by CPU time of the process, best round), the seconds to build the
net and its gradients (CPU time), the peak memory of training steps (in a fresh process per variant: peak RSS over
3 steps minus the RSS before them), and the ratios against plain.

    python benchmarks/blstm_train.py [--layers 4] [--units 256] [--batch 16] [--time 200] [--steps 3] [--rounds 4]
"""

import argparse
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from returnn_lite.extern_data import ExternData  # noqa: E402
from returnn_lite.network import TFNetwork  # noqa: E402

tf1 = tf.compat.v1
N_IN, N_CLASSES = 40, 500


def make_batch(rng, batch, time_len):
    lens = rng.randint(int(time_len * 0.8), time_len + 1, size=batch).astype("int32")
    lens[0] = time_len
    x = rng.randn(batch, time_len, N_IN).astype("float32")
    y = rng.randint(0, N_CLASSES, size=(batch, time_len)).astype("int32")
    return x, y, lens


def build_returnn_lite(layers, units, unit="lstm", native=True):
    from returnn_lite.config import Config

    net_dict = {}
    src = ["data"]
    for i in range(layers):
        for name, direction in (("lstm%i_fw" % i, 1), ("lstm%i_bw" % i, -1)):
            net_dict[name] = {"class": "rec", "unit": unit, "n_out": units, "direction": direction, "from": src}
        src = ["lstm%i_fw" % i, "lstm%i_bw" % i]
    net_dict["output"] = {"class": "softmax", "loss": "ce", "from": src}
    config = Config({"native_ops": bool(native)})
    net = TFNetwork(config=config, extern_data=ExternData({"data": {"dim": N_IN},
                                                           "classes": {"dim": N_CLASSES, "sparse": True}}),
                    train_flag=True)
    t0 = time.process_time()
    net.construct_from_dict(net_dict)
    t1 = time.process_time()
    train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(net.get_objective())
    t2 = time.process_time()
    data, classes = net.extern_data.get_data("data"), net.extern_data.get_data("classes")

    def feed(x, y, lens):
        return {data.placeholder: x, data.size_placeholder[0]: lens, classes.placeholder: y,
                classes.size_placeholder[0]: lens}

    return train_op, feed, (t1 - t0, t2 - t1)


def _lstm_plain(x, seq_len, n_in, units, reverse, scope):
    """x [T, B, n_in] -> [T, B, units]."""
    with tf1.variable_scope(scope):
        w = tf1.get_variable("W", [n_in, 4 * units], initializer=tf1.glorot_uniform_initializer())
        w_re = tf1.get_variable("W_re", [units, 4 * units], initializer=tf1.glorot_uniform_initializer())
        b = tf1.get_variable("b", [4 * units], initializer=tf1.zeros_initializer())
    if reverse:
        x = tf.reverse_sequence(x, seq_len, seq_axis=0, batch_axis=1)
    z = tf.tensordot(x, w, [[2], [0]]) + b
    n_time, n_batch = tf.shape(z)[0], tf.shape(z)[1]
    z_ta = tf.TensorArray(tf.float32, size=n_time).unstack(z)
    out_ta = tf.TensorArray(tf.float32, size=n_time)

    def body(t, out_ta, c, h):
        j, i, f, o = tf.split(z_ta.read(t) + tf.matmul(h, w_re), 4, axis=1)
        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(j)
        h_new = tf.sigmoid(o) * tf.tanh(c_new)
        mask = tf.expand_dims(t < seq_len, 1)
        c_new, h_new = tf.where(mask, c_new, c), tf.where(mask, h_new, h)
        return t + 1, out_ta.write(t, h_new), c_new, h_new

    zeros = tf.zeros([n_batch, units])
    _, out_ta, _, _ = tf.while_loop(lambda t, *_: t < n_time, body, [0, out_ta, zeros, zeros])
    y = out_ta.stack()
    if reverse:
        y = tf.reverse_sequence(y, seq_len, seq_axis=0, batch_axis=1)
    return y


def build_plain_tf(layers, units):
    x_ph = tf1.placeholder(tf.float32, [None, None, N_IN])
    y_ph = tf1.placeholder(tf.int32, [None, None])
    len_ph = tf1.placeholder(tf.int32, [None])
    t0 = time.process_time()
    x = tf.transpose(x_ph, [1, 0, 2])
    n_in = N_IN
    for i in range(layers):
        fw = _lstm_plain(x, len_ph, n_in, units, False, "plain_lstm%i_fw" % i)
        bw = _lstm_plain(x, len_ph, n_in, units, True, "plain_lstm%i_bw" % i)
        x, n_in = tf.concat([fw, bw], axis=2), 2 * units
    return plain_output_and_train_op(x, n_in, x_ph, y_ph, len_ph, t0)


def plain_output_and_train_op(x, n_in, x_ph, y_ph, len_ph, t0):
    """The plain baselines' softmax output, masked CE and SGD step over time-major x [T, B, n_in]:
    (train_op, feed function, (net construction s, gradient construction s)), CPU time from t0."""
    with tf1.variable_scope("plain_output"):
        w = tf1.get_variable("W", [n_in, N_CLASSES], initializer=tf1.glorot_uniform_initializer())
        b = tf1.get_variable("b", [N_CLASSES], initializer=tf1.zeros_initializer())
    logits = tf.tensordot(x, w, [[2], [0]]) + b  # [T, B, C]
    mask = tf.transpose(tf.sequence_mask(len_ph, tf.shape(x_ph)[1]), [1, 0])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.transpose(y_ph, [1, 0]), logits=logits)
    loss = tf.reduce_sum(tf.where(mask, ce, tf.zeros_like(ce))) / tf.cast(tf.reduce_sum(len_ph), tf.float32)
    t1 = time.process_time()
    train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
    t2 = time.process_time()

    def feed(x, y, lens):
        return {x_ph: x, y_ph: y, len_ph: lens}

    return train_op, feed, (t1 - t0, t2 - t1)


def measure(session, train_op, feed, batches, steps):
    """:return: (frames, wall seconds, process CPU seconds)"""
    frames = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for k in range(steps):
        x, y, lens = batches[k % len(batches)]
        session.run(train_op, feed(x, y, lens))
        frames += int(lens.sum())
    return frames, time.perf_counter() - w0, time.process_time() - c0


def run_variants(variants, batches, rounds, steps):
    """Builds each variant in its own graph and session, then measures them in interleaved rounds (so that load
    changes hit all alike): {key: dict(session, build=(net s, grads s), wall=[frames/s], cpu=[frames/CPU-s])}."""
    runs = {}
    for key, build in variants.items():
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(1)
            train_op, feed, build_secs = build()
            session = tf1.Session(graph=graph)
            session.run(tf1.global_variables_initializer())
            measure(session, train_op, feed, batches, 1)  # warm-up
            runs[key] = dict(op=train_op, feed=feed, session=session, build=build_secs, wall=[], cpu=[])
    for _ in range(rounds):
        for r in runs.values():
            frames, wall, cpu = measure(r["session"], r["op"], r["feed"], batches, steps)
            r["wall"].append(frames / wall)
            r["cpu"].append(frames / cpu)
    return runs


def peak_rss_mb(key, args):
    """Peak RSS increase (MB) of a fresh process that builds only this variant over a few training steps."""
    cmd = [sys.executable, os.path.abspath(__file__), "--only", key, "--layers", str(args.layers), "--units",
           str(args.units), "--batch", str(args.batch), "--time", str(args.time), "--tf-cell-unit", args.tf_cell_unit]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    for line in out.stdout.splitlines():
        if line.startswith("peak_rss_mb "):
            return float(line.split()[1])
    raise RuntimeError("peak memory run of %s failed:\n%s" % (key, out.stderr[-3000:]))


def run_only(key, variants, batches):
    """Child process of peak_rss_mb: build one variant, run 3 steps, print the peak RSS."""
    import resource

    with tf.Graph().as_default() as graph:
        train_op, feed, _ = variants[key]()
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            base = _current_rss_mb()
            measure(session, train_op, feed, batches, 3)
    # the peak RSS over the training steps above the RSS before them (imports, graph, session, variables)
    print("peak_rss_mb %.1f" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 - base))


def _current_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--time", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tf-cell-unit", default="standardlstm", help="TF-cell unit to measure too ('' to skip)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak memory runs (one process each)")
    parser.add_argument("--only", help=argparse.SUPPRESS)  # internal: peak memory of one variant
    args = parser.parse_args()
    from returnn_lite import native_op

    if os.environ.pop(native_op.ENV_MODE, None) is not None and not args.only:
        print("(ignoring %s: this benchmark compares both paths)" % native_op.ENV_MODE)
    if native_op.lstm_module() is None:
        raise SystemExit("the native op is not available (no C++ compiler?): nothing to compare")
    rng = np.random.RandomState(42)
    batches = [make_batch(rng, args.batch, args.time) for _ in range(3)]
    variants = {"fused": lambda: build_returnn_lite(args.layers, args.units, "lstm", True),
                "loop": lambda: build_returnn_lite(args.layers, args.units, "lstm", False),
                "plain": lambda: build_plain_tf(args.layers, args.units)}
    if args.tf_cell_unit:
        variants["tfcell"] = lambda: build_returnn_lite(args.layers, args.units, args.tf_cell_unit, False)
    if args.only:
        return run_only(args.only, variants, batches)
    runs = run_variants(variants, batches, args.rounds, args.steps)
    for key, r in runs.items():
        r["session"].close()
        r["peak"] = 0 if args.no_memory else peak_rss_mb(key, args)
    names = {"fused": "fused op", "loop": "pure-TF loop", "plain": "plain TF",
             "tfcell": "TF cell (%s)" % args.tf_cell_unit}
    print("%-26s %12s %12s %10s %10s %12s" % ("variant", "frames/s", "frames/CPUs", "net s", "grads s", "step MB"))
    for key, r in runs.items():
        print("%-26s %12.0f %12.0f %10.2f %10.2f %12.0f" % (
            names[key], max(r["wall"]), max(r["cpu"]), r["build"][0], r["build"][1], r["peak"]))
    plain = runs["plain"]
    for key in runs:
        if key == "plain":
            continue
        r = runs[key]
        print("ratio %s / plain TF: frames/s %.3f, frames/CPU-s %.3f, grad construction %.2f, peak memory %.2f" % (
            names[key], max(r["wall"]) / max(plain["wall"]), max(r["cpu"]) / max(plain["cpu"]),
            r["build"][1] / plain["build"][1], r["peak"] / max(plain["peak"], 1)))
    fused, loop = runs["fused"], runs["loop"]
    print("ratio fused op / pure-TF loop: frames/s %.3f, peak memory %.2f" % (
        max(fused["wall"]) / max(loop["wall"]), fused["peak"] / max(loop["peak"], 1)))
    print("goals: fused/plain frames/s >= 1.7 (issue 30); fused grad construction <= plain; fused peak <= loop peak; "
          "TF cell/plain >= 1.0")


if __name__ == "__main__":
    main()
