"""
The tensor types as the RETURNN frontend (``rf``) sees them::

    from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim, TensorDict

There is ONE dim system: :class:`Dim` is the compiler's dim tag (:mod:`returnn_lite.data`) and :class:`Tensor`
is the compiler's :class:`~returnn_lite.data.Data` (as in the original, where ``Data`` is an alias of ``Tensor``).
The frontend methods (operators, ``mark_as_loss``, ``dyn_size_ext``, dim arithmetic, ...) live in the mixins
``Dim``/``Data`` inherit (:mod:`returnn_lite.data_mixins`, below :mod:`returnn_lite.data`; this package is above it).

The names are resolved lazily (PEP 562), so that importing this package alone stays cheap.
"""

from __future__ import annotations

__all__ = ["Tensor", "Dim", "batch_dim", "single_step_dim", "TensorDict", "Data", "SpatialDim", "FeatureDim"]


def __getattr__(name):
    if name in ("Tensor", "Dim", "batch_dim", "single_step_dim", "Data", "SpatialDim", "FeatureDim"):
        from .. import data as _data

        return getattr(_data, name)
    if name == "TensorDict":
        from .tensor_dict import TensorDict

        return TensorDict
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
