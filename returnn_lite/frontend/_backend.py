"""
The selection of rf's backend.

``rf`` functions are backend-independent: they check dims, then call the backend of the tensors involved
(:func:`get_backend_for_tensor`: by the type of the raw tensor, else the globally selected backend). What a
backend implements (:class:`Backend`) is in :mod:`returnn_lite.tensor.backend`. Seed 000 (layers backend) and seed
002 (torch backend) list the same methods; :class:`returnn_lite.frontend_layers.ReturnnLayersBackend` is the layers
backend, :class:`returnn_lite.torch.frontend.TorchBackend` the PyTorch one.
"""

from __future__ import annotations

from ..tensor.backend import (  # noqa: F401 (the interface, re-exported)
    BACKEND_METHODS, RAW_METHODS, Backend, _registry, get_backend_by_raw_tensor_type)

_global_backend = [None]


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


def get_backend_for_tensor(tensor):
    raw = getattr(tensor, "placeholder", None)
    if raw is not None:
        for cls in _registry:
            if cls.implements_rf_ops and isinstance(raw, cls.RawTensorType):
                return cls
    return get_selected_backend()


def get_backend_for_dims():
    return get_selected_backend()
