"""
The tensor types as the RETURNN frontend (``rf``) and the backends see them, pure Python (no TensorFlow, no
PyTorch)::

    from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim, TensorDict

:class:`Dim` and :class:`Tensor` are in :mod:`.tensor`, what a backend implements in :mod:`.backend`. The TF
compiler's ``Data`` (:mod:`returnn_lite.data`) is a subclass of Tensor; ``returnn_lite.tensor.Data`` loads it (and
TensorFlow) on first access only.
"""

from __future__ import annotations

from .tensor import Dim, FeatureDim, SpatialDim, Tensor, batch_dim, single_step_dim  # noqa: F401
from .tensor_dict import TensorDict  # noqa: F401

__all__ = ["Tensor", "Dim", "batch_dim", "single_step_dim", "TensorDict", "Data", "SpatialDim", "FeatureDim"]


def __getattr__(name):
    if name == "Data":  # the TF compiler's Tensor (imports TensorFlow)
        import importlib

        return importlib.import_module("returnn_lite.data").Data
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
