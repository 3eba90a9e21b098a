#!/usr/bin/env python3
"""
CPU time of the ``twod_lstm`` layer (forward + gradient of all params) against a plain-TF baseline in the same
process, each in its own graph and session, on the same random input and weights:

- ``layer``: returnn_lite's twod_lstm (one loop step per anti-diagonal of the target x source grid: two
  [T*B, n] x [n, 5n] matmuls per step, T + S - 1 steps),
- ``naive``: plain TF, the grid cell by cell: a tf.while_loop over the target rows with an inner tf.while_loop over
  the source positions (two [B, n] x [n, 5n] matmuls per cell, T * S steps) -- what one writes without the
  diagonal trick.

Both compute the same numbers (checked). Prints the best CPU time (process time, min over rounds) per variant and
the ratio naive / layer.

    python benchmarks/twod_lstm.py [--batch 8] [--src 40] [--trg 30] [--units 64] [--rounds 3]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from returnn_lite.extern_data import ExternData  # noqa: E402
from returnn_lite.network import TFNetwork  # noqa: E402

tf1 = tf.compat.v1
N_SRC_FEAT, N_TRG_FEAT = 32, 16


def build_layer(units):
    net = TFNetwork(extern_data=ExternData({"data": {"dim": N_SRC_FEAT}, "classes": {"dim": N_TRG_FEAT}}),
                    train_flag=True)
    net.construct_from_dict({"output": {"class": "twod_lstm", "from": ["data", "data:classes"], "n_out": units,
                                        "pooling": "max"}})
    layer = net.get_layer("output")
    out = layer.output.copy_as_batch_major().placeholder
    params = [layer.params[k] for k in ("rec-twod/W_re", "rec-twod/Vh_re", "rec-twod/Vv_re")]
    data, classes = net.extern_data.get_data("data"), net.extern_data.get_data("classes")
    inputs = (data.placeholder, classes.placeholder, data.size_placeholder[0], classes.size_placeholder[0])
    return inputs, params, out


def build_naive(units):
    """Plain TF: row loop over the target, inner loop over the source, one cell per step."""
    src = tf1.placeholder(tf.float32, [None, None, N_SRC_FEAT])
    trg = tf1.placeholder(tf.float32, [None, None, N_TRG_FEAT])
    src_lens = tf1.placeholder(tf.int32, [None])
    trg_lens = tf1.placeholder(tf.int32, [None])
    n = units
    w = tf1.get_variable("W_re", (N_SRC_FEAT + N_TRG_FEAT, 5 * n))
    v_h = tf1.get_variable("Vh_re", (n, 5 * n))
    v_v = tf1.get_variable("Vv_re", (n, 5 * n))
    n_b, n_s, n_t = tf.shape(src)[0], tf.shape(src)[1], tf.shape(trg)[1]
    src_mask = tf.sequence_mask(src_lens, n_s, dtype=tf.float32)  # [B,S]

    def row(t, c_above, h_above, rows):
        def cell(s, c_left, h_left, c_row, h_row):
            x = tf.concat([src[:, s], trg[:, t]], axis=-1)
            z = tf.matmul(x, w) + tf.matmul(h_left, v_h) + tf.matmul(h_above[s], v_v)
            i, f, lam, o = [tf.sigmoid(z[:, k * n:(k + 1) * n]) for k in range(4)]
            c = i * tf.tanh(z[:, 4 * n:]) + f * lam * c_above[s] + f * (1 - lam) * c_left
            valid = src_mask[:, s:s + 1]
            c = c * valid
            h = o * tf.tanh(c) * valid
            return s + 1, c, h, c_row.write(s, c), h_row.write(s, h)

        zeros = tf.zeros([n_b, n])
        _, _, _, c_row, h_row = tf.while_loop(
            lambda s, *_: s < n_s, cell,
            (0, zeros, zeros, tf.TensorArray(tf.float32, size=n_s), tf.TensorArray(tf.float32, size=n_s)))
        h_row = h_row.stack()  # [S,B,n]
        return t + 1, c_row.stack(), h_row, rows.write(t, tf.reduce_max(h_row, axis=0))

    zeros = tf.zeros([n_s, n_b, n])
    _, _, _, rows = tf.while_loop(lambda t, *_: t < n_t, row,
                                  (0, zeros, zeros, tf.TensorArray(tf.float32, size=n_t)),
                                  shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None, n]),
                                                    tf.TensorShape([None, None, n]), tf.TensorShape(None)))
    out = tf.transpose(rows.stack(), [1, 0, 2])  # [B,T,n]
    return (src, trg, src_lens, trg_lens), [w, v_h, v_v], out


def measure(build, units, feed_values, weights, rounds):
    graph = tf.Graph()
    with graph.as_default():
        inputs, params, out = build(units)
        grads = tf1.gradients(tf.reduce_sum(out), params)
        with tf1.Session(graph=graph, config=tf1.ConfigProto(intra_op_parallelism_threads=1,
                                                             inter_op_parallelism_threads=1)) as session:
            session.run(tf1.global_variables_initializer())
            for p, value in zip(params, weights):
                p.load(value, session)
            feed = dict(zip(inputs, feed_values))
            value, _ = session.run((out, grads), feed)  # warm-up
            best = float("inf")
            for _ in range(rounds):
                t0 = time.process_time()
                session.run((out, grads), feed)
                best = min(best, time.process_time() - t0)
    return best, value


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--src", type=int, default=40)
    parser.add_argument("--trg", type=int, default=30)
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    src_lens = rng.randint(args.src // 2, args.src + 1, size=args.batch).astype("int32")
    src_lens[0] = args.src
    feed_values = (rng.randn(args.batch, args.src, N_SRC_FEAT).astype("float32"),
                   rng.randn(args.batch, args.trg, N_TRG_FEAT).astype("float32"),
                   src_lens, np.full([args.batch], args.trg, "int32"))
    n = args.units
    weights = [rng.uniform(-0.1, 0.1, shape).astype("float32")
               for shape in ((N_SRC_FEAT + N_TRG_FEAT, 5 * n), (n, 5 * n), (n, 5 * n))]
    print("twod_lstm: batch %i, source %i, target %i, %i units; forward + gradient, CPU time, best of %i"
          % (args.batch, args.src, args.trg, n, args.rounds))
    times = {}
    outs = {}
    for name, build in (("layer", build_layer), ("naive", build_naive)):
        times[name], outs[name] = measure(build, n, feed_values, weights, args.rounds)
        print("  %-6s %8.3f s" % (name, times[name]))
    np.testing.assert_allclose(outs["layer"], outs["naive"], rtol=1e-4, atol=1e-5)
    print("  same outputs; naive / layer: %.2fx" % (times["naive"] / times["layer"]))


if __name__ == "__main__":
    main()
