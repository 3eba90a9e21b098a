#!/usr/bin/env python3
"""
Training step time of one Conformer block: returnn_lite's rf ConformerEncoderLayer on the rf torch backend vs the
same block hand-written in plain PyTorch (nn.Linear, LayerNorm, depthwise nn.Conv1d, BatchNorm1d, masked softmax
attention), in the same process, same batches, same params (the plain block gets the rf params copied, and its
output is checked to be the same). A step = forward + sum of the outputs within the lengths + backward + Adam step.
CPU time (process_time), min over rounds (interleaved) of --steps steps each.

The compared rf block uses standard multi-head self attention (``self_att=rf.SelfAttention``) so that both compute
exactly the same thing; the rf block with its default RelPosSelfAttention is timed too (for information).

    python benchmarks/rf_conformer_block.py [--steps 5] [--rounds 3] [--batch 8] [--time 100] [--dim 256]
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.frontend.encoder.conformer import ConformerEncoderLayer  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402
from returnn_lite.torch.frontend import rf_module_to_pt_module  # noqa: E402
from returnn_lite.torch.frontend._backend import _new  # noqa: E402

time_dim = Dim(None, name="time")


class PlainConformerBlock(torch.nn.Module):
    """The Conformer block (macaron FFs, MHSA, conv module, final LayerNorm) in plain PyTorch, x [B, T, D]."""

    def __init__(self, d, ff, heads, kernel):
        super().__init__()
        self.heads = heads
        self.ln = torch.nn.ModuleDict({n: torch.nn.LayerNorm(d, eps=1e-6) for n in (
            "ffn1", "att", "conv", "ffn2", "final")})
        self.ffn1 = torch.nn.Sequential(torch.nn.Linear(d, ff), torch.nn.SiLU(), torch.nn.Linear(ff, d))
        self.ffn2 = torch.nn.Sequential(torch.nn.Linear(d, ff), torch.nn.SiLU(), torch.nn.Linear(ff, d))
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.conv1 = torch.nn.Linear(d, 2 * d)
        self.depthwise = torch.nn.Conv1d(d, d, kernel, groups=d, padding=(kernel - 1) // 2)
        self.bn = torch.nn.BatchNorm1d(d, eps=1e-3, momentum=0.1)
        self.conv2 = torch.nn.Linear(d, d)

    def forward(self, x, mask):  # mask [B, T] bool
        n_b, n_t, d = x.shape
        x = x + 0.5 * self.ffn1(self.ln["ffn1"](x))
        qkv = self.qkv(self.ln["att"](x)).view(n_b, n_t, self.heads, 3, d // self.heads)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        x = x + self.proj(att.transpose(1, 2).reshape(n_b, n_t, d))
        h = F.glu(self.conv1(self.ln["conv"](x)), dim=-1)
        h = self.depthwise(h.transpose(1, 2))
        h = F.silu(self.bn(h)).transpose(1, 2)
        x = x + self.conv2(h)
        x = x + 0.5 * self.ffn2(self.ln["ffn2"](x))
        return self.ln["final"](x)


def copy_rf_params_to_plain(rf_layer, plain, heads):
    p = {name: t.raw_tensor.detach() for name, t in rf_layer.named_parameters()}
    with torch.no_grad():
        for rf_name, pt_name in (("ffn1", "ffn1"), ("ffn2", "ffn2")):
            getattr(plain, pt_name)[0].weight.copy_(p[rf_name + ".linear_ff.weight"].T)
            getattr(plain, pt_name)[0].bias.copy_(p[rf_name + ".linear_ff.bias"])
            getattr(plain, pt_name)[2].weight.copy_(p[rf_name + ".linear_out.weight"].T)
            getattr(plain, pt_name)[2].bias.copy_(p[rf_name + ".linear_out.bias"])
        for rf_name, pt_name in (("ffn1_layer_norm", "ffn1"), ("self_att_layer_norm", "att"),
                                 ("conv_layer_norm", "conv"), ("ffn2_layer_norm", "ffn2"),
                                 ("final_layer_norm", "final")):
            plain.ln[pt_name].weight.copy_(p[rf_name + ".scale"])
            plain.ln[pt_name].bias.copy_(p[rf_name + ".bias"])
        # rf qkv per head [q, k, v]: the plain view (heads, 3, d_head) has the same layout
        plain.qkv.weight.copy_(p["self_att.qkv.weight"].T)
        plain.qkv.bias.copy_(p["self_att.qkv.bias"])
        plain.proj.weight.copy_(p["self_att.proj.weight"].T)
        plain.proj.bias.copy_(p["self_att.proj.bias"])
        plain.conv1.weight.copy_(p["conv_block.positionwise_conv1.weight"].T)
        plain.conv1.bias.copy_(p["conv_block.positionwise_conv1.bias"])
        plain.depthwise.weight.copy_(p["conv_block.depthwise_conv.filter"])
        plain.depthwise.bias.copy_(p["conv_block.depthwise_conv.bias"])
        plain.bn.weight.copy_(p["conv_block.norm.gamma"])
        plain.bn.bias.copy_(p["conv_block.norm.beta"])
        plain.conv2.weight.copy_(p["conv_block.positionwise_conv2.weight"].T)
        plain.conv2.bias.copy_(p["conv_block.positionwise_conv2.bias"])


def make_batches(n, batch, max_len, d, seed=1):
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        lens = rng.randint(max_len // 2, max_len + 1, size=batch).astype("int32")
        lens[0] = max_len
        out.append((torch.from_numpy(rng.randn(batch, max_len, d).astype("float32")), torch.from_numpy(lens)))
    return out


def rf_forward(layer, model_dim, x, lens):
    time_dim.reset_eager()
    batch_dim.dyn_size_ext = _new("batch", [], torch.tensor(x.shape[0], dtype=torch.int32))
    time_dim.dyn_size_ext = _new("time:size", [batch_dim], lens)
    y = layer(_new("x", [batch_dim, time_dim, model_dim], x), spatial_dim=time_dim)
    return y.copy_transpose([batch_dim, time_dim, model_dim]).raw_tensor


def run_rf(layer, model_dim, opt, batches):
    for x, lens in batches:
        rf.init_train_step_run_ctx(train_flag=True, step=0, epoch=1)
        y = rf_forward(layer, model_dim, x, lens)
        mask = torch.arange(x.shape[1])[None, :] < lens[:, None]
        loss = (y * mask[:, :, None]).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def run_plain(block, opt, batches):
    for x, lens in batches:
        mask = torch.arange(x.shape[1])[None, :] < lens[:, None]
        y = block(x, mask)
        loss = (y * mask[:, :, None]).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def timed(fn, rounds):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--time", type=int, default=100)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kernel", type=int, default=31)
    args = parser.parse_args()
    torch.manual_seed(1)
    rf.select_backend_torch()
    model_dim = Dim(args.dim, name="model")
    ff_dim = Dim(4 * args.dim, name="ff")
    opts = dict(ff_dim=ff_dim, num_heads=args.heads, conv_kernel_size=args.kernel, dropout=0.0, att_dropout=0.0)
    rf_layer = ConformerEncoderLayer(model_dim, self_att=rf.SelfAttention, **opts)
    rf_relpos = ConformerEncoderLayer(model_dim, **opts)
    plain = PlainConformerBlock(args.dim, 4 * args.dim, args.heads, args.kernel)
    for m in (rf_layer, rf_relpos):  # random (non-trivial) params everywhere
        for _, p in m.named_parameters():
            if p.raw_tensor.requires_grad:
                with torch.no_grad():
                    p.raw_tensor.uniform_(-0.1, 0.1)
    copy_rf_params_to_plain(rf_layer, plain, args.heads)
    batches = make_batches(args.steps, args.batch, args.time, args.dim)

    x, lens = batches[0]
    mask = torch.arange(x.shape[1])[None, :] < lens[:, None]
    rf.init_train_step_run_ctx(train_flag=False, step=0, epoch=1)
    plain.eval()
    with torch.no_grad():
        diff = (rf_forward(rf_layer, model_dim, x, lens) - plain(x, mask)).abs()[mask].max().item()
    plain.train()
    print("max |rf - plain| (eval, within the lengths): %.2e" % diff)
    assert diff < 1e-3, diff

    pt_layer, pt_relpos = rf_module_to_pt_module(rf_layer), rf_module_to_pt_module(rf_relpos)
    opt_rf = torch.optim.Adam(pt_layer.parameters(), lr=1e-4)
    opt_relpos = torch.optim.Adam(pt_relpos.parameters(), lr=1e-4)
    opt_plain = torch.optim.Adam(plain.parameters(), lr=1e-4)
    run_rf(rf_layer, model_dim, opt_rf, batches[:1])  # warm-up
    run_plain(plain, opt_plain, batches[:1])
    # rounds interleaved (plain, rf, rf relpos, plain, ...): a load change on the machine hits all three alike
    t_plain = t_rf = t_relpos = float("inf")
    for _ in range(args.rounds):
        t_plain = min(t_plain, timed(lambda: run_plain(plain, opt_plain, batches), 1))
        t_rf = min(t_rf, timed(lambda: run_rf(rf_layer, model_dim, opt_rf, batches), 1))
        t_relpos = min(t_relpos, timed(lambda: run_rf(rf_relpos, model_dim, opt_relpos, batches), 1))
    n = args.steps
    print("Conformer block, batch %i x %i frames, dim %i, %i heads, kernel %i, torch %s, %i threads" % (
        args.batch, args.time, args.dim, args.heads, args.kernel, torch.__version__, torch.get_num_threads()))
    print("plain PyTorch block        %.1f ms/step" % (1000 * t_plain / n))
    print("rf block (SelfAttention)   %.1f ms/step  ratio %.2f" % (1000 * t_rf / n, t_rf / t_plain))
    print("rf block (RelPos, default) %.1f ms/step  ratio %.2f (more work: relative positions)" % (
        1000 * t_relpos / n, t_relpos / t_plain))


if __name__ == "__main__":
    main()
