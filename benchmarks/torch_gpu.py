#!/usr/bin/env python3
"""
GPU train step of rf (torch backend) against the same model in plain PyTorch, and the torch engine end to end.

Models (batch 32 x 400 frames of 80 features, 1000 classes, padded frames masked):

* a 6-block pre-norm Transformer encoder: 512 dims, 8 heads, FF 2048 (ReLU), no dropout;
* a 2-layer LSTM with 512 units.

A train step is forward, masked cross entropy (summed over the frames), backward and Adam, in float32 and under
bfloat16 autocast. Reported: ms/step (CUDA events, median over --steps after --warmup steps), the rf/plain ratio,
the peak GPU memory (``torch.cuda.max_memory_allocated``) and its ratio. End to end: the torch engine's epoch
loop (``rnn.py``'s path: dataset -> batches -> DataLoader workers -> pinned host -> device copy -> step -> loss
values to the host -> progress) on the Transformer, wall time per step against the bare rf step; the bare step's
share of the wall time estimates how busy the GPU is.

Needs PyTorch, not TensorFlow (rf's torch backend; the tensor-home branch makes that import TF-free).

    python benchmarks/torch_gpu.py              # on a GPU; a compact table comes last
    python benchmarks/torch_gpu.py --cpu-smoke  # tiny sizes on the CPU (checks that everything runs)
    python benchmarks/torch_gpu.py --op-census  # ops and bytes of one step, rf vs plain (the GPU work, on the CPU)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
except ImportError:  # (only --op-census needs it)
    TorchDispatchMode = None

FULL = dict(batch=32, time=400, feat=80, dim=512, heads=8, ff=2048, classes=1000, blocks=6, lstm_layers=2,
            steps=20, warmup=5, e2e_steps=30)
SMOKE = dict(batch=4, time=20, feat=8, dim=32, heads=4, ff=64, classes=10, blocks=2, lstm_layers=2,
             steps=3, warmup=1, e2e_steps=4)


# ---- rf models


def rf_models(sizes):
    """(dims, rf Transformer class, rf LSTM class, train_step)."""
    import returnn_lite.frontend as rf
    from returnn_lite.tensor import Dim, batch_dim

    dims = dict(time=Dim(None, name="time"), feat=Dim(sizes["feat"], name="feat"),
                model=Dim(sizes["dim"], name="model"), ff=Dim(sizes["ff"], name="ff"),
                classes=Dim(sizes["classes"], name="classes"), key=Dim(sizes["dim"], name="att-key"),
                value=Dim(sizes["dim"], name="att-value"))

    class Block(rf.Module):
        def __init__(self):
            super().__init__()
            d = dims["model"]
            self.ln_att = rf.LayerNorm(d)
            # key/value dims of their own: rf.Linear(d, d) with in_dim == out_dim is not supported here
            self.att = rf.SelfAttention(d, d, key_dim_total=dims["key"], value_dim_total=dims["value"],
                                        num_heads=sizes["heads"], att_dropout=0.0)
            self.ln_ff = rf.LayerNorm(d)
            self.ff1 = rf.Linear(d, dims["ff"])
            self.ff2 = rf.Linear(dims["ff"], d)

        def __call__(self, x, *, axis):
            x = x + self.att(self.ln_att(x), axis=axis)
            return x + self.ff2(rf.relu(self.ff1(self.ln_ff(x))))

    class Transformer(rf.Module):
        def __init__(self):
            super().__init__()
            self.input = rf.Linear(dims["feat"], dims["model"])
            self.blocks = rf.ModuleList([Block() for _ in range(sizes["blocks"])])
            self.ln = rf.LayerNorm(dims["model"])
            self.output = rf.Linear(dims["model"], dims["classes"])

        def __call__(self, x):
            x = self.input(x)
            for block in self.blocks:
                x = block(x, axis=dims["time"])
            return self.output(self.ln(x))

    class Lstm(rf.Module):
        def __init__(self):
            super().__init__()
            in_dims = [dims["feat"]] + [dims["model"]] * (sizes["lstm_layers"] - 1)
            self.layers = rf.ModuleList([rf.LSTM(d, dims["model"]) for d in in_dims])
            self.output = rf.Linear(dims["model"], dims["classes"])

        def __call__(self, x):
            for lstm in self.layers:
                x, _ = lstm(x, state=lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=dims["time"])
            return self.output(x)

    def train_step(*, model, extern_data, **_):
        logits = model(extern_data["data"])
        ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=extern_data["classes"],
                              axis=dims["classes"])
        ce.mark_as_loss("ce")

    return dims, Transformer, Lstm, train_step


# ---- plain PyTorch models (the same computation)


class PlainBlock(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        d, self.heads = sizes["dim"], sizes["heads"]
        self.ln_att = torch.nn.LayerNorm(d, eps=1e-6)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln_ff = torch.nn.LayerNorm(d, eps=1e-6)
        self.ff1 = torch.nn.Linear(d, sizes["ff"])
        self.ff2 = torch.nn.Linear(sizes["ff"], d)

    def forward(self, x, mask):  # x [B,T,D], mask [B,T]
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln_att(x)).view(b, t, self.heads, 3 * d // self.heads).transpose(1, 2).chunk(3, -1)
        energy = torch.matmul(q, k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        energy = energy.masked_fill(~mask[:, None, None, :], float("-inf"))
        att = torch.matmul(torch.softmax(energy, -1), v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(att)
        return x + self.ff2(torch.relu(self.ff1(self.ln_ff(x))))


class PlainTransformer(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.input = torch.nn.Linear(sizes["feat"], sizes["dim"])
        self.blocks = torch.nn.ModuleList([PlainBlock(sizes) for _ in range(sizes["blocks"])])
        self.ln = torch.nn.LayerNorm(sizes["dim"], eps=1e-6)
        self.output = torch.nn.Linear(sizes["dim"], sizes["classes"])

    def forward(self, x, lens, mask):
        x = self.input(x)
        for block in self.blocks:
            x = block(x, mask)
        return self.output(self.ln(x))


class PlainLstm(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.lstm = torch.nn.LSTM(sizes["feat"], sizes["dim"], num_layers=sizes["lstm_layers"])
        self.output = torch.nn.Linear(sizes["dim"], sizes["classes"])

    def forward(self, x, lens, mask):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x.transpose(0, 1), lens, enforce_sorted=False)
        y, _ = self.lstm(packed)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=x.shape[1])
        return self.output(y.transpose(0, 1))


# ---- measuring


class Timer:
    """Per-step times: CUDA events on a GPU, perf_counter on the CPU; median in ms."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.marks = []

    def start(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, start):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append((start, ev))
        else:
            self.marks.append((start, time.perf_counter()))

    def median_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            return statistics.median(a.elapsed_time(b) for a, b in self.marks)
        return statistics.median((b - a) * 1e3 for a, b in self.marks)


def make_batches(sizes, device, n, seed=1):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        b, t = sizes["batch"], sizes["time"]
        lens = torch.randint(t // 2, t + 1, (b,), generator=gen, dtype=torch.int32)
        lens[0] = t
        x = torch.randn(b, t, sizes["feat"], generator=gen)
        y = torch.randint(0, sizes["classes"], (b, t), generator=gen, dtype=torch.int32)
        out.append((x.to(device), y.to(device), lens))  # the lengths stay on the CPU, as the engine keeps them
    return out


def _autocast(device, amp):
    return torch.autocast(device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext()


def _peak_reset(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device):
    return torch.cuda.max_memory_allocated() / 2 ** 30 if device.type == "cuda" else float("nan")


def bench_plain(model_cls, sizes, device, batches, amp, census=None):
    torch.manual_seed(1)
    model = model_cls(sizes).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    timer = Timer(device)
    _peak_reset(device)
    for i, (x, y, lens) in enumerate(batches):
        start = timer.start()
        with _census_ctx(census, i, batches):
            mask = torch.arange(x.shape[1], device=device)[None, :] < lens.to(device)[:, None]
            with _autocast(device, amp):
                logits = model(x, lens, mask)
                ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.long().reshape(-1),
                                     reduction="none").view(mask.shape)
                loss = (ce * mask).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        if i >= sizes["warmup"]:
            timer.stop(start)
    return timer.median_ms(), _peak_gib(device), sum(p.numel() for p in model.parameters())


class OpCensus(TorchDispatchMode if TorchDispatchMode is not None else object):
    """Counts the aten ops of a step (forward + loss + backward), the bytes of the new tensors they allocate, and
    the bytes saved for backward (activations; params not counted): the GPU work and memory, judged on the CPU."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.alloc_bytes = 0
        self.saved = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def __enter__(self):
        self._hooks.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        res = super().__exit__(*exc)
        self._hooks.__exit__(*exc)
        return res

    def _pack(self, t):
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):  # (a param or a view of one)
            self.saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in _flat(list(args) + list((kwargs or {}).values()))}
        self.ops += 1
        self.alloc_bytes += sum(o.untyped_storage().nbytes() for o in _flat([out])
                                if o.untyped_storage().data_ptr() not in inputs)
        return out

    def summary(self):
        return self.ops, self.alloc_bytes, sum(self.saved.values())


def _flat(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _flat(v)


def _census_ctx(census, i, batches):
    """The census (if any) over the last step."""
    return census if census is not None and i == len(batches) - 1 else contextlib.nullcontext()


def op_census(sizes):
    """Per model and precision: aten ops, allocated MiB and saved-for-backward MiB of one train step, rf vs plain
    (CPU; under bf16 autocast on the CPU, layer norm and softmax stay bf16, on CUDA they run in float32)."""
    device = torch.device("cpu")
    batches = make_batches(sizes, device, 2)
    print("%-12s %-5s %9s %9s %11s %11s %11s %11s" % ("model", "prec", "rf ops", "pl ops", "rf alloc", "pl alloc",
                                                      "rf saved", "pl saved"))
    for name, plain_cls in (("transformer", PlainTransformer), ("lstm", PlainLstm)):
        for amp in (False, True):
            rows = []
            for bench, arg in ((bench_rf, name), (bench_plain, plain_cls)):
                census = OpCensus()
                bench(arg, dict(sizes, warmup=0), device, batches, amp, census=census)
                rows.append(census)
            (ro, ra, rs), (po, pa, ps) = rows[0].summary(), rows[1].summary()
            print("%-12s %-5s %9i %9i %10.2fM %10.2fM %10.2fM %10.2fM" % (
                name, "bf16" if amp else "fp32", ro, po, ra / 2 ** 20, pa / 2 ** 20, rs / 2 ** 20, ps / 2 ** 20))


def _rf_device_ctx(device):
    import returnn_lite.frontend as rf

    ctx = getattr(rf, "set_default_device_ctx", None)
    return ctx(str(device)) if ctx is not None else contextlib.nullcontext()


def bench_rf_any_lens(model_name, sizes, device, batches, amp):
    """bench_rf with the lengths on the CPU (as the engine keeps them); where the rf backend cannot mix devices
    yet, again with the lengths on the GPU (the row is marked ``*``)."""
    try:
        return bench_rf(model_name, sizes, device, batches, amp)
    except RuntimeError as exc:
        if "same device" not in str(exc) or device.type != "cuda":
            raise
        print("  %s: lengths on the CPU failed (%s); lengths moved to the GPU" % (
            model_name, str(exc).splitlines()[0][:120]), flush=True)
    res = bench_rf(model_name, sizes, device, [(x, y, lens.to(device)) for x, y, lens in batches], amp)
    return res[:3] + ("*",)


def bench_rf(model_name, sizes, device, batches, amp, census=None):
    import returnn_lite.frontend as rf
    from returnn_lite.tensor import TensorDict, batch_dim
    from returnn_lite.torch.frontend import rf_module_to_pt_module

    rf.select_backend_torch()
    rf.set_random_seed(1)
    dims, transformer, lstm, train_step = rf_models(sizes)
    with _rf_device_ctx(device):
        model = (transformer if model_name == "transformer" else lstm)()
    pt = rf_module_to_pt_module(model).to(device)
    opt = torch.optim.Adam(pt.parameters(), lr=1e-4)
    extern_data = TensorDict()
    extern_data.update({"data": {"dims": (batch_dim, dims["time"], dims["feat"]), "dtype": "float32"},
                        "classes": {"dims": (batch_dim, dims["time"]), "dtype": "int32",
                                    "sparse_dim": dims["classes"]}}, auto_convert=True)
    timer = Timer(device)
    _peak_reset(device)
    for i, (x, y, lens) in enumerate(batches):
        start = timer.start()
        dims["time"].reset_eager()
        batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(x.shape[0], dtype=torch.int32), dims=[],
                                                      dtype="int32", name="batch")
        dims["time"].dyn_size_ext = rf.convert_to_tensor(lens, dims=[batch_dim], dtype="int32", name="time:size")
        extern_data.data["data"].raw_tensor = x
        extern_data.data["classes"].raw_tensor = y
        rf.init_train_step_run_ctx(train_flag=True, step=i, epoch=1)
        with _census_ctx(census, i, batches):
            with _rf_device_ctx(device), _autocast(device, amp):
                train_step(model=model, extern_data=extern_data)
                total = rf.get_run_ctx().total_loss()
            opt.zero_grad(set_to_none=True)
            total.raw_tensor.float().backward()
        opt.step()
        if i >= sizes["warmup"]:
            timer.stop(start)
    return timer.median_ms(), _peak_gib(device), sum(p.numel() for p in pt.parameters())


def bench_engine(sizes, device, amp, workers):
    """The torch engine's epoch loop on the rf Transformer and a DummyDataset: wall ms/step (after a warm-up
    epoch)."""
    from returnn_lite.config import Config
    from returnn_lite.engine import Engine
    from returnn_lite.engine.progress import Log
    from returnn_lite.tensor import batch_dim

    dims, transformer, _, train_step = rf_models(sizes)
    n = sizes["e2e_steps"]
    config = Config({
        "backend": "torch", "task": "train", "device": str(device), "adam": True, "learning_rate": 1e-4,
        "extern_data": {"data": {"dims": (batch_dim, dims["time"], dims["feat"]), "dtype": "float32"},
                        "classes": {"dims": (batch_dim, dims["time"]), "dtype": "int32",
                                    "sparse_dim": dims["classes"]}},
        "get_model": lambda **_: transformer(), "train_step": train_step,
        "train": {"class": "DummyDataset", "input_dim": sizes["feat"], "output_dim": sizes["classes"],
                  "num_seqs": sizes["batch"] * n, "seq_len": sizes["time"]},
        "batch_size": sizes["batch"] * sizes["time"], "max_seqs": sizes["batch"],
        "torch_dataloader_opts": {"num_workers": workers},
    })
    if amp:
        config.set("torch_amp", "bfloat16")
    engine = Engine(config, log=Log(verbosity=0))
    data = engine.load_dataset("train")
    engine.train_one_epoch_from_scratch(data, 1e-4)  # builds the model; warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    engine.run_epoch(data, 2, train=True, learning_rate=1e-4)
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / n * 1e3
    engine.close()
    return wall


def _try(what, func, *args):
    try:
        return func(*args)
    except Exception as exc:  # a row that fails is reported, the others still run
        print("  %s: failed: %s: %s" % (what, type(exc).__name__, str(exc).splitlines()[0][:200]), flush=True)
        if os.environ.get("TORCH_GPU_BENCH_TRACEBACK"):
            import traceback

            traceback.print_exc()
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--steps", type=int, default=None, help="measured steps per row")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of the end-to-end run")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--op-census", action="store_true",
                        help="aten ops / allocated / saved-for-backward MiB of one step, rf vs plain, on the CPU "
                             "(--cpu-smoke sizes with 50 frames: attention [B,H,T,T] large against [B,T,D] as at "
                             "full size)")
    args = parser.parse_args()
    if args.op_census:
        torch.set_num_threads(1)
        op_census(dict(SMOKE, time=50))
        return
    sizes = dict(SMOKE if args.cpu_smoke else FULL)
    if args.steps:
        sizes["steps"] = args.steps
    if args.cpu_smoke:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    elif torch.cuda.is_available():
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 in both
        torch.backends.cudnn.allow_tf32 = False
    else:
        parser.error("no CUDA GPU here; use --cpu-smoke")
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print("device: %s, torch %s; batch %i x %i frames, %i classes" % (
        card, torch.__version__, sizes["batch"], sizes["time"], sizes["classes"]), flush=True)
    batches = make_batches(sizes, device, sizes["warmup"] + sizes["steps"])
    rows = []
    for name, plain_cls in (("transformer", PlainTransformer), ("lstm", PlainLstm)):
        for amp in (False, True):
            prec = "bf16" if amp else "fp32"
            plain = _try("%s %s plain" % (name, prec), bench_plain, plain_cls, sizes, device, batches, amp)
            rf_res = _try("%s %s rf" % (name, prec), bench_rf_any_lens, name, sizes, device, batches, amp)
            rows.append((name, prec, rf_res, plain))
            if rf_res and plain:
                print("  %s %s: rf %.2f ms (%.2f GiB, %i params), plain %.2f ms (%.2f GiB, %i params)" % (
                    name, prec, rf_res[0], rf_res[1], rf_res[2], plain[0], plain[1], plain[2]), flush=True)
    e2e = []
    if not args.skip_e2e:
        for amp, workers in ((False, 0), (False, args.workers), (True, args.workers)):
            prec = "bf16" if amp else "fp32"
            wall = _try("engine e2e %s workers %i" % (prec, workers), bench_engine, sizes, device, amp, workers)
            bare = next((r[2][0] for r in rows if r[0] == "transformer" and r[1] == prec and r[2]), None)
            e2e.append(("%s, %i loader workers" % (prec, workers), wall, bare))
    print()
    print("%-12s %-5s %9s %9s %6s %8s %8s %6s" % ("model", "prec", "rf ms", "plain ms", "ratio", "rf GiB",
                                                  "pl GiB", "mem x"))
    for name, prec, rf_res, plain in rows:
        if rf_res and plain:
            print("%-12s %-5s %9.2f %9.2f %6.3f %8.2f %8.2f %6.3f" % (
                name, prec + ("*" if len(rf_res) > 3 else ""), rf_res[0], plain[0], rf_res[0] / plain[0], rf_res[1], plain[1],
                rf_res[1] / plain[1] if plain[1] == plain[1] and plain[1] else float("nan")))
        else:
            print("%-12s %-5s %9s %9s" % (name, prec, "%.2f" % rf_res[0] if rf_res else "failed",
                                          "%.2f" % plain[0] if plain else "failed"))
    for prec, wall, bare in e2e:
        if wall and bare:
            print("engine e2e transformer %s: %.2f ms/step wall vs bare rf step %.2f ms: %.3fx, GPU busy ~%.0f%%" % (
                prec, wall, bare, wall / bare, 100.0 * min(1.0, bare / wall)))
        else:
            print("engine e2e transformer %s: failed" % prec)
    if any(r[2] and len(r[2]) > 3 for r in rows):
        print("*: the rf step needed the sequence lengths on the GPU (the engine keeps them on the CPU)")
    print("goals: transformer fp32 ratio <= 1.05, bf16 <= 1.10, memory <= 1.05x, e2e <= 1.15x (%s)" % card)


if __name__ == "__main__":
    main()
