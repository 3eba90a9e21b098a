#!/usr/bin/env python3
"""
Per-step cost of the torch engine's training loop (issue 30) on the rf 12AX LSTM (``configs/12ax_rf_lstm.config``
with ``backend = "torch"``), in one process, min over rounds of one epoch (100 steps) each:

- ``engine``: :meth:`Engine.run_epoch` (dataset, batching, prefetch thread or ``--workers`` DataLoader workers,
  batch checks, numpy -> torch, the step, loss values to the host, scores, the per-step log line at
  ``log_verbosity`` 5 written to /dev/null);
- ``data``: the same epoch's batches as arrays alone (dataset generation + batching, no training);
- ``backend step``: :meth:`TorchBackend.train_step` on the epoch's batches prebuilt as numpy arrays (no loop);
- ``bare``: the config's ``train_step`` on the same model class, extern data set by hand from prebuilt torch
  tensors on the device, the losses' values to the host, backward, Adam (what a hand-written rf loop runs).

The ratio to drive down is engine / bare. On the CPU: CPU time (process_time, all threads of this process; with
``--workers N`` the data is made in the worker processes, outside it). With ``--device cuda``: wall time with the
device synchronized at the end of each round (CUDA-guarded; ``--amp bfloat16``, ``--workers N`` as
``torch_dataloader_opts``). With ``--workers N``, also: the main process's CPU time to receive a GPU-sized batch
(32 seqs x 400 frames x 80 features, DummyDataset) from N loader workers, without training.

    python benchmarks/torch_engine_step.py [--rounds 5] [--device cpu|cuda] [--workers 0] [--amp bfloat16]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CONFIG = os.path.join(ROOT, "configs", "12ax_rf_lstm.config")

import torch  # noqa: E402


def make_engine(workdir, device, workers, amp, verbosity=5):
    from returnn_lite.config import Config
    from returnn_lite.engine.engine import Engine
    from returnn_lite.engine.learning_rate_control import load_learning_rate_control_from_config
    from returnn_lite.engine.progress import Log

    config = Config()
    config.load_file(CONFIG)
    config.set("backend", "torch")
    config.set("device", device)
    config.set("model", os.path.join(workdir, "model"))
    config.set("learning_rate_file", os.path.join(workdir, "learning_rates"))
    config.set("log_verbosity", verbosity)
    if workers:
        config.set("torch_dataloader_opts", {"num_workers": workers})
    if amp:
        config.set("torch_amp", amp)
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


def bare_loop(config, arrays, device, amp):
    """The config's train_step on a fresh model of its class: prebuilt device tensors, losses to the host, Adam."""
    import contextlib

    import returnn_lite.frontend as rf
    from returnn_lite.tensor import TensorDict, batch_dim
    from returnn_lite.torch.frontend import rf_module_to_pt_module

    rf.select_backend_torch()
    rf.set_random_seed(1)
    ctx = rf.set_default_device_ctx(str(device))
    with ctx:
        model = config.typed_value("get_model")(epoch=1, step=0)
    pt = rf_module_to_pt_module(model).to(device)
    opt = torch.optim.Adam(pt.parameters(), lr=0.01)
    train_step = config.typed_value("train_step")
    extern_data = TensorDict()
    extern_data.update(config.typed_value("extern_data"), auto_convert=True)
    time_dim = extern_data.data["data"].dims[1]
    batches = [(torch.from_numpy(a.data["data"]).to(device), torch.from_numpy(a.data["classes"]).to(device),
                torch.from_numpy(a.seq_lens["data"])) for a in arrays]
    autocast = (lambda: torch.autocast(device.type, dtype=getattr(torch, amp))) if amp else contextlib.nullcontext

    def run():
        for i, (x, y, lens) in enumerate(batches):
            time_dim.reset_eager()
            batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(x.shape[0], dtype=torch.int32), dims=[],
                                                          dtype="int32", name="batch")
            time_dim.dyn_size_ext = rf.convert_to_tensor(lens, dims=[batch_dim], dtype="int32", name="time:size")
            extern_data.data["data"].raw_tensor = x
            extern_data.data["classes"].raw_tensor = y
            rf.init_train_step_run_ctx(train_flag=True, step=i, epoch=1)
            with rf.set_default_device_ctx(str(device)), autocast():
                train_step(model=model, extern_data=extern_data)
                run_ctx = rf.get_run_ctx()
                total = run_ctx.total_loss()
            torch.stack([loss.get_summed_loss().raw_tensor.detach().float()  # logged per step, as the engine
                         for loss in run_ctx.losses.values()]).tolist()
            opt.zero_grad(set_to_none=True)
            total.raw_tensor.float().backward()
            opt.step()
    return run


def backend_loop(engine, arrays):
    backend = engine.backend

    def run():
        for i, a in enumerate(arrays):
            results = backend.train_step(a, dataset_name="train", step=i, epoch=1, epoch_step=i, learning_rate=0.01)
            if "deferred" in results:
                results["deferred"]()
    return run


def loader_main_cpu(workers, epochs=4):
    """Main-process CPU ms per batch received from ``workers`` loader workers (and checked), no training."""
    import returnn_lite.frontend as rf
    from returnn_lite.config import Config
    from returnn_lite.engine.engine import Engine
    from returnn_lite.engine.progress import Log
    from returnn_lite.tensor import Dim, batch_dim

    time_dim, feat, classes = Dim(None, name="time"), Dim(80, name="feat"), Dim(1000, name="classes")

    def train_step(*, model, extern_data, **_):
        rf.reduce_sum(model(extern_data["data"]), axis=[classes]).mark_as_loss("x")

    config = Config({
        "backend": "torch", "task": "train", "device": "cpu", "adam": True, "learning_rate": 1e-4,
        "extern_data": {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"},
                        "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes}},
        "get_model": lambda **_: rf.Linear(feat, classes), "train_step": train_step,
        "train": {"class": "DummyDataset", "input_dim": 80, "output_dim": 1000, "num_seqs": 32 * 40, "seq_len": 400},
        "batch_size": 32 * 400, "max_seqs": 32, "torch_dataloader_opts": {"num_workers": workers}})
    engine = Engine(config, log=Log(verbosity=0))
    engine.train_data = engine.load_dataset("train")
    engine._build(1, engine.train_data, train=True)
    best, num = float("inf"), 0
    for epoch in range(1, epochs + 1):
        t0, num = time.process_time(), 0
        for _, arrays in engine._prefetched_batches(engine.train_data, epoch, True):
            engine.backend._check_batch(arrays, "train")
            num += 1
        best = min(best, time.process_time() - t0)
    engine.close()
    return best / num * 1e3


def timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=0, help="torch_dataloader_opts num_workers")
    parser.add_argument("--amp", default=None, help="torch_amp dtype, e.g. bfloat16")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA GPU here")
    workdir = tempfile.mkdtemp(prefix="torch_engine_step_")
    try:
        engine = make_engine(workdir, args.device, args.workers, args.amp)
        engine.run_epoch(engine.train_data, 1, train=True, learning_rate=0.01, prefix="warm-up")
        arrays = epoch_arrays(engine, 2)
        steps = len(arrays)
        bare = bare_loop(engine.config, arrays, device, args.amp)
        backend = backend_loop(engine, arrays)
        bare()
        backend()
        epochs = iter(range(3, 3 + 2 * args.rounds))
        best = dict(engine=float("inf"), data=float("inf"), backend=float("inf"), bare=float("inf"))
        for _ in range(args.rounds):  # interleaved: machine load hits all alike
            for name, fn in (("data", lambda: epoch_arrays(engine, next(epochs))), ("bare", bare),
                             ("backend", backend),
                             ("engine", lambda: engine.run_epoch(engine.train_data, next(epochs), train=True,
                                                                 learning_rate=0.01, prefix="train epoch"))):
                best[name] = min(best[name], timed(fn, device))
        engine.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    per = {k: v / steps * 1e3 for k, v in best.items()}
    what = "wall time (synchronized)" if device.type == "cuda" else "CPU time"
    print("rf 12AX LSTM, torch engine (device %s, %i loader workers, amp %s), %s, min over %i epochs of %i steps:" % (
        device, args.workers, args.amp, what, args.rounds, steps))
    print("  engine (run_epoch, log_verbosity 5): %.3f ms/step" % per["engine"])
    print("  data alone (dataset + batches):      %.3f ms/step" % per["data"])
    print("  backend train_step, prebuilt arrays: %.3f ms/step" % per["backend"])
    print("  bare rf step, prebuilt tensors:      %.3f ms/step" % per["bare"])
    if args.workers and device.type != "cuda":  # the data is made in the workers: not in this process's CPU time
        print("  loop overhead (engine - bare):        %.3f ms/step" % (per["engine"] - per["bare"]))
        print("  main-process CPU per 32x400x80 batch from %i workers: %.3f ms" % (
            args.workers, loader_main_cpu(args.workers)))
        print("ratio engine/bare: %.2f   backend step/bare: %.2f" % (
            per["engine"] / per["bare"], per["backend"] / per["bare"]))
        return
    print("  loop overhead (engine - data - bare): %.3f ms/step" % (per["engine"] - per["data"] - per["bare"]))
    print("ratio engine/bare: %.2f   backend step/bare: %.2f   engine/(bare+data): %.2f" % (
        per["engine"] / per["bare"], per["backend"] / per["bare"], per["engine"] / (per["bare"] + per["data"])))


if __name__ == "__main__":
    main()
