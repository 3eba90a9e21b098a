"""
The :class:`Dataset` base API of the original RETURNN.

A dataset is used epoch-wise: ``init_seq_order(epoch)`` fixes the sequence order of that (sub-)epoch, then
seqs are addressed by their index in that order (``seq_idx``; "sorted seq idx" in the original), going
forward: ``load_seqs(start, end)``, ``get_data(seq_idx, key)``, ``get_seq_length(seq_idx)``, ...

Data formats are described per data key by ``num_outputs[key] = [dim, ndim]`` (ndim counted without batch:
1 = sparse ``[T]`` class indices with ``dim`` classes, 2 = dense ``[T, dim]``).
"""

from __future__ import annotations

import numpy

from .seq_order import apply_partition_epoch, get_seq_order, seq_ordering_needs_lengths

__all__ = ["Dataset", "NumbersDict", "convert_data_dims", "DatasetError"]


class DatasetError(Exception):
    """Wrong dataset options, malformed data files, or API misuse (e.g. no ``init_seq_order`` yet)."""


class NumbersDict(dict):
    """data key -> number (e.g. sequence lengths), with the element-wise helpers batching needs."""

    def max_value(self):
        return max(self.values()) if self else 0

    def min_value(self):
        return min(self.values()) if self else 0

    def _binary(self, other, op):
        if isinstance(other, dict):
            return NumbersDict({k: op(v, other.get(k, 0)) for k, v in self.items()})
        return NumbersDict({k: op(v, other) for k, v in self.items()})

    def __add__(self, other):
        return self._binary(other, lambda a, b: a + b)

    def __sub__(self, other):
        return self._binary(other, lambda a, b: a - b)

    def copy(self):
        return NumbersDict(self)


def convert_data_dims(dims):
    """
    Normalize ``output_dim``-style specs to ``{key: [dim, ndim]}``.
    Accepts ``int`` (sparse dim for "classes"), ``{key: int}`` (sparse), ``{key: (dim, ndim)}``, or
    ``{key: {"dim": .., "shape": (..), "sparse": ..}}``.
    """
    if dims is None:
        return {}
    if isinstance(dims, (int, numpy.integer)):
        dims = {"classes": int(dims)}
    if not isinstance(dims, dict):
        raise DatasetError("data dims must be int or dict, got %r" % (dims,))
    out = {}
    for key, value in dims.items():
        if isinstance(value, (int, numpy.integer)):
            out[key] = [int(value), 1]
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            out[key] = [int(value[0]) if value[0] is not None else None, int(value[1])]
        elif isinstance(value, dict):
            shape = value.get("shape", (None,) if value.get("sparse") else (None, value.get("dim")))
            out[key] = [value.get("dim"), len(shape)]
        else:
            raise DatasetError("data dims for %r: expected int, (dim, ndim) or dict, got %r" % (key, value))
    return out


# Options the original accepts that change nothing here (caching, multi-processing, logging details).
_IGNORED_OPTIONS = {
    "cache_byte_size", "use_cache_manager", "shuffle_frames_of_nseqs", "unique_seq_tags", "context_window",
    "estimated_num_seqs", "min_chunk_size_frac", "seq_list_filter_file", "parent_dataset", "cache_size",
}


class Dataset:
    """Base class. Subclasses implement ordering and data access (see :class:`IndexedDataset`)."""

    def __init__(self, name=None, window=1, seq_ordering="default", partition_epoch=None,
                 random_seed_offset=None, fixed_random_seed=None, chunking=None, min_chunk_size=0,
                 **kwargs):
        unknown = sorted(set(kwargs) - _IGNORED_OPTIONS)
        if unknown:
            raise TypeError("%s: unknown option(s) %s" % (type(self).__name__, ", ".join(map(repr, unknown))))
        self.name = name or type(self).__name__
        if not isinstance(window, int) or window < 1:
            raise DatasetError("%s: window must be an int >= 1, got %r" % (self.name, window))
        self.window = window
        self.seq_ordering = seq_ordering or "default"
        self.partition_epoch = int(partition_epoch or 1)
        self.random_seed_offset = int(random_seed_offset or 0)
        self.fixed_random_seed = fixed_random_seed
        self.chunking = chunking  # used by batching.generate_batches when it gets no chunking itself
        self.min_chunk_size = min_chunk_size
        self.epoch = None
        self.num_inputs = 0
        self.num_outputs = {}  # key -> [dim, ndim]
        self.labels = {}  # key -> list of label names

    def __repr__(self):
        return "<%s %r epoch=%r>" % (type(self).__name__, self.name, self.epoch)

    # ---- epoch / order

    def init_seq_order(self, epoch=None, seq_list=None, seq_order=None):
        """
        Start (sub-)epoch ``epoch``. ``seq_list`` (seq tags) or ``seq_order`` (corpus indices) force an order.
        Returns whether the order may have changed.
        """
        raise NotImplementedError

    def get_random_seed_for_epoch(self, epoch, num_epochs_fixed=1):
        """Seed for the random parts of epoch ``epoch``; the same for all sub-epochs of one full epoch."""
        if self.fixed_random_seed is not None:
            return int(self.fixed_random_seed)
        full_epoch = epoch or 1
        if self.partition_epoch > 1:
            full_epoch = (full_epoch - 1) // self.partition_epoch + 1
        full_epoch = (full_epoch - 1) // max(num_epochs_fixed, 1) + 1
        return full_epoch + self.random_seed_offset

    def get_seq_order_for_epoch(self, epoch, num_seqs, get_seq_len=None):
        """Corpus indices for (sub-)epoch ``epoch``: ``seq_ordering``, then ``partition_epoch``."""
        if seq_ordering_needs_lengths(self.seq_ordering) and get_seq_len is None:
            raise DatasetError("%s: seq_ordering %r needs sequence lengths, which this dataset cannot provide"
                               % (self.name, self.seq_ordering))
        try:
            order = get_seq_order(self.seq_ordering, num_seqs, get_seq_len=get_seq_len,
                                  get_seed=lambda nth: self.get_random_seed_for_epoch(epoch, nth))
        except ValueError as exc:
            raise DatasetError("%s: %s" % (self.name, exc)) from None
        return apply_partition_epoch(order, self.partition_epoch, epoch)

    def get_current_seq_order(self):
        """Corpus seq indices of the current epoch, in order."""
        raise NotImplementedError

    def finish_epoch(self):
        """Called after the last batch of an epoch (free resources)."""

    @property
    def num_seqs(self):
        raise NotImplementedError

    def is_less_than_num_seqs(self, n):
        return n < self.num_seqs

    def get_complete_frac(self, seq_idx):
        """Progress in the current epoch after ``seq_idx`` (0..1], or None if the size is unknown."""
        num_seqs = self.num_seqs
        if not num_seqs or num_seqs == float("inf"):
            return None
        return min(float(seq_idx + 1) / num_seqs, 1.0)

    # ---- data access

    def load_seqs(self, start, end):
        """Make seqs ``[start, end)`` available; earlier ones may be freed."""

    def get_data(self, seq_idx, key):
        raise NotImplementedError

    def get_input_data(self, seq_idx):
        return self.get_data(seq_idx, "data")

    def get_targets(self, target, seq_idx):
        return self.get_data(seq_idx, target)

    def get_seq_length(self, seq_idx):
        """:rtype: NumbersDict key -> number of frames"""
        return NumbersDict({key: _seq_len_of(self.get_data(seq_idx, key)) for key in self.get_data_keys()})

    def get_seq_tag(self, seq_idx):
        return "seq-%i" % self.get_corpus_seq_idx(seq_idx)

    get_tag = get_seq_tag  # the original's name

    def get_corpus_seq_idx(self, seq_idx):
        return self.get_current_seq_order()[seq_idx]

    def get_all_tags(self):
        """Tags of all seqs of the corpus (independent of the current order)."""
        raise NotImplementedError("%s cannot list all seq tags" % type(self).__name__)

    # ---- data format

    def get_data_keys(self):
        """"data" first (if present), then the targets, as in the original."""
        return _data_first(self.num_outputs.keys())

    def get_target_list(self):
        return [key for key in self.get_data_keys() if key != "data"]

    def _check_key(self, key):
        if key not in self.num_outputs:
            raise KeyError("%s: unknown data key %r; available: %s" % (self.name, key, self.get_data_keys()))

    def get_data_dim(self, key):
        """Number of classes (sparse) or feature dim (dense)."""
        self._check_key(key)
        dim = self.num_outputs[key][0]
        return 1 if dim is None else dim

    def is_data_sparse(self, key):
        self._check_key(key)
        return self.num_outputs[key][1] <= 1 and str(self.get_data_dtype(key)).startswith(("int", "uint"))

    def get_data_dtype(self, key):
        self._check_key(key)
        return "int32" if self.num_outputs[key][1] <= 1 else "float32"

    def get_data_shape(self, key):
        """Shape of ``get_data(seq_idx, key)`` without the time axis (None for unknown)."""
        self._check_key(key)
        ndim = self.num_outputs[key][1]
        if ndim <= 1:
            return []
        shape = [None] * (ndim - 1)
        shape[-1] = self.get_data_dim(key)
        return shape

    def len_info(self):
        try:
            return "%s, sequences: %s" % (self.name, self.num_seqs)
        except DatasetError:
            return self.name

    # ---- helpers for subclasses

    def _sliding_window(self, data):
        """Stack ``window`` neighbouring frames (zero-padded at the borders): [T, D] -> [T, window * D]."""
        left = self.window // 2
        right = self.window - 1 - left
        padded = numpy.concatenate([numpy.zeros((left,) + data.shape[1:], data.dtype), data,
                                    numpy.zeros((right,) + data.shape[1:], data.dtype)], axis=0)
        frames = [padded[i:i + data.shape[0]] for i in range(self.window)]
        return numpy.concatenate(frames, axis=-1)

    def _apply_window_to_dims(self):
        if self.window > 1 and "data" in self.num_outputs and self.num_outputs["data"][1] == 2:
            dim = self.num_outputs["data"][0]
            self.num_outputs["data"] = [dim * self.window, 2]
            self.num_inputs = dim * self.window


def _data_first(keys):
    keys = sorted(keys)
    return (["data"] if "data" in keys else []) + [k for k in keys if k != "data"]


def _seq_len_of(array):
    array = numpy.asarray(array)
    return int(array.shape[0]) if array.ndim >= 1 else 1
