#!/usr/bin/env python3
"""
Construction speed: a chain of N linear layers built by returnn_lite vs the same net in plain TF
(tf.compat.v1 variables + matmul), in the same process. Prints seconds, op counts and the ratio.

    python benchmarks/construction.py [--layers 200] [--dim 512] [--repeat 3]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from returnn_lite.extern_data import ExternData  # noqa: E402
from returnn_lite.network import TFNetwork  # noqa: E402

tf1 = tf.compat.v1


def build_returnn_lite(num_layers, dim):
    net_dict = {}
    src = "data"
    for i in range(num_layers):
        name = "output" if i == num_layers - 1 else "l%i" % i
        net_dict[name] = {"class": "linear", "activation": "tanh", "n_out": dim, "from": src}
        src = name
    with tf.Graph().as_default() as graph:
        t0 = time.perf_counter()
        net = TFNetwork(extern_data=ExternData({"data": {"dim": dim}}), train_flag=False)
        net.construct_from_dict(net_dict)
        dt = time.perf_counter() - t0
        return dt, len(graph.get_operations())


def build_plain_tf(num_layers, dim):
    with tf.Graph().as_default() as graph:
        t0 = time.perf_counter()
        x = tf1.placeholder(tf.float32, [None, None, dim], name="data")
        tf1.placeholder(tf.int32, [None], name="data_seq_lens")
        for i in range(num_layers):
            with tf1.variable_scope("l%i" % i):
                w = tf1.get_variable("W", [dim, dim], initializer=tf1.glorot_uniform_initializer())
                b = tf1.get_variable("b", [dim], initializer=tf1.zeros_initializer())
                x = tf.tanh(tf.matmul(x, w) + b)
        dt = time.perf_counter() - t0
        return dt, len(graph.get_operations())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    build_returnn_lite(5, 8)  # warm up imports and registries
    build_plain_tf(5, 8)
    lite = min(build_returnn_lite(args.layers, args.dim) for _ in range(args.repeat))
    plain = min(build_plain_tf(args.layers, args.dim) for _ in range(args.repeat))
    print("%i linear layers, dim %i" % (args.layers, args.dim))
    print("returnn_lite: %.3f s, %i ops" % lite)
    print("plain TF:     %.3f s, %i ops" % plain)
    print("ratio (returnn_lite / plain TF): time %.2fx, ops %.2fx" % (lite[0] / plain[0], lite[1] / plain[1]))


if __name__ == "__main__":
    main()
