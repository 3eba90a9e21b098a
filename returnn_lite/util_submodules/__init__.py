"""Submodules of returnn_lite.util (basic, math, py_compat), importable as ``returnn_lite.util.<name>``."""
