"""
Checkpoint files on disk for the checkpoint tool and the backend conversions: :class:`Checkpoint` (names, shapes,
dtypes; tensors read on demand with errors naming file and param) and :func:`write_checkpoint` (atomic).
"""

from __future__ import annotations

import glob
import os
import re

import numpy as np

from .checkpoint_loader import CheckpointError, normalize_checkpoint_filename, open_checkpoint, read_tensor

_GLOBAL_NAMES = ("global_step",)
_OPTIMIZER_GLOBALS = re.compile(r"^(beta1_power|beta2_power|optimize/|updater/|globals/)")


class ToolError(Exception):
    pass


class Checkpoint:
    """A checkpoint on disk: names, shapes, dtypes; tensors read on demand with errors naming file and param."""

    def __init__(self, filename):
        self.filename, self.reader = open_checkpoint(filename)
        self.shapes = {k: tuple(v) for k, v in self.reader.get_variable_to_shape_map().items()}
        self.dtypes = {k: np.dtype(v.as_numpy_dtype) for k, v in self.reader.get_variable_to_dtype_map().items()}

    def get(self, name):
        return read_tensor(self.reader, self.filename, name)

    def names(self):
        return sorted(self.shapes)

    def is_optimizer_state(self, name):
        if _OPTIMIZER_GLOBALS.match(name):
            return True
        return "/" in name and name.rsplit("/", 1)[0] in self.shapes

    def param_names(self):
        """Model params: not the global step, not optimizer slots (<param>/Adam etc.)."""
        return [n for n in self.names() if n not in _GLOBAL_NAMES and not self.is_optimizer_state(n)]

    def global_step(self):
        return int(self.get("global_step")) if "global_step" in self.shapes else None

    def num_values(self, names):
        return int(sum(int(np.prod(self.shapes[n], dtype=np.int64)) for n in names))

    def data_files(self):
        return sorted(glob.glob(glob.escape(self.filename) + ".data-*"))

    def check_size(self):
        """Cheap truncation check without reading: the data files must hold at least the numeric tensors' bytes."""
        files = self.data_files()
        if not files:
            raise CheckpointError("checkpoint %r: no data file %r" % (self.filename, self.filename + ".data-*"))
        have = sum(os.path.getsize(f) for f in files)
        need = sum(int(np.prod(self.shapes[n], dtype=np.int64)) * self.dtypes[n].itemsize
                   for n in self.shapes if self.dtypes[n].kind in "fiub")
        if have < need:
            for name in self.names():  # find the first param that cannot be read, to name it
                self.get(name)
            raise CheckpointError("checkpoint %r is truncated: data files have %i bytes, its params need %i" % (
                self.filename, have, need))

    def read_all(self, names=None):
        return {n: self.get(n) for n in (self.names() if names is None else names)}


def write_checkpoint(filename, values):
    """Write name -> numpy value as a TF checkpoint (V2) atomically: temp prefix, then rename (index last)."""
    import tensorflow as tf

    filename = normalize_checkpoint_filename(filename)
    directory = os.path.dirname(os.path.abspath(filename))
    if not os.path.isdir(directory):
        raise ToolError("output %r: directory %r does not exist" % (filename, directory))
    tmp = os.path.join(directory, ".%s.tmp%i" % (os.path.basename(filename), os.getpid()))
    names = sorted(values)
    try:
        with tf.device("/cpu:0"):
            tf.raw_ops.SaveV2(prefix=tmp, tensor_names=names, shape_and_slices=[""] * len(names),
                              tensors=[tf.constant(values[n]) for n in names])
        tmp_files = glob.glob(glob.escape(tmp) + ".*")
        for old in glob.glob(glob.escape(filename) + ".data-*"):
            os.remove(old)
        for f in tmp_files:
            if not f.endswith(".index"):
                os.replace(f, filename + f[len(tmp):])
        os.replace(tmp + ".index", filename + ".index")
    finally:
        for f in glob.glob(glob.escape(tmp) + ".*"):
            os.remove(f)
    return filename
