"""``returnn_lite.util.py_compat``: the typing names that the original's ``returnn.util.py_compat`` gives model code
(rf modules import ``Protocol`` from there)."""

from typing import Literal, Protocol

__all__ = ["Protocol", "Literal"]
