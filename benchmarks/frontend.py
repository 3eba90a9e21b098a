#!/usr/bin/env python3
"""
Construction cost of rf model code on the RETURNN-layers backend vs the equivalent hand-written layer dict.

Model: a 12-layer pre-norm Transformer encoder (model dim 256, 4 heads, ff 1024, dropout 0.1) + linear output with
framewise CE, in train mode; both the same params (no bias in the attention) and the same dropout masks (residual
dropout broadcast over time). Measured in the same process, each in a fresh graph, CPU time, min over repeats:

- ``rf``:   ``get_net_dict`` (running the rf code) + ``TFNetwork.construct_from_dict`` + ``get_total_loss``,
- ``dict``: ``TFNetwork.construct_from_dict`` of the hand-written dict (layer_norm, self_attention, linear, ...)
  + ``get_total_loss``.

Prints both times, the layer counts and the ratio rf / dict (goal: <= 1.3).

    python benchmarks/frontend.py [--layers 12] [--repeats 3]
"""

import argparse
import gc
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.config import Config, global_config_ctx  # noqa: E402
from returnn_lite.frontend_layers import get_net_dict  # noqa: E402
from returnn_lite.network import TFNetwork  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

N_IN, MODEL, HEADS, FF, CLASSES = 40, 256, 4, 1024, 100


def make_rf_config(num_layers):
    time_dim = Dim(None, name="time")
    in_dim, model_dim, ff_dim = Dim(N_IN, name="in"), Dim(MODEL, name="model"), Dim(FF, name="ff")
    classes_dim = Dim(CLASSES, name="classes")

    class Block(rf.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = rf.LayerNorm(model_dim)
            self.att = rf.SelfAttention(model_dim, model_dim, key_dim_total=Dim(MODEL, name="k"),
                                        value_dim_total=Dim(MODEL, name="v"), num_heads=HEADS, att_dropout=0.1,
                                        with_bias=False)
            self.norm2 = rf.LayerNorm(model_dim)
            self.ff1 = rf.Linear(model_dim, ff_dim)
            self.ff2 = rf.Linear(ff_dim, model_dim)

        def __call__(self, x):
            x = x + rf.dropout(self.att(self.norm1(x), axis=time_dim), 0.1, axis=model_dim)
            return x + rf.dropout(self.ff2(rf.relu(self.ff1(self.norm2(x)))), 0.1, axis=model_dim)

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.inp = rf.Linear(in_dim, model_dim)
            self.layers = rf.Sequential(Block() for _ in range(num_layers))
            self.out = rf.Linear(model_dim, classes_dim)

        def __call__(self, x):
            return self.out(self.layers(self.inp(x)))

    def train_step(*, model, extern_data, **_):
        logits = model(extern_data["data"])
        rf.cross_entropy(estimated=logits, estimated_type="logits", target=extern_data["classes"],
                         axis=classes_dim).mark_as_loss("ce")

    return Config({
        "extern_data": {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
                        "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim}},
        "get_model": lambda **_: Model(), "train_step": train_step, "task": "train"})


def make_dict(num_layers):
    net = {"inp": {"class": "linear", "from": "data", "n_out": MODEL}}
    noise = {"*": None, "T": 1}  # as rf.dropout(axis=model_dim): the mask varies along batch and model dim only
    src = "inp"
    for i in range(num_layers):
        p = "l%i_" % i
        net.update({
            p + "ln1": {"class": "layer_norm", "from": src},
            p + "att": {"class": "self_attention", "from": p + "ln1", "num_heads": HEADS, "total_key_dim": MODEL,
                        "n_out": MODEL, "attention_dropout": 0.1},
            p + "att_proj": {"class": "linear", "from": p + "att", "n_out": MODEL, "with_bias": False},
            p + "att_drop": {"class": "dropout", "from": p + "att_proj", "dropout": 0.1, "dropout_noise_shape": noise},
            p + "res1": {"class": "combine", "kind": "add", "from": [src, p + "att_drop"]},
            p + "ln2": {"class": "layer_norm", "from": p + "res1"},
            p + "ff1": {"class": "linear", "from": p + "ln2", "n_out": FF, "activation": "relu"},
            p + "ff2": {"class": "linear", "from": p + "ff1", "n_out": MODEL},
            p + "ff_drop": {"class": "dropout", "from": p + "ff2", "dropout": 0.1, "dropout_noise_shape": noise},
            p + "res2": {"class": "combine", "kind": "add", "from": [p + "res1", p + "ff_drop"]},
        })
        src = p + "res2"
    net["output"] = {"class": "softmax", "from": src, "loss": "ce", "target": "classes"}
    return net


def time_rf(num_layers):
    config = make_rf_config(num_layers)
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default(), global_config_ctx(config):
        t0 = time.process_time()
        net_dict, _ = get_net_dict(epoch=1, step=0)
        t1 = time.process_time()
        net = TFNetwork(config=config, train_flag=True)
        net.construct_from_dict(net_dict)
        net.get_total_loss()
        t2 = time.process_time()
    return t2 - t0, t1 - t0, len(net.layers)


def time_dict(num_layers):
    config = Config({"extern_data": {"data": {"dim": N_IN}, "classes": {"dim": CLASSES, "sparse": True}}})
    with tf.Graph().as_default():
        t0 = time.process_time()
        net = TFNetwork(config=config, train_flag=True)
        net.construct_from_dict(make_dict(num_layers))
        net.get_total_loss()
        t1 = time.process_time()
    return t1 - t0, len(net.layers)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    time_dict(1), time_rf(1)  # warm-up (imports, TF kernels registry)
    rf_times, rf_dict_times, dict_times = [], [], []
    for _ in range(args.repeats):
        gc.collect()  # the graphs of earlier builds are garbage cycles: not collected (or timed) inside a build
        t, t_dict_build, n_rf = time_rf(args.layers)
        rf_times.append(t)
        rf_dict_times.append(t_dict_build)
        gc.collect()
        t, n_dict = time_dict(args.layers)
        dict_times.append(t)
    rf_t, dict_t = min(rf_times), min(dict_times)
    print("rf:   %.3fs CPU (of which rf code -> net dict %.3fs), %i layers" % (rf_t, min(rf_dict_times), n_rf))
    print("dict: %.3fs CPU, %i layers" % (dict_t, n_dict))
    print("ratio rf/dict: %.2f (goal <= 1.3)" % (rf_t / dict_t))


if __name__ == "__main__":
    main()
