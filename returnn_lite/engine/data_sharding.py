"""How a rank of a multi-process training reads its part of a dataset (both backends; no framework import)."""

from __future__ import annotations

__all__ = ["init_seq_order_for_rank", "SHARDING_MODES"]

SHARDING_MODES = ("shard", "random_seed_offset")


def init_seq_order_for_rank(dataset, epoch, rank, size, mode, error_cls):
    """
    Start ``epoch`` of ``dataset`` with rank ``rank``'s part of it:

    * ``"shard"``: every ``size``-th seq of the epoch's order (the same order on every rank), from seq ``rank``: the
      ranks see disjoint parts, together the whole epoch;
    * ``"random_seed_offset"``: the whole dataset in a rank-specific random order.
    """
    if mode == "random_seed_offset":
        base = getattr(dataset, "_dist_base_seed_offset", None)
        if base is None:
            base = dataset._dist_base_seed_offset = getattr(dataset, "random_seed_offset", 0) or 0
        dataset.random_seed_offset = base + rank * 1000003
        dataset.init_seq_order(epoch=epoch)
        return
    if mode != "shard":
        raise error_cls("dataset distribution %r: use one of %s" % (mode, ", ".join(SHARDING_MODES)))
    dataset.init_seq_order(epoch=epoch)
    try:
        order = list(dataset.get_current_seq_order())
    except NotImplementedError:
        raise error_cls("dataset distribution 'shard': dataset %r cannot tell its seq order; use "
                        "'random_seed_offset'" % (dataset.name,)) from None
    dataset.init_seq_order(epoch=epoch, seq_order=order[rank::size])
