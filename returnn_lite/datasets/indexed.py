"""
:class:`IndexedDataset`: common base of datasets that can produce any corpus seq on demand
(generated, static in-memory, HDF). It implements ordering, ``seq_list``, caching and windowing once.
"""

from __future__ import annotations

import numpy

from .basic import Dataset, DatasetError, NumbersDict, _seq_len_of

__all__ = ["IndexedDataset"]

_INF = float("inf")


class IndexedDataset(Dataset):
    """
    Subclasses implement:

    * ``_num_corpus_seqs()``: int (or ``inf`` for endless generated data; then only "default" ordering)
    * ``_load_corpus_seq(corpus_idx)``: dict key -> numpy array (time-major, time first)

    and optionally ``_corpus_seq_tag``, ``_corpus_seq_lens`` (cheaper lengths for sorting) and ``_on_new_epoch``.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._seq_order = None  # corpus indices of the current epoch; None: identity (endless data)
        self._num_seqs = None
        self._cache = {}  # seq_idx -> dict key -> array
        self._tag_index = None  # seq tag -> corpus idx, built on first use of seq_list

    # ---- to implement

    def _num_corpus_seqs(self):
        raise NotImplementedError

    def _load_corpus_seq(self, corpus_idx):
        raise NotImplementedError

    def _corpus_seq_tag(self, corpus_idx):
        return "seq-%i" % corpus_idx

    def _corpus_seq_lens(self, corpus_idx):
        seq = self._load_corpus_seq(corpus_idx)
        return NumbersDict({key: _seq_len_of(value) for key, value in seq.items()})

    def _on_new_epoch(self, epoch):
        """Hook before the order of a new epoch is computed (e.g. to reseed generated data)."""

    # ---- ordering

    def _sort_key_len(self, corpus_idx):
        lens = self._corpus_seq_lens(corpus_idx)
        return lens["data"] if "data" in lens else lens.max_value()

    def init_seq_order(self, epoch=None, seq_list=None, seq_order=None):
        self.epoch = epoch
        self._cache.clear()
        self._on_new_epoch(epoch)
        total = self._num_corpus_seqs()
        if seq_order is not None:
            order = [int(i) for i in seq_order]
        elif seq_list is not None:
            order = self._corpus_indices_for_tags(seq_list)
        elif total == _INF:
            if self.seq_ordering != "default" or self.partition_epoch > 1:
                raise DatasetError("%s: endless data (num_seqs=inf) supports only seq_ordering='default' and "
                                   "no partition_epoch" % self.name)
            self._seq_order, self._num_seqs = None, _INF
            return True
        else:
            order = self.get_seq_order_for_epoch(epoch, int(total), get_seq_len=self._sort_key_len)
        if total != _INF and any(not 0 <= i < total for i in order):
            raise DatasetError("%s: seq order has indices outside [0, %i)" % (self.name, total))
        self._seq_order, self._num_seqs = order, len(order)
        return True

    def _corpus_indices_for_tags(self, seq_list):
        total = self._num_corpus_seqs()
        if total == _INF:
            raise DatasetError("%s: seq_list is not supported for endless data (num_seqs=inf)" % self.name)
        if self._tag_index is None:
            self._tag_index = {self._corpus_seq_tag(i): i for i in range(int(total))}
        missing = [tag for tag in seq_list if tag not in self._tag_index]
        if missing:
            raise DatasetError("%s: %i seq tag(s) of seq_list not in this dataset, e.g. %r"
                               % (self.name, len(missing), missing[:3]))
        return [self._tag_index[tag] for tag in seq_list]

    def _require_init(self):
        if self._num_seqs is None:
            raise DatasetError("%s: call init_seq_order(epoch) before accessing seqs" % self.name)

    @property
    def num_seqs(self):
        self._require_init()
        return self._num_seqs

    def get_current_seq_order(self):
        self._require_init()
        if self._seq_order is None:
            raise DatasetError("%s: endless data has no explicit seq order" % self.name)
        return list(self._seq_order)

    def get_corpus_seq_idx(self, seq_idx):
        self._require_init()
        return seq_idx if self._seq_order is None else self._seq_order[seq_idx]

    def get_all_tags(self):
        total = self._num_corpus_seqs()
        if total == _INF:
            raise DatasetError("%s: endless data has no complete tag list" % self.name)
        return [self._corpus_seq_tag(i) for i in range(int(total))]

    def get_total_num_seqs(self):
        return self._num_corpus_seqs()

    # ---- data access

    def _get_seq(self, seq_idx):
        seq = self._cache.get(seq_idx)
        if seq is None:
            self._require_init()
            if not 0 <= seq_idx < self._num_seqs:
                raise IndexError("%s: seq_idx %i out of range (num_seqs %s)" % (self.name, seq_idx, self._num_seqs))
            seq = self._load_corpus_seq(self.get_corpus_seq_idx(seq_idx))
            seq = {key: numpy.asarray(value) for key, value in seq.items()}
            seq = {key: value[None] if value.ndim == 0 and key not in self._scalar_keys else value
                   for key, value in seq.items()}
            if self.window > 1 and "data" in seq and seq["data"].ndim == 2:
                seq["data"] = self._sliding_window(seq["data"])
            self._cache[seq_idx] = seq
        return seq

    def load_seqs(self, start, end):
        # Free what lies before start (access is mostly forward), keep and load [start, end).
        for idx in [i for i in self._cache if i < start]:
            del self._cache[idx]
        self._require_init()
        for idx in range(start, min(end, self._num_seqs)):
            self._get_seq(idx)

    def get_data(self, seq_idx, key):
        seq = self._get_seq(seq_idx)
        if key not in seq:
            raise KeyError("%s: unknown data key %r; available: %s" % (self.name, key, sorted(seq)))
        return seq[key]

    # Keys whose values are scalars per seq (e.g. a transcription string), kept 0-dim.
    _scalar_keys = ()

    # True where _corpus_seq_lens does not load the data (e.g. HDF): lengths then need no data in memory.
    _cheap_seq_lens = False

    def get_seq_length(self, seq_idx):
        if seq_idx not in self._cache and self._cheap_seq_lens:
            self._require_init()
            return self._corpus_seq_lens(self.get_corpus_seq_idx(seq_idx))
        return NumbersDict({key: _seq_len_of(value) for key, value in self._get_seq(seq_idx).items()})

    def get_seq_tag(self, seq_idx):
        return self._corpus_seq_tag(self.get_corpus_seq_idx(seq_idx))

    get_tag = get_seq_tag
