#!/usr/bin/env python3
"""
Data-parallel training speed on TF collectives (returnn_lite.distributed): the BLSTM benchmark model (4 x
bidirectional LSTM, 40-dim input, 500 classes, CE, SGD, gradients all-reduced every step as
``horovod_reduce_type = "grad"``), trained with 1 and with 2 local workers on loopback (1 intra-op thread each).

Prints per worker count: sequences/s (all workers together, by wall time, best round), the scaling efficiency
(seqs/s with 2 workers / (2 x seqs/s with 1 worker); the 2 cores of a small machine bound it), and the all-reduce
overhead per step: the time of the gradient all-reduce alone (all gradients, same sizes, one session.run) with
2 workers, minus the time of the same run without collectives.

    python benchmarks/distributed.py [--layers 4] [--units 256] [--batch 8] [--time 100] [--steps 5] [--rounds 3]
"""

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

N_IN, N_CLASSES = 40, 500


def worker(args):
    import numpy as np
    import tensorflow as tf

    from returnn_lite.config import Config
    from returnn_lite.distributed import Collectives, get_distributed_setup
    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    tf1 = tf.compat.v1
    setup = get_distributed_setup(Config({"distributed": {"reduce_type": "grad"}})) if os.environ.get(
        "TF_CONFIG") else None
    base = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        net_dict, src = {}, ["data"]
        for i in range(args.layers):
            for name, direction in (("lstm%i_fw" % i, 1), ("lstm%i_bw" % i, -1)):
                net_dict[name] = {"class": "rec", "unit": "lstm", "n_out": args.units, "direction": direction,
                                  "from": src}
            src = ["lstm%i_fw" % i, "lstm%i_bw" % i]
        net_dict["output"] = {"class": "softmax", "loss": "ce", "from": src}
        net = TFNetwork(config=Config({}), extern_data=ExternData({
            "data": {"dim": N_IN}, "classes": {"dim": N_CLASSES, "sparse": True}}), train_flag=True)
        net.construct_from_dict(net_dict)
        params = net.get_trainable_params()
        grads = tf.gradients(net.get_objective(), params)
        grads = [tf.convert_to_tensor(g) for g in grads]
        coll = Collectives(setup) if setup else None
        if coll:
            grads = coll.all_reduce_list(grads, "sum")
        opt = tf1.train.GradientDescentOptimizer(1e-4)
        train_op = opt.apply_gradients(list(zip(grads, params)))
        # the all-reduce alone, on gradient-sized tensors (variables, so nothing else is computed)
        bufs = [tf1.Variable(tf.zeros(p.shape), trainable=False) for p in params]
        reduce_alone = tf.group(*coll.all_reduce_list([b.read_value() for b in bufs], "sum")) if coll else None
        no_reduce = tf.group(*[tf.identity(b.read_value()) for b in bufs])
        barrier = coll.barrier_op() if coll else None
        if setup:
            session = tf1.Session(setup.target, graph=graph, config=setup.session_config(base))
        else:
            session = tf1.Session(graph=graph, config=base)
        session.run(tf1.global_variables_initializer())
        num_params = sum(int(np.prod(p.shape.as_list())) for p in params)
    rng = np.random.RandomState(1 + (setup.rank if setup else 0))
    lens = rng.randint(int(args.time * 0.8), args.time + 1, size=args.batch).astype("int32")
    lens[0] = args.time
    data = net.extern_data.get_data("data")
    classes = net.extern_data.get_data("classes")
    feed = {data.placeholder: rng.randn(args.batch, args.time, N_IN).astype("float32"),
            classes.placeholder: rng.randint(0, N_CLASSES, size=(args.batch, args.time)).astype("int32"),
            data.get_sequence_lengths(): lens, classes.get_sequence_lengths(): lens}
    session.run(train_op, feed)  # warmup
    if reduce_alone is not None:
        session.run(reduce_alone)
    best_step = best_reduce = best_plain = float("inf")
    for _ in range(args.rounds):
        if barrier is not None:
            session.run(barrier)
        t = time.time()
        for _ in range(args.steps):
            session.run(train_op, feed)
        best_step = min(best_step, (time.time() - t) / args.steps)
        if reduce_alone is not None:
            session.run(barrier)
            t = time.time()
            for _ in range(args.steps):
                session.run(reduce_alone)
            best_reduce = min(best_reduce, (time.time() - t) / args.steps)
        t = time.time()
        for _ in range(args.steps):
            session.run(no_reduce)
        best_plain = min(best_plain, (time.time() - t) / args.steps)
    if barrier is not None:
        session.run(barrier)
    session.close()
    print("RESULT " + json.dumps({"rank": setup.rank if setup else 0, "step_s": best_step, "num_params": num_params,
                                  "reduce_s": None if reduce_alone is None else best_reduce - best_plain}),
          flush=True)


def run_workers(n, args):
    return launch_workers(os.path.abspath(__file__), _pass_args(args), n, distributed=n > 1, timeout=args.timeout)


def launch_workers(script, worker_args, n, *, distributed, timeout):
    """Runs ``script --worker ...`` as n local processes (TF_CONFIG cluster if distributed); their RESULT dicts."""
    from returnn_lite.launch import free_ports, worker_env

    cmd = [sys.executable, script, "--worker"] + list(worker_args)
    workers = ["127.0.0.1:%i" % p for p in free_ports(n)]
    procs = []
    for rank in range(n):
        env = worker_env(workers, rank) if distributed else dict(os.environ, TF_CONFIG="")
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            lines = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
            if p.returncode != 0 or not lines:
                raise SystemExit("worker failed:\n" + out.decode()[-3000:])
            results.append(json.loads(lines[-1][len("RESULT "):]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def _pass_args(args):
    return ["--layers", str(args.layers), "--units", str(args.units), "--batch", str(args.batch), "--time",
            str(args.time), "--steps", str(args.steps), "--rounds", str(args.rounds)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--time", type=int, default=100)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=500)
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    one = run_workers(1, args)
    two = run_workers(2, args)
    seqs1 = args.batch / one[0]["step_s"]
    seqs2 = sum(args.batch / r["step_s"] for r in two)
    print("BLSTM %i x %i, %.2fM params, batch %i x %i frames, 1 intra-op thread per worker" % (
        args.layers, args.units, one[0]["num_params"] / 1e6, args.batch, args.time))
    print("1 worker : %8.2f seqs/s  (%.1f ms/step)" % (seqs1, one[0]["step_s"] * 1e3))
    print("2 workers: %8.2f seqs/s  (%.1f ms/step, slowest worker)" % (seqs2, max(r["step_s"] for r in two) * 1e3))
    print("scaling efficiency: %.2f  (seqs/s 2 workers / (2 x 1 worker))" % (seqs2 / (2 * seqs1)))
    print("all-reduce overhead per step (all gradients, 2 workers, loopback): %.2f ms" % (
        max(r["reduce_s"] for r in two) * 1e3))


if __name__ == "__main__":
    main()
