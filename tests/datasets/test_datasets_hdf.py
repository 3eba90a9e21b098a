"""SimpleHDFWriter -> HDFDataset round trips, the on-disk layout, atomic writing, and error messages."""

import os

import h5py
import numpy
import pytest

from returnn_lite.datasets import DatasetError, HDFDataset, SimpleHDFWriter


def _write_dense(path, seqs, with_classes=True, num_classes=None, labels=None):
    """seqs: list of (tag, [T, 3] float array, [T] int array)"""
    writer = SimpleHDFWriter(str(path), dim=3, labels=labels,
                             extra_type={"classes": (num_classes, 1, "int32")} if num_classes else None)
    max_len = max(s[1].shape[0] for s in seqs)
    inputs = numpy.zeros((len(seqs), max_len, 3), "float32")
    classes = numpy.zeros((len(seqs), max_len), "int32")
    for i, (_, x, y) in enumerate(seqs):
        inputs[i, :len(x)] = x
        classes[i, :len(y)] = y
    writer.insert_batch(inputs, [len(s[1]) for s in seqs], [s[0] for s in seqs],
                        extra={"classes": classes} if with_classes else None)
    writer.close()


def _random_seqs(prefix, lens, seed=0):
    rnd = numpy.random.RandomState(seed)
    return [("%s-%i" % (prefix, i), rnd.randn(n, 3).astype("float32"), rnd.randint(0, 5, size=n).astype("int32"))
            for i, n in enumerate(lens)]


def test_round_trip_dense_with_sparse_targets(tmp_path):
    path = tmp_path / "out.hdf"
    seqs = _random_seqs("s", [4, 2, 6])
    _write_dense(path, seqs, labels=["a", "b", "c"])
    ds = HDFDataset(files=[str(path)])
    ds.init_seq_order(1)
    assert ds.num_seqs == 3 and ds.get_data_keys() == ["data", "classes"]
    assert ds.num_outputs["data"] == [3, 2] and ds.num_outputs["classes"][1] == 1
    assert ds.num_outputs["classes"][0] >= 1 + max(int(s[2].max()) for s in seqs)
    assert ds.is_data_sparse("classes") and not ds.is_data_sparse("data")
    assert ds.get_data_dtype("data") == "float32" and ds.get_data_shape("data") == [3]
    assert ds.labels["data"] == ["a", "b", "c"]
    for i, (tag, x, y) in enumerate(seqs):
        assert ds.get_seq_tag(i) == tag
        assert ds.get_seq_length(i) == {"data": len(x), "classes": len(y)}
        assert numpy.array_equal(ds.get_data(i, "data"), x)
        assert numpy.array_equal(ds.get_targets("classes", i), y)
    assert ds.get_all_tags() == ["s-0", "s-1", "s-2"] and ds.get_num_timesteps() == 12


def test_layout_on_disk(tmp_path):
    path = tmp_path / "out.hdf"
    _write_dense(path, _random_seqs("s", [4, 2]), num_classes=5)
    with h5py.File(path, "r") as f:
        assert f.attrs["numSeqs"] == 2 and f.attrs["numTimesteps"] == 6 and f.attrs["inputPattSize"] == 3
        assert f["inputs"].shape == (6, 3)
        assert f["seqLengths"][...].tolist() == [[4, 4], [2, 2]]
        assert [t.decode() if isinstance(t, bytes) else t for t in f["seqTags"][...]] == ["s-0", "s-1"]
        assert f["targets/data/classes"].shape == (6,)
        assert list(f["targets/size"].attrs["classes"]) == [5, 1]


def test_sparse_inputs_and_multiple_extras(tmp_path):
    path = tmp_path / "sparse.hdf"
    writer = SimpleHDFWriter(str(path), dim=7, ndim=1)
    inputs = numpy.array([[1, 2, 3], [4, 5, 0]], "int32")
    writer.insert_batch(inputs, [3, 2], ["x", "y"],
                        extra={"scores": numpy.array([[0.5, 1.5, 2.5], [1.0, 2.0, 0.0]], "float32"),
                               "len": numpy.array([3, 2], "int32")})
    writer.close()
    ds = HDFDataset(files=str(path))
    ds.init_seq_order(1)
    assert ds.num_outputs["data"] == [7, 1] and ds.is_data_sparse("data")
    assert ds.get_data(1, "data").tolist() == [4, 5]
    assert ds.get_data(1, "scores").tolist() == [1.0, 2.0]
    assert ds.get_data(0, "len").tolist() == [3]  # per-seq scalar got a length-1 time axis
    assert ds.get_seq_length(0) == {"data": 3, "len": 1, "scores": 3}


def test_multiple_files_and_sorting(tmp_path):
    _write_dense(tmp_path / "a.hdf", _random_seqs("a", [5, 1]))
    _write_dense(tmp_path / "b.hdf", _random_seqs("b", [3, 7], seed=1))
    ds = HDFDataset(files=[str(tmp_path / "a.hdf"), str(tmp_path / "b.hdf")], seq_ordering="sorted")
    ds.init_seq_order(1)
    assert ds.num_seqs == 4
    assert [ds.get_seq_tag(i) for i in range(4)] == ["a-1", "b-0", "a-0", "b-1"]
    ds.init_seq_order(1, seq_list=["b-1", "a-0"])
    assert ds.get_seq_length(0)["data"] == 7


def test_atomic_write_and_abort(tmp_path):
    path = tmp_path / "atomic.hdf"
    writer = SimpleHDFWriter(str(path), dim=3)
    writer.insert_batch(numpy.zeros((1, 2, 3), "float32"), [2], ["t"])
    assert not path.exists()  # only a hidden temp file so far
    writer.close()
    assert path.exists() and [p.name for p in tmp_path.iterdir()] == ["atomic.hdf"]
    writer = SimpleHDFWriter(str(tmp_path / "never.hdf"), dim=3)
    writer.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atomic.hdf"]
    with pytest.raises(ValueError, match="expected 3 axes"):
        SimpleHDFWriter(str(tmp_path / "x.hdf"), dim=3).insert_batch(numpy.zeros((1, 2)), [2], ["t"])


def test_errors_name_the_file(tmp_path):
    missing = str(tmp_path / "missing.hdf")
    with pytest.raises(DatasetError, match="not found.*missing.hdf"):
        HDFDataset(files=[missing])
    garbage = tmp_path / "garbage.hdf"
    garbage.write_text("not hdf")
    with pytest.raises(DatasetError, match="garbage.hdf.*HDF5"):
        HDFDataset(files=[str(garbage)])
    incomplete = tmp_path / "incomplete.hdf"
    with h5py.File(incomplete, "w") as f:
        f.create_dataset("inputs", data=numpy.zeros((3, 2)))
    with pytest.raises(DatasetError, match="incomplete.hdf.*seqLengths"):
        HDFDataset(files=[str(incomplete)])
    inconsistent = tmp_path / "inconsistent.hdf"
    with h5py.File(inconsistent, "w") as f:
        f.create_dataset("inputs", data=numpy.zeros((3, 2)))
        f.create_dataset("seqLengths", data=numpy.array([[2, 2], [2, 2]]))
        f.create_dataset("seqTags", data=[b"a", b"b"])
    with pytest.raises(DatasetError, match="inconsistent.hdf.*3 frames.*4"):
        HDFDataset(files=[str(inconsistent)])
    _write_dense(tmp_path / "dim3.hdf", _random_seqs("s", [2]))
    other = tmp_path / "dim4.hdf"
    writer = SimpleHDFWriter(str(other), dim=4)
    writer.insert_batch(numpy.zeros((1, 2, 4), "float32"), [2], ["t"])
    writer.close()
    with pytest.raises(DatasetError, match="dim4.hdf.*differs"):
        HDFDataset(files=[str(tmp_path / "dim3.hdf"), str(other)])
    assert os.path.exists(other)
