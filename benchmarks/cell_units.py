#!/usr/bin/env python3
"""
Training speed of a BLSTM (default 4 x 256, as benchmarks/blstm_train.py) with a TF-cell unit of the rec layer
(``--unit standardlstm``, ``basiclstm``, ``rnn``, or ``lstm`` = the NativeLstm2 layout on the pure-TF loop), against
two plain-TF BLSTMs with the same cell math, each in its own graph and session of this process:

- ``plain loop``: hand-written: the input projection of all frames outside the loop, ``tf.while_loop`` over
  ``h @ W_rec`` with copy-through masking (the baseline of issue #30: "plain TF's loop"),
- ``plain dynamic_rnn``: ``tf.compat.v1.nn.bidirectional_dynamic_rnn`` with a cell written as TF's rnn cells are
  (per frame ``concat([x, h]) @ kernel + bias``; TF 2.21 with Keras 3 has no ``LSTMCell`` class, so the cell is a
  small duck-typed class with the same math and param shapes).

Prints per variant frames/s (wall) and frames per CPU-second of the process (best round, rounds interleaved), the CPU
seconds to build the net and its gradients, and the ratios of returnn_lite against both baselines.

    python benchmarks/cell_units.py [--unit standardlstm] [--layers 4] [--units 256] [--batch 16] [--time 200]
        [--steps 3] [--rounds 4]
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from blstm_train import (  # noqa: E402
    N_IN, build_returnn_lite, make_batch, plain_output_and_train_op, run_variants)

tf1 = tf.compat.v1

# unit -> (gates per unit, forget bias, gate order); the math of each below in _cell_step
UNITS = {"standardlstm": (4, 1.0, "ijfo"), "basiclstm": (4, 1.0, "ijfo"), "lstm": (4, 0.0, "jifo"),
         "rnn": (1, None, None)}


def _cell_step(unit, z, c, units):
    """Gate math of one frame from the full pre-activation z [B, gates*units]: (h, c) (c is None for rnn)."""
    n_gates, forget_bias, order = UNITS[unit]
    if n_gates == 1:
        return tf.tanh(z), None
    parts = dict(zip(order, tf.split(z, 4, axis=1)))
    c_new = tf.sigmoid(parts["f"] + forget_bias) * c + tf.sigmoid(parts["i"]) * tf.tanh(parts["j"]) if forget_bias \
        else tf.sigmoid(parts["f"]) * c + tf.sigmoid(parts["i"]) * tf.tanh(parts["j"])
    return tf.sigmoid(parts["o"]) * tf.tanh(c_new), c_new


def _params(scope, unit, n_in, units):
    n_gates = UNITS[unit][0]
    with tf1.variable_scope(scope):
        kernel = tf1.get_variable("kernel", [n_in + units, n_gates * units],
                                  initializer=tf1.glorot_uniform_initializer())
        bias = tf1.get_variable("bias", [n_gates * units], initializer=tf1.zeros_initializer())
    return kernel, bias


def _rnn_loop(unit, x, seq_len, n_in, units, reverse, scope):
    """Hand-written: x [T, B, n_in] -> [T, B, units]; projection outside the loop, copy-through masking."""
    kernel, bias = _params(scope, unit, n_in, units)
    if reverse:
        x = tf.reverse_sequence(x, seq_len, seq_axis=0, batch_axis=1)
    z = tf.tensordot(x, kernel[:n_in], [[2], [0]]) + bias
    w_rec = kernel[n_in:]
    n_time, n_batch = tf.shape(z)[0], tf.shape(z)[1]
    z_ta = tf.TensorArray(tf.float32, size=n_time).unstack(z)
    out_ta = tf.TensorArray(tf.float32, size=n_time)

    def body(t, out_ta, c, h):
        h_new, c_new = _cell_step(unit, z_ta.read(t) + tf.matmul(h, w_rec), c, units)
        mask = tf.expand_dims(t < seq_len, 1)
        h_new = tf.where(mask, h_new, h)
        c_new = tf.where(mask, c_new, c) if c_new is not None else c
        return t + 1, out_ta.write(t, h_new), c_new, h_new

    zeros = tf.zeros([n_batch, units])
    _, out_ta, _, _ = tf.while_loop(lambda t, *_: t < n_time, body, [0, out_ta, zeros, zeros])
    y = out_ta.stack()
    if reverse:
        y = tf.reverse_sequence(y, seq_len, seq_axis=0, batch_axis=1)
    return y


class _PlainCell:
    """Duck-typed TF rnn cell (what tf.compat.v1.nn.dynamic_rnn needs): concat([x, h]) @ kernel + bias per frame."""

    def __init__(self, unit, n_in, units, scope):
        self.unit, self.units = unit, units
        self.kernel, self.bias = _params(scope, unit, n_in, units)

    @property
    def state_size(self):
        return (self.units, self.units)

    @property
    def output_size(self):
        return self.units

    def zero_state(self, batch_size, dtype):
        return tuple(tf.zeros([batch_size, self.units], dtype) for _ in range(2))

    def __call__(self, inputs, state, scope=None):
        c, h = state
        z = tf.matmul(tf.concat([inputs, h], axis=1), self.kernel) + self.bias
        h_new, c_new = _cell_step(self.unit, z, c, self.units)
        return h_new, (c_new if c_new is not None else c, h_new)


def _rnn_dynamic(unit, x, seq_len, n_in, units, scope):
    fw, bw = _PlainCell(unit, n_in, units, scope + "_fw"), _PlainCell(unit, n_in, units, scope + "_bw")
    (y_fw, y_bw), _ = tf1.nn.bidirectional_dynamic_rnn(fw, bw, x, sequence_length=seq_len, dtype=tf.float32,
                                                        time_major=True, scope=scope)
    return tf.concat([y_fw, y_bw], axis=2)


def build_plain(unit, layers, units, dynamic):
    x_ph = tf1.placeholder(tf.float32, [None, None, N_IN])
    y_ph = tf1.placeholder(tf.int32, [None, None])
    len_ph = tf1.placeholder(tf.int32, [None])
    t0 = time.process_time()
    x = tf.transpose(x_ph, [1, 0, 2])
    n_in = N_IN
    for i in range(layers):
        if dynamic:
            x = _rnn_dynamic(unit, x, len_ph, n_in, units, "plain_lstm%i" % i)
        else:
            fw = _rnn_loop(unit, x, len_ph, n_in, units, False, "plain_lstm%i_fw" % i)
            bw = _rnn_loop(unit, x, len_ph, n_in, units, True, "plain_lstm%i_bw" % i)
            x = tf.concat([fw, bw], axis=2)
        n_in = 2 * units
    return plain_output_and_train_op(x, n_in, x_ph, y_ph, len_ph, t0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--unit", default="standardlstm", choices=sorted(UNITS))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--time", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.RandomState(42)
    batches = [make_batch(rng, args.batch, args.time) for _ in range(3)]
    variants = {
        "lite": lambda: build_returnn_lite(args.layers, args.units, args.unit, native=False),
        "loop": lambda: build_plain(args.unit, args.layers, args.units, dynamic=False),
        "dynamic": lambda: build_plain(args.unit, args.layers, args.units, dynamic=True)}
    names = {"lite": "returnn_lite (%s)" % args.unit, "loop": "plain TF loop", "dynamic": "plain TF dynamic_rnn"}
    runs = run_variants(variants, batches, args.rounds, args.steps)
    for r in runs.values():
        r["session"].close()
    print("%-28s %12s %12s %10s %10s" % ("variant", "frames/s", "frames/CPUs", "net s", "grads s"))
    for key, r in runs.items():
        print("%-28s %12.0f %12.0f %10.2f %10.2f" % (
            names[key], max(r["wall"]), max(r["cpu"]), r["build"][0], r["build"][1]))
    lite = runs["lite"]
    for key in ("loop", "dynamic"):
        base = runs[key]
        print("ratio %s / %s: frames/s %.3f, frames/CPU-s %.3f, net+grads construction %.2f" % (
            names["lite"], names[key], max(lite["wall"]) / max(base["wall"]), max(lite["cpu"]) / max(base["cpu"]),
            sum(lite["build"]) / sum(base["build"])))
    print("goal: returnn_lite / plain TF loop frames/s >= 1.0")


if __name__ == "__main__":
    main()
