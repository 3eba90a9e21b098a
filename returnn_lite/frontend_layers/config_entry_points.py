"""
Config entry points on the layers backend: ``get_net_dict(epoch=, step=) -> (net_dict, model)`` runs the config's
``get_model`` and ``train_step`` (task "train"/"eval") or ``forward_step`` (task "forward"/"search") under a
:class:`NetDictBuilder`; the result is a plain layer dict for :class:`returnn_lite.network.TFNetwork`.
"""

from __future__ import annotations

from ..data import Data
from ..tensor.tensor import with_arith_operands
from ..tensor.tensor_dict import TensorDict
from ._net import Layer, NetDictBuilder


def extern_data_tensors(extern_data_opts, builder):
    """The extern data as rf Tensors whose raw tensors are the ``data:KEY`` layers; their dims are reset."""
    td = TensorDict()
    for key, opts in extern_data_opts.items():
        if isinstance(opts, Data):
            opts = opts.get_kwargs()
            opts.pop("name", None)
        opts = dict(opts)
        opts.pop("available_for_inference", None)
        t = Data(name=key, **opts)
        t.placeholder = Layer("data:%s" % key, {}, builder)
        for d in t.dims:
            builder.dim_sources.setdefault(d, t)
        for d in t.dims:
            if d.dimension is None and not d.is_batch_dim():
                d.reset_eager()
        td.data[key] = t
    return td


def get_net_dict(*, epoch, step, config=None, task=None):
    """(net_dict, model) from the config (default: the global config) on the RETURNN-layers backend."""
    from .. import frontend as rf
    from ..config import get_global_config

    if config is None:
        config = get_global_config()
    backend = config.value("backend", "tensorflow")
    if backend not in ("tensorflow", "tf", "returnn_layers_tf"):
        raise ValueError("config backend=%r: returnn_lite runs rf configs (get_model/train_step) only on the "
                         "RETURNN-layers backend (backend = \"tensorflow\")" % backend)
    rf.select_backend_returnn_layers_tf()
    extern_data_opts = config.typed_value("extern_data")
    if not extern_data_opts:
        raise ValueError("get_net_dict: the config has no extern_data")
    get_model = config.typed_value("get_model")
    if get_model is None:
        raise ValueError("get_net_dict: the config defines no get_model(*, epoch, step, **_)")
    if task is None:
        task = config.value("task", "train")
    builder = NetDictBuilder()
    with builder:
        extern_data = extern_data_tensors(extern_data_opts, builder)
        model = get_model(epoch=epoch, step=step)
        register_params(model, builder)
        if task in ("train", "eval"):
            step_func = config.typed_value("train_step")
            if step_func is None:
                raise ValueError("get_net_dict: task %r needs train_step(*, model, extern_data, **_) in the config"
                                 % task)
            rf.init_train_step_run_ctx(train_flag=(task == "train"), step=step, epoch=epoch)
        else:
            step_func = config.typed_value("forward_step")
            if step_func is None:
                raise ValueError("get_net_dict: task %r needs forward_step(*, model, extern_data, **_) in the config"
                                 % task)
            rf.init_forward_step_run_ctx(epoch=epoch, step=step)
        step_func(model=model, extern_data=extern_data)
    return prune_unused_layers(builder.net_dict), model


def prune_unused_layers(net_dict):
    """Drop the layers no output, loss or param needs (e.g. unused final loop states), as the original."""
    from ._loop import outer_refs

    keep, stack = set(), [name for name, d in net_dict.items()
                          if d.get("is_output_layer") or d.get("loss") or name == "output"]
    while stack:
        name = stack.pop()
        while name not in net_dict and "/" in name:  # a sub-layer ("loop/y") -> its layer
            name = name.rsplit("/", 1)[0]
        if name in keep or name not in net_dict:
            continue
        keep.add(name)
        stack.extend(outer_refs(net_dict[name]))
        stack.extend(_dim_size_layer_names(net_dict[name]))
    return {name: d for name, d in net_dict.items() if name in keep}


def _dim_size_layer_names(layer_dict):
    """The layers whose outputs are the lengths of the output dims made by ``Dim(size_tensor)`` (kept with it)."""
    out = layer_dict.get("out_shape") or getattr(layer_dict.get("out"), "dims", ())
    names = []
    for d in with_arith_operands(out):
        ext = d.dyn_size_ext if d.dimension is None and not d.is_batch_dim() else None
        if ext is not None and isinstance(ext.placeholder, Layer):
            names.append(ext.placeholder.name)
    return names


def register_params(model, builder):
    """A variable layer per param of the model (``a.b`` -> layer ``a/b``); module paths for the name scopes."""
    from ..frontend.module import Module
    from ._backend import ReturnnLayersBackend

    if not isinstance(model, Module):
        raise TypeError("get_model must return an rf.Module, got %r" % (model,))
    for path, mod in model.named_modules():
        mod._rfl_path = path
    for name, param in model.named_parameters():
        param.rf_name = name
        ReturnnLayersBackend.create_parameter_raw(param, name=name.replace(".", "/"))


def get_net_dict_for_engine(config, *, epoch, task):
    """The engine's hook: the layer dict of a config with get_model/train_step (forward_step) instead of network."""
    from ..config import global_config_ctx

    task = {"train": "train", "eval": "eval", "forward": "forward", "search": "forward"}.get(task, "train")
    with global_config_ctx(config):
        net_dict, _model = get_net_dict(epoch=epoch, step=0, config=config, task=task)
    return net_dict
