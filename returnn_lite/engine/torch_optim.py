"""
The torch engine's optimizer and gradient options (the TF updater's names and meanings, see
:mod:`returnn_lite.engine.updater`), and ``preload_from_files`` for ``.pt`` checkpoints.
"""

from __future__ import annotations

import torch

from .backend import EngineError
from .checkpoints import normalize_checkpoint_name
from .torch_checkpoint import check_state_dict_tensors, load_pt

__all__ = ["make_optimizer", "process_gradients", "preload_from_files"]

_CLASSES = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "nadam": torch.optim.NAdam,
            "sgd": torch.optim.SGD, "gradientdescent": torch.optim.SGD, "momentum": torch.optim.SGD,
            "adadelta": torch.optim.Adadelta, "adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop}


def make_optimizer(config, params):
    """The torch optimizer of the config's optimizer options (the learning rate is set per step)."""
    params = [p for p in params if p.requires_grad]
    if not params:
        raise EngineError("the model has no trainable params (task train)")
    epsilon = config.float("optimizer_epsilon", 1e-8)
    opts = config.typed_value("optimizer", None)
    if isinstance(opts, str):
        opts = {"class": opts}
    if opts:
        opts = dict(opts)
        if "class" not in opts:
            raise EngineError("optimizer %r: needs a 'class' (known: %s)" % (opts, ", ".join(sorted(_CLASSES))))
        cls_name = str(opts.pop("class")).lower()
        if cls_name.endswith("optimizer"):
            cls_name = cls_name[:-len("optimizer")]
        opts.pop("learning_rate", None)  # the rate is controlled per epoch/step
        if cls_name not in _CLASSES:
            raise EngineError("optimizer %r: not supported on the torch backend (known: %s)" % (
                cls_name, ", ".join(sorted(_CLASSES))))
        if cls_name in ("adam", "adamw", "nadam"):
            opts.setdefault("eps", opts.pop("epsilon", epsilon))
            if "beta1" in opts or "beta2" in opts:
                opts["betas"] = (opts.pop("beta1", 0.9), opts.pop("beta2", 0.999))
        if cls_name == "momentum":
            opts.setdefault("momentum", config.float("momentum", 0.9))
        if cls_name == "rmsprop" and "decay" in opts:
            opts["alpha"] = opts.pop("decay")
        try:
            return _CLASSES[cls_name](params, lr=0.0, **opts)
        except TypeError as exc:
            raise EngineError("optimizer %r: %s" % (config.typed_value("optimizer"), exc)) from None
    if config.bool("adam", False):
        return torch.optim.Adam(params, lr=0.0, eps=epsilon)
    if config.bool("nadam", False):
        return torch.optim.NAdam(params, lr=0.0, eps=epsilon)
    if config.bool("adadelta", False):
        return torch.optim.Adadelta(params, lr=0.0, rho=config.float("adadelta_decay", 0.95),
                                    eps=config.float("adadelta_offset", 1e-6))
    if config.bool("adagrad", False):
        return torch.optim.Adagrad(params, lr=0.0)
    if config.bool("rmsprop", False):
        return torch.optim.RMSprop(params, lr=0.0, alpha=config.float("rmsprop_decay", 0.9), eps=epsilon)
    return torch.optim.SGD(params, lr=0.0, momentum=config.float("momentum", 0.0))


def process_gradients(config, optimizer):
    """``gradient_noise``, ``gradient_clip`` (value), ``gradient_clip_norm`` (per tensor),
    ``gradient_clip_global_norm``, in the TF updater's order; no host sync (clipping stays on the device)."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not params:
        return
    noise = config.float("gradient_noise", 0.0)
    if noise > 0:
        for p in params:
            p.grad.add_(torch.randn_like(p.grad) * noise)
    clip_norm = config.float("gradient_clip_norm", 0.0)
    if clip_norm > 0:
        for p in params:
            torch.nn.utils.clip_grad_norm_([p], clip_norm)
    clip = config.float("gradient_clip", 0.0)
    if clip > 0:
        torch.nn.utils.clip_grad_value_(params, clip)
    global_norm = config.float("gradient_clip_global_norm", 0.0)
    if global_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, global_norm)


_PRELOAD_KEYS = {"filename", "prefix", "init_for_train", "ignore_missing", "ignore_params", "ignore_params_prefixes",
                 "var_name_mapping"}


def preload_from_files(backend, training, fresh_train):
    """As the TF engine: ``init_for_train`` entries initialize a fresh training, the others apply to eval/forward.
    ``prefix``: our params named ``<prefix><name>`` are loaded from ``<name>`` in the file."""
    preload = backend.config.typed_value("preload_from_files", None) or {}
    own = backend.pt_module.state_dict()
    for name, opts in sorted(preload.items()):
        unknown = sorted(set(opts) - _PRELOAD_KEYS)
        if unknown:
            raise EngineError("preload_from_files %r: unknown option(s) %s; known: %s" % (
                name, unknown, sorted(_PRELOAD_KEYS)))
        if opts.get("init_for_train", False):
            if not fresh_train:
                continue
        elif training:
            continue
        path = normalize_checkpoint_name(opts["filename"]) + ".pt"
        state = load_pt(path, backend.device, "preload_from_files %r: cannot read %r" % (name, path))
        values = state.get("model", state) if isinstance(state, dict) else None
        if not isinstance(values, dict):
            raise EngineError("preload_from_files %r: %r is not a torch checkpoint" % (name, path))
        check_state_dict_tensors(values, "preload_from_files %r: %r" % (name, path))
        prefix = opts.get("prefix", "")
        mapping = opts.get("var_name_mapping") or {}
        ignore = set(opts.get("ignore_params", ()))
        ignore_prefixes = tuple(opts.get("ignore_params_prefixes", ()))
        loaded, missing = {}, []
        for key in own:
            if not key.startswith(prefix) or key in ignore or (ignore_prefixes and key.startswith(ignore_prefixes)):
                continue
            src = mapping.get(key, key[len(prefix):])
            if src in values:
                loaded[key] = values[src]
            else:
                missing.append(src)
        if missing and not opts.get("ignore_missing", False):
            raise EngineError("preload_from_files %r: %r has no param(s) %s (set ignore_missing)" % (
                name, path, sorted(missing)))
        try:
            backend.pt_module.load_state_dict(loaded, strict=False)
        except RuntimeError as exc:
            raise EngineError("preload_from_files %r: %s" % (name, str(exc).splitlines()[0])) from None
        backend.log.v4("preload_from_files %r: %i params from %s" % (name, len(loaded), path))
