"""MetaDataset (seq matching by tag, order control) and the init_dataset factory."""

import numpy
import pytest

from returnn_lite.config import Config, global_config_ctx
from returnn_lite.datasets import (DatasetError, HDFDataset, MetaDataset, SimpleHDFWriter, Task12AXDataset,
                                   batch_to_arrays, generate_batches, init_dataset)

TAGS = ["utt-a", "utt-b", "utt-c", "utt-d"]
LENS = [3, 6, 2, 5]


def _features_opts():
    return {"class": "StaticDataset", "seq_tags": TAGS,
            "data": [{"data": numpy.full((n, 2), i, "float32")} for i, n in enumerate(LENS)]}


def _alignment_opts(tags=TAGS, seq_ordering="default"):
    return {"class": "StaticDataset", "seq_tags": list(tags), "seq_ordering": seq_ordering,
            "data": [{"classes": numpy.full((LENS[TAGS.index(t)],), TAGS.index(t), "int32")} for t in tags]}


def test_meta_matches_by_tag():
    # the alignment dataset stores its seqs in another order: they are matched by tag
    meta = MetaDataset(datasets={"feat": _features_opts(), "align": _alignment_opts(tags=TAGS[::-1])},
                       data_map={"data": ("feat", "data"), "classes": ("align", "classes")},
                       seq_ordering="sorted")
    assert meta.get_data_keys() == ["data", "classes"] and meta.num_outputs["data"] == [2, 2]
    assert meta.is_data_sparse("classes") and meta.get_data_dtype("data") == "float32"
    meta.init_seq_order(1)
    assert [meta.get_seq_tag(i) for i in range(4)] == ["utt-c", "utt-a", "utt-d", "utt-b"]
    meta.load_seqs(0, 4)
    for i in range(4):
        idx = TAGS.index(meta.get_seq_tag(i))
        assert (meta.get_data(i, "data") == idx).all() and (meta.get_data(i, "classes") == idx).all()
        assert meta.get_seq_length(i) == {"data": LENS[idx], "classes": LENS[idx]}
    assert meta.get_current_seq_order() == [2, 0, 3, 1]
    arrays = batch_to_arrays(meta, next(generate_batches(meta, batch_size=100)))
    assert arrays.data["classes"].shape == (4, 6) and arrays.seq_tags[0] == "utt-c"


def test_meta_seq_order_control_dataset():
    meta = MetaDataset(datasets={"feat": _features_opts(), "align": _alignment_opts(seq_ordering="reverse")},
                       data_map={"data": ("feat", "data"), "classes": ("align", "classes")},
                       seq_order_control_dataset="align")
    meta.init_seq_order(1)
    assert [meta.get_seq_tag(i) for i in range(4)] == TAGS[::-1]
    assert (meta.get_data(0, "data") == 3).all()


def test_meta_errors():
    with pytest.raises(DatasetError, match="no data key 'classes'"):
        MetaDataset(datasets={"feat": _features_opts()}, data_map={"classes": ("feat", "classes")})
    with pytest.raises(DatasetError, match="must be \\(dataset name, data key\\)"):
        MetaDataset(datasets={"feat": _features_opts()}, data_map={"data": ("nope", "data")})
    meta = MetaDataset(datasets={"feat": _features_opts(), "align": _alignment_opts(tags=TAGS[:2])},
                       data_map={"data": ("feat", "data"), "classes": ("align", "classes")})
    with pytest.raises(DatasetError, match="not in this dataset"):
        meta.init_seq_order(1)


def test_meta_with_hdf(tmp_path):
    path = str(tmp_path / "align.hdf")
    writer = SimpleHDFWriter(path, dim=None, ndim=1)
    writer.insert_batch(numpy.array([[1, 1, 1, 0, 0, 0], [2, 2, 2, 2, 2, 2]]), [3, 6], TAGS[:2])
    writer.close()
    meta = init_dataset({"class": "MetaDataset", "datasets": {"feat": _features_opts(),
                                                              "align": {"class": "HDFDataset", "files": [path]}},
                         "data_map": {"data": ("feat", "data"), "classes": ("align", "data")},
                         "seq_order_control_dataset": "align"})
    meta.init_seq_order(1)
    assert meta.num_seqs == 2 and meta.get_data(1, "classes").tolist() == [2] * 6
    assert meta.num_outputs["classes"] == [3, 1]  # sparse dim inferred by the writer


def test_init_dataset_forms(tmp_path):
    ds = init_dataset({"class": "Task12AXDataset", "num_seqs": 3})
    assert isinstance(ds, Task12AXDataset)
    assert isinstance(init_dataset("Task12AXDataset"), Task12AXDataset)
    assert init_dataset(ds) is ds
    literal = init_dataset("{'class': 'DummyDataset', 'input_dim': 2, 'output_dim': 3, 'num_seqs': 4}")
    assert literal.num_outputs == {"data": [2, 2], "classes": [3, 1]}
    dummy = init_dataset(lambda: {"class": "DummyDataset", "input_dim": 2, "output_dim": 3, "num_seqs": 4},
                         extra_kwargs={"name": "dev"}, default_kwargs={"seq_len": 5})
    dummy.init_seq_order(1)
    assert dummy.name == "dev" and dummy.num_seqs == 4 and dummy.get_seq_length(0)["data"] == 5
    config = Config({"train": {"class": "Task12AXDataset", "num_seqs": 7}})
    config.typed_dict["get_dev"] = lambda: {"class": "Task12AXDataset", "num_seqs": 2}
    with global_config_ctx(config):
        train = init_dataset("config:train")
        dev = init_dataset("config:get_dev()")
    train.init_seq_order(1)
    dev.init_seq_order(1)
    assert train.num_seqs == 7 and dev.num_seqs == 2
    path = str(tmp_path / "x.hdf")
    writer = SimpleHDFWriter(path, dim=2)
    writer.insert_batch(numpy.zeros((1, 3, 2), "float32"), [3], ["t"])
    writer.close()
    assert isinstance(init_dataset(path), HDFDataset)


def test_init_dataset_errors():
    with pytest.raises(DatasetError, match="unknown dataset class 'Task12AX'.*Did you mean 'Task12AXDataset'.*"
                                           "Known dataset classes:.*HDFDataset"):
        init_dataset({"class": "Task12AX"})
    with pytest.raises(DatasetError, match="unknown dataset class 'NoSuch'.*StaticDataset"):
        init_dataset("NoSuch")
    with pytest.raises(DatasetError, match="unknown option.*'bogus'"):
        init_dataset({"class": "Task12AXDataset", "bogus": 1})
    with pytest.raises(DatasetError, match="need a 'class'"):
        init_dataset({"num_seqs": 3})
