#!/usr/bin/env python3
"""
Startup and graph construction speed on real networks (issue 19), returnn_lite vs the same model hand-written in
plain TF (graph mode, tf.gradients), in one process, interleaved, CPU time (process_time), min over repeats:

- ``big``: ``../shared/bench/big_construct.config`` (12+6 layer Transformer, d 512) in training mode, against a
  compact plain-TF Transformer of the same shapes (decoder over the whole target sequence, as teacher forcing);
- ``blstm``: the BLSTM 4x256 model of ``benchmarks/blstm_train.py`` (returnn_lite fused "lstm" unit vs its plain-TF
  version).

For each: forward construction, loss, gradients (s), forward op counts by type, and the ratios.

Two plain-TF baselines for ``big`` (issue 30), both in this process:

- "own": ``plain_big`` below (sequence masks, tensordot dense layers; the one of issue 19);
- "shared": ``../shared/bench/baseline_tf.py`` (``make_model("big_construct")``: no masks, 2D MatMul dense layers,
  einsum attention), the baseline the original RETURNN is measured against. Its forward includes the loss, so the
  row "forward+loss" is the one to compare; the issue-30 goals are gradients <= 1.1x and forward <= 1.0x of it. Then process start
-> first ``session.run`` of a training step (wall clock, fresh process each): the CLI (``python -m returnn_lite``)
on a BLSTM training config vs a plain-TF script doing the same. Grappler's share of the first step is shown too.

    python benchmarks/startup.py [--repeat 3] [--only big|enc|flat|blstm] [--no-first-step]

``--only enc``: big_construct's encoder alone (+ a framewise softmax/CE output), against the plain-TF encoder: the
construction cost outside the decoder's rec loop. ``--only flat``: big_construct with the decoder's unit layers
written as top-level layers over the target sequence (what moving the decoder out of its loop amounts to in
training), against plain_big.
"""

import argparse
import collections
import gc
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
BIG_CONFIG = os.path.join(ROOT, "..", "shared", "bench", "big_construct.config")
if not os.path.exists(BIG_CONFIG):
    BIG_CONFIG = "/work/shared/bench/big_construct.config"

import tensorflow as tf  # noqa: E402

tf1 = tf.compat.v1
SHARED_BENCH = os.path.dirname(BIG_CONFIG)
try:  # imported before any TF op runs: it sets TF's thread counts at import
    sys.path.insert(0, SHARED_BENCH)
    import baseline_tf as shared_baseline  # noqa: E402
except ImportError:
    shared_baseline = None
finally:
    sys.path.remove(SHARED_BENCH)
OP_GROUPS = {
    "Const": ("Const",), "Shape": ("Shape",), "StridedSlice": ("StridedSlice",), "Reshape": ("Reshape",),
    "Transpose": ("Transpose",), "Identity": ("Identity",),
    "control flow": ("While", "StatelessWhile", "If", "StatelessIf", "Enter", "Exit", "Merge", "Switch",
                     "NextIteration", "LoopCond"),
}


def op_counts(ops):
    """Counts of the forward ops by group (TensorList* too)."""
    types = collections.Counter(op.type for op in ops)
    res = {"total": len(ops)}
    for group, names in OP_GROUPS.items():
        res[group] = sum(types[n] for n in names)
    res["TensorList*"] = sum(n for t, n in types.items() if t.startswith("TensorList") or t == "EmptyTensorList")
    return res


def _timed_build(build_forward):
    """build_forward() -> loss tensor; returns dict of times (s CPU) and op counts."""
    _LAST_NET[:] = []  # (kept only for grappler_first_run)
    gc.collect()  # the graphs of earlier builds are garbage cycles: not collected (or timed) inside this build
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        t0 = time.process_time()
        loss_fn = build_forward()
        t1 = time.process_time()
        loss = loss_fn()
        t2 = time.process_time()
        forward_ops = graph.get_operations()
        tf.gradients(loss, tf1.trainable_variables())
        t3 = time.process_time()
    return dict(forward=t1 - t0, loss=t2 - t1, gradients=t3 - t2, ops=op_counts(forward_ops),
                all_ops=len(graph.get_operations()))


# ---- returnn_lite

def lite_big():
    from returnn_lite.config import Config
    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    config = Config()
    config.load_file(BIG_CONFIG)
    train_flag = tf1.placeholder_with_default(False, shape=(), name="train_flag")
    tf1.get_default_graph()._returnn_lite_train_flag = train_flag
    extern_data = ExternData()
    extern_data.init_from_config(config)
    net = TFNetwork(config=config, extern_data=extern_data, train_flag=train_flag, eval_flag=True)
    net.construct_from_dict(config.typed_value("network"))
    _LAST_NET[:] = [net]
    return net.get_objective


_LAST_NET = []


def lite_enc():
    """big_construct's encoder only (+ a framewise softmax output with CE on it), no decoder / rec loop."""
    from returnn_lite.config import Config
    from returnn_lite.data import Data, FeatureDim
    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    config = Config()
    config.load_file(BIG_CONFIG)
    net_dict = {k: v for k, v in config.typed_value("network").items() if k not in ("output", "decision") and not k.startswith("dec_")}
    net_dict["output"] = {"class": "softmax", "from": "encoder", "loss": "ce", "loss_opts": {"label_smoothing": 0.1},
                          "with_bias": False, "forward_weights_init": net_dict["enc_01_ff_conv1"][
                              "forward_weights_init"]}
    train_flag = tf1.placeholder_with_default(False, shape=(), name="train_flag")
    tf1.get_default_graph()._returnn_lite_train_flag = train_flag
    extern_data = ExternData({"data": {"dim": 40}})
    data = extern_data.get_data("data")
    extern_data.register_data(Data(name="classes", dims=data.dims[:2], sparse_dim=FeatureDim("classes", 1000),
                                   auto_create_placeholders=True))
    net = TFNetwork(config=config, extern_data=extern_data, train_flag=train_flag, eval_flag=True)
    net.construct_from_dict(net_dict)
    _LAST_NET[:] = [net]
    return net.get_objective


def lite_flat():
    """
    big_construct with its decoder unit written as top-level layers over the whole target sequence (prev:output ->
    the target shifted by one frame, base:X -> X; no choice/end/decision): the network that moving the decoder out
    of its loop amounts to in training, i.e. what big can reach without a loop.
    """
    from returnn_lite.config import Config
    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    def flat(v):
        if isinstance(v, list):
            return [flat(x) for x in v]
        if isinstance(v, str) and v.startswith("base:"):
            return v[len("base:"):]
        return "prev_output" if v == "prev:output" else v

    config = Config()
    config.load_file(BIG_CONFIG)
    net_dict = dict(config.typed_value("network"))
    unit = net_dict.pop("output")["unit"]
    del net_dict["decision"]
    for name, desc in unit.items():
        if name not in ("output", "end"):
            net_dict[name] = {k: flat(v) for k, v in desc.items()}
    net_dict["prev_output"] = {"class": "shift_axis", "from": "data:classes", "axis": "T", "amount": 1, "pad": True,
                               "adjust_size_info": False}
    train_flag = tf1.placeholder_with_default(False, shape=(), name="train_flag")
    tf1.get_default_graph()._returnn_lite_train_flag = train_flag
    extern_data = ExternData()
    extern_data.init_from_config(config)
    net = TFNetwork(config=config, extern_data=extern_data, train_flag=train_flag, eval_flag=True)
    net.construct_from_dict(net_dict)
    return net.get_objective


def lite_blstm(layers=4, units=256):
    from returnn_lite.config import Config
    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork
    from blstm_train import N_CLASSES, N_IN

    net_dict, src = {}, ["data"]
    for i in range(layers):
        for name, direction in (("lstm%i_fw" % i, 1), ("lstm%i_bw" % i, -1)):
            net_dict[name] = {"class": "rec", "unit": "lstm", "n_out": units, "direction": direction, "from": src}
        src = ["lstm%i_fw" % i, "lstm%i_bw" % i]
    net_dict["output"] = {"class": "softmax", "loss": "ce", "from": src}
    net = TFNetwork(config=Config({"native_ops": True}),
                    extern_data=ExternData({"data": {"dim": N_IN}, "classes": {"dim": N_CLASSES, "sparse": True}}),
                    train_flag=True)
    net.construct_from_dict(net_dict)
    return net.get_objective


# ---- plain TF

def plain_blstm(layers=4, units=256):
    from blstm_train import N_CLASSES, N_IN, _lstm_plain

    x_ph = tf1.placeholder(tf.float32, [None, None, N_IN])
    y_ph = tf1.placeholder(tf.int32, [None, None])
    len_ph = tf1.placeholder(tf.int32, [None])
    x, n_in = tf.transpose(x_ph, [1, 0, 2]), N_IN
    for i in range(layers):
        fw = _lstm_plain(x, len_ph, n_in, units, False, "plain_lstm%i_fw" % i)
        bw = _lstm_plain(x, len_ph, n_in, units, True, "plain_lstm%i_bw" % i)
        x, n_in = tf.concat([fw, bw], axis=2), 2 * units
    logits = _dense(x, N_CLASSES, "plain_output")
    mask = tf.transpose(tf.sequence_mask(len_ph, tf.shape(x_ph)[1]), [1, 0])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.transpose(y_ph, [1, 0]), logits=logits)
    return lambda: tf.reduce_sum(tf.where(mask, ce, tf.zeros_like(ce))) / tf.cast(tf.reduce_sum(len_ph), tf.float32)


def _dense(x, n_out, scope, bias=True, act=None):
    with tf1.variable_scope(scope):
        w = tf1.get_variable("W", [x.shape[-1], n_out], initializer=tf1.glorot_uniform_initializer())
        y = tf.tensordot(x, w, [[x.shape.rank - 1], [0]])
        if bias:
            y += tf1.get_variable("b", [n_out], initializer=tf1.zeros_initializer())
    return act(y) if act else y


def _layer_norm(x, scope):
    with tf1.variable_scope(scope):
        d = x.shape[-1]
        scale = tf1.get_variable("scale", [d], initializer=tf1.ones_initializer())
        bias = tf1.get_variable("bias", [d], initializer=tf1.zeros_initializer())
    mean, var = tf.nn.moments(x, [-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-6) * scale + bias


def _attention(q_in, kv_in, kv_mask, heads, scope, causal=False, self_att=True, d=512, drop=0.1):
    """q_in [B,Tq,D], kv_in [B,Tk,D], kv_mask [B,Tk] bool."""
    with tf1.variable_scope(scope):
        if self_att:
            qkv = _dense(q_in, 3 * d, "qkv", bias=False)
            q, k, v = tf.split(qkv, 3, axis=-1)
        else:
            q = _dense(q_in, d, "q", bias=False)
            k, v = _dense(kv_in, d, "k", bias=False), _dense(kv_in, d, "v", bias=False)

        def heads_(x):
            b, t = tf.shape(x)[0], tf.shape(x)[1]
            return tf.transpose(tf.reshape(x, [b, t, heads, d // heads]), [0, 2, 1, 3])

        q, k, v = heads_(q), heads_(k), heads_(v)
        energy = tf.matmul(q, k, transpose_b=True) * (d // heads) ** -0.5  # [B,H,Tq,Tk]
        mask = kv_mask[:, None, None, :]
        if causal:
            tq = tf.shape(q_in)[1]
            mask = tf.logical_and(mask, tf.linalg.band_part(tf.ones([tq, tq], tf.bool), -1, 0)[None, None])
        energy = tf.where(mask, energy, tf.fill(tf.shape(energy), float("-inf")))
        weights = tf.nn.dropout(tf.nn.softmax(energy), rate=drop)
        out = tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3])
        out = tf.reshape(out, [tf.shape(q_in)[0], tf.shape(q_in)[1], d])
        return _dense(out, d, "out", bias=False)


def shared_big():
    """big_construct in ../shared/bench/baseline_tf.py (the shared baseline): placeholders, params, forward and loss."""
    x = tf1.placeholder(tf.float32, [None, None, shared_baseline.IN_DIM], name="data")
    y = tf1.placeholder(tf.int32, [None, None], name="classes")
    loss = shared_baseline.make_model("big_construct", "raw").loss(x, y, training=True)
    return lambda: loss


def _positional(x, d=512):
    t = tf.shape(x)[1]
    pos = tf.cast(tf.range(t), tf.float32)[:, None]
    inv = tf.exp(tf.range(d // 2, dtype=tf.float32) * (-4.0 * 2.302585 / (d // 2 - 1)))
    return x + tf.concat([tf.sin(pos * inv), tf.cos(pos * inv)], axis=1)[None]


def plain_enc(**kwargs):
    """The encoder of plain_big with a framewise softmax output (as lite_enc)."""
    return plain_big(dec_layers=0, **kwargs)


def plain_big(enc_layers=12, dec_layers=6, d=512, heads=8, ff=2048, drop=0.1, n_in=40, n_classes=1000):
    """The Transformer of big_construct.config, written directly in TF (training graph, teacher forcing).
    dec_layers=0: only the encoder, with a framewise softmax output on it (targets of the input's length)."""
    x_ph = tf1.placeholder(tf.float32, [None, None, n_in])
    x_len = tf1.placeholder(tf.int32, [None])
    y_ph = tf1.placeholder(tf.int32, [None, None])
    y_len = tf1.placeholder(tf.int32, [None])
    x_mask, y_mask = tf.sequence_mask(x_len, tf.shape(x_ph)[1]), tf.sequence_mask(y_len, tf.shape(y_ph)[1])
    x = tf.nn.dropout(_positional(_dense(x_ph, d, "source_embed", bias=False) * d ** 0.5), rate=drop)

    def ff_block(h, scope):
        y = _dense(_layer_norm(h, scope + "_ln"), ff, scope + "_1", act=tf.nn.relu)
        return h + tf.nn.dropout(_dense(tf.nn.dropout(y, rate=drop), d, scope + "_2"), rate=drop)

    for i in range(enc_layers):
        x = x + tf.nn.dropout(_attention(_layer_norm(x, "enc%i_att_ln" % i), None, x_mask, heads, "enc%i_att" % i),
                              rate=drop)
        x = ff_block(x, "enc%i_ff" % i)
    enc = _layer_norm(x, "encoder")
    if not dec_layers:
        y_ph, y_mask = tf1.placeholder(tf.int32, [None, None]), x_mask
        logits = _dense(enc, n_classes, "output", bias=False)
        return _smoothed_ce_loss(y_ph, y_mask, logits, n_classes)
    prev = tf.pad(y_ph[:, :-1], [[0, 0], [1, 0]])  # prev:output, initial 0
    with tf1.variable_scope("target_embed"):
        emb = tf1.get_variable("W", [n_classes, d], initializer=tf1.glorot_uniform_initializer())
    y = tf.nn.dropout(_positional(tf.nn.embedding_lookup(emb, prev) * d ** 0.5), rate=drop)
    for i in range(dec_layers):
        y = y + tf.nn.dropout(_attention(_layer_norm(y, "dec%i_satt_ln" % i), None, y_mask, heads, "dec%i_satt" % i,
                                         causal=True), rate=drop)
        y = y + tf.nn.dropout(_attention(_layer_norm(y, "dec%i_att_ln" % i), enc, x_mask, heads, "dec%i_att" % i,
                                         self_att=False), rate=drop)
        y = ff_block(y, "dec%i_ff" % i)
    logits = _dense(_layer_norm(y, "decoder"), n_classes, "output_prob", bias=False)
    return _smoothed_ce_loss(y_ph, y_mask, logits, n_classes)


def _smoothed_ce_loss(y_ph, y_mask, logits, n_classes):
    def loss():
        ce = tf.nn.softmax_cross_entropy_with_logits(
            labels=tf.one_hot(y_ph, n_classes, on_value=0.9 + 0.1 / n_classes, off_value=0.1 / n_classes),
            logits=logits)
        return tf.reduce_sum(tf.where(y_mask, ce, tf.zeros_like(ce)))

    return loss


# ---- process start -> first training step

BLSTM_CONFIG = """
use_tensorflow = True
task = "train"
extern_data = {"data": {"dim": 40, "shape": (None, 40)}, "classes": {"dim": 500, "shape": (None,), "sparse": True}}
train = {"class": "DummyDataset", "input_dim": 40, "output_dim": 500, "num_seqs": 64, "seq_len": 200}
dev = None
batch_size = 3200
max_seqs = 16
network = %r
optimizer = {"class": "sgd"}
learning_rate = 0.01
model = %r
num_epochs = 1
log_verbosity = 5
"""

PLAIN_FIRST_STEP = """
import time, sys, os
import numpy as np
import tensorflow as tf
sys.path.insert(0, %r)
from blstm_train import build_plain_tf, make_batch
tf1 = tf.compat.v1
with tf.Graph().as_default() as g:
    train_op, feed, _ = build_plain_tf(4, 256)
    s = tf1.Session(graph=g)
    s.run(tf1.global_variables_initializer())
    x, y, lens = make_batch(np.random.RandomState(1), 16, 200)
    s.run(train_op, feed(x, y, lens))
print("FIRST STEP DONE", flush=True)
"""


def _time_to_line(cmd, pattern, env=None):
    """Wall seconds from Popen to the first stdout/stderr line containing pattern (then the process is ended)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if pattern in line:
                return time.perf_counter() - t0
        raise RuntimeError("%s ended without %r:\n%s" % (cmd, pattern, "".join(lines[-30:])))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def first_step_times(repeat, tmp):
    net_dict, src = {}, ["data"]
    for i in range(4):
        for name, direction in (("lstm%i_fw" % i, 1), ("lstm%i_bw" % i, -1)):
            net_dict[name] = {"class": "rec", "unit": "nativelstm2", "n_out": 256, "direction": direction,
                              "from": src}
        src = ["lstm%i_fw" % i, "lstm%i_bw" % i]
    net_dict["output"] = {"class": "softmax", "loss": "ce", "from": src}
    config_file = os.path.join(tmp, "blstm.config")
    with open(config_file, "w") as f:
        f.write(BLSTM_CONFIG % (net_dict, os.path.join(tmp, "model")))
    plain_file = os.path.join(tmp, "plain_first_step.py")
    with open(plain_file, "w") as f:
        f.write(PLAIN_FIRST_STEP % HERE)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    lite, plain = [], []
    for _ in range(repeat):
        lite.append(_time_to_line([sys.executable, "-m", "returnn_lite", config_file], " step 0", env))
        plain.append(_time_to_line([sys.executable, plain_file], "FIRST STEP DONE", env))
    return min(lite), min(plain)


def grappler_first_run(repeat):
    """big_construct training step: first session.run (s wall) with TF's default Grappler vs meta optimizer off."""
    import numpy as np

    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        loss = lite_big()()
        train_op = tf1.train.AdamOptimizer(1e-4).minimize(loss)
        init = tf1.global_variables_initializer()
        data, classes = _LAST_NET[0].extern_data.get_data("data"), _LAST_NET[0].extern_data.get_data("classes")
        rng = np.random.RandomState(1)
        feed = {data.placeholder: rng.randn(10, 50, 40).astype("float32"), data.size_placeholder[0]: [50] * 10,
                classes.placeholder: rng.randint(1, 1000, (10, 10)).astype("int32"),
                classes.size_placeholder[0]: [10] * 10, graph._returnn_lite_train_flag: True}
        res = {"default": [], "off": []}
        for _ in range(repeat):
            for mode in res:
                config = tf1.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=2)
                config.graph_options.rewrite_options.disable_meta_optimizer = mode == "off"
                with tf1.Session(graph=graph, config=config) as session:
                    session.run(init)
                    t0 = time.perf_counter()
                    session.run(train_op, feed)
                    t1 = time.perf_counter()
                    session.run(train_op, feed)
                    res[mode].append((t1 - t0, time.perf_counter() - t1))
    print("== big_construct first session.run of a training step (wall s, min of %i): Grappler default %.2f "
          "(next step %.2f), meta optimizer off %.2f (next step %.2f)" % (
              repeat, *min(res["default"]), *min(res["off"])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["big", "enc", "flat", "blstm"],
                    help="enc: big_construct's encoder (+ framewise output/loss) only, without the decoder loop; "
                         "flat: big_construct with the decoder unit as top-level layers (no loop)")
    ap.add_argument("--no-first-step", action="store_true")
    ap.add_argument("--grappler", action="store_true", help="also time Grappler at the first step of big_construct")
    args = ap.parse_args()
    models = {"big": (lite_big, plain_big), "enc": (lite_enc, plain_enc), "flat": (lite_flat, plain_big),
              "blstm": (lite_blstm, plain_blstm)}
    if args.only:
        models = {args.only: models[args.only]}
    else:
        del models["enc"], models["flat"]  # parts / variants of big, for finding where big's time goes
    import returnn_lite.network  # noqa: F401  (imports are not construction time)

    results = {key: {"lite": [], "plain": [], "shared": []} for key in models}
    shared = {"big": shared_big} if shared_baseline is not None else {}
    for key, (lite, plain) in models.items():  # warm-up: imports, registries, TF op caches
        _timed_build(lite)
        _timed_build(plain)
        if key in shared:
            _timed_build(shared[key])
    for _ in range(args.repeat):
        for key, (lite, plain) in models.items():
            results[key]["lite"].append(_timed_build(lite))
            results[key]["plain"].append(_timed_build(plain))
            if key in shared:
                results[key]["shared"].append(_timed_build(shared[key]))
    for key, res in results.items():
        for r in res["lite"] + res["plain"] + res["shared"]:
            r["forward+loss"] = r["forward"] + r["loss"]
        print("== %s (CPU s, min of %i; forward op counts)" % (key, args.repeat))
        with_shared = bool(res["shared"])
        print("%-14s %12s %12s %8s" % ("", "returnn_lite", "plain (own)", "ratio")
              + (" %12s %8s" % ("shared base", "ratio") if with_shared else ""))
        for what in ("forward", "loss", "forward+loss", "gradients"):
            lite_t, plain_t = min(r[what] for r in res["lite"]), min(r[what] for r in res["plain"])
            line = "%-14s %12.3f %12.3f %8.2f" % (what, lite_t, plain_t, lite_t / max(plain_t, 1e-6))
            if with_shared:
                shared_t = min(r[what] for r in res["shared"])
                line += " %12.3f %8s" % (shared_t, "%.2f" % (lite_t / shared_t) if shared_t > 1e-3 else "-")
            print(line)
        lite_ops, plain_ops = res["lite"][0]["ops"], res["plain"][0]["ops"]
        shared_ops = res["shared"][0]["ops"] if with_shared else None
        for group in lite_ops:
            line = "%-14s %12i %12i %8.2f" % ("ops " + group, lite_ops[group], plain_ops[group],
                                              lite_ops[group] / max(plain_ops[group], 1))
            if with_shared:
                line += " %12i %8.2f" % (shared_ops[group], lite_ops[group] / max(shared_ops[group], 1))
            print(line)
        line = "%-14s %12i %12i %8.2f" % ("ops w/ grads", res["lite"][0]["all_ops"], res["plain"][0]["all_ops"],
                                          res["lite"][0]["all_ops"] / res["plain"][0]["all_ops"])
        if with_shared:
            line += " %12i %8.2f" % (res["shared"][0]["all_ops"], res["lite"][0]["all_ops"] / res["shared"][0]["all_ops"])
        print(line)
    if not args.no_first_step:
        with tempfile.TemporaryDirectory() as tmp:
            lite_t, plain_t = first_step_times(args.repeat, tmp)
        print("== BLSTM 4x256 process start -> first training step (wall s, min of %i)" % args.repeat)
        print("returnn_lite CLI %.2f, plain TF %.2f, difference %.2f s, ratio %.2f" % (
            lite_t, plain_t, lite_t - plain_t, lite_t / plain_t))
    if args.grappler:
        grappler_first_run(args.repeat)
    print("goals vs plain (own): big forward <= 1.2x, gradients <= 1.2x, ops <= 1.1x; BLSTM gradients <= 1.0x; "
          "first step <= plain + 1.5 s. vs the shared baseline (issue 30): big forward+loss <= 1.0x, "
          "gradients <= 1.1x")


if __name__ == "__main__":
    main()
