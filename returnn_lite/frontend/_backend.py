"""
The backend interface of rf and its selection.

``rf`` functions are backend-independent: they check dims, then call the backend of the tensors involved
(:func:`get_backend_for_tensor`: by the type of the raw tensor, else the globally selected backend).
A backend subclasses :class:`Backend` and sets ``RawTensorType``; every method it does not implement raises
:class:`NotImplementedError` naming the backend and the method. Seed 000 (layers backend) and seed 002 (torch
backend) list the same methods; :class:`returnn_lite.frontend_layers.ReturnnLayersBackend` is the layers backend.
"""

from __future__ import annotations

_registry = []  # backend classes with a RawTensorType, for get_backend_for_tensor
_global_backend = [None]

# methods of the backend interface (the ones rf calls); the stubs raise NotImplementedError
BACKEND_METHODS = (
    "executing_eagerly", "set_random_seed", "get_random_state", "set_random_state",
    "convert_to_tensor", "full", "range_over_dim", "dim_value_tensor", "dim_size_tensor",
    "combine", "compare", "activation", "cast", "copy", "transpose", "stop_gradient", "scaled_gradient",
    "where", "clip_by_value", "reduce", "softmax", "log_softmax", "matmul",
    "concat", "pad", "gather", "slice", "split", "merge_dims", "split_dims", "expand_dim", "squeeze",
    "replace_dim", "reshape", "cum_concat_step", "sequence_mask",
    "softmax_cross_entropy_with_logits", "ctc_loss", "dropout", "random",
    "create_parameter_raw", "set_parameter_initial_value", "set_parameter_trainable",
    "batch_norm", "conv", "pool", "stft", "lstm", "cond", "while_loop", "scan", "loop",
    "make_output_tensor", "mark_as_loss",
)


def _stub(method):
    def _not_implemented(*_args, **_kwargs):
        raise NotImplementedError("rf backend: %s() is not implemented by this backend" % method)

    _not_implemented.__name__ = method
    return staticmethod(_not_implemented)


class Backend:
    """Base of the rf backends (abstract: every method of :data:`BACKEND_METHODS` raises until overridden)."""

    name = None
    RawTensorType = None
    is_tensorflow = False
    # optional fused implementations (None: rf composes them from the primitives)
    linear = None  # linear(source, *, weight, bias, in_dim)
    layer_norm = None  # layer_norm(x, *, in_dim, scale, bias, eps)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.RawTensorType is not None and cls not in _registry:
            _registry.append(cls)


for _m in BACKEND_METHODS:
    setattr(Backend, _m, _stub(_m))


def select_backend_returnn_layers_tf():
    """rf calls build a RETURNN layer dict (see :func:`returnn_lite.frontend_layers.get_net_dict`)."""
    _global_backend[0] = _load_backend("returnn_lite.frontend_layers", "ReturnnLayersBackend")


def _load_backend(module_name, class_name):
    """Backends are plugins: loaded by module name (they import the frontend, not the other way round)."""
    import importlib

    return getattr(importlib.import_module(module_name), class_name)


def select_backend_torch():
    """rf calls run eagerly on PyTorch (:class:`returnn_lite.torch.frontend.TorchBackend`, needs ``torch``)."""
    try:
        backend = _load_backend("returnn_lite.torch.frontend", "TorchBackend")
    except ImportError as exc:
        raise ImportError("rf.select_backend_torch(): PyTorch is not installed (pip install -e \".[torch]\"): %s" % exc)

    _global_backend[0] = backend


def select_backend_tf():
    raise NotImplementedError(
        "rf.select_backend_tf(): the eager TF backend of rf is not implemented in returnn_lite "
        "(use rf.select_backend_returnn_layers_tf())")


def get_selected_backend():
    if _global_backend[0] is None:
        raise RuntimeError("rf: no backend selected (call rf.select_backend_returnn_layers_tf() first)")
    return _global_backend[0]


def is_backend_selected():
    return _global_backend[0] is not None


def get_backend_by_raw_tensor_type(raw_type):
    for cls in _registry:
        if issubclass(raw_type, cls.RawTensorType):
            return cls
    raise TypeError("rf: no backend for raw tensors of type %s" % raw_type.__name__)


def get_backend_for_tensor(tensor):
    raw = getattr(tensor, "placeholder", None)
    if raw is not None:
        for cls in _registry:
            if isinstance(raw, cls.RawTensorType):
                return cls
    return get_selected_backend()


def get_backend_for_dims():
    return get_selected_backend()
