"""
Epoch checkpoints with the original's file naming (``<model>.<epoch %03d>.index`` / ``.data-*``), written so
that a kill at any moment loses nothing: the checkpoint is saved under a temp prefix, then the data files are
renamed into place, and the ``.index`` file (the marker that the epoch is complete) is renamed last.

Checkpoints hold the network params under their original names (``output/W``), ``global_step``, and the
optimizer state (``output/W/Adam``, ``beta1_power``, ...; optional when loading).

The file-name helpers are shared by both engine backends (they take the marker suffix: ``.index`` for TF, ``.pt``
for torch); :class:`CheckpointSaver` is the TF backend's and imports TF when used.
"""

from __future__ import annotations

import glob
import os
import re
import shutil


__all__ = ["epoch_model_filename", "model_epoch_from_filename", "get_existing_models", "CheckpointSaver",
           "checkpoint_exists", "remove_stale_temp_files"]

_INDEX = ".index"


def epoch_model_filename(model_prefix, epoch):
    return "%s.%03d" % (model_prefix, epoch)


def model_epoch_from_filename(filename):
    """``/x/model.012`` -> 12; None if the name has no epoch suffix."""
    m = re.match(r"^.*\.(\d+)$", filename)
    return int(m.group(1)) if m else None


def normalize_checkpoint_name(filename):
    """Accept ``model.003``, ``model.003.index``, ``.meta``, ``.data-00000-of-00001`` and (torch) ``.pt``."""
    for suffix in (".index", ".meta", ".pt"):
        if filename.endswith(suffix):
            return filename[:-len(suffix)]
    return re.sub(r"\.data-\d+-of-\d+$", "", filename)


def checkpoint_exists(filename, suffix=_INDEX):
    return os.path.exists(filename + suffix)


def get_existing_models(model_prefix, suffix=_INDEX):
    """epoch -> checkpoint name, for every complete epoch checkpoint ``<model_prefix>.NNN<suffix>``."""
    if not model_prefix:
        return {}
    directory = os.path.dirname(os.path.abspath(model_prefix))
    base = os.path.basename(model_prefix)
    pattern = re.compile(r"^%s\.(\d{3,})%s$" % (re.escape(base), re.escape(suffix)))
    res = {}
    if not os.path.isdir(directory):
        return res
    for name in os.listdir(directory):
        m = pattern.match(name)
        if m:
            epoch = int(m.group(1))
            res[epoch] = epoch_model_filename(model_prefix, epoch)
    return res


def remove_stale_temp_files(model_prefix):
    """Leftovers of a save that was killed halfway."""
    if not model_prefix:
        return
    directory = os.path.dirname(os.path.abspath(model_prefix))
    base = os.path.basename(model_prefix)
    for path in glob.glob(os.path.join(glob.escape(directory), ".%s.*.tmp*" % glob.escape(base))):
        try:
            if os.path.isdir(path):  # e.g. the "_temp" dir of a killed TF save
                shutil.rmtree(path)
            else:
                os.remove(path)
        except OSError:
            pass


class CheckpointSaver:
    """Saves/loads the network params, the global train step and extra (optimizer) variables."""

    def __init__(self, network, extra_vars=()):
        self.network = network
        self.extra_vars = list(extra_vars)
        self._saver = None
        self._keys = None

    def _var_dict(self):
        d = {p.op.name: p for p in self.network.get_params_list()
             if not getattr(p, "_returnn_lite_not_saveable", False)}  # e.g. keep_over_epoch states
        d["global_step"] = self.network.get_global_train_step_var()
        for v in self.extra_vars:
            d.setdefault(v.op.name, v)
        return d

    def save(self, session, filename):
        """Atomically write checkpoint ``filename`` (``filename.index`` appears last)."""
        with session.graph.as_default():
            self._save(session, filename)

    def _save(self, session, filename):
        import tensorflow as tf

        tf1 = tf.compat.v1
        d = self._var_dict()
        if self._saver is None or self._keys != set(d):
            self._saver = tf1.train.Saver(var_list=d, max_to_keep=None, save_relative_paths=True, sharded=False)
            self._keys = set(d)
        directory = os.path.dirname(os.path.abspath(filename))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, ".%s.tmp%i" % (os.path.basename(filename), os.getpid()))
        self._saver.save(session, tmp, write_meta_graph=False, write_state=False)
        files = glob.glob(glob.escape(tmp) + ".*")
        data_files = [f for f in files if not f.endswith(_INDEX)]
        for f in data_files:
            os.replace(f, filename + f[len(tmp):])
        os.replace(tmp + _INDEX, filename + _INDEX)  # the marker: the epoch is complete

    def load(self, session, filename, load_extra=True):
        """Params (must all exist) and global step; then whatever extra (optimizer) vars the checkpoint has."""
        if not checkpoint_exists(filename):
            raise IOError("checkpoint %r not found (no %r)" % (filename, filename + _INDEX))
        with session.graph.as_default():
            self._load(session, filename, load_extra)

    def _load(self, session, filename, load_extra):
        from ..checkpoint_loader import CustomCheckpointLoader

        self.network.get_global_train_step_var()
        self.network.load_params_from_file(filename, session=session)
        if load_extra and self.extra_vars:
            loader = CustomCheckpointLoader(filename, saveable_params=self.extra_vars, ignore_missing=True)
            present = [v for v in self.extra_vars if v.op.name in loader.ckpt_shapes]  # e.g. another optimizer before
            if present:
                loader.params = present
                loader.load_now(session)
