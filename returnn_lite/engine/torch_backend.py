"""
The PyTorch backend of the engine: ``backend = "torch"`` in a config with ``get_model`` / ``train_step``
(``forward_step`` for ``task = "forward"``).

:class:`TorchEngine` is the :class:`~returnn_lite.engine.engine.Engine` (same epoch loop, datasets, batching,
learning-rate control, logging, checkpoint/resume protocol); it only replaces the backend-specific hooks:

* ``_build_graph``: the rf model on the torch backend (``get_model``) and a torch optimizer instead of a TF graph,
* ``_feed_dict`` / ``_session_run``: one step: the batch as torch tensors in the extern data (dims with their
  lengths), ``train_step`` under the rf run ctx, the losses as the TF engine's fetches (``cost:``, ``error:``,
  ``loss_norm_factor:``), backward + optimizer step when training,
* checkpoints: ``<model>.NNN.pt`` (``torch.save`` of the model's state_dict with rf param names, the optimizer
  state and the global step), written to a temp file and renamed into place (atomic; a killed save leaves the
  previous checkpoint), found on resume as the TF engine finds ``.index`` files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

import numpy

from .checkpoints import epoch_model_filename
from .engine import Engine, EngineError
from ..util import atomic_write

_SUFFIX = ".pt"
_TRAIN_OP, _LR, _ARRAYS = "_torch_train_op", "_torch_learning_rate", "_torch_arrays"


class _NoGraph:
    @staticmethod
    @contextlib.contextmanager
    def as_default():
        yield


class _NetworkShim:
    """What the shared epoch loop asks of the network."""

    def __init__(self, engine):
        self.engine = engine
        self.losses_dict = {"train_step": None}

    @staticmethod
    def get_post_control_dependencies():
        return None

    def set_global_train_step(self, step, _session=None):
        self.engine.global_step = step


class _UpdaterShim:
    train_op = _TRAIN_OP
    learning_rate = _LR


class TorchSaver:
    """``<name>.pt``: {"model": state_dict (rf names), "optimizer": ..., "global_step": int, "epoch": int}."""

    def __init__(self, engine):
        self.engine = engine

    def save(self, _session, filename):
        import torch

        engine = self.engine
        state = {"model": engine.pt_module.state_dict(), "global_step": engine.global_step, "epoch": engine.epoch,
                 "optimizer": engine.optimizer.state_dict() if engine.optimizer is not None else None}
        path = filename + _SUFFIX
        atomic_write(path, lambda f: torch.save(state, f), binary=True)

    def load(self, _session, filename, load_extra=True):
        import torch

        engine = self.engine
        state = torch.load(filename + _SUFFIX, map_location="cpu", weights_only=False)
        if not isinstance(state, dict) or "model" not in state:
            raise ValueError("%s%s is not a returnn_lite torch checkpoint (no 'model' entry)" % (filename, _SUFFIX))
        missing, unexpected = engine.pt_module.load_state_dict(state["model"], strict=False)
        if missing or unexpected:
            raise KeyError("checkpoint %s%s does not match the model: missing params %s, unknown params %s" % (
                filename, _SUFFIX, sorted(missing), sorted(unexpected)))
        if load_extra:
            engine.global_step = int(state.get("global_step", 0))
            if engine.optimizer is not None and state.get("optimizer"):
                engine.optimizer.load_state_dict(state["optimizer"])


class TorchEngine(Engine):
    """The engine on the rf torch backend (see the module doc)."""

    def __init__(self, config, log=None):
        super().__init__(config, log=log)
        try:
            import torch  # noqa: F401
        except ImportError:
            raise EngineError("backend = \"torch\" needs PyTorch (pip install -e \".[torch]\")") from None
        for key in ("get_model",):
            if not callable(config.typed_value(key, None)):
                raise EngineError("backend = \"torch\" needs %s(*, epoch, step, **_) in the config" % key)
        if config.has("network"):
            raise EngineError("backend = \"torch\" runs rf configs (get_model/train_step), not a layer dict "
                              "'network' (use backend = \"tensorflow\")")
        if config.has("distributed") or config.bool("use_horovod", False) or \
                len(json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker", [])) > 1:
            raise EngineError("backend = \"torch\": distributed training (distributed / use_horovod / TF_CONFIG) is "
                              "not supported on the torch backend; run one process")
        self.model = None
        self.pt_module = None
        self.optimizer = None
        self.global_step = 0
        self.extern_data = None
        self.graph = _NoGraph()

    # ---- checkpoint files
    def _existing_models(self):
        if not self.model_prefix:
            return {}
        directory = os.path.dirname(os.path.abspath(self.model_prefix))
        pattern = re.compile(r"^%s\.(\d{3,})%s$" % (re.escape(os.path.basename(self.model_prefix)),
                                                     re.escape(_SUFFIX)))
        res = {}
        if os.path.isdir(directory):
            for name in os.listdir(directory):
                m = pattern.match(name)
                if m:
                    res[int(m.group(1))] = epoch_model_filename(self.model_prefix, int(m.group(1)))
        return res

    def _checkpoint_exists(self, filename):
        return os.path.exists(filename + _SUFFIX)

    def _load_model(self, epoch_model, train):
        epoch, filename = epoch_model
        if not filename:
            return
        self.log.v4("Load model %s%s" % (filename, _SUFFIX))
        try:
            self.saver.load(None, filename, load_extra=bool(epoch) and train)
        except (IOError, KeyError, ValueError) as exc:
            raise EngineError("cannot load model %r: %s" % (filename + _SUFFIX, exc)) from None
        except Exception as exc:  # e.g. a truncated file
            raise EngineError("cannot load model %r: checkpoint file truncated or corrupt (%s: %s)" % (
                filename + _SUFFIX, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")) from None

    # ---- model
    def _get_net_dict(self, epoch):
        return None  # the model is the config's get_model

    def _build_graph(self, net_dict, dataset, train):
        from .. import frontend as rf
        from ..tensor.tensor_dict import TensorDict
        from ..torch.frontend import rf_module_to_pt_module

        config = self.config
        rf.select_backend_torch()
        rf.set_random_seed(config.int("random_seed", 42))
        extern_data_opts = config.typed_value("extern_data", None)
        if not extern_data_opts:
            raise EngineError("backend = \"torch\" needs extern_data in the config")
        self.extern_data = TensorDict()
        self.extern_data.update(extern_data_opts, auto_convert=True)
        self.model = config.typed_value("get_model")(epoch=self.epoch or 1, step=self.global_step)
        import torch

        if isinstance(self.model, torch.nn.Module):  # a plain PyTorch model (demos/demo-torch.config)
            self.pt_module = self.model
        else:
            self.pt_module = rf_module_to_pt_module(self.model)
        self.network = _NetworkShim(self)
        self.data_keys = sorted(k for k in self.extern_data.data if k in dataset.get_data_keys()) \
            if dataset is not None else sorted(self.extern_data.data)
        self.optimizer = None
        if train:
            if not callable(config.typed_value("train_step", None)):
                raise EngineError("task train with backend = \"torch\" needs train_step(*, model, extern_data, **_)")
            self.optimizer = _make_optimizer(config, self.pt_module.parameters())
            self.updater = _UpdaterShim()
            self.train_flag = "_torch_train_flag"
        self.saver = TorchSaver(self)
        self.fetches = {}
        n = sum(p.numel() for p in self.pt_module.parameters())
        self.log.v4("Model (torch backend): %i params %s, data keys %s" % (
            n, [name for name, _ in self.pt_module.named_parameters()], self.data_keys))

    def _check_dataset_keys(self, dataset):
        missing = [k for k in self.data_keys if k not in set(dataset.get_data_keys())]
        if missing:
            raise EngineError("dataset %r has no data key(s) %s needed by the model (it has: %s)"
                              % (dataset.name, missing, sorted(dataset.get_data_keys())))

    # ---- steps
    def _feed_dict(self, arrays, dataset_name=None):
        return {_ARRAYS: arrays}

    def _set_extern_data(self, arrays):
        """The batch as raw torch tensors of the extern data; batch and dynamic dims get their sizes."""
        import torch

        from ..data import batch_dim
        from ..torch.frontend._backend import _new

        for key in self.extern_data.data:
            for d in self.extern_data.data[key].dims:
                d.reset_eager()
        n_batch = None
        for key in self.data_keys:
            t = self.extern_data.data[key]
            value = arrays.data[key]
            lens = arrays.seq_lens[key]
            if value.ndim == len(t.dims) + 1 and value.shape[1] == 1:
                value = value[:, 0]
            if value.ndim != len(t.dims):
                raise EngineError("data %r: the dataset gives shape %s, extern_data has dims %s" % (
                    key, value.shape, [d.short_repr() for d in t.dims]))
            value = numpy.ascontiguousarray(value.astype(t.dtype, copy=False))
            t.raw_tensor = torch.from_numpy(value)
            n_batch = value.shape[0]
            first = True
            for axis, d in enumerate(t.dims):
                if d.dimension is not None or d.is_batch_dim():
                    continue
                sizes = numpy.asarray(lens if first else numpy.full(lens.shape, value.shape[axis]), dtype="int32")
                first = False
                if d.dyn_size_ext is None:
                    d.dyn_size_ext = _new("%s:size" % d.description, [batch_dim], torch.from_numpy(sizes))
        batch_dim.dyn_size_ext = _new("batch", [], torch.tensor(n_batch, dtype=torch.int32))

    def _session_run(self, fetches, feed, dataset_name, step):
        import torch

        from .. import frontend as rf

        arrays = feed[_ARRAYS]
        train = "_train_op" in fetches
        self._set_extern_data(arrays)
        rf.init_train_step_run_ctx(train_flag=train, step=self.global_step, epoch=self.epoch or 1)
        self.pt_module.train(train)
        with (contextlib.nullcontext() if train else torch.no_grad()):
            self.config.typed_value("train_step")(model=self.model, extern_data=self.extern_data)
            ctx = rf.get_run_ctx()
            results = {}
            for name, loss in ctx.losses.items():
                inv = loss.get_inv_norm_factor()
                inv = float(inv.raw_tensor.detach()) if hasattr(inv, "raw_tensor") else float(inv)
                summed = float(loss.get_summed_loss().raw_tensor.detach())
                results[("error:" if loss.as_error else "cost:") + name] = summed
                results["loss_norm_factor:" + name] = 1.0 / inv if inv else 0.0
            if not ctx.losses:
                raise EngineError("train_step marked no loss (use Tensor.mark_as_loss)")
            if train:
                total = ctx.total_loss()
                self.optimizer.zero_grad(set_to_none=True)
                total.raw_tensor.backward()
                for group in self.optimizer.param_groups:
                    group["lr"] = float(feed[_LR])
                self.optimizer.step()
                self.global_step += 1
        return results

    # ---- forward
    def forward_to_hdf(self, dataset, output_file):
        import torch

        from .. import frontend as rf
        from ..datasets import SimpleHDFWriter, batch_to_arrays

        forward_step = self.config.typed_value("forward_step", None)
        if not callable(forward_step):
            raise EngineError("task forward with backend = \"torch\" needs forward_step(*, model, extern_data, **_)")
        name = self.config.value("forward_output_layer", None) or "output"
        self._check_dataset_keys(dataset)
        writer = None
        n = 0
        try:
            for batch in self._batches(dataset, self.epoch, train=False):
                arrays = batch_to_arrays(dataset, batch, self.data_keys)
                self._set_extern_data(arrays)
                rf.init_forward_step_run_ctx(epoch=self.epoch or 1, step=n,
                                             expected_outputs=self._expected_outputs())
                self.pt_module.eval()
                with torch.no_grad():
                    forward_step(model=self.model, extern_data=self.extern_data)
                outputs = rf.get_run_ctx().outputs
                if name not in outputs.data:
                    raise EngineError("forward: forward_step marked no output %r (marked: %s)" % (
                        name, sorted(outputs.data)))
                out = outputs.data[name]
                values, lens = _batch_major(out)
                if writer is None:
                    feat = out.dims[-1].dimension if values.ndim > 2 else (
                        out.sparse_dim.dimension if out.sparse_dim is not None else 1)
                    writer = SimpleHDFWriter(output_file, dim=feat, ndim=values.ndim - 1)
                writer.insert_batch(values, lens, arrays.seq_tags)
                n += arrays.num_seqs
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is not None:
            writer.close()
        self.log.v1("forward: wrote %i seqs of output %r to %s" % (n, name, output_file))

    def _expected_outputs(self):
        """The config's ``model_outputs`` as a TensorDict (dynamic dims get a lengths template that
        forward_step may fill, as demo-torch does), or None."""
        import torch

        from ..data import batch_dim
        from ..tensor.tensor_dict import TensorDict
        from ..torch.frontend._backend import _new

        opts = self.config.typed_value("model_outputs", None)
        if not opts:
            return None
        outputs = TensorDict()
        try:
            outputs.update(opts, auto_convert=True)
        except Exception as exc:
            raise EngineError("model_outputs %r: %s" % (opts, exc)) from None
        for t in outputs.data.values():
            for d in t.dims:
                d.reset_eager()
                if d.dimension is None and not d.is_batch_dim():
                    d.dyn_size_ext = _new("%s:size" % d.description, [batch_dim], torch.zeros([0], dtype=torch.int32))
        return outputs


def _batch_major(out):
    """(numpy [B, T, ...], lens [B]) of an output Tensor (one frame per seq without a dynamic dim)."""
    dims = list(out.dims)
    b = [d for d in dims if d.is_batch_dim()]
    dyn = [d for d in dims if d.dimension is None and not d.is_batch_dim()]
    order = b + dyn[:1] + [d for d in dims if d not in b and d not in dyn[:1]]
    x = out.raw_tensor.permute([dims.index(d) for d in order]).detach().cpu().numpy()
    if dyn:
        lens = dyn[0].dyn_size_ext.raw_tensor.detach().cpu().numpy().astype("int32")
    else:
        x = x[:, None]
        lens = numpy.ones([x.shape[0]], dtype="int32")
    return x, lens


def _make_optimizer(config, params):
    """The torch optimizer of the config's optimizer options (the learning rate is set per step)."""
    import torch

    params = [p for p in params if p.requires_grad]
    epsilon = config.float("optimizer_epsilon", 1e-8)
    opts = config.typed_value("optimizer", None)
    if isinstance(opts, str):
        opts = {"class": opts}
    if opts:
        opts = dict(opts)
        cls_name = opts.pop("class").lower()
        opts.pop("learning_rate", None)
        classes = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "nadam": torch.optim.NAdam,
                   "sgd": torch.optim.SGD, "gradientdescent": torch.optim.SGD, "adadelta": torch.optim.Adadelta,
                   "adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop}
        if cls_name not in classes:
            raise EngineError("optimizer %r: not supported on the torch backend (known: %s)" % (
                cls_name, ", ".join(sorted(classes))))
        if cls_name in ("adam", "adamw", "nadam"):
            opts.setdefault("eps", opts.pop("epsilon", epsilon))
        try:
            return classes[cls_name](params, lr=0.0, **opts)
        except TypeError as exc:
            raise EngineError("optimizer %r: %s" % (config.typed_value("optimizer"), exc)) from None
    if config.bool("adam", False):
        return torch.optim.Adam(params, lr=0.0, eps=epsilon)
    if config.bool("nadam", False):
        return torch.optim.NAdam(params, lr=0.0, eps=epsilon)
    momentum = config.float("momentum", 0.0)
    return torch.optim.SGD(params, lr=0.0, momentum=momentum)
