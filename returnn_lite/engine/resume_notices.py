"""
On resume, ``++key value`` overrides that the saved state supersedes get one notice line each, naming the key, the
value given and what is used instead (stderr, and the log; on stdout too where that is not the same file):

- ``learning_rate`` / ``learning_rates``: the learning-rate file continues with its own rate;
- ``import_model_train_epoch1`` and ``preload_from_files`` entries with ``init_for_train``: they only initialize a
  training that starts at epoch 1;
- ``load``: the training continues from the last existing epoch checkpoint.
"""

from __future__ import annotations

import os
import sys

from .checkpoints import normalize_checkpoint_name

__all__ = ["superseded_override_notices", "print_notice"]


def _given(config, key):
    """The value as typed on the command line."""
    return getattr(config, "cmd_line_args", {}).get(key, config.value(key, ""))


def _learning_rate_notices(engine, start_epoch, keys):
    lrc = engine.learning_rate_control
    if lrc is None or not lrc.epoch_data:
        return []
    notices = []
    for key in ("learning_rate", "learning_rates"):
        if key not in keys:
            continue
        used = lrc.get_learning_rate_for_epoch(start_epoch)
        given = engine.config.typed_value(key)
        wanted = rate_for_epoch(given, start_epoch) if key == "learning_rates" else engine.config.float(key, 0.0)
        if wanted is None or used == wanted:
            continue
        notices.append(
            "notice: ++%s %s is not used: resuming after epoch %i, the learning-rate file %r continues with "
            "learning rate %s for epoch %i (delete the file or set learning_rates per epoch in the file to change it)"
            % (key, _given(engine.config, key), start_epoch - 1, lrc.filename, used, start_epoch))
    return notices


def superseded_override_notices(engine, start_epoch, epoch_model):
    """The notices for a training that resumes at ``start_epoch`` from ``epoch_model`` ((epoch, checkpoint))."""
    config = engine.config
    keys = set(getattr(config, "cmd_line_args", None) or ())
    keys |= set(getattr(config, "cmd_line_keys", None) or ())
    resumed_epoch, checkpoint = epoch_model
    if start_epoch <= 1 or not keys or not resumed_epoch:
        return []
    notices = _learning_rate_notices(engine, start_epoch, keys)
    if "import_model_train_epoch1" in keys and config.value("import_model_train_epoch1", ""):
        notices.append("notice: ++import_model_train_epoch1 %s is not used: resuming after epoch %i from %s (it only "
                       "initializes a training that starts at epoch 1)" % (
                           _given(config, "import_model_train_epoch1"), resumed_epoch, checkpoint))
    preload = config.typed_value("preload_from_files", None) if "preload_from_files" in keys else None
    if isinstance(preload, dict):
        names = sorted(name for name, opts in preload.items() if isinstance(opts, dict) and opts.get("init_for_train"))
        if names:
            notices.append("notice: ++preload_from_files entries %s (init_for_train) are not used: resuming after "
                           "epoch %i from %s (they only initialize a training that starts at epoch 1)" % (
                               ", ".join(repr(n) for n in names), resumed_epoch, checkpoint))
    load = config.value("load", "") if "load" in keys else ""
    if load and normalize_checkpoint_name(load) != checkpoint and config.value("start_epoch", "auto") == "auto":
        notices.append("notice: ++load %s is not used: training continues from the existing checkpoint %s of epoch %i "
                       "(set ++start_epoch or remove the model files to start from it)" % (
                           _given(config, "load"), checkpoint, resumed_epoch))
    return notices


def _stdout_is_stderr():
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno()))
    except (AttributeError, OSError, ValueError):  # e.g. captured streams without a file descriptor
        return False


def print_notice(log, text):
    """One line on stderr and in the log file; on the log's stdout too unless that is where stderr goes."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
    if log.stream is sys.stdout and _stdout_is_stderr():
        if log.file is not None:
            log.file.write(text + "\n")
    else:
        log.v1(text)


def rate_for_epoch(rates, epoch):
    """``learning_rates`` (list: first epochs, then the last one; dict: epoch -> rate) for one epoch, or None."""
    try:
        if isinstance(rates, dict):
            return float(rates[epoch]) if epoch in rates else None
        if isinstance(rates, (list, tuple)) and rates:
            return float(rates[min(epoch, len(rates)) - 1])
    except (TypeError, ValueError):
        return None
    return None
