"""
Batches over a dataset's current epoch, as the original RETURNN builds them, and their conversion to padded
numpy arrays.

* ``batch_size``: frames of the *padded* batch: ``max_len * num_seqs <= batch_size`` for every data key
  (a single seq longer than that still forms a batch of its own).
* ``max_seqs``: seqs per batch. ``max_seq_length``: longer seqs are skipped (negative int: limit on "classes").
* ``chunking``: ``"size:step"``, an int, ``(size, step)`` or per-key dicts: seqs are cut into overlapping
  windows, each of which is a separate batch entry.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy

from .basic import NumbersDict

__all__ = ["Batch", "BatchSeq", "BatchArrays", "generate_batches", "iterate_seqs", "parse_chunking",
           "batch_to_arrays"]

log = logging.getLogger(__name__)
_INF = float("inf")


@dataclass
class BatchSeq:
    """One batch entry: frames ``[start[key], end[key])`` of seq ``seq_idx`` (a whole seq, or one chunk)."""

    seq_idx: int
    start: NumbersDict
    end: NumbersDict

    @property
    def lengths(self):
        return self.end - self.start


@dataclass
class Batch:
    seqs: list = field(default_factory=list)
    max_lengths: NumbersDict = field(default_factory=NumbersDict)

    @property
    def num_seqs(self):
        return len(self.seqs)

    def padded_lengths_with(self, lengths):
        return NumbersDict({k: max(self.max_lengths.get(k, 0), v) for k, v in lengths.items()})

    def add(self, seq):
        self.seqs.append(seq)
        self.max_lengths = self.padded_lengths_with(seq.lengths)

    def num_padded_frames(self):
        """key -> max_len * num_seqs"""
        return NumbersDict({k: v * self.num_seqs for k, v in self.max_lengths.items()})

    @property
    def start_seq(self):
        return min(s.seq_idx for s in self.seqs)

    @property
    def end_seq(self):
        return max(s.seq_idx for s in self.seqs) + 1


def _is_no_chunking(chunking):
    return chunking is None or chunking is False or chunking == 0 or chunking == "" or chunking == "0"


def parse_chunking(chunking):
    """-> (chunk_size, chunk_step), each an int or dict key -> int; (None, None) for no chunking."""
    if _is_no_chunking(chunking):
        return None, None
    if isinstance(chunking, str):
        parts = chunking.split(":")
        if len(parts) > 2:
            raise ValueError("chunking %r: expected 'size' or 'size:step'" % chunking)
        try:
            size = int(parts[0])
            step = int(parts[1]) if len(parts) == 2 else size
        except ValueError:
            raise ValueError("chunking %r: expected 'size' or 'size:step' with ints" % chunking) from None
    elif isinstance(chunking, (tuple, list)):
        if len(chunking) != 2:
            raise ValueError("chunking %r: expected (size, step)" % (chunking,))
        size, step = chunking
        step = size if step is None else step
    elif isinstance(chunking, (int, dict)):
        size, step = chunking, chunking
    else:
        raise ValueError("chunking: unsupported %r" % (chunking,))
    for value in (size, step):
        for v in (value.values() if isinstance(value, dict) else [value]):
            if v is not None and v <= 0:
                raise ValueError("chunking %r: sizes and steps must be positive" % (chunking,))
    return size, step


def _per_key(value, key):
    return value.get(key) if isinstance(value, dict) else value


def _chunks(seq_idx, length, chunk_size, chunk_step, min_chunk_size):
    """Split one seq into chunks; keys of length <= 1 or without chunk size are given whole in every chunk."""
    sized = [k for k in length if _per_key(chunk_size, k)]
    if not sized:
        yield BatchSeq(seq_idx, NumbersDict.fromkeys(length, 0), NumbersDict(length))
        return
    default_key = "data" if "data" in sized else sorted(sized)[0]
    d_size = _per_key(chunk_size, default_key)
    d_step = _per_key(chunk_step, default_key) or d_size
    whole = []
    for key in length:
        if key == default_key:
            continue
        size, step = _per_key(chunk_size, key), _per_key(chunk_step, key) or _per_key(chunk_size, key)
        if not size or length[key] <= 1:
            whole.append(key)
        elif (size, step) == (d_size, d_step) and length[key] != length[default_key]:
            raise ValueError(
                "chunking: seq %i has data keys of different lengths %r; chunk them with a per-key dict "
                "(e.g. {'data': 100, 'classes': 50}) or restrict used_data_keys" % (seq_idx, dict(length)))
    n = 0
    while True:
        start, end = NumbersDict(), NumbersDict()
        for key in length:
            if key in whole:
                start[key], end[key] = 0, length[key]
            else:
                size = _per_key(chunk_size, key)
                step = _per_key(chunk_step, key) or size
                start[key] = min(n * step, length[key])
                end[key] = min(start[key] + size, length[key])
        if start[default_key] >= length[default_key]:
            break
        yield BatchSeq(seq_idx, start, end)
        n += 1
        if length[default_key] - n * d_step <= min_chunk_size:
            break


def iterate_seqs(dataset, chunking=None, used_data_keys=None, min_chunk_size=0):
    """All batch entries of the dataset's current epoch, in order (see :class:`BatchSeq`)."""
    chunk_size, chunk_step = parse_chunking(chunking)
    seq_idx = 0
    while dataset.is_less_than_num_seqs(seq_idx):
        length = dataset.get_seq_length(seq_idx)
        if used_data_keys is not None:
            length = NumbersDict({k: length[k] for k in used_data_keys if k in length})
        if chunk_size is None:
            yield BatchSeq(seq_idx, NumbersDict.fromkeys(length, 0), NumbersDict(length))
        else:
            yield from _chunks(seq_idx, length, chunk_size, chunk_step, min_chunk_size)
        seq_idx += 1


def _batch_size_limit(value):
    """None/0/negative -> no limit; int -> all keys; dict -> per key."""
    if value is None or (not isinstance(value, dict) and value <= 0):
        return None
    return value


def _max_seq_length_limit(value):
    """Like :func:`_batch_size_limit`, but a negative int limits only "classes" (the original's convention)."""
    if isinstance(value, (int, float)) and value < 0:
        return {"classes": -value}
    return _batch_size_limit(value)


def _exceeds(lengths, limit):
    if limit is None:
        return False
    if isinstance(limit, dict):
        return any(lengths.get(k, 0) > v for k, v in limit.items())
    return lengths.max_value() > limit


def generate_batches(dataset, batch_size, max_seqs=-1, max_seq_length=None, chunking=None, shuffle_batches=False,
                     used_data_keys=None, min_chunk_size=None, seed=None):
    """
    Yield :class:`Batch` es over the dataset's current epoch (call ``dataset.init_seq_order(epoch)`` first).

    :param int|dict|None batch_size: max padded frames per batch (per key if dict); None/0: unlimited
    :param int|None max_seqs: max seqs (chunks) per batch; None/<=0: unlimited
    :param int|dict|None max_seq_length: skip longer seqs (chunks); negative int: limit for "classes" only
    :param chunking: see :func:`parse_chunking`; None: ``dataset.chunking``; 0/"": off
    :param bool shuffle_batches: build all batches, then shuffle their order (seed: epoch-based)
    :param list[str]|None used_data_keys: only these keys count (e.g. the network's extern data)
    """
    batch_size = _batch_size_limit(batch_size)
    max_seqs = max_seqs if max_seqs and max_seqs > 0 else _INF
    max_seq_length = _max_seq_length_limit(max_seq_length)
    if chunking is None:
        chunking = getattr(dataset, "chunking", None)
    if min_chunk_size is None:
        min_chunk_size = getattr(dataset, "min_chunk_size", 0) or 0
    batches = _generate(dataset, batch_size, max_seqs, max_seq_length, chunking, used_data_keys, min_chunk_size)
    if not shuffle_batches:
        yield from batches
        return
    batches = list(batches)
    if seed is None:
        seed = dataset.get_random_seed_for_epoch(dataset.epoch)
    numpy.random.RandomState(seed).shuffle(batches)
    yield from batches


def _generate(dataset, batch_size, max_seqs, max_seq_length, chunking, used_data_keys, min_chunk_size):
    batch = Batch()
    for seq in iterate_seqs(dataset, chunking, used_data_keys, min_chunk_size):
        lengths = seq.lengths
        if _exceeds(lengths, max_seq_length):
            continue
        if batch_size is not None and _exceeds(lengths, batch_size):
            log.warning("seq %i: length %s exceeds batch_size %s; it gets a batch of its own",
                        seq.seq_idx, dict(lengths), batch_size)
        padded = NumbersDict({k: v * (batch.num_seqs + 1) for k, v in batch.padded_lengths_with(lengths).items()})
        if batch.num_seqs > 0 and (batch.num_seqs + 1 > max_seqs or _exceeds(padded, batch_size)):
            yield batch
            batch = Batch()
        batch.add(seq)
    if batch.num_seqs > 0:
        yield batch


@dataclass
class BatchArrays:
    """A batch as numpy arrays, ready to feed: ``data[key]`` is [B, T, ...] (zero-padded)."""

    data: dict
    seq_lens: dict  # key -> int32 [B]
    seq_tags: list
    seq_idxs: list

    @property
    def num_seqs(self):
        return len(self.seq_idxs)


def batch_to_arrays(dataset, batch, data_keys=None):
    """
    :param Dataset dataset: in the epoch the batch was made for
    :param Batch batch:
    :param list[str]|None data_keys: default: the keys of the batch entries
    :rtype: BatchArrays
    """
    dataset.load_seqs(batch.start_seq, batch.end_seq)
    if data_keys is None:
        data_keys = sorted(batch.seqs[0].start.keys()) if batch.seqs else []
    data, seq_lens = {}, {}
    for key in data_keys:
        parts = []
        for seq in batch.seqs:
            full = dataset.get_data(seq.seq_idx, key)
            start = seq.start.get(key, 0)
            end = seq.end.get(key, full.shape[0] if full.ndim else 1)
            parts.append(full[start:end] if full.ndim else full[None])
        shape = [len(parts)] + [max(p.shape[i] for p in parts) for i in range(parts[0].ndim)]
        out = numpy.zeros(shape, dtype=parts[0].dtype)
        for i, part in enumerate(parts):
            out[(i,) + tuple(slice(0, n) for n in part.shape)] = part
        data[key] = out
        seq_lens[key] = numpy.array([p.shape[0] for p in parts], dtype=numpy.int32)
    return BatchArrays(data=data, seq_lens=seq_lens, seq_tags=[dataset.get_seq_tag(s.seq_idx) for s in batch.seqs],
                       seq_idxs=[s.seq_idx for s in batch.seqs])
