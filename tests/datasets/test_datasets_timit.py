"""TimitDataset / NltkTimitDataset: the label sets and maps, a tiny synthetic TIMIT copy, clear errors without it."""

import os

import numpy
import pytest

from corpora import synth_audio
from returnn_lite.datasets import DatasetError, init_dataset
from returnn_lite.datasets.timit import TimitDataset


def test_label_sets_have_silence_first():
    labels61 = TimitDataset.get_labels(61)
    assert len(labels61) == 61 and labels61[0] == "pau" and labels61[1:] == sorted(labels61[1:])
    assert "q" in labels61 and "h#" in labels61
    labels39 = TimitDataset.get_labels(39)
    assert len(labels39) == 39 and labels39[0] == "sil" and "q" not in labels39
    assert len(TimitDataset.get_labels(48)) == 48


def test_label_map_61_to_39():
    labels61, labels39 = TimitDataset.get_labels(61), TimitDataset.get_labels(39)
    label_map = TimitDataset.get_label_map()  # 61 -> 39
    assert sorted(label_map) == list(range(61))

    def mapped(phone):
        target = label_map[labels61.index(phone)]
        return None if target is None else labels39[target]

    assert mapped("pau") == mapped("h#") == mapped("bcl") == "sil"
    assert mapped("ao") == mapped("aa") == "aa" and mapped("zh") == "sh" and mapped("ux") == "uw"
    assert mapped("q") is None
    # 48 -> 39: 'cl' and 'vcl' are both silence, 'ix' folds into 'ih'
    labels48 = TimitDataset.get_labels(48)
    map48 = TimitDataset.get_label_map(48, 39)
    assert labels39[map48[labels48.index("vcl")]] == "sil" and labels39[map48[labels48.index("ix")]] == "ih"


def _write_utterance(folder, tag, phones, seed):
    import soundfile

    path = os.path.join(folder, tag)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    audio = synth_audio(seed, 0.1 * len(phones))
    soundfile.write(path + ".wav", audio, 16000, subtype="PCM_16")
    step = len(audio) // len(phones)
    with open(path + ".phn", "w") as f:
        for i, phone in enumerate(phones):
            f.write("%i %i %s\n" % (i * step, (i + 1) * step, phone))


@pytest.fixture(scope="module")
def timit_dir(tmp_path_factory):
    pytest.importorskip("soundfile")
    pytest.importorskip("librosa")
    d = str(tmp_path_factory.mktemp("timit"))
    train = {"dr1/fcjf0/sa1": ["h#", "sh", "ix", "q", "h#"], "dr1/fcjf0/sa2": ["h#", "ao", "zh", "pau"]}
    for i, (tag, phones) in enumerate(sorted(train.items())):
        _write_utterance(os.path.join(d, "train"), tag, phones, seed=i)
    with open(os.path.join(d, "train", "filelist.phn"), "w") as f:
        f.write("".join(tag + ".phn\n" for tag in sorted(train)))
    os.makedirs(os.path.join(d, "test"))
    return d


def test_timit_from_disk_61_and_39_phones(timit_dir):
    ds = init_dataset({"class": "TimitDataset", "timit_dir": timit_dir, "with_delta": True,
                       "random_permute_audio": False})
    assert ds.num_outputs == {"data": [80, 2], "classes": [61, 1]} and ds.get_data_dim("data") == 80
    ds.init_seq_order(epoch=1)
    assert ds.num_seqs == 2
    ds.load_seqs(0, 2)
    labels = TimitDataset.get_labels(61)
    assert ds.get_seq_tag(0) == "dr1/fcjf0/sa1"
    assert [labels[i] for i in ds.get_data(0, "classes")] == ["h#", "sh", "ix", "q", "h#"]
    features = ds.get_data(0, "data")
    assert features.dtype == numpy.float32 and features.shape[1] == 80 and 45 <= features.shape[0] <= 55
    ds39 = init_dataset({"class": "TimitDataset", "timit_dir": timit_dir, "num_phones": 39,
                         "random_permute_audio": False})
    ds39.init_seq_order(epoch=1)
    ds39.load_seqs(0, 2)
    labels39 = TimitDataset.get_labels(39)
    assert [labels39[i] for i in ds39.get_data(0, "classes")] == ["sil", "sh", "ih", "sil"]  # q dropped
    assert [labels39[i] for i in ds39.get_data(1, "classes")] == ["sil", "aa", "sh", "sil"]


def test_timit_without_its_files_fails_naming_the_path(timit_dir, tmp_path):
    with pytest.raises(DatasetError, match=r"TimitDataset: the TIMIT folder \(option timit_dir\) '/no/timit'"):
        init_dataset({"class": "TimitDataset", "timit_dir": "/no/timit"})
    with pytest.raises(DatasetError, match=r"seq list '.*test/filelist.core.phn' does not exist"):
        init_dataset({"class": "TimitDataset", "timit_dir": timit_dir, "train": False})
    with pytest.raises(DatasetError, match=r"NLTK TIMIT sample is not at '%s/corpora/timit'" % tmp_path):
        init_dataset({"class": "NltkTimitDataset", "nltk_download_dir": str(tmp_path)})


def test_nltk_timit_splits_90_10(tmp_path):
    pytest.importorskip("soundfile")
    pytest.importorskip("librosa")
    corpus = tmp_path / "corpora" / "timit"
    for i in range(10):
        _write_utterance(str(corpus), "dr1-fvmh0/s%i" % i, ["h#", "iy", "h#"], seed=i)
    (corpus / "timitdic.txt").write_text("; dictionary\n")
    opts = {"class": "NltkTimitDataset", "nltk_download_dir": str(tmp_path), "random_permute_audio": False}
    train, dev = init_dataset(dict(opts, train=True)), init_dataset(dict(opts, train=False))
    train.init_seq_order(epoch=1)
    dev.init_seq_order(epoch=1)
    assert train.num_seqs == 9 and dev.num_seqs == 1 and dev.get_seq_tag(0) == "dr1-fvmh0/s9"
    dev.load_seqs(0, 1)
    assert [TimitDataset.get_labels(61)[i] for i in dev.get_data(0, "classes")] == ["h#", "iy", "h#"]
