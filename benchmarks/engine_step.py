#!/usr/bin/env python3
"""
Per-step cost of the TF engine's training loop (issue 30) on ``configs/12ax_lstm.config``, in one process, CPU time
(process_time: all threads, e.g. the prefetch thread), min over rounds of one epoch (100 steps) each:

- ``engine``: :meth:`Engine.run_epoch` (dataset, batching, prefetch thread, feeds, the train step, scores, the
  per-step log line at ``log_verbosity`` 5, written to /dev/null);
- ``data``: the same epoch's batches as arrays alone (dataset generation + batching, no training);
- ``bare``: ``session.run`` of the train op and the losses' cost/error/norm tensors of the same graph, on the same
  epoch's batches prebuilt as feed dicts (what a hand-written TF loop runs per step).

The ratio to drive down is engine / bare (the step with everything vs the step alone); engine - data - bare is what
the loop itself adds. With ``--cli``: ``rnn.py`` as a child (CPU time per step from two runs of different length,
so that start-up cancels), and the original RETURNN's CLI beside it when ``returnn`` is installed (column skipped
otherwise).

    python benchmarks/engine_step.py [--rounds 5] [--cli]
"""

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
CONFIG = os.path.join(ROOT, "configs", "12ax_lstm.config")


def make_engine(workdir, verbosity=5):
    from returnn_lite.config import Config
    from returnn_lite.engine.engine import Engine
    from returnn_lite.engine.learning_rate_control import load_learning_rate_control_from_config
    from returnn_lite.engine.progress import Log

    config = Config()
    config.load_file(CONFIG)
    config.set("model", os.path.join(workdir, "model"))
    config.set("learning_rate_file", os.path.join(workdir, "learning_rates"))
    config.set("log_verbosity", verbosity)
    engine = Engine(config, log=Log(verbosity=verbosity, stream=open(os.devnull, "w")))
    engine._init_train_datasets()
    engine.learning_rate_control = load_learning_rate_control_from_config(config)
    engine._build(1, engine.train_data, train=True)
    return engine


def epoch_arrays(engine, epoch):
    from returnn_lite.datasets import batch_to_arrays

    dataset = engine.train_data
    keys = engine.backend.data_keys
    return [batch_to_arrays(dataset, batch, keys) for batch in engine.batches(dataset, epoch, train=True)]


def bare_loop(backend, feeds, learning_rate):
    """session.run of the train op + the loss values, feeds prebuilt (no Python of the engine)."""
    fetches = [backend.updater.train_op] + [backend.fetches[k] for k in sorted(backend.fetches)]
    session = backend.session
    extra = {backend.updater.learning_rate: learning_rate, backend.train_flag: True}
    feeds = [{**feed, **extra} for feed in feeds]

    def run():
        for feed in feeds:
            session.run(fetches, feed_dict=feed)
    return run


def timed(fn, rounds, clock=time.process_time):
    best = float("inf")
    for _ in range(rounds):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def in_process(rounds):
    workdir = tempfile.mkdtemp(prefix="engine_step_")
    try:
        engine = make_engine(workdir)
        backend = engine.backend
        engine.run_epoch(engine.train_data, 1, train=True, learning_rate=0.01, prefix="warm-up")
        arrays = epoch_arrays(engine, 2)
        steps = len(arrays)
        feeds = [backend.feed_dict(a) for a in arrays]
        bare = bare_loop(backend, feeds, 0.01)
        bare()  # warm-up
        epochs = iter(range(3, 3 + 3 * rounds))
        t_data = t_bare = t_engine = float("inf")
        for _ in range(rounds):  # interleaved: machine load hits all three alike
            t_data = min(t_data, timed(lambda: epoch_arrays(engine, next(epochs)), 1))
            t_bare = min(t_bare, timed(bare, 1))
            t_engine = min(t_engine, timed(lambda: engine.run_epoch(
                engine.train_data, next(epochs), train=True, learning_rate=0.01, prefix="train epoch"), 1))
        engine.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return steps, t_engine / steps, t_data / steps, t_bare / steps


_STEP_LINE = re.compile(r"^train epoch \d+, step \d+,")


def cli_step_cpu(cmd, workdir, epochs=(1, 3)):
    """CPU s/step of a CLI training run: (CPU, steps) of a short and a long run, differenced (start-up cancels)."""
    figures = []
    for num_epochs in epochs:
        run_dir = os.path.join(workdir, "e%i" % num_epochs)
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
        before = os.times()
        out = subprocess.run(cmd + ["++model", os.path.join(run_dir, "model"), "++learning_rate_file",
                                    os.path.join(run_dir, "lr"), "++num_epochs", str(num_epochs),
                                    "++log_verbosity", "5"],
                             cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True)
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        figures.append((cpu, sum(1 for line in out.stdout.splitlines() if _STEP_LINE.match(line))))
    (cpu0, steps0), (cpu1, steps1) = figures
    return (cpu1 - cpu0) / (steps1 - steps0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cli", action="store_true", help="also rnn.py (and the original's CLI if installed)")
    args = parser.parse_args()
    steps, engine, data, bare = in_process(args.rounds)
    print("12AX LSTM (configs/12ax_lstm.config) train step, CPU time, min over %i epochs of %i steps:" % (
        args.rounds, steps))
    print("  engine (run_epoch, log_verbosity 5): %.3f ms/step" % (engine * 1e3))
    print("  data alone (dataset + batches):      %.3f ms/step" % (data * 1e3))
    print("  bare session.run, prebuilt feeds:     %.3f ms/step" % (bare * 1e3))
    print("  loop overhead (engine - data - bare): %.3f ms/step" % ((engine - data - bare) * 1e3))
    if args.cli:
        workdir = tempfile.mkdtemp(prefix="engine_step_cli_")
        try:
            lite = cli_step_cpu([sys.executable, os.path.join(ROOT, "rnn.py"), CONFIG], workdir)
            print("  rnn.py CLI: %.3f ms/step CPU" % (lite * 1e3))
            if importlib.util.find_spec("returnn") is not None:  # the original, as a separate program only
                orig = cli_step_cpu([sys.executable, "-m", "returnn", CONFIG], workdir)
                print("  original RETURNN CLI: %.3f ms/step CPU (lite/original %.2f)" % (orig * 1e3, lite / orig))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    print("ratio engine/bare: %.2f   engine/(bare+data): %.2f" % (engine / bare, engine / (bare + data)))


if __name__ == "__main__":
    main()
