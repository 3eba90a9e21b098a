"""seq_ordering variants, epoch-dependent seeds, partition_epoch, seq_list."""

import numpy
import pytest

from returnn_lite.datasets import DatasetError, StaticDataset
from returnn_lite.datasets.seq_order import apply_partition_epoch, get_seq_order

LENS = [5, 3, 9, 1, 7, 3, 8, 2, 6, 4, 10, 2]


def _dataset(**kwargs):
    data = [{"data": numpy.zeros((n, 2), "float32"), "classes": numpy.zeros((n,), "int32")} for n in LENS]
    return StaticDataset(data, output_dim={"classes": 3}, **kwargs)


def _order(epoch=1, **kwargs):
    ds = _dataset(**kwargs)
    ds.init_seq_order(epoch)
    return ds.get_current_seq_order()


def _lens(order):
    return [LENS[i] for i in order]


def test_default_reverse_sorted():
    n = len(LENS)
    assert _order(seq_ordering="default") == list(range(n))
    assert _order(seq_ordering="reverse") == list(range(n))[::-1]
    assert _lens(_order(seq_ordering="sorted")) == sorted(LENS)
    assert _lens(_order(seq_ordering="sorted_reverse")) == sorted(LENS, reverse=True)
    # stable: equal lengths keep corpus order
    assert _order(seq_ordering="sorted")[:2] == [3, 7]


def test_random_depends_on_epoch_and_seed():
    a1, a1b, a2 = _order(1, seq_ordering="random"), _order(1, seq_ordering="random"), _order(2, seq_ordering="random")
    assert sorted(a1) == list(range(len(LENS)))
    assert a1 == a1b and a1 != a2
    assert _order(1, seq_ordering="random", random_seed_offset=5) != a1
    assert _order(1, seq_ordering="random", fixed_random_seed=3) == _order(9, seq_ordering="random",
                                                                            fixed_random_seed=3)
    # "random:2": same order for 2 consecutive epochs
    assert _order(1, seq_ordering="random:2") == _order(2, seq_ordering="random:2")
    assert _order(2, seq_ordering="random:2") != _order(3, seq_ordering="random:2")


@pytest.mark.parametrize("ordering, bins", [("laplace:3", 3), ("laplace:.4", 3), ("laplace", 2)])
def test_laplace_bins_sorted_alternating(ordering, bins):
    order = _order(seq_ordering=ordering)
    assert sorted(order) == list(range(len(LENS)))
    n = len(order)
    for b in range(bins):
        part = _lens(order[b * n // bins:(b + 1) * n // bins])
        assert part == sorted(part, reverse=(b % 2 == 1))


def test_sort_bin_shuffle():
    for ordering in ("sort_bin_shuffle:3", "sort_bin_shuffle:.4", "sort_bin_shuffle_x2:3"):
        order = _order(seq_ordering=ordering)
        assert sorted(order) == list(range(len(LENS)))
    # each bin of sort_bin_shuffle is a contiguous, sorted length range
    order = _order(seq_ordering="sort_bin_shuffle:3")
    bins = [_lens(order[i * 4:(i + 1) * 4]) for i in range(3)]
    assert all(b == sorted(b) for b in bins)
    assert sorted(bins) == [sorted(LENS)[i * 4:(i + 1) * 4] for i in range(3)]
    assert _order(1, seq_ordering="sort_bin_shuffle:3") != _order(2, seq_ordering="sort_bin_shuffle:3")


def test_unknown_ordering():
    with pytest.raises(DatasetError, match="unknown seq_ordering 'bogus'"):
        _order(seq_ordering="bogus")
    with pytest.raises(ValueError, match="needs sequence lengths"):
        get_seq_order("sorted", 3)


def test_partition_epoch():
    n = len(LENS)
    parts = [_order(epoch, seq_ordering="random", partition_epoch=5) for epoch in range(1, 6)]
    assert [len(p) for p in parts] == [3, 3, 2, 2, 2]
    assert sorted(sum(parts, [])) == list(range(n))  # one full pass over the data
    # the next full epoch reshuffles
    parts2 = [_order(epoch, seq_ordering="random", partition_epoch=5) for epoch in range(6, 11)]
    assert sorted(sum(parts2, [])) == list(range(n)) and parts2 != parts
    ds = _dataset(partition_epoch=4)
    ds.init_seq_order(2)
    assert ds.num_seqs == 3 and ds.get_current_seq_order() == [3, 4, 5]
    assert ds.get_seq_tag(0) == "seq-3"
    assert apply_partition_epoch(list(range(7)), 3, 3) == [5, 6]


def test_seq_list_and_api():
    ds = _dataset()
    ds.init_seq_order(1, seq_list=["seq-4", "seq-0"])
    assert ds.num_seqs == 2 and ds.get_seq_length(0)["data"] == 7 and ds.get_seq_tag(1) == "seq-0"
    assert ds.is_less_than_num_seqs(1) and not ds.is_less_than_num_seqs(2)
    assert ds.get_complete_frac(0) == 0.5
    with pytest.raises(DatasetError, match="not in this dataset"):
        ds.init_seq_order(1, seq_list=["nope"])
    with pytest.raises(DatasetError, match="init_seq_order"):
        _ = _dataset().num_seqs
