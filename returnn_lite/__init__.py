"""returnn_lite: compiles RETURNN layer-dict networks onto TensorFlow 2.x graphs (tf.compat.v1 graph mode)."""

import os as _os

# the user's own TF log level (None: not set; the command-line tools then use 3, see tf_startup.py)
USER_TF_CPP_MIN_LOG_LEVEL = _os.environ.get("TF_CPP_MIN_LOG_LEVEL")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
