"""Submodules of returnn_lite.util (basic, math), importable as ``returnn_lite.util.<name>``."""
