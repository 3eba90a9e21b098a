"""
Training/evaluation/forwarding engine: the epoch loop (:mod:`.engine`) over a backend (:mod:`.backend`: TF graph
and session, or PyTorch), learning-rate control, checkpoints, progress.

Importing this package imports no framework; the TF-only names (``Updater``, ``CheckpointSaver``, ...) load
TensorFlow when first used.
"""

from .backend import EngineBackend, EngineError
from .checkpoints import epoch_model_filename, get_existing_models
from .engine import Engine
from .learning_rate_control import (ConstantLearningRate, EpochData, LearningRateControl, LearningRateFileError,
                                    NewbobAbs, NewbobMultiEpoch, NewbobRelative,
                                    load_learning_rate_control_from_config)
from .progress import Log, ProgressLine, hms
from .updater_errors import UpdaterError

__all__ = [
    "Engine", "EngineError", "EngineBackend", "Updater", "UpdaterError", "get_optimizer_class", "CheckpointSaver",
    "epoch_model_filename", "get_existing_models", "LearningRateControl", "ConstantLearningRate", "NewbobRelative",
    "NewbobAbs", "NewbobMultiEpoch", "EpochData", "LearningRateFileError", "load_learning_rate_control_from_config",
    "Log", "ProgressLine", "hms",
]

_LAZY = {"Updater": ".updater", "get_optimizer_class": ".updater", "CheckpointSaver": ".checkpoints"}


def __getattr__(name):  # TF-only names: imported on first use (PEP 562)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
