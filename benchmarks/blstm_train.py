#!/usr/bin/env python3
"""
Training speed of a BLSTM acoustic model: 4 bidirectional LSTM layers x 256 units, 40-dim input, 500 classes,
sequences of ~200 frames, softmax + cross entropy, SGD. returnn_lite ("lstm" = NativeLstm2 layout) vs a
hand-written plain-TF equivalent (input projection for all frames, tf.while_loop over h @ W_re, masking), in
the same process. Prints frames/second of both and the ratio.

    python benchmarks/blstm_train.py [--layers 4] [--units 256] [--batch 16] [--time 200] [--steps 3] [--rounds 4]
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
N_IN, N_CLASSES = 40, 500


def make_batch(rng, batch, time_len):
    lens = rng.randint(int(time_len * 0.8), time_len + 1, size=batch).astype("int32")
    lens[0] = time_len
    x = rng.randn(batch, time_len, N_IN).astype("float32")
    y = rng.randint(0, N_CLASSES, size=(batch, time_len)).astype("int32")
    return x, y, lens


def build_returnn_lite(layers, units):
    net_dict = {}
    src = ["data"]
    for i in range(layers):
        for name, direction in (("lstm%i_fw" % i, 1), ("lstm%i_bw" % i, -1)):
            net_dict[name] = {"class": "rec", "unit": "lstm", "n_out": units, "direction": direction, "from": src}
        src = ["lstm%i_fw" % i, "lstm%i_bw" % i]
    net_dict["output"] = {"class": "softmax", "loss": "ce", "from": src}
    net = TFNetwork(extern_data=ExternData({"data": {"dim": N_IN}, "classes": {"dim": N_CLASSES, "sparse": True}}),
                    train_flag=True)
    net.construct_from_dict(net_dict)
    train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(net.get_objective())
    data, classes = net.extern_data.get_data("data"), net.extern_data.get_data("classes")

    def feed(x, y, lens):
        return {data.placeholder: x, data.size_placeholder[0]: lens, classes.placeholder: y,
                classes.size_placeholder[0]: lens}

    return net, train_op, feed


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
    x = tf.transpose(x_ph, [1, 0, 2])
    n_in = N_IN
    for i in range(layers):
        fw = _lstm_plain(x, len_ph, n_in, units, False, "plain_lstm%i_fw" % i)
        bw = _lstm_plain(x, len_ph, n_in, units, True, "plain_lstm%i_bw" % i)
        x, n_in = tf.concat([fw, bw], axis=2), 2 * units
    with tf1.variable_scope("plain_output"):
        w = tf1.get_variable("W", [n_in, N_CLASSES], initializer=tf1.glorot_uniform_initializer())
        b = tf1.get_variable("b", [N_CLASSES], initializer=tf1.zeros_initializer())
    logits = tf.tensordot(x, w, [[2], [0]]) + b  # [T, B, C]
    mask = tf.transpose(tf.sequence_mask(len_ph, tf.shape(x_ph)[1]), [1, 0])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.transpose(y_ph, [1, 0]), logits=logits)
    loss = tf.reduce_sum(tf.where(mask, ce, tf.zeros_like(ce))) / tf.cast(tf.reduce_sum(len_ph), tf.float32)
    train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)

    def feed(x, y, lens):
        return {x_ph: x, y_ph: y, len_ph: lens}

    return train_op, feed


def measure(session, train_op, feed, batches, steps):
    frames = 0
    t0 = time.perf_counter()
    for k in range(steps):
        x, y, lens = batches[k % len(batches)]
        session.run(train_op, feed(x, y, lens))
        frames += int(lens.sum())
    return frames, time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--time", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.RandomState(42)
    batches = [make_batch(rng, args.batch, args.time) for _ in range(3)]
    with tf.Graph().as_default():
        net, lite_op, lite_feed = build_returnn_lite(args.layers, args.units)
        plain_op, plain_feed = build_plain_tf(args.layers, args.units)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            measure(session, lite_op, lite_feed, batches, 1)  # warm-up
            measure(session, plain_op, plain_feed, batches, 1)
            totals = {"lite": [0, 0.0], "plain": [0, 0.0]}
            for _ in range(args.rounds):  # interleaved, so that load changes hit both alike
                for key, op, feed in (("lite", lite_op, lite_feed), ("plain", plain_op, plain_feed)):
                    frames, secs = measure(session, op, feed, batches, args.steps)
                    totals[key][0] += frames
                    totals[key][1] += secs
            lite = totals["lite"][0] / totals["lite"][1]
            plain = totals["plain"][0] / totals["plain"][1]
    print("returnn_lite: %.0f frames/s" % lite)
    print("plain TF:     %.0f frames/s" % plain)
    print("ratio returnn_lite / plain TF: %.3f" % (lite / plain))


if __name__ == "__main__":
    main()
