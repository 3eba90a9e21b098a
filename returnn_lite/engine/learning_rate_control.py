"""
Learning-rate control per epoch, as in the original RETURNN: ``constant``, ``newbob`` (= ``newbob_rel``),
``newbob_abs``, ``newbob_multi_epoch``.

The state (learning rate and error scores per epoch) is kept in ``learning_rate_file`` in the original's
format, a Python dict literal::

    {
      1: EpochData(learningRate=0.01, error={
    'dev_error': 0.05,
    'dev_score': 0.12,
    'train_score': 0.2,
    }),
    }

The file is written atomically (temp file + ``os.replace``).

Config options (names of the original): ``learning_rate`` (default 1.0), ``learning_rates`` (list: the rates of
the first epochs, or dict epoch -> rate), ``min_learning_rate``, ``learning_rate_control``,
``learning_rate_control_error_measure``, ``learning_rate_control_relative_error_relative_lr``,
``learning_rate_control_min_num_epochs_per_new_lr``, ``newbob_learning_rate_decay`` (0.5),
``newbob_learning_rate_growth`` (1.0), ``newbob_relative_error_threshold`` (-0.01),
``newbob_relative_error_div_by_old``, ``newbob_error_threshold`` (-0.01), ``newbob_multi_num_epochs`` (5),
``newbob_multi_update_interval`` (1), ``newbob_relative_error_grow_threshold``, ``learning_rate_file``.
"""

from __future__ import annotations

import math
import os
from ..util import atomic_write

__all__ = ["EpochData", "LearningRateControl", "ConstantLearningRate", "NewbobRelative", "NewbobAbs",
           "NewbobMultiEpoch", "learning_rate_control_type", "load_learning_rate_control_from_config",
           "LearningRateFileError", "pending_filename", "commit_pending_file", "discard_pending_file",
           "recover_pending_file"]


class LearningRateFileError(Exception):
    """A ``learning_rate_file`` that cannot be parsed."""


class EpochData:
    """Learning rate and error scores (key -> float) of one epoch."""

    def __init__(self, learningRate=None, error=None, learning_rate=None):  # noqa: N803 (file format name)
        self.learning_rate = learning_rate if learning_rate is not None else learningRate
        self.error = dict(error or {})

    def __repr__(self):
        lines = "".join("%r: %s,\n" % (k, _float_repr(v)) for k, v in sorted(self.error.items()))
        return "EpochData(learningRate=%s, error={\n%s})" % (_float_repr(self.learning_rate), lines)


def _float_repr(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "float(%r)" % str(v)
    return repr(v)


class LearningRateControl:
    """Base: per-epoch learning rates, filled lazily by :func:`calc_learning_rate_for_epoch`."""

    need_error_info = True

    @classmethod
    def load_initial_kwargs_from_config(cls, config):
        return {
            "default_learning_rate": config.float("learning_rate", 1.0),
            "min_learning_rate": config.float("min_learning_rate", 0.0),
            "default_learning_rates": config.typed_value("learning_rates") or config.float_list("learning_rates"),
            "error_measure_key": config.value("learning_rate_control_error_measure", None),
            "relative_error_also_relative_to_learning_rate":
                config.bool("learning_rate_control_relative_error_relative_lr", False),
            "min_num_epochs_per_new_learning_rate": config.int("learning_rate_control_min_num_epochs_per_new_lr", 0),
            "relative_error_div_by_old": config.bool("newbob_relative_error_div_by_old", False),
            "learning_rate_decay": config.float("newbob_learning_rate_decay", 0.5),
            "learning_rate_growth": config.float("newbob_learning_rate_growth", 1.0),
            "filename": config.value("learning_rate_file", None),
        }

    @classmethod
    def load_initial_from_config(cls, config):
        return cls(**cls.load_initial_kwargs_from_config(config))

    def __init__(self, default_learning_rate, min_learning_rate=0.0, default_learning_rates=None,
                 error_measure_key=None, relative_error_also_relative_to_learning_rate=False,
                 min_num_epochs_per_new_learning_rate=0, relative_error_div_by_old=False,
                 learning_rate_decay=0.5, learning_rate_growth=1.0, filename=None):
        self.default_learning_rate = default_learning_rate
        self.min_learning_rate = min_learning_rate
        if isinstance(default_learning_rates, (list, tuple)):
            default_learning_rates = {i + 1: float(v) for i, v in enumerate(default_learning_rates)}
        self.default_learning_rates = dict(default_learning_rates or {})
        self.error_measure_key = error_measure_key
        self.relative_error_also_relative_to_learning_rate = relative_error_also_relative_to_learning_rate
        self.min_num_epochs_per_new_learning_rate = min_num_epochs_per_new_learning_rate
        self.relative_error_div_by_old = relative_error_div_by_old
        self.learning_rate_decay = learning_rate_decay
        self.learning_rate_growth = learning_rate_growth
        self.filename = filename
        self.epoch_data = {}  # epoch -> EpochData
        if filename and os.path.exists(filename):
            self.load()
        for epoch, lr in sorted(self.default_learning_rates.items()):
            if epoch not in self.epoch_data:
                self.epoch_data[epoch] = EpochData(learning_rate=lr)

    def __repr__(self):
        return "<%s default_lr=%r, %i epochs>" % (type(self).__name__, self.default_learning_rate, len(self.epoch_data))

    # ---- the file

    def load(self):
        with open(self.filename, "r") as f:
            text = f.read()
        ns = {"EpochData": EpochData, "nan": float("nan"), "inf": float("inf"), "__builtins__": {"float": float}}
        try:
            data = eval(text, ns)  # the file format is a Python literal with EpochData(...) calls
        except Exception as exc:
            raise LearningRateFileError("learning_rate_file %r: cannot parse: %s: %s"
                                        % (self.filename, type(exc).__name__, exc)) from None
        if not isinstance(data, dict):
            raise LearningRateFileError("learning_rate_file %r: expected a dict, got %s"
                                        % (self.filename, type(data).__name__))
        self.epoch_data = {int(k): v if isinstance(v, EpochData) else EpochData(learning_rate=v)
                           for k, v in data.items()}

    def save(self, pending=False):
        """Write the state atomically (nothing if there is no ``learning_rate_file``). ``pending``: to
        :func:`pending_filename` instead (moved into place by :func:`commit_pending_file`); returns that name."""
        if not self.filename:
            return None
        text = "{\n" + "".join("  %i: %s,\n" % (ep, data) for ep, data in sorted(self.epoch_data.items())) + "}\n"
        target = pending_filename(self.filename) if pending else self.filename
        atomic_write_text(target, text)
        return target

    # ---- learning rates

    def get_learning_rate_for_epoch(self, epoch):
        assert epoch >= 1
        if epoch in self.epoch_data and self.epoch_data[epoch].learning_rate is not None:
            return self.epoch_data[epoch].learning_rate
        learning_rate = self.calc_learning_rate_for_epoch(epoch)
        if self.min_learning_rate:
            learning_rate = max(learning_rate, self.min_learning_rate)
        self.set_default_learning_rate_for_epoch(epoch, learning_rate)
        return learning_rate

    def set_default_learning_rate_for_epoch(self, epoch, learning_rate):
        if epoch in self.epoch_data:
            if self.epoch_data[epoch].learning_rate is None:
                self.epoch_data[epoch].learning_rate = learning_rate
        else:
            self.epoch_data[epoch] = EpochData(learning_rate=learning_rate)

    def calc_learning_rate_for_epoch(self, epoch):
        raise NotImplementedError

    def get_last_epoch(self, epoch):
        epochs = [e for e in self.epoch_data if e < epoch]
        return max(epochs) if epochs else None

    def get_most_recent_learning_rate(self, epoch, exclude_current=True):
        for e in sorted(self.epoch_data, reverse=True):
            if e > epoch or (exclude_current and e == epoch):
                continue
            if self.epoch_data[e].learning_rate is not None:
                return self.epoch_data[e].learning_rate
        return self.default_learning_rate

    def _lr_unchanged_for_min_epochs(self, epoch, learning_rate):
        """learning_rate_control_min_num_epochs_per_new_lr: keep a new rate for at least that many epochs."""
        n = self.min_num_epochs_per_new_learning_rate
        if not n:
            return True
        last = [e for e in sorted(self.epoch_data) if e < epoch][-n:]
        return len(last) >= n and all(self.epoch_data[e].learning_rate == learning_rate for e in last)

    def calc_learning_rate_decay_or_grow(self, learning_rate, decay):
        return learning_rate * (self.learning_rate_decay if decay else self.learning_rate_growth)

    # ---- errors

    def set_epoch_error(self, epoch, error):
        """error: key -> float, or key -> dict loss key -> float (flattened to key_LOSSNAME if more than one)."""
        if epoch not in self.epoch_data:
            self.get_learning_rate_for_epoch(epoch)
        flat = {}
        for key, value in error.items():
            if isinstance(value, dict):
                if len(value) == 1:
                    flat[key] = float(next(iter(value.values())))
                    continue
                for k1, v1 in value.items():
                    if ":" in k1:
                        k1 = k1[k1.index(":") + 1:]
                    flat["%s_%s" % (key, k1)] = float(v1)
            elif value is not None:
                flat[key] = float(value)
        self.epoch_data[epoch].error.update(flat)

    def get_error_key(self, epoch):
        if epoch not in self.epoch_data:
            return self.error_measure_key
        errors = self.epoch_data[epoch].error
        if not errors:
            return None
        if len(errors) == 1 and "old_format_score" in errors:
            return "old_format_score"
        if self.error_measure_key:
            return self.error_measure_key if self.error_measure_key in errors else None
        for key in ("dev_score", "train_score"):
            if key in errors:
                return key
        for key in sorted(errors):
            if key == "dev_score_output":
                return key
        for key in sorted(errors):
            if key.startswith("dev_score_"):
                return key
        return min(errors)

    def get_epoch_error_value(self, epoch):
        key = self.get_error_key(epoch)
        if key is None:
            return None
        return self.epoch_data[epoch].error.get(key)

    def _relative_error(self, old_error, new_error):
        denom = abs(old_error) if self.relative_error_div_by_old else abs(new_error)
        return (new_error - old_error) / denom if denom else 0.0


class ConstantLearningRate(LearningRateControl):
    """The most recent rate (``learning_rates`` entries, else ``learning_rate``)."""

    need_error_info = False

    def calc_learning_rate_for_epoch(self, epoch):
        return self.get_most_recent_learning_rate(epoch)


def _newbob_two_epochs(control, epoch, should_decay):
    """Newbob on the errors of the last two epochs: decay when should_decay(old, new, lr) says so."""
    last_epoch = control.get_last_epoch(epoch)
    if last_epoch is None:
        return control.default_learning_rate
    learning_rate = control.epoch_data[last_epoch].learning_rate
    if learning_rate is None:
        return control.default_learning_rate
    last2_epoch = control.get_last_epoch(last_epoch)
    if last2_epoch is None:
        return learning_rate
    old_error, new_error = control.get_epoch_error_value(last2_epoch), control.get_epoch_error_value(last_epoch)
    if old_error is None or new_error is None:
        return learning_rate
    if not control._lr_unchanged_for_min_epochs(epoch, learning_rate):
        return learning_rate
    if should_decay(old_error, new_error, learning_rate):
        learning_rate = control.calc_learning_rate_decay_or_grow(learning_rate, decay=True)
    return learning_rate


class NewbobRelative(LearningRateControl):
    """Decay when the relative error change of the last two epochs is above ``newbob_relative_error_threshold``."""

    @classmethod
    def load_initial_kwargs_from_config(cls, config):
        kwargs = super().load_initial_kwargs_from_config(config)
        kwargs["relative_error_threshold"] = config.float("newbob_relative_error_threshold", -0.01)
        return kwargs

    def __init__(self, relative_error_threshold=-0.01, **kwargs):
        super().__init__(**kwargs)
        self.relative_error_threshold = relative_error_threshold

    def calc_learning_rate_for_epoch(self, epoch):
        return _newbob_two_epochs(self, epoch, self._should_decay)

    def _should_decay(self, old_error, new_error, learning_rate):
        relative_error = self._relative_error(old_error, new_error)
        if self.relative_error_also_relative_to_learning_rate:
            relative_error /= learning_rate / self.default_learning_rate
        return relative_error > self.relative_error_threshold


class NewbobAbs(LearningRateControl):
    """Decay when the absolute error change of the last two epochs is above ``newbob_error_threshold``."""

    @classmethod
    def load_initial_kwargs_from_config(cls, config):
        kwargs = super().load_initial_kwargs_from_config(config)
        kwargs["error_threshold"] = config.float("newbob_error_threshold", -0.01)
        return kwargs

    def __init__(self, error_threshold=-0.01, **kwargs):
        super().__init__(**kwargs)
        self.error_threshold = error_threshold

    def calc_learning_rate_for_epoch(self, epoch):
        return _newbob_two_epochs(self, epoch, self._should_decay)

    def _should_decay(self, old_error, new_error, learning_rate):
        return new_error - old_error > self.error_threshold


class NewbobMultiEpoch(LearningRateControl):
    """
    Looks at the mean relative error change over the last ``newbob_multi_num_epochs`` epochs trained with the
    current rate; decays when it is above ``newbob_relative_error_threshold``, grows (``newbob_learning_rate_growth``)
    when below ``newbob_relative_error_grow_threshold``. Decides every ``newbob_multi_update_interval`` epochs.
    """

    @classmethod
    def load_initial_kwargs_from_config(cls, config):
        kwargs = super().load_initial_kwargs_from_config(config)
        threshold = config.float("newbob_relative_error_threshold", -0.01)
        kwargs.update({
            "num_epochs": config.int("newbob_multi_num_epochs", 5),
            "update_interval": config.int("newbob_multi_update_interval", 1),
            "relative_error_threshold": threshold,
            "relative_error_grow_threshold": config.float("newbob_relative_error_grow_threshold", threshold),
        })
        return kwargs

    def __init__(self, num_epochs=5, update_interval=1, relative_error_threshold=-0.01,
                 relative_error_grow_threshold=None, **kwargs):
        super().__init__(**kwargs)
        self.num_epochs = max(int(num_epochs), 1)
        self.update_interval = max(int(update_interval), 1)
        self.relative_error_threshold = relative_error_threshold
        self.relative_error_grow_threshold = (
            relative_error_threshold if relative_error_grow_threshold is None else relative_error_grow_threshold)

    def _recent_mean_relative_error(self, epoch):
        """(mean relative error or None, most recent learning rate)."""
        epochs = sorted(e for e in self.epoch_data if e < epoch)
        if not epochs:
            return None, self.default_learning_rate
        learning_rate = self.epoch_data[epochs[-1]].learning_rate
        if learning_rate is None:
            return None, self.default_learning_rate
        same_lr = []
        for e in reversed(epochs):
            if self.epoch_data[e].learning_rate != learning_rate:
                break
            same_lr.insert(0, e)
        last = same_lr[-(self.num_epochs + 1):]
        if len(last) < self.num_epochs + 1:
            return None, learning_rate
        errors = [self.get_epoch_error_value(e) for e in last]
        if any(e is None for e in errors):
            return None, learning_rate
        rel = [self._relative_error(errors[i], errors[i + 1]) for i in range(len(errors) - 1)]
        return sum(rel) / len(rel), learning_rate

    def calc_learning_rate_for_epoch(self, epoch):
        mean_rel, learning_rate = self._recent_mean_relative_error(epoch)
        if mean_rel is None or (epoch - 1) % self.update_interval != 0:
            return learning_rate
        if self.relative_error_also_relative_to_learning_rate:
            mean_rel /= learning_rate / self.default_learning_rate
        if mean_rel > self.relative_error_threshold:
            return self.calc_learning_rate_decay_or_grow(learning_rate, decay=True)
        if mean_rel < self.relative_error_grow_threshold:
            return self.calc_learning_rate_decay_or_grow(learning_rate, decay=False)
        return learning_rate


def learning_rate_control_type(type_name):
    if type_name == "constant":
        return ConstantLearningRate
    if type_name in ("newbob", "newbob_rel", "newbob_relative"):  # old setups expect the relative version
        return NewbobRelative
    if type_name == "newbob_abs":
        return NewbobAbs
    if type_name == "newbob_multi_epoch":
        return NewbobMultiEpoch
    raise ValueError("unknown learning_rate_control %r; known: constant, newbob, newbob_rel, newbob_relative, "
                     "newbob_abs, newbob_multi_epoch" % (type_name,))


def load_learning_rate_control_from_config(config):
    cls = learning_rate_control_type(config.value("learning_rate_control", "constant"))
    return cls.load_initial_from_config(config)


def pending_filename(filename):
    """Where the learning-rate state of an epoch waits until its checkpoint is complete."""
    return os.path.join(os.path.dirname(os.path.abspath(filename)), ".%s.pending" % os.path.basename(filename))


def commit_pending_file(pending):
    """Move a pending learning-rate file into place (a rename: needs no disk space)."""
    directory, base = os.path.split(pending)
    os.replace(pending, os.path.join(directory, base[1:-len(".pending")]))


def discard_pending_file(pending):
    try:
        os.remove(pending)
    except OSError:
        pass


def recover_pending_file(filename, complete_epochs):
    """On resume: a pending learning-rate file whose last epoch has a complete checkpoint (killed between the
    checkpoint and the rename) is committed; any other is discarded. Returns True if committed."""
    if not filename:
        return False
    pending = pending_filename(filename)
    if not os.path.exists(pending):
        return False
    try:
        with open(pending) as f:
            text = f.read()
        data = eval(text, {"EpochData": EpochData, "nan": float("nan"), "inf": float("inf"),
                           "__builtins__": {"float": float}})
        last_epoch = max(int(k) for k, v in data.items() if isinstance(v, EpochData) and v.error)
    except Exception:  # incomplete or unreadable: it never became the state
        discard_pending_file(pending)
        return False
    if last_epoch in complete_epochs:
        commit_pending_file(pending)
        return True
    discard_pending_file(pending)
    return False


def atomic_write_text(filename, text):
    """Write ``text`` to ``filename`` atomically (see :func:`returnn_lite.util.atomic_write`), creating the directory."""
    os.makedirs(os.path.dirname(os.path.abspath(filename)), exist_ok=True)
    atomic_write(filename, lambda f: f.write(text))
