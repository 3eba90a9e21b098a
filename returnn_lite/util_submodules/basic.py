"""``returnn_lite.util.basic``: the original's ``returnn.util.basic`` names that model code uses."""

from returnn_lite.compat.util_basic import *  # noqa: F401,F403
from returnn_lite.compat.util_basic import BehaviorVersion, NotSpecified  # noqa: F401
