"""
Several processes on the torch engine: ``torch_distributed = {...}`` in the config, started by
``torchrun --nproc_per_node N rnn.py CONFIG`` (one process per GPU; several nodes by torchrun's rendezvous).

Options (``torch_distributed`` keys):

* ``reduce_type``: ``"grad"`` (default; DistributedDataParallel sums the gradients in the backward pass) or
  ``"param"`` (each rank steps on its own; the params are averaged every ``param_sync_step`` steps and at the end
  of each epoch);
* ``param_sync_step`` (default 100), with ``reduce_type = "param"``;
* ``dataset_distribution``: ``"shard"`` (default: rank r reads every N-th seq of the epoch from seq r, so each rank
  runs about 1/N of the steps) or ``"random_seed_offset"`` (every rank reads all of it in its own random order);
* ``barrier_timeout`` (seconds, default 300): how long a rank waits for the others in any collective (the steps'
  all-reduces, the end-of-epoch barrier). A rank that died or hangs ends the run with one error line naming it,
  instead of a hang;
* ``options``: extra keyword arguments of ``DistributedDataParallel`` (e.g. ``find_unused_parameters``).

The process group is NCCL on GPUs, gloo on CPUs; the control messages (does every rank have another batch, the
epoch's score sums, the barrier) always go over a gloo group on the CPU, so they cost no GPU sync. Only rank 0
writes checkpoints, the learning-rate file and the log; dev scores are computed on each rank's shard and summed.
"""

from __future__ import annotations

import contextlib
import datetime
import os

import torch
import torch.distributed as dist

from .backend import DistributedContext, EngineError
from .data_sharding import SHARDING_MODES, init_seq_order_for_rank

__all__ = ["TorchDistributed"]

_KEYS = {"reduce_type", "param_sync_step", "dataset_distribution", "barrier_timeout", "options"}


class TorchDistributed(DistributedContext):
    """The torch engine's :class:`~returnn_lite.engine.backend.DistributedContext`."""

    @classmethod
    def from_config(cls, config, log, device):
        opts = config.typed_value("torch_distributed")
        if not isinstance(opts, dict):
            raise EngineError("torch_distributed %r: expected a dict (e.g. torch_distributed = {})" % (opts,))
        unknown = sorted(set(opts) - _KEYS)
        if unknown:
            raise EngineError("torch_distributed: unknown key(s) %s; supported: %s" % (unknown, ", ".join(sorted(_KEYS))))
        if config.value("task", "train") != "train":
            raise EngineError("torch_distributed: only task train runs on several processes; run task %r with one "
                              "process" % config.value("task", "train"))
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise EngineError("torch_distributed: start the run with torchrun --nproc_per_node N rnn.py CONFIG (the "
                              "environment lacks %s)" % ", ".join(missing))
        return cls(opts, log, device)

    def __init__(self, opts, log, device):
        self.log = log
        self.reduce_type = opts.get("reduce_type", "grad")
        if self.reduce_type not in ("grad", "param"):
            raise EngineError("torch_distributed reduce_type %r: use \"grad\" or \"param\"" % (self.reduce_type,))
        self.param_sync_step = int(opts.get("param_sync_step", 100))
        if self.param_sync_step < 1:
            raise EngineError("torch_distributed param_sync_step %r: must be >= 1" % (opts.get("param_sync_step"),))
        self.dataset_distribution = opts.get("dataset_distribution", "shard")
        if self.dataset_distribution not in SHARDING_MODES:
            raise EngineError("torch_distributed dataset_distribution %r: use one of %s" % (
                self.dataset_distribution, ", ".join(SHARDING_MODES)))
        self.timeout = float(opts.get("barrier_timeout", 300))
        self.ddp_options = dict(opts.get("options", None) or {})
        self.rank = int(os.environ["RANK"])
        self.size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if device.type == "cuda":
            device = torch.device("cuda", self.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        self.device = device
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        timeout = datetime.timedelta(seconds=self.timeout)
        try:
            dist.init_process_group(backend=self.backend, timeout=timeout,
                                    **({"device_id": device} if device.type == "cuda" else {}))
            self.control = dist.new_group(backend="gloo", timeout=timeout) if self.backend != "gloo" else None
        except Exception as exc:
            raise EngineError("torch_distributed: rank %i of %i cannot join the process group (%s): %s" % (
                self.rank, self.size, self.backend, str(exc).splitlines()[0] if str(exc) else exc)) from None
        self.steps = 0
        self.module = None  # the params to average / broadcast
        if self.rank != 0:  # only rank 0 logs (its errors still go to stderr)
            log.verbosity = 0
            log.close()
        log.v3("torch_distributed: %i processes (%s), reduce_type %r, dataset_distribution %r, barrier timeout %g s" % (
            self.size, self.backend, self.reduce_type, self.dataset_distribution, self.timeout))

    # ---- errors

    def lost_contact_error(self, exc, what):
        """The one-line error for a failed collective (a rank died, or did not answer within the timeout)."""
        text = " ".join(str(exc).split())[:300]
        return EngineError("torch_distributed: rank %i of %i: %s failed: another rank died or did not answer within "
                           "barrier_timeout %g s (%s: %s)" % (self.rank, self.size, what, self.timeout,
                                                             type(exc).__name__, text))

    def _collective(self, what, func, *args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (RuntimeError, ConnectionError) as exc:
            raise self.lost_contact_error(exc, what) from None

    # ---- model

    def wrap_module(self, step_module):
        """``"grad"``: the step module in DistributedDataParallel; ``"param"``: as it is (params averaged)."""
        self.module = step_module
        if self.reduce_type != "grad":
            return step_module
        from torch.nn.parallel import DistributedDataParallel

        try:
            return self._collective(
                "the DistributedDataParallel setup", DistributedDataParallel, step_module,
                device_ids=[self.device.index] if self.device.type == "cuda" else None, **self.ddp_options)
        except TypeError as exc:
            raise EngineError("torch_distributed options %r: %s" % (self.ddp_options, exc)) from None

    @staticmethod
    def no_sync(step_module):
        """No gradient all-reduce in this backward (gradient accumulation over several steps)."""
        ddp = getattr(step_module, "_orig_mod", step_module)  # torch.compile's wrapper
        return ddp.no_sync() if hasattr(ddp, "no_sync") else contextlib.nullcontext()

    def _float_params(self):
        return [p for p in self.module.parameters()] if self.module is not None else []

    def broadcast_params(self):
        if self.module is None:
            return
        with torch.no_grad():
            for tensor in self.module.state_dict().values():
                self._collective("the params broadcast from rank 0", dist.broadcast, tensor, 0)
        self.log.v4("torch_distributed: params broadcast from rank 0")

    def _average_params(self):
        with torch.no_grad():
            for p in self._float_params():
                if p.dtype.is_floating_point:
                    self._collective("the params averaging", dist.all_reduce, p.data, op=dist.ReduceOp.SUM)
                    p.data.div_(self.size)

    # ---- the loop's calls

    def init_seq_order(self, dataset, epoch):
        init_seq_order_for_rank(dataset, epoch, self.rank, self.size, self.dataset_distribution, EngineError)

    def all_have_batch(self, have):
        flag = torch.tensor([1 if have else 0], dtype=torch.int32)
        self._collective("the step sync", dist.all_reduce, flag, op=dist.ReduceOp.MIN, group=self.control)
        return bool(flag.item())

    def after_step(self):
        self.steps += 1
        if self.reduce_type == "param" and self.steps % self.param_sync_step == 0:
            self._average_params()
            self.log.v5("torch_distributed: params averaged after step %i" % self.steps)

    def end_of_epoch(self):
        self.barrier("the end-of-epoch barrier")
        if self.reduce_type == "param":
            self._average_params()

    def sum_accumulator(self, acc):
        keys = [("cost", k) for k in sorted(acc.cost)] + [("error", k) for k in sorted(acc.error)] + \
            [("frames", k) for k in sorted(acc.frames)]
        values = torch.tensor([getattr(acc, part)[k] for part, k in keys] + [acc.num_seqs, acc.num_steps],
                              dtype=torch.float64)
        self._collective("the epoch score sum", dist.all_reduce, values, op=dist.ReduceOp.SUM, group=self.control)
        summed = values.tolist()
        for (part, k), value in zip(keys, summed):
            getattr(acc, part)[k] = float(value)
        acc.num_seqs, acc.num_steps = int(summed[-2]), int(summed[-1])

    def barrier(self, what):
        # on the gloo group: names the ranks that did not arrive within the timeout
        self._collective(what, dist.monitored_barrier, group=self.control,
                         timeout=datetime.timedelta(seconds=self.timeout), wait_all_ranks=True)

    def close(self):
        if dist.is_initialized():
            dist.destroy_process_group()
