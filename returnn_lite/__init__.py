"""returnn_lite: compiles RETURNN layer-dict networks onto TensorFlow 2.x graphs (tf.compat.v1 graph mode)."""

import os as _os

_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
