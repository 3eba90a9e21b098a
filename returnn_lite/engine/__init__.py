"""Training/evaluation/forwarding engine: epoch loop, updater, learning-rate control, checkpoints, progress."""

from .checkpoints import CheckpointSaver, epoch_model_filename, get_existing_models
from .engine import Engine, EngineError
from .learning_rate_control import (ConstantLearningRate, EpochData, LearningRateControl, LearningRateFileError,
                                    NewbobAbs, NewbobMultiEpoch, NewbobRelative,
                                    load_learning_rate_control_from_config)
from .progress import Log, ProgressLine, hms
from .updater import Updater, UpdaterError, get_optimizer_class

__all__ = [
    "Engine", "EngineError", "Updater", "UpdaterError", "get_optimizer_class", "CheckpointSaver",
    "epoch_model_filename", "get_existing_models", "LearningRateControl", "ConstantLearningRate", "NewbobRelative",
    "NewbobAbs", "NewbobMultiEpoch", "EpochData", "LearningRateFileError", "load_learning_rate_control_from_config",
    "Log", "ProgressLine", "hms",
]
