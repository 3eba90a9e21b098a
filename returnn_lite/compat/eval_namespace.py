"""
The namespace of ``eval`` strings (eval layers, ``combine`` with kind "eval"): as in the original, every public
name of the TF util module (:mod:`returnn_lite.tf_util`: ``where_bc``, ``safe_log``, ``nd_indices``, ...), plus
``tf`` (TF 2 with the TF1 names, :mod:`returnn_lite.compat.tf1`), ``np``, and builtins whose ``__import__``
knows the original's module names (:mod:`returnn_lite.compat.legacy`). The layer adds ``source``, ``self`` and
its ``eval_locals``.
"""

from __future__ import annotations

__all__ = ["get_eval_namespace"]

_base = None


def get_eval_namespace():
    """A fresh dict (callers add to it) with the names every eval string sees."""
    global _base
    if _base is None:
        import numpy as np

        from .. import tf_util
        from .legacy import config_builtins
        from .tf1 import get_tf1_shim

        base = {k: v for k, v in vars(tf_util).items() if not k.startswith("_")}
        base.update({"tf": get_tf1_shim(), "np": np, "numpy": np, "tf_util": tf_util,
                     "__builtins__": config_builtins()})
        _base = base
    return dict(_base)
