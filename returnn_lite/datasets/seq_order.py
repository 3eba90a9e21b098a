"""
Sequence orderings of the original RETURNN (``seq_ordering`` dataset option) and ``partition_epoch``.

All randomness comes from a seed callback ``get_seed(num_epochs_fixed)`` so that the dataset decides how the
seed depends on the epoch (and on ``random_seed_offset`` / ``fixed_random_seed``).
"""

from __future__ import annotations

import numpy

__all__ = ["get_seq_order", "apply_partition_epoch", "KNOWN_SEQ_ORDERINGS", "seq_ordering_needs_lengths"]

KNOWN_SEQ_ORDERINGS = (
    "default", "reverse", "sorted", "sorted_reverse", "random[:nth]",
    "laplace[:bins|:.seqs_per_bin][:nth]", "sort_bin_shuffle[:bins|:.seqs_per_bin][:nth]",
    "sort_bin_shuffle_x2[:bins|:.seqs_per_bin][:nth]")


def seq_ordering_needs_lengths(seq_ordering):
    return seq_ordering.split(":")[0] in ("sorted", "sorted_reverse", "laplace", "sort_bin_shuffle",
                                          "sort_bin_shuffle_x2")


def _parse_bins_and_nth(args, num_seqs, seq_ordering):
    """``[bins|.seqs_per_bin][, nth]`` -> (bins, nth). ".N" means about N seqs per bin (at least 2 bins)."""
    try:
        if not args or args[0] == "":
            bins = 2
        elif args[0].startswith("."):
            bins = max(num_seqs // int(args[0][1:]), 2)
        else:
            bins = int(args[0])
        nth = int(args[1]) if len(args) > 1 else 1
    except ValueError:
        raise ValueError("invalid seq_ordering %r (expected e.g. 'laplace:100' or 'laplace:.100')"
                         % seq_ordering) from None
    if bins < 1 or nth < 1:
        raise ValueError("invalid seq_ordering %r: bins and nth must be positive" % seq_ordering)
    return bins, nth


def _split_bins(seq_index, bins):
    """Split into ``bins`` contiguous parts of (almost) equal size; the last gets the remainder."""
    n = len(seq_index)
    return [list(seq_index[i * n // bins:(i + 1) * n // bins]) for i in range(bins)]


def get_seq_order(seq_ordering, num_seqs, get_seq_len=None, get_seed=None):
    """
    :param str seq_ordering: see :data:`KNOWN_SEQ_ORDERINGS`
    :param int num_seqs:
    :param get_seq_len: corpus seq idx -> length (needed for the length-based orderings)
    :param get_seed: num_epochs_fixed -> int seed (needed for the random orderings)
    :return: list of corpus seq indices
    """
    name, *args = seq_ordering.split(":")
    if seq_ordering_needs_lengths(seq_ordering) and get_seq_len is None:
        raise ValueError("seq_ordering %r needs sequence lengths, which this dataset cannot provide" % seq_ordering)
    if name == "default" and not args:
        return list(range(num_seqs))
    if name == "reverse" and not args:
        return list(range(num_seqs - 1, -1, -1))
    if name in ("sorted", "sorted_reverse") and not args:
        sign = -1 if name == "sorted_reverse" else 1
        lens = numpy.array([sign * get_seq_len(i) for i in range(num_seqs)], dtype=numpy.int64)
        return numpy.argsort(lens, kind="stable").tolist()
    if name == "random":
        nth = int(args[0]) if args and args[0] else 1
        return numpy.random.RandomState(get_seed(nth)).permutation(num_seqs).tolist()
    if name == "laplace":
        # Random bins, each sorted by length, alternating ascending/descending: similar lengths within a
        # batch, while the overall order stays random.
        bins, nth = _parse_bins_and_nth(args, num_seqs, seq_ordering)
        perm = numpy.random.RandomState(get_seed(nth)).permutation(num_seqs)
        out = []
        for i, part in enumerate(_split_bins(perm.tolist(), bins)):
            part.sort(key=get_seq_len, reverse=(i % 2 == 1))
            out += part
        return out
    if name in ("sort_bin_shuffle", "sort_bin_shuffle_x2"):
        # Shuffle, sort by length, cut into bins, shuffle the bin order (x2: also shuffle within bins).
        bins, nth = _parse_bins_and_nth(args, num_seqs, seq_ordering)
        rnd = numpy.random.RandomState(get_seed(nth))
        seq_index = rnd.permutation(num_seqs).tolist()
        seq_index.sort(key=get_seq_len)  # stable: ties stay in random order
        parts = _split_bins(seq_index, bins)
        bin_ids = list(range(bins))
        rnd.shuffle(bin_ids)
        out = []
        for i in bin_ids:
            part = parts[i]
            if name == "sort_bin_shuffle_x2":
                rnd.shuffle(part)
            out += part
        return out
    raise ValueError("unknown seq_ordering %r; known: %s" % (seq_ordering, ", ".join(KNOWN_SEQ_ORDERINGS)))


def apply_partition_epoch(seq_index, partition_epoch, epoch):
    """
    The part of ``seq_index`` for sub-epoch ``epoch``: one pass over the data is split into ``partition_epoch``
    consecutive parts; the first ``num_seqs % partition_epoch`` parts get one seq more.
    """
    if partition_epoch <= 1:
        return list(seq_index)
    num_seqs = len(seq_index)
    current = ((epoch or 1) - 1) % partition_epoch
    base, extra = divmod(num_seqs, partition_epoch)
    start = current * base + min(current, extra)
    end = start + base + (1 if current < extra else 0)
    return list(seq_index[start:end])
