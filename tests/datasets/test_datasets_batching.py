"""Batch limits, chunking, shuffling, and the conversion to padded arrays."""

import numpy
import pytest

from returnn_lite.datasets import StaticDataset, Task12AXDataset, batch_to_arrays, generate_batches, parse_chunking

LENS = [5, 3, 9, 1, 7, 3, 8, 2, 6, 4, 10, 2]


def _dataset(lens=LENS, classes_lens=None, **kwargs):
    classes_lens = classes_lens or lens
    data = [{"data": numpy.arange(n * 2, dtype="float32").reshape(n, 2) + 100 * i,
             "classes": numpy.arange(m, dtype="int32") + 100 * i}
            for i, (n, m) in enumerate(zip(lens, classes_lens))]
    ds = StaticDataset(data, output_dim={"classes": 200}, **kwargs)
    ds.init_seq_order(1)
    return ds


def test_batch_size_and_max_seqs():
    ds = _dataset()
    batches = list(generate_batches(ds, batch_size=20, max_seqs=3))
    seen = []
    for batch in batches:
        assert batch.num_seqs <= 3
        assert batch.max_lengths["data"] * batch.num_seqs <= 20
        seen += [s.seq_idx for s in batch.seqs]
    assert seen == list(range(len(LENS)))
    # greedy: the next seq would have broken a limit
    for batch, nxt in zip(batches, batches[1:]):
        n = nxt.seqs[0].lengths["data"]
        assert batch.num_seqs == 3 or max(batch.max_lengths["data"], n) * (batch.num_seqs + 1) > 20


def test_single_long_seq_gets_own_batch():
    batches = list(generate_batches(_dataset(), batch_size=4))
    assert any(b.num_seqs == 1 and b.max_lengths["data"] == 10 for b in batches)
    assert sum(b.num_seqs for b in batches) == len(LENS)


def test_max_seq_length_skips():
    ds = _dataset()
    kept = [s.seq_idx for b in generate_batches(ds, batch_size=1000, max_seq_length=6) for s in b.seqs]
    assert kept == [i for i, n in enumerate(LENS) if n <= 6]
    ds2 = _dataset(classes_lens=[1] * len(LENS))
    kept = [s.seq_idx for b in generate_batches(ds2, batch_size=1000, max_seq_length=-1) for s in b.seqs]
    assert kept == list(range(len(LENS)))  # negative: only "classes" is limited
    assert len(list(generate_batches(ds2, batch_size=1000, max_seq_length={"data": 2}))) == 1


def test_parse_chunking():
    assert parse_chunking("10:5") == (10, 5) and parse_chunking("10") == (10, 10) and parse_chunking(4) == (4, 4)
    assert parse_chunking(None) == (None, None) and parse_chunking(0) == (None, None)
    assert parse_chunking(({"data": 4}, {"data": 2})) == ({"data": 4}, {"data": 2})
    with pytest.raises(ValueError):
        parse_chunking("a:b")


def test_chunking_windows():
    ds = _dataset(lens=[10, 3])
    seqs = [s for b in generate_batches(ds, batch_size=1000, chunking="4:3") for s in b.seqs]
    windows = [(s.seq_idx, s.start["data"], s.end["data"]) for s in seqs]
    assert windows == [(0, 0, 4), (0, 3, 7), (0, 6, 10), (0, 9, 10), (1, 0, 3)]
    assert all(s.start["classes"] == s.start["data"] for s in seqs)
    arrays = batch_to_arrays(ds, next(generate_batches(ds, batch_size=1000, chunking="4:3")))
    assert arrays.seq_lens["data"].tolist() == [4, 4, 4, 1, 3]
    assert (arrays.data["data"][1, :4] == ds.get_data(0, "data")[3:7]).all()
    # min_chunk_size drops a short tail chunk
    seqs = [s for b in generate_batches(ds, batch_size=1000, chunking="4:3", min_chunk_size=1) for s in b.seqs]
    assert [(s.start["data"], s.end["data"]) for s in seqs if s.seq_idx == 0] == [(0, 4), (3, 7), (6, 10)]


def test_chunking_different_lengths():
    ds = _dataset(lens=[8], classes_lens=[4])
    with pytest.raises(ValueError, match="different lengths"):
        list(generate_batches(ds, batch_size=100, chunking=4))
    per_key = ({"data": 4, "classes": 2}, None)
    chunks = [s for b in generate_batches(ds, batch_size=100, chunking=per_key) for s in b.seqs]
    assert [(s.start["data"], s.end["data"], s.start["classes"], s.end["classes"]) for s in chunks] == \
        [(0, 4, 0, 2), (4, 8, 2, 4)]
    # restricting the used keys avoids the problem
    chunks = [s for b in generate_batches(ds, batch_size=100, chunking=4, used_data_keys=["data"]) for s in b.seqs]
    assert len(chunks) == 2 and set(chunks[0].start) == {"data"}


def test_dataset_chunking_option():
    ds = _dataset(lens=[8], chunking="4:4")
    assert sum(b.num_seqs for b in generate_batches(ds, batch_size=100)) == 2
    assert sum(b.num_seqs for b in generate_batches(ds, batch_size=100, chunking=0)) == 1


def test_shuffle_batches():
    ds = _dataset()
    plain = [[s.seq_idx for s in b.seqs] for b in generate_batches(ds, batch_size=12)]
    shuffled = [[s.seq_idx for s in b.seqs] for b in generate_batches(ds, batch_size=12, shuffle_batches=True)]
    again = [[s.seq_idx for s in b.seqs] for b in generate_batches(ds, batch_size=12, shuffle_batches=True)]
    assert sorted(shuffled) == sorted(plain) and shuffled == again and shuffled != plain


def test_batch_to_arrays_padding():
    ds = _dataset()
    batch = next(generate_batches(ds, batch_size=100, max_seqs=3))
    arrays = batch_to_arrays(ds, batch)
    assert arrays.num_seqs == 3 and arrays.seq_tags == ["seq-0", "seq-1", "seq-2"]
    assert arrays.data["data"].shape == (3, 9, 2) and arrays.data["data"].dtype == numpy.float32
    assert arrays.data["classes"].shape == (3, 9) and arrays.data["classes"].dtype == numpy.int32
    assert arrays.seq_lens["data"].tolist() == [5, 3, 9]
    assert (arrays.data["data"][1, 3:] == 0).all() and (arrays.data["data"][1, :3] == ds.get_data(1, "data")).all()
    only = batch_to_arrays(ds, batch, data_keys=["classes"])
    assert set(only.data) == {"classes"}


def test_12ax_epoch_batches_fast():
    ds = Task12AXDataset(num_seqs=300)
    ds.init_seq_order(1)
    total = 0
    for batch in generate_batches(ds, batch_size=2000, max_seqs=20, chunking="50:25"):
        arrays = batch_to_arrays(ds, batch)
        assert arrays.data["data"].shape[:2] == arrays.data["classes"].shape
        assert arrays.data["data"].shape[0] * arrays.data["data"].shape[1] <= 2000
        total += arrays.num_seqs
    assert total >= 300
