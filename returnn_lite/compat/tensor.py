"""
What ``returnn.tf.util.data`` / ``returnn.tensor`` provide to config files, taken lazily from
:mod:`returnn_lite.data` (so that importing this module does not import TensorFlow).
"""

from __future__ import annotations

import importlib

__all__ = ["Dim", "SpatialDim", "FeatureDim", "batch_dim", "single_step_dim", "DimensionTag", "Data", "Tensor"]

# names the original exports under another name too
_FALLBACK_NAMES = {"DimensionTag": "Dim", "Tensor": "Data"}


def __getattr__(name):
    if name not in __all__:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    try:
        data_mod = importlib.import_module("returnn_lite.data")
    except ImportError as exc:
        raise ImportError("%s needs returnn_lite.data, which cannot be imported: %s" % (name, exc)) from exc
    for candidate in (name, _FALLBACK_NAMES.get(name)):
        if candidate and hasattr(data_mod, candidate):
            value = getattr(data_mod, candidate)
            globals()[name] = value  # cache for the next lookup
            return value
    raise ImportError("returnn_lite.data does not provide %r (needed by 'from returnn... import %s')" % (name, name))


def __dir__():
    return sorted(set(globals()) | set(__all__))
