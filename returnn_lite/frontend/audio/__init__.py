"""rf.audio: features computed inside the model: log-mel filterbank from raw audio, SpecAugment."""

from .mel import *  # noqa: F401,F403
from .specaugment import *  # noqa: F401,F403
