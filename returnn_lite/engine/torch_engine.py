"""
The PyTorch engine backend (``backend = "torch"``): the config's ``get_model`` (an rf Module on rf's torch backend,
or a plain ``torch.nn.Module``), ``train_step`` / ``forward_step``, a torch optimizer, ``.pt`` checkpoints.
Implements :class:`returnn_lite.engine.backend.EngineBackend` for the shared epoch loop. Imports no TensorFlow.

Options (the original's names):

* ``device``: ``"cpu"``, ``"gpu"``/``"cuda"``, ``"cuda:N"``; the env var ``PT_DEVICE`` wins; default: CUDA if
  available, else CPU. Params and extern data live on the device, sequence lengths stay on the CPU; rf ops create
  their tensors on it (rf's default device is set while a step runs). Checkpoints load onto it (``map_location``).
* ``torch_intra_op_threads`` (CPU only): torch's intra-op threads, default 1 as the original (several threads
  oversubscribe the cores of a shared machine for the small ops of a train step).
* ``torch_amp``: ``"bfloat16"`` / ``"float16"`` / ``{"dtype": ..., "grad_scaler": {...}}``: the step runs under
  ``torch.autocast``; float16 gets a ``torch.amp.GradScaler`` (its state is in the checkpoint).
* ``torch_distributed = {...}``: several processes under ``torchrun`` (:mod:`.torch_distributed`).
* ``accum_grad_multiple_step``, ``gradient_clip``, ``gradient_clip_norm``, ``gradient_clip_global_norm``,
  ``gradient_noise``, ``learning_rate_warmup_steps``, ``dynamic_learning_rate``, ``optimizer`` (and the old-style
  ``adam``/``nadam``/... flags) as the TF engine.
* ``torch_dataloader_opts = {"num_workers": N, "pin_memory": bool, "prefetch_factor": k}``: batches are made by N
  worker processes (0: one background thread), pinned and copied to the device ahead of the step.
* ``forward_step`` + ``forward_callback`` (:class:`returnn_lite.forward_iface.ForwardCallbackIface`) for
  ``task = "forward"``; without a callback the output ``forward_output_layer`` (default ``"output"``) goes to HDF.
* ``torch_oom_retry = True``: a train/eval batch that runs out of memory is split into halves (recursively) and
  each half run, the update made once with their summed gradients (not with ``torch_distributed``, nor for losses
  with ``use_normalized_loss``); without it, out of memory is one error line naming the step and batch shape.
* ``torch_compile = True`` or a dict of ``torch.compile`` options: the train step's model call is compiled.

Checkpoint ``<model>.NNN.pt``: ``{"model": state_dict (rf param names), "optimizer", "grad_scaler", "global_step",
"epoch"}``, written to a temp file (fsynced) and renamed into place (a killed save or a full disk leaves the
previous checkpoint; the loop commits the learning-rate file after it). Loading checks the zip's CRCs (which
``torch.load`` skips), maps tensors saved on another device onto this one, and refuses 'meta' tensors, naming the
file.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os

import numpy
import torch

from .backend import EngineBackend, EngineError, ForwardOutput
from .checks import check_dataset_matches_extern_data, check_feed_value, first_line
from .checkpoints import checkpoint_exists, get_existing_models, remove_stale_temp_files
from .torch_checkpoint import check_state_dict_tensors, load_pt, save_pt_atomically

__all__ = ["TorchBackend", "select_device", "parse_torch_amp"]

_SUFFIX = ".pt"
_AMP_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
_DATALOADER_KEYS = {"num_workers", "pin_memory", "prefetch_factor"}


def select_device(config):
    """``PT_DEVICE``, else config ``device``, else CUDA if available, else CPU (one clear error for a bad value)."""
    env = os.environ.get("PT_DEVICE") or None
    value = env or config.value("device", None) or None
    where = "PT_DEVICE=%s" % env if env else "device %r" % (value,)
    if value is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = "cuda" + value[3:] if value.startswith("gpu") else value
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise EngineError("%s: not a device; use \"cpu\", \"gpu\", \"cuda\" or \"cuda:N\"" % where) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EngineError("%s: no CUDA GPU is available on this machine (torch %s sees none); use device = "
                              "\"cpu\" or PT_DEVICE=cpu" % (where, torch.__version__))
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise EngineError("%s: this machine has %i CUDA GPU(s)" % (where, torch.cuda.device_count()))
    elif device.type != "cpu":
        raise EngineError("%s: device type %r is not supported; use \"cpu\", \"gpu\", \"cuda\" or \"cuda:N\"" % (
            where, device.type))
    return device


def parse_torch_amp(config, device):
    """(autocast dtype or None, GradScaler kwargs or None) of ``torch_amp`` (and ``grad_scaler``)."""
    opts = config.typed_value("torch_amp", None)
    scaler = config.typed_value("grad_scaler", None) if config.has("grad_scaler") else "default"
    if opts in (None, "", False):
        if scaler not in ("default", None):
            raise EngineError("grad_scaler: only with torch_amp = \"float16\"")
        return None, None
    if isinstance(opts, str):
        dtype_name = opts
    elif isinstance(opts, dict):
        unknown = sorted(set(opts) - {"dtype", "grad_scaler"})
        if unknown:
            raise EngineError("torch_amp: unknown key(s) %s; known: dtype, grad_scaler" % unknown)
        dtype_name = opts.get("dtype", "float16")
        if "grad_scaler" in opts:
            scaler = opts["grad_scaler"]
    else:
        raise EngineError("torch_amp %r: expected \"bfloat16\", \"float16\" or {\"dtype\": ..., \"grad_scaler\": "
                          "{...}}" % (opts,))
    if dtype_name not in _AMP_DTYPES:
        raise EngineError("torch_amp dtype %r: use \"bfloat16\" or \"float16\"" % (dtype_name,))
    dtype = _AMP_DTYPES[dtype_name]
    if scaler == "default":
        scaler = {} if dtype == torch.float16 else None
    if scaler is not None and not isinstance(scaler, dict):
        raise EngineError("torch_amp grad_scaler %r: expected a dict of torch.amp.GradScaler options or None" % (
            scaler,))
    if dtype == torch.float16 and device.type == "cpu" and scaler is not None:
        scaler = dict(scaler)
    return dtype, scaler


def _set_cpu_threads(config, device, log):
    """The original's default: one intra-op thread on the CPU unless configured."""
    if config.has("torch_intra_op_threads"):
        n = config.int("torch_intra_op_threads", 1)
        if n < 1:
            raise EngineError("torch_intra_op_threads %r: must be >= 1" % config.value("torch_intra_op_threads"))
    elif device.type == "cpu":
        n = 1
    else:
        return
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
        log.v5("torch: %i intra-op thread(s)" % n)


def _results_dict(keys, floats):
    results = {}
    for i, key in enumerate(keys):
        summed, inv = floats[2 * i], floats[2 * i + 1]
        results[key] = summed
        results["loss_norm_factor:" + key.split(":", 1)[1]] = 1.0 / inv if inv else 0.0
    return results


def _frames(arrays):
    return max((int(v.shape[1]) for v in arrays.data.values() if getattr(v, "ndim", 0) >= 2), default=1)


def _combined_results(parts):
    """The results of the pieces of a split batch as of one step: costs and frames (1 / norm factor) summed."""
    sums = {}
    for results in parts:
        for key, value in results.items():
            if key.startswith("loss_norm_factor:"):
                value = 1.0 / value if value else 0.0
            sums[key] = sums.get(key, 0.0) + value
    return {key: (1.0 / value if value else 0.0) if key.startswith("loss_norm_factor:") else value
            for key, value in sums.items()}


def _dead_worker_error(dataset_name, exc):
    return EngineError("dataset %r: a torch_dataloader_opts worker died: %s" % (
        dataset_name, str(exc).splitlines()[0]))


def _is_collective_failure(exc):
    """A failed all-reduce (a rank died or timed out), not an error of the model code."""
    dist_errors = tuple(getattr(torch.distributed, name) for name in ("DistError", "DistBackendError")
                        if hasattr(torch.distributed, name))
    if dist_errors and isinstance(exc, dist_errors):
        return True
    text = str(exc).lower()
    return any(word in text for word in ("connection closed", "connection reset", "gloo", "nccl", "timed out"))


def _register_config_module(config):
    """torch.compile looks up the module of the functions it traces: the config's functions live in
    ``__returnn_config__``, which is no imported module; a module object with the config's names stands in."""
    import sys
    import types

    name = config.typed_dict.get("__name__", "__returnn_config__")
    if name in sys.modules and not getattr(sys.modules[name], "_returnn_lite_config_standin", False):
        return  # a real module of that name
    module = types.ModuleType(name)
    module.__dict__.update({k: v for k, v in config.typed_dict.items() if k != "__builtins__"})
    module._returnn_lite_config_standin = True
    sys.modules[name] = module


def _state_dict_error_text(exc):
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 and lines[0].startswith("Error(s) in loading state_dict") else first_line(exc)


class _StepModule(torch.nn.Module):
    """The model with the step function as ``forward``: what DDP and torch.compile wrap, so that the rf model call
    inside ``train_step`` runs within their forward."""

    def __init__(self, pt_module, model):
        super().__init__()
        self.pt_module = pt_module
        object.__setattr__(self, "_model", model)

    def forward(self, step_func, extern_data):
        step_func(model=self._model, extern_data=extern_data)
        return _collect_losses()


def _collect_losses():
    """(total loss raw tensor or None, [(key, summed raw, inv norm raw or number)]) of the run ctx's losses."""
    from .. import frontend as rf

    ctx = rf.get_run_ctx()
    items = []
    for name, loss in ctx.losses.items():
        inv = loss.get_inv_norm_factor()
        items.append((("error:" if loss.as_error else "cost:") + name, loss.get_summed_loss().raw_tensor,
                      getattr(inv, "raw_tensor", inv)))
    total = ctx.total_loss() if ctx.losses else None
    return getattr(total, "raw_tensor", total), items


class TorchBackend(EngineBackend):
    """See the module doc."""

    name = "torch"
    checkpoint_suffix = _SUFFIX
    _defer_results_on_cpu = False  # tests: the GPU's one-step-late results path on the CPU

    def __init__(self, config, log, task):
        super().__init__(config, log, task)
        if not callable(config.typed_value("get_model", None)):
            raise EngineError("backend = \"torch\" needs get_model(*, epoch, step, **_) in the config")
        if config.has("network"):
            raise EngineError("backend = \"torch\" runs rf configs (get_model/train_step), not a layer dict "
                              "'network' (use backend = \"tensorflow\")")
        if config.has("distributed") or config.bool("use_horovod", False) or \
                len(json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker", [])) > 1:
            raise EngineError("backend = \"torch\": distributed / use_horovod / TF_CONFIG are the TF backend's; "
                              "use torch_distributed = {} under torchrun")
        for key in ("tf_log_dir", "tf_session_opts", "search_train_network_layers", "pretrain", "get_network"):
            if config.has(key) and config.typed_value(key, None) not in (None, "", {}, []):
                raise EngineError("%s: not supported with backend = \"torch\"" % key)
        self.device = select_device(config)
        _set_cpu_threads(config, self.device, log)
        self.amp_dtype, self._scaler_opts = parse_torch_amp(config, self.device)
        self.model = None
        self.pt_module = None
        self.optimizer = None
        self.grad_scaler = None
        self.global_step = 0
        self.extern_data = None
        self._step_module = None  # DDP / compiled wrapper of the step (train)
        self._accum_count = 0
        self._forward_out = None
        self._loader_opts = self._dataloader_opts()
        self._compile_opts = self._torch_compile_opts()
        self._oom_retry = self._oom_retry_opt()
        self._oom_where = "step"
        self._backward_started = False
        self._in_train_mode = False  # pt_module.train(True) was called since the last build / eval / forward

    # ---- options

    def _dataloader_opts(self):
        opts = self.config.typed_value("torch_dataloader_opts", None) or {}
        if not isinstance(opts, dict):
            raise EngineError("torch_dataloader_opts %r: expected a dict (num_workers, pin_memory, prefetch_factor)"
                              % (opts,))
        unknown = sorted(set(opts) - _DATALOADER_KEYS)
        if unknown:
            raise EngineError("torch_dataloader_opts: unknown key(s) %s; supported: %s" % (
                unknown, ", ".join(sorted(_DATALOADER_KEYS))))
        return dict(opts)

    def _oom_retry_opt(self):
        value = self.config.typed_value("torch_oom_retry", False)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if value not in (True, False, None, 0, 1):
            raise EngineError("torch_oom_retry %r: expected True or False" % (value,))
        if value and self.config.typed_value("torch_distributed", None) is not None:
            raise EngineError("torch_oom_retry: not with torch_distributed (a split batch would run more "
                              "all-reduces on one rank than on the others)")
        return bool(value)

    def _torch_compile_opts(self):
        opts = self.config.typed_value("torch_compile", None)
        if opts in (None, False):
            return None
        if opts is True:
            return {}
        if not isinstance(opts, dict):
            raise EngineError("torch_compile %r: expected True or a dict of torch.compile options" % (opts,))
        return dict(opts)

    # ---- setup

    def setup_distributed(self):
        if self.config.typed_value("torch_distributed", None) is None:
            return None
        from .torch_distributed import TorchDistributed

        self.dist = TorchDistributed.from_config(self.config, self.log, self.device)
        self.device = self.dist.device
        return self.dist

    def _device_ctx(self):
        from .. import frontend as rf

        ctx = getattr(rf, "set_default_device_ctx", None)
        return ctx(str(self.device)) if ctx is not None else contextlib.nullcontext()

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def build(self, epoch, dataset, train):
        from .. import frontend as rf
        from ..tensor import TensorDict

        config = self.config
        rf.select_backend_torch()
        rf.set_random_seed(config.int("random_seed", 42))
        extern_data_opts = config.typed_value("extern_data", None)
        if not extern_data_opts:
            raise EngineError("backend = \"torch\" needs extern_data in the config")
        self.extern_data = TensorDict()
        self.extern_data.update(extern_data_opts, auto_convert=True)
        with self._device_ctx():
            self.model = config.typed_value("get_model")(epoch=epoch or 1, step=self.global_step)
        if isinstance(self.model, torch.nn.Module):  # a plain PyTorch model (demos/demo-torch.config)
            self.pt_module = self.model
        else:
            from ..torch.frontend import rf_module_to_pt_module

            self.pt_module = rf_module_to_pt_module(self.model)
        self.pt_module.to(self.device)
        self._in_train_mode = False
        self.data_keys = sorted(k for k in self.extern_data.data if k in dataset.get_data_keys()) \
            if dataset is not None else sorted(self.extern_data.data)
        self.optimizer = None
        self.grad_scaler = None
        self._step_module = None
        if train:
            if not callable(config.typed_value("train_step", None)):
                raise EngineError("task train with backend = \"torch\" needs train_step(*, model, extern_data, **_)")
            from .torch_optim import make_optimizer

            self.optimizer = make_optimizer(config, self.pt_module.parameters())
            if self._scaler_opts is not None:
                try:
                    self.grad_scaler = torch.amp.GradScaler(self.device.type, **self._scaler_opts)
                except TypeError as exc:
                    raise EngineError("torch_amp grad_scaler %r: %s" % (self._scaler_opts, exc)) from None
            step_module = _StepModule(self.pt_module, self.model)
            if self.dist is not None:
                step_module = self.dist.wrap_module(step_module)
            if self._compile_opts is not None:
                _register_config_module(config)
                try:
                    step_module = torch.compile(step_module, **self._compile_opts)
                except TypeError as exc:
                    raise EngineError("torch_compile %r: %s" % (self._compile_opts, exc)) from None
            self._step_module = step_module
        n = sum(p.numel() for p in self.pt_module.parameters())
        self.log.v4("Model (torch backend, device %s%s): %i params %s, data keys %s" % (
            self.device, ", amp %s" % str(self.amp_dtype).replace("torch.", "") if self.amp_dtype else "",
            n, [name for name, _ in self.pt_module.named_parameters()], self.data_keys))

    def has_loss(self):
        return True  # train_step marks them; a step without one is an error

    def check_dataset(self, dataset):
        """Before the first step: keys, sparse vs dense, dims and label range (the TF engine's check)."""
        super().check_dataset(dataset)
        check_dataset_matches_extern_data(dataset, self._extern_data_view(), self.data_keys, EngineError)

    def _extern_data_view(self):
        """The extern data as the TF checks (engine/checks.py) read them: a "network" without layers."""
        from types import SimpleNamespace

        data = self.extern_data.data
        view = SimpleNamespace(has_data=lambda key: key in data, get_data=lambda key: data[key],
                               default_input="data")
        return SimpleNamespace(extern_data=view, layers={})

    def _check_batch(self, arrays, dataset_name):
        """Before a step: the batch check, unless the producer of the batch made it (``torch_data.batch_pairs``)."""
        if not hasattr(arrays, "check_error"):
            self.check_batch(arrays, dataset_name)
        elif arrays.check_error is not None:
            raise EngineError(arrays.check_error)

    def check_batch(self, arrays, dataset_name):
        """Per batch (numpy, cheap): shape, label range of sparse data, finite dense values; names the seq."""
        network = self._extern_data_view()
        for key in self.data_keys:
            t = self.extern_data.data[key]
            value = arrays.data[key]
            if value.ndim == len(t.dims) + 1 and value.shape[1] == 1:
                value = value[:, 0]
            check_feed_value(t, value, arrays.seq_lens.get(key), key, dataset_name, network, arrays.seq_tags,
                             EngineError)

    # ---- data

    def batch_arrays_iter(self, engine, dataset, epoch, train):
        """(batch, arrays) pairs made ahead of the step (see ``torch_dataloader_opts``)."""
        from .torch_data import batch_pairs

        return batch_pairs(engine, self, dataset, epoch, train, self._loader_opts)

    def _dynamic_dims(self):
        if getattr(self, "_dyn_dims_of", None) is not self.extern_data:
            dims = []
            for t in self.extern_data.data.values():
                dims += [d for d in t.dims if d.dimension is None and not d.is_batch_dim() and d not in dims]
            self._dyn_dims_of, self._dyn_dims = self.extern_data, dims
        return self._dyn_dims

    def _set_extern_data(self, arrays):
        """The batch as torch tensors of the extern data on the device; the lengths stay on the CPU."""
        from .. import frontend as rf
        from ..tensor import batch_dim

        for d in self._dynamic_dims():  # the previous batch's sizes
            d.reset_eager()
        n_batch = None
        pinned = getattr(arrays, "torch_tensors", None) or {}
        for key in self.data_keys:
            t = self.extern_data.data[key]
            value = arrays.data[key]
            lens = arrays.seq_lens[key]
            if value.ndim == len(t.dims) + 1 and value.shape[1] == 1:
                value = value[:, 0]
            if value.ndim != len(t.dims):
                raise EngineError("data %r: the dataset gives shape %s, extern_data has dims %s" % (
                    key, value.shape, [d.short_repr() for d in t.dims]))
            raw = pinned.get(key)
            if raw is None or tuple(raw.shape) != value.shape:
                raw = torch.from_numpy(numpy.ascontiguousarray(value.astype(t.dtype, copy=False)))
            t.raw_tensor = raw.to(self.device, non_blocking=True)
            n_batch = value.shape[0]
            first = True
            for axis, d in enumerate(t.dims):
                if d.dimension is not None or d.is_batch_dim():
                    continue
                sizes = numpy.asarray(lens if first else numpy.full(lens.shape, value.shape[axis]), dtype="int32")
                first = False
                if d.dyn_size_ext is None:
                    d.dyn_size_ext = rf.convert_to_tensor(torch.from_numpy(sizes), dims=[batch_dim], dtype="int32",
                                                          name="%s:size" % d.description)
        batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(n_batch, dtype=torch.int32), dims=[],
                                                      dtype="int32", name="batch")

    # ---- steps

    def _learning_rate(self, learning_rate, epoch):
        """The epoch's rate with the per-step schedule (warmup, dynamic_learning_rate) of the TF updater."""
        config = self.config
        lr = float(learning_rate)
        warmup = config.float("learning_rate_warmup_steps", 0)
        if warmup > 0:
            lr *= min(1.0, (self.global_step + 1) / warmup)
        func = config.typed_value("dynamic_learning_rate", None)
        if callable(func):
            kwargs = {"global_train_step": self.global_step, "learning_rate": lr, "epoch": epoch, "network": None}
            params = inspect.signature(func).parameters
            if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                kwargs = {k: v for k, v in kwargs.items() if k in params}
            lr = float(func(**kwargs))
        return lr

    def _results(self, items, defer=False):
        """The step's results as floats: one device->host copy per step. ``defer`` (train steps on a GPU): the
        copy runs asynchronously and the loop reads the floats after it has launched the next step (so the host
        does not wait for the GPU in every step); the results then come as ``{"deferred": callable}``."""
        if not items:
            raise EngineError("train_step marked no loss (use Tensor.mark_as_loss)")
        values = []
        for _, summed, inv in items:
            values.append(summed.detach().float().reshape(()) if isinstance(summed, torch.Tensor) else
                          torch.tensor(float(summed)))
            values.append(inv.detach().float().reshape(()).to(values[-1].device) if isinstance(inv, torch.Tensor)
                          else torch.tensor(float(inv), device=values[-1].device))
        stacked = torch.stack([v.to(values[0].device) for v in values])
        keys = [key for key, _, _ in items]
        if defer and stacked.device.type == "cuda":
            host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
            host.copy_(stacked, non_blocking=True)
            done = torch.cuda.Event()
            done.record()

            def get():
                done.synchronize()
                return _results_dict(keys, host.tolist())

            return {"deferred": get}
        if defer and self._defer_results_on_cpu:  # (tests: the deferred path without a GPU)
            floats = stacked.tolist()
            return {"deferred": lambda: _results_dict(keys, floats)}
        return _results_dict(keys, stacked.cpu().tolist())

    def train_step(self, arrays, *, dataset_name, step, epoch, epoch_step, learning_rate, have_next=None):
        self._oom_where = "train step %i of dataset %r" % (step, dataset_name)
        try:
            self._check_batch(arrays, dataset_name)
            return self._train_step(arrays, epoch, learning_rate, have_next)
        except torch.OutOfMemoryError:
            raise self._out_of_memory_error(arrays, "train step %i of dataset %r" % (step, dataset_name)) from None
        except (RuntimeError, ConnectionError) as exc:  # e.g. DDP's all-reduce when another rank died
            if "DataLoader worker" in str(exc):  # torch's SIGCHLD handler raises it wherever the main thread is
                raise _dead_worker_error(dataset_name, exc) from None
            if self.dist is None or isinstance(exc, EngineError) or not _is_collective_failure(exc):
                raise
            raise self.dist.lost_contact_error(exc, "train step %i of dataset %r" % (step, dataset_name)) from None

    def _out_of_memory_error(self, arrays, what):
        """One line: where, the batch's shape, the peak memory, and what to lower."""
        if self.optimizer is not None:  # the partial gradients of the failed step
            self.optimizer.zero_grad(set_to_none=True)
        self._accum_count = 0
        return EngineError(self._out_of_memory_text(arrays, what))

    def _out_of_memory_text(self, arrays, what):
        peak = ""
        if self.device.type == "cuda":
            peak = ", peak %.2f GiB of %.2f GiB" % (torch.cuda.max_memory_allocated(self.device) / 2 ** 30,
                                                   torch.cuda.get_device_properties(self.device).total_memory / 2 ** 30)
            torch.cuda.empty_cache()
        return "%s: out of memory on %s with a batch of %i seqs x %i frames%s; lower batch_size or max_seqs (or use " \
               "torch_amp)" % (what, self.device, arrays.num_seqs, _frames(arrays), peak)

    def _train_step(self, arrays, epoch, learning_rate, have_next):
        accum = max(self.config.int("accum_grad_multiple_step", 1), 1)
        self._accum_count += 1
        apply_update = self._accum_count >= accum or have_next is False
        sync = self.dist.no_sync(self._step_module) if (self.dist is not None and not apply_update) else \
            contextlib.nullcontext()
        pieces = self._run_pieces(arrays, lambda piece: self._forward_backward(piece, epoch, sync), train=True)
        if apply_update:
            self._apply_update(self._learning_rate(learning_rate, epoch))
            self._accum_count = 0
        self.global_step += 1
        results = self._results(pieces[0], defer=True) if len(pieces) == 1 else \
            _combined_results([self._results(items) for items in pieces])
        if have_next is not None:
            results["all_have_next"] = self.dist.all_have_batch(have_next)
        return results

    def _forward_backward(self, arrays, epoch, sync):
        """The step's losses on ``arrays``, their gradients added to the params' ``.grad``."""
        from .. import frontend as rf

        self._set_extern_data(arrays)
        rf.init_train_step_run_ctx(train_flag=True, step=self.global_step, epoch=epoch)
        if not self._in_train_mode:  # (a walk over all submodules: after a build, eval or forward only)
            self.pt_module.train(True)
            self._in_train_mode = True
        with self._device_ctx(), sync:
            with self._autocast():
                total, items = self._step_module(self.config.typed_value("train_step"), self.extern_data)
            if total is None:
                raise EngineError("train_step marked no loss (use Tensor.mark_as_loss)")
            if not isinstance(total, torch.Tensor) or not total.requires_grad:
                raise EngineError("train_step: the losses do not depend on any trainable param (nothing to train)")
            total = total.float()  # the gradients of accum_grad_multiple_step steps are summed, as the TF updater
            self._backward_started = True
            if self.grad_scaler is not None:
                self.grad_scaler.scale(total).backward()
            else:
                total.backward()
        return items

    def _run_pieces(self, arrays, run, train, _split=False):
        """``[run(arrays)]`` (the step's loss items). With ``torch_oom_retry``, a batch that runs out of memory is
        split into halves (again while a half does), each run on its own: the summed losses' gradients add up to
        the whole batch's. Not retried: a single seq, and an out-of-memory error in a backward pass when the
        params already had gradients (of an earlier half, or of accum_grad_multiple_step), which it partly changed."""
        grads_before = train and self._oom_retry and any(p.grad is not None for p in self.pt_module.parameters())
        self._backward_started = False
        try:
            items = run(arrays)
        except torch.OutOfMemoryError:
            if not self._oom_retry:
                raise
            if arrays.num_seqs < 2 or (self._backward_started and grads_before):
                raise EngineError(self._out_of_memory_text(arrays, self._oom_where) + (
                    " (torch_oom_retry: a single seq)" if arrays.num_seqs < 2 else
                    " (torch_oom_retry: not split: its backward pass ran out of memory after adding to the gradients "
                    "of an earlier half or step)")) from None
            if self._backward_started and self.optimizer is not None:
                self.optimizer.zero_grad(set_to_none=True)  # no gradients before: drop the partial ones
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            from .torch_data import split_batch_arrays

            halves = split_batch_arrays(arrays)
            self.log.v3("%s: out of memory with a batch of %i seqs x %i frames; retrying it as %i + %i seqs "
                        "(torch_oom_retry)" % (self._oom_where, arrays.num_seqs, _frames(arrays),
                                               halves[0].num_seqs, halves[1].num_seqs))
            return [items for half in halves for items in self._run_pieces(half, run, train, _split=True)]
        if _split:
            from .. import frontend as rf

            normalized = sorted(name for name, loss in rf.get_run_ctx().losses.items()
                                if loss.use_normalized_loss and not loss.as_error)
            if normalized:
                raise EngineError("%s: torch_oom_retry cannot split this batch: loss(es) %s use use_normalized_loss "
                                  "(their gradient is not the sum over the halves); lower batch_size or max_seqs" % (
                                      self._oom_where, normalized))
        return [items]

    def _apply_update(self, lr):
        from .torch_optim import process_gradients

        if self.grad_scaler is not None:
            self.grad_scaler.unscale_(self.optimizer)
        process_gradients(self.config, self.optimizer)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.grad_scaler is not None:
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def eval_step(self, arrays, *, dataset_name, step, epoch):
        self._oom_where = "eval step %i of dataset %r" % (step, dataset_name)
        try:
            self._check_batch(arrays, dataset_name)
            return self._eval_step(arrays, epoch)
        except torch.OutOfMemoryError:
            raise self._out_of_memory_error(arrays, "eval step %i of dataset %r" % (step, dataset_name)) from None
        except RuntimeError as exc:
            if "DataLoader worker" in str(exc):
                raise _dead_worker_error(dataset_name, exc) from None
            raise

    def _eval_step(self, arrays, epoch):
        step_func = self.config.typed_value("train_step", None)
        if not callable(step_func):
            raise EngineError("eval with backend = \"torch\" needs train_step(*, model, extern_data, **_)")
        pieces = self._run_pieces(arrays, lambda piece: self._eval_items(piece, epoch, step_func), train=False)
        return self._results(pieces[0]) if len(pieces) == 1 else \
            _combined_results([self._results(items) for items in pieces])

    def _eval_items(self, arrays, epoch, step_func):
        from .. import frontend as rf

        self._set_extern_data(arrays)
        rf.init_train_step_run_ctx(train_flag=False, step=self.global_step, epoch=epoch)
        self.pt_module.train(False)
        self._in_train_mode = False
        with torch.no_grad(), self._device_ctx(), self._autocast():
            step_func(model=self.model, extern_data=self.extern_data)
            _, items = _collect_losses()
        return items

    def set_global_train_step(self, step):
        self.global_step = step

    # ---- forward

    def forward_outputs(self, arrays, epoch, step):
        """The outputs forward_step marks on a batch (a TensorDict)."""
        from .. import frontend as rf

        forward_step = self.config.typed_value("forward_step", None)
        if not callable(forward_step):
            raise EngineError("task forward with backend = \"torch\" needs forward_step(*, model, extern_data, **_)")
        self._set_extern_data(arrays)
        from .torch_forward import expected_outputs

        rf.init_forward_step_run_ctx(epoch=epoch or 1, step=step, expected_outputs=expected_outputs(self.config))
        self.pt_module.eval()
        self._in_train_mode = False
        with torch.no_grad(), self._device_ctx(), self._autocast():
            forward_step(model=self.model, extern_data=self.extern_data)
        return rf.get_run_ctx().outputs

    def forward_output(self):
        return self._forward_out  # None before the first batch: the dims come from forward_step

    def forward_batch(self, arrays, *, dataset_name, step, epoch):
        from .torch_forward import batch_major

        name = self.config.value("forward_output_layer", None) or "output"
        outputs = self.forward_outputs(arrays, epoch, step)
        if name not in outputs.data:
            raise EngineError("forward: forward_step marked no output %r (marked: %s)" % (name, sorted(outputs.data)))
        out = outputs.data[name]
        values, lens = batch_major(out)
        if self._forward_out is None:
            feat = out.dims[-1].dimension if values.ndim > 2 else (
                out.sparse_dim.dimension if out.sparse_dim is not None else 1)
            self._forward_out = ForwardOutput(name, feat, values.ndim - 1)
        return values, lens

    def forward_with_callback(self, engine, dataset):
        """task forward with ``forward_callback``: init(model=), process_seq(seq_tag=, outputs=) per seq, finish()."""
        from .torch_forward import run_forward_callback

        return run_forward_callback(engine, self, dataset)

    # ---- checkpoint files

    def existing_models(self, model_prefix):
        return get_existing_models(model_prefix, suffix=_SUFFIX)

    def checkpoint_exists(self, filename):
        return checkpoint_exists(filename, suffix=_SUFFIX)

    def remove_stale_temp_files(self, model_prefix):
        remove_stale_temp_files(model_prefix)

    def save_checkpoint(self, filename):
        state = {"model": self.pt_module.state_dict(), "global_step": self.global_step,
                 "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
                 "grad_scaler": self.grad_scaler.state_dict() if self.grad_scaler is not None else None}
        save_pt_atomically(state, filename + _SUFFIX)

    def load_checkpoint(self, filename, load_extra):
        path = filename + _SUFFIX
        state = load_pt(path, self.device, "cannot load model %r" % path)
        if not isinstance(state, dict) or "model" not in state:
            raise EngineError("cannot load model %r: not a returnn_lite torch checkpoint (no 'model' entry)" % path)
        check_state_dict_tensors(state["model"], "cannot load model %r" % path)
        try:
            missing, unexpected = self.pt_module.load_state_dict(state["model"], strict=False)
        except RuntimeError as exc:  # shape mismatch
            raise EngineError("cannot load model %r: %s" % (path, _state_dict_error_text(exc))) from None
        if missing or unexpected:
            raise EngineError("cannot load model %r: checkpoint does not match the model: missing params %s, "
                              "unknown params %s" % (path, sorted(missing), sorted(unexpected)))
        if load_extra:
            self.global_step = int(state.get("global_step", 0))
            try:
                if self.optimizer is not None and state.get("optimizer"):
                    self.optimizer.load_state_dict(state["optimizer"])
                if self.grad_scaler is not None and state.get("grad_scaler"):
                    self.grad_scaler.load_state_dict(state["grad_scaler"])
            except (ValueError, KeyError, RuntimeError, TypeError) as exc:
                raise EngineError("cannot load model %r: its optimizer state does not fit the optimizer (%s: %s)" % (
                    path, type(exc).__name__, first_line(exc))) from None

    def preload_from_files(self, training, fresh_train):
        from .torch_optim import preload_from_files

        preload_from_files(self, training, fresh_train)

    def close(self):
        if self.dist is not None:
            self.dist.close()
