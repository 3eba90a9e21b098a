"""
:class:`StaticDataset`: all data given in memory as a list of dicts (data key -> numpy array).
"""

from __future__ import annotations

import numpy

from .basic import DatasetError, _data_first, convert_data_dims
from .indexed import IndexedDataset

__all__ = ["StaticDataset"]


class StaticDataset(IndexedDataset):
    """
    :param list[dict[str,numpy.ndarray]] data: one dict per seq; arrays are time-major ([T] or [T, ...])
    :param list[str]|None target_list: default: all keys except "data"
    :param int|dict|None output_dim: see :func:`convert_data_dims`; inferred from the arrays where missing
      (dense: last axis; sparse int [T] arrays: max value + 1 over all seqs)
    :param int|None input_dim: dense "data" dim
    :param list[str]|None seq_tags: default "seq-<idx>"
    """

    def __init__(self, data, target_list=None, output_dim=None, input_dim=None, seq_tags=None, **kwargs):
        super().__init__(**kwargs)
        if not data:
            raise DatasetError("%s: data must be a non-empty list of dicts" % self.name)
        self.data = [{key: numpy.asarray(value) for key, value in seq.items()} for seq in data]
        self.data_keys = _data_first(self.data[0].keys())
        for i, seq in enumerate(self.data):
            if sorted(seq.keys()) != sorted(self.data_keys):
                raise DatasetError("%s: seq %i has keys %s, expected %s" % (self.name, i, sorted(seq), self.data_keys))
        if target_list is None:
            target_list = [key for key in self.data_keys if key != "data"]
        for key in target_list:
            if key not in self.data_keys:
                raise DatasetError("%s: target %r not in data keys %s" % (self.name, key, self.data_keys))
        self.target_list = list(target_list)
        if seq_tags is not None and len(seq_tags) != len(self.data):
            raise DatasetError("%s: %i seq_tags for %i seqs" % (self.name, len(seq_tags), len(self.data)))
        self.seq_tags = list(seq_tags) if seq_tags is not None else None

        dims = convert_data_dims(output_dim)
        if input_dim is not None and "data" not in dims:
            dims["data"] = [input_dim, 2]
        for key in self.data_keys:
            first = self.data[0][key]
            if key not in dims:
                dims[key] = [self._infer_dim(key), max(first.ndim, 1)]
            if dims[key][1] != max(first.ndim, 1):
                raise DatasetError("%s: key %r: data has %i axes, output_dim says %i"
                                   % (self.name, key, first.ndim, dims[key][1]))
        extra = sorted(set(dims) - set(self.data_keys))
        if extra:
            raise DatasetError("%s: output_dim has keys %s that are not in the data" % (self.name, extra))
        self.num_outputs = dims
        self.num_inputs = dims["data"][0] if "data" in dims else 0
        self._apply_window_to_dims()

    def _infer_dim(self, key):
        first = self.data[0][key]
        if first.ndim >= 2:
            return int(first.shape[-1])
        if first.dtype.kind in "iu":
            return int(max(int(seq[key].max()) if seq[key].size else 0 for seq in self.data)) + 1
        return 1

    def _num_corpus_seqs(self):
        return len(self.data)

    def _load_corpus_seq(self, corpus_idx):
        return self.data[corpus_idx]

    def _corpus_seq_tag(self, corpus_idx):
        return self.seq_tags[corpus_idx] if self.seq_tags else "seq-%i" % corpus_idx

    def get_data_keys(self):
        return list(self.data_keys)

    def get_target_list(self):
        return list(self.target_list)

    def get_data_dtype(self, key):
        self._check_key(key)
        return str(self.data[0][key].dtype)

    def get_data_shape(self, key):
        self._check_key(key)
        shapes = {seq[key].shape[1:] for seq in self.data}
        first = self.data[0][key].shape[1:]
        # axes whose size differs between seqs are dynamic (None)
        shape = [d if all(s[i] == d for s in shapes) else None for i, d in enumerate(first)]
        if key == "data" and self.window > 1 and shape:
            shape[-1] *= self.window
        return shape
