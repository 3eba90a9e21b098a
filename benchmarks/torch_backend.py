#!/usr/bin/env python3
"""
Training step time of the 12AX rf LSTM (configs/12ax_rf_lstm.config: LSTM 9 -> 20, Linear 20 -> 2, cross entropy
with padded frames masked, frame error) on the rf torch backend vs the same model hand-written in plain PyTorch
(torch.nn.LSTM on a packed sequence, nn.Linear, masked cross entropy, Adam). Same process, same batches (10 seqs of
up to 200 frames, as the config's chunking), same initial params; a step = extern data setup + forward + losses +
backward + Adam step. CPU time (process_time), min over rounds of --steps steps each.

Also prints the rf dispatch overhead per op: ``a + b`` / ``rf.matmul`` on tiny tensors vs the raw torch op, the
torch engine's whole train step (:class:`returnn_lite.engine.torch_engine.TorchBackend`: numpy batch -> tensors,
step, loss values to the host, Adam) against the bare rf step, and the rf step in wall time with the engine's
default CPU threads (1, as the original; ``torch_intra_op_threads``) against torch's own default.

    python benchmarks/torch_backend.py [--steps 20] [--rounds 5] [--batch 10] [--time 200]
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, Tensor, TensorDict, batch_dim  # noqa: E402
from returnn_lite.torch.frontend import rf_module_to_pt_module  # noqa: E402

time_dim = Dim(None, name="time")
in_dim = Dim(9, name="in")
classes_dim = Dim(2, name="classes")
hidden_dim = Dim(20, name="lstm")
extern_data_opts = {
    "data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}


class Model(rf.Module):  # as configs/12ax_rf_lstm.config
    def __init__(self):
        super().__init__()
        self.lstm = rf.LSTM(in_dim, hidden_dim)
        self.output = rf.Linear(hidden_dim, classes_dim)

    def __call__(self, x):
        h, _ = self.lstm(x, state=self.lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=time_dim)
        return self.output(h)


def train_step(*, model, extern_data, **_):  # as configs/12ax_rf_lstm.config
    logits = model(extern_data["data"])
    targets = extern_data["classes"]
    ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=targets, axis=classes_dim)
    ce.mark_as_loss("ce")
    frame_error = rf.cast(rf.compare(rf.reduce_argmax(logits, axis=classes_dim), "not_equal", targets), "float32")
    frame_error.mark_as_loss("fer", as_error=True)


class PlainModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(9, 20)
        self.output = torch.nn.Linear(20, 2)

    def forward(self, x, lens):  # x [B,T,F]
        packed = torch.nn.utils.rnn.pack_padded_sequence(x.transpose(0, 1), lens, enforce_sorted=False)
        y, _ = self.lstm(packed)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=x.shape[1])
        return self.output(y.transpose(0, 1))  # [B,T,C]


def make_batches(n, batch, max_len, seed=1):
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        lens = rng.randint(max_len // 2, max_len + 1, size=batch).astype("int32")
        lens[0] = max_len
        x = rng.randn(batch, max_len, 9).astype("float32")
        y = rng.randint(0, 2, size=(batch, max_len)).astype("int32")
        out.append((torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(lens)))
    return out


def run_rf(model, opt, batches, extern_data):
    for x, y, lens in batches:
        time_dim.reset_eager()
        batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(x.shape[0], dtype=torch.int32), dims=[],
                                                      dtype="int32", name="batch")
        time_dim.dyn_size_ext = rf.convert_to_tensor(lens, dims=[batch_dim], dtype="int32", name="time:size")
        extern_data.data["data"].raw_tensor = x
        extern_data.data["classes"].raw_tensor = y
        rf.init_train_step_run_ctx(train_flag=True, step=0, epoch=1)
        train_step(model=model, extern_data=extern_data)
        ctx = rf.get_run_ctx()
        float(ctx.losses["ce"].get_summed_loss().raw_tensor.detach())  # the engine reports these per step
        float(ctx.losses["fer"].get_summed_loss().raw_tensor)
        total = ctx.total_loss()
        opt.zero_grad(set_to_none=True)
        total.raw_tensor.backward()
        opt.step()


def run_plain(model, opt, batches):
    for x, y, lens in batches:
        logits = model(x, lens)
        mask = torch.arange(x.shape[1])[None, :] < lens[:, None]
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 2), y.long().reshape(-1), reduction="none")
        loss = (ce.reshape(mask.shape) * mask).sum()
        fer = ((logits.argmax(-1) != y) & mask).float().sum()
        float(loss.detach())
        float(fer)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def timed(fn, rounds, clock=time.process_time):
    best = float("inf")
    for _ in range(rounds):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def engine_backend(model_factory):
    """The torch engine backend on this model (default options: CPU, the engine's thread default)."""
    from returnn_lite.config import Config
    from returnn_lite.engine.progress import Log
    from returnn_lite.engine.torch_engine import TorchBackend

    config = Config({"backend": "torch", "device": "cpu", "extern_data": extern_data_opts, "adam": True,
                     "get_model": lambda **_: model_factory(), "train_step": train_step})
    backend = TorchBackend(config, Log(verbosity=0), "train")
    backend.build(1, None, train=True)
    return backend


def run_engine(backend, batches):
    from returnn_lite.datasets.batching import BatchArrays

    for i, (x, y, lens) in enumerate(batches):
        lens_np = lens.numpy()
        arrays = BatchArrays(data={"data": x.numpy(), "classes": y.numpy()},
                             seq_lens={"data": lens_np, "classes": lens_np}, seq_tags=[], seq_idxs=[])
        backend.train_step(arrays, dataset_name="bench", step=i, epoch=1, epoch_step=i, learning_rate=0.01)


def dispatch_overhead(n=2000):
    a, b = Dim(3, name="a"), Dim(4, name="b")
    x = Tensor("x", dims=[a, b], dtype="float32", raw_tensor=torch.randn(3, 4))
    y = Tensor("y", dims=[a, b], dtype="float32", raw_tensor=torch.randn(3, 4))
    c = Dim(5, name="c")
    w = Tensor("w", dims=[b, c], dtype="float32", raw_tensor=torch.randn(4, 5))  # as rf.Linear
    xr, yr = x.raw_tensor, y.raw_tensor
    res = {}
    res["add"] = (timed(lambda: [x + y for _ in range(n)], 3) - timed(lambda: [xr + yr for _ in range(n)], 3)) / n
    res["matmul"] = (timed(lambda: [rf.matmul(x, w, reduce=b) for _ in range(n)], 3) -
                     timed(lambda: [torch.matmul(xr, w.raw_tensor) for _ in range(n)], 3)) / n
    return res


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--time", type=int, default=200)
    args = parser.parse_args()
    torch_default_threads = torch.get_num_threads()
    rf.select_backend_torch()
    rf.set_random_seed(1)
    model = Model()
    pt = rf_module_to_pt_module(model)
    plain = PlainModel()
    with torch.no_grad():  # the same initial params (rf LSTM params have torch's layout; one bias)
        plain.lstm.weight_ih_l0.copy_(model.lstm.ff_weight.raw_tensor)
        plain.lstm.weight_hh_l0.copy_(model.lstm.rec_weight.raw_tensor)
        plain.lstm.bias_ih_l0.copy_(model.lstm.bias.raw_tensor)
        plain.lstm.bias_hh_l0.zero_()
        plain.output.weight.copy_(model.output.weight.raw_tensor.t())
        plain.output.bias.copy_(model.output.bias.raw_tensor)
    opt_rf = torch.optim.Adam(pt.parameters(), lr=0.01)
    opt_plain = torch.optim.Adam(plain.parameters(), lr=0.01)
    extern_data = TensorDict()
    extern_data.update(extern_data_opts, auto_convert=True)
    batches = make_batches(args.steps, args.batch, args.time)
    run_rf(model, opt_rf, batches[:2], extern_data)  # warm-up
    run_plain(plain, opt_plain, batches[:2])
    backend = engine_backend(Model)  # sets the engine's default threads
    engine_threads = torch.get_num_threads()
    run_engine(backend, batches[:2])
    t_engine = timed(lambda: run_engine(backend, batches), args.rounds) / args.steps
    t_rf = timed(lambda: run_rf(model, opt_rf, batches, extern_data), args.rounds) / args.steps
    t_plain = timed(lambda: run_plain(plain, opt_plain, batches), args.rounds) / args.steps
    over = dispatch_overhead()
    wall_rf = timed(lambda: run_rf(model, opt_rf, batches, extern_data), args.rounds, time.perf_counter) / args.steps
    wall_plain = timed(lambda: run_plain(plain, opt_plain, batches), args.rounds, time.perf_counter) / args.steps
    torch.set_num_threads(torch_default_threads)  # a few steps only: oversubscribed threads can be very slow
    few = batches[:min(5, len(batches))]
    wall_rf_default = timed(lambda: run_rf(model, opt_rf, few, extern_data), 2, time.perf_counter) / len(few)
    wall_plain_default = timed(lambda: run_plain(plain, opt_plain, few), 2, time.perf_counter) / len(few)
    print("12AX rf LSTM train step (batch %i x %i frames, CPU time, min over %i rounds of %i steps):" % (
        args.batch, args.time, args.rounds, args.steps))
    print("  rf torch backend: %.3f ms/step" % (t_rf * 1e3))
    print("  plain PyTorch:    %.3f ms/step" % (t_plain * 1e3))
    print("  rf dispatch overhead per op: add %.1f us, matmul %.1f us" % (over["add"] * 1e6, over["matmul"] * 1e6))
    print("  torch engine train step (batch -> tensors, step, losses to host): %.3f ms/step (%.2fx the bare rf step)"
          % (t_engine * 1e3, t_engine / t_rf))
    print("  wall time, engine default %i thread(s): rf %.3f ms/step, plain %.3f ms/step" % (
        engine_threads, wall_rf * 1e3, wall_plain * 1e3))
    print("  wall time, torch default %i thread(s): rf %.3f ms/step, plain %.3f ms/step" % (
        torch_default_threads, wall_rf_default * 1e3, wall_plain_default * 1e3))
    print("ratio torch_backend/plain: %.2f (goal <= 1.5; engine default threads)" % (t_rf / t_plain))


if __name__ == "__main__":
    main()
