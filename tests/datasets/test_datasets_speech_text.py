"""OggZipDataset, LibriSpeechCorpus, LmDataset, TranslationDataset on small synthetic corpora."""

import gzip
import io
import os
import pickle
import zipfile

import numpy
import pytest

from corpora import SENTENCES, synth_audio, write_bpe, write_chars_vocab, write_ogg_zip
from returnn_lite.datasets import DatasetError, init_dataset

pytest.importorskip("soundfile")
librosa = pytest.importorskip("librosa")


def _all_seqs(ds, epoch=1, keys=None):
    ds.init_seq_order(epoch=epoch)
    out = []
    for i in range(ds.num_seqs):
        ds.load_seqs(i, i + 1)
        out.append((ds.get_seq_tag(i), {k: ds.get_data(i, k) for k in (keys or ds.get_data_keys())}))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("oggzip")
    path, entries = write_ogg_zip(str(d), "corpus", 6)
    chars = write_chars_vocab(str(d / "chars.txt"))
    return str(d), path, entries, chars


def test_oggzip_log_mel_matches_direct_librosa(corpus):
    d, path, entries, chars = corpus
    ds = init_dataset({"class": "OggZipDataset", "path": path, "targets": {"class": "CharacterTargets",
                       "vocab_file": chars}, "audio": {"features": "log_mel_filterbank", "num_feature_filters": 40}})
    assert sorted(ds.get_data_keys()) == ["classes", "data", "orth", "raw"]
    assert ds.get_data_dim("data") == 40 and ds.get_data_dim("classes") == 28 and ds.get_data_dtype("raw") == "string"
    seqs = _all_seqs(ds)
    assert [tag for tag, _ in seqs] == [e["file"] for e in entries]
    import soundfile
    zf = zipfile.ZipFile(path)
    for (tag, data), entry in zip(seqs, entries):
        audio, sr = soundfile.read(io.BytesIO(zf.read("corpus/" + entry["file"])))
        audio = audio / numpy.max(numpy.abs(audio))
        mel = librosa.feature.melspectrogram(y=audio, sr=sr, n_mels=40, hop_length=160, n_fft=400)
        numpy.testing.assert_allclose(data["data"], numpy.log(numpy.maximum(1e-3, mel)).T, rtol=1e-5, atol=1e-5)
        assert str(data["raw"]) == entry["text"] and data["raw"].ndim == 0
        assert bytes(data["orth"]).decode("utf8") == entry["text"]
        assert "".join(ds.labels["classes"][i] for i in data["classes"]) == entry["text"]


@pytest.mark.parametrize("features,dim", [("mfcc", 13), ("db_mel_filterbank", 20), ("log_log_mel_filterbank", 20),
                                          ("linear_spectrogram", 256)])
def test_oggzip_feature_types_deltas_and_per_seq_norm(corpus, features, dim):
    d, path, _, _ = corpus
    audio = {"features": features, "num_feature_filters": dim, "with_delta": 1, "norm_mean": "per_seq",
             "norm_std_dev": "per_seq", "preemphasis": 0.97}
    ds = init_dataset({"class": "OggZipDataset", "path": path, "targets": None, "audio": audio})
    assert ds.get_data_dim("data") == 2 * dim and "classes" not in ds.get_data_keys()
    (_, data), = _all_seqs(ds, keys=["data"])[:1]
    x = data["data"]
    assert x.dtype == numpy.float32 and x.shape[1] == 2 * dim and numpy.all(numpy.isfinite(x))
    numpy.testing.assert_allclose(x.mean(axis=0), 0, atol=1e-4)


def test_oggzip_norm_files_and_bad_shape(corpus, tmp_path):
    d, path, _, _ = corpus
    numpy.savetxt(str(tmp_path / "mean.txt"), numpy.full(13, 2.0))
    opts = {"class": "OggZipDataset", "path": path, "targets": None,
            "audio": {"features": "mfcc", "num_feature_filters": 13, "norm_mean": str(tmp_path / "mean.txt"),
                      "norm_std_dev": 4.0}}
    ref = dict(opts, audio={"features": "mfcc", "num_feature_filters": 13})
    (_, a), = _all_seqs(init_dataset(opts))[:1]
    (_, b), = _all_seqs(init_dataset(ref))[:1]
    numpy.testing.assert_allclose(a["data"], (b["data"] - 2.0) / 4.0, rtol=1e-5, atol=1e-5)
    with pytest.raises(DatasetError, match=r"norm_mean has shape \(3,\), expected \(13,\)"):
        init_dataset(dict(opts, audio={"features": "mfcc", "num_feature_filters": 13, "norm_mean": [1, 2, 3]}))


def test_oggzip_wav_raw_multiple_zips_segments_subset(tmp_path):
    p1, e1 = write_ogg_zip(str(tmp_path), "part1", 3, fmt="WAV", seed=1)
    p2, e2 = write_ogg_zip(str(tmp_path), "part2", 3, fmt="WAV", seed=2)
    ds = init_dataset({"class": "OggZipDataset", "path": [p1, p2], "targets": None,
                       "audio": {"features": "raw", "peak_normalization": False}})
    seqs = _all_seqs(ds)
    assert len(seqs) == 6 and ds.get_data_dim("data") == 1
    import soundfile
    audio, _ = soundfile.read(io.BytesIO(zipfile.ZipFile(p2).read("part2/" + e2[0]["file"])))
    numpy.testing.assert_allclose(seqs[3][1]["data"][:, 0], audio.astype("float32"))
    segments = tmp_path / "segments.gz"
    with gzip.open(str(segments), "wt") as f:
        f.write("utt001.wav\nutt002.wav\n")
    ds = init_dataset({"class": "OggZipDataset", "path": p1, "targets": None, "audio": None,
                       "segment_file": str(segments)})
    assert [t for t, _ in _all_seqs(ds)] == ["utt001.wav", "utt002.wav"]
    ds = init_dataset({"class": "OggZipDataset", "path": [p1, p2], "targets": None, "audio": None,
                       "fixed_random_subset": 4})
    assert ds.get_total_num_seqs() == 4


def test_oggzip_folder_text_only_sorting_partition_and_filter(tmp_path):
    path, entries = write_ogg_zip(str(tmp_path), "txt", 8, text_only=True, seconds=(0.1, 2.0))
    folder = tmp_path / "folder" / "txt"
    folder.mkdir(parents=True)
    (tmp_path / "folder" / "txt.txt").write_bytes(zipfile.ZipFile(path).read("txt.txt"))
    codes, vocab = write_bpe(str(tmp_path))
    base = {"class": "OggZipDataset", "path": str(folder), "audio": None,
            "targets": {"bpe_file": codes, "vocab_file": vocab, "unknown_label": "<unk>"}}
    ds = init_dataset(dict(base, seq_ordering="sorted"))
    assert sorted(ds.get_data_keys()) == ["classes", "orth", "raw"]
    ds.init_seq_order(1)
    durations = [entries[i]["duration"] for i in ds.get_current_seq_order()]
    assert durations == sorted(durations)
    ds = init_dataset(dict(base, seq_ordering="random:3", partition_epoch=2))
    ds.init_seq_order(1)
    first = ds.get_current_seq_order()
    ds.init_seq_order(2)
    assert len(first) == 4 and sorted(first + ds.get_current_seq_order()) == list(range(8))
    lens = sorted(int(e["duration"] * 100) for e in entries)
    ds = init_dataset(dict(base, epoch_wise_filter={(1, 1): {"max_mean_len": numpy.mean(lens[:3])}}))
    ds.init_seq_order(1)
    kept = [int(entries[i]["duration"] * 100) for i in ds.get_current_seq_order()]
    assert sorted(kept) == lens[:3] and ds.get_current_seq_order() == sorted(ds.get_current_seq_order())
    ds.init_seq_order(2)
    assert ds.num_seqs == 8
    with pytest.raises(DatasetError, match="no 'file' entries"):
        init_dataset(dict(base, audio={}))._lazy_init()


def test_oggzip_option_errors(corpus):
    d, path, _, _ = corpus
    with pytest.raises(DatasetError, match="unknown features='fbank'"):
        init_dataset({"class": "OggZipDataset", "path": path, "targets": None, "audio": {"features": "fbank"}})
    with pytest.raises(DatasetError, match="random_permute: unknown option"):
        init_dataset({"class": "OggZipDataset", "path": path, "targets": None,
                      "audio": {"random_permute": {"rnd_scale": 1}}})
    with pytest.raises(DatasetError, match="zip file not found"):
        init_dataset({"class": "OggZipDataset", "path": path + ".missing.zip", "targets": None, "audio": None})


def test_librispeech_layout(tmp_path):
    import soundfile
    chapter = tmp_path / "train-clean-100" / "19" / "198"
    chapter.mkdir(parents=True)
    lines = []
    for i, text in enumerate(["HELLO WORLD", "THE CAT"]):
        soundfile.write(str(chapter / ("19-198-%04i.flac" % i)), synth_audio(i, 0.3), 16000)
        lines.append("19-198-%04i %s" % (i, text))
    (chapter / "19-198.trans.txt").write_text("\n".join(lines) + "\n")
    chars = write_chars_vocab(str(tmp_path / "chars.txt"), "@ ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    ds = init_dataset({"class": "LibriSpeechCorpus", "path": str(tmp_path), "prefix": "train",
                       "audio": {"features": "mfcc", "num_feature_filters": 13}, "targets": "chars",
                       "chars": {"vocab_file": chars}})
    seqs = _all_seqs(ds)
    assert [t for t, _ in seqs] == ["train-clean-100-19-198-0000", "train-clean-100-19-198-0001"]
    assert seqs[1][1]["data"].shape == (31, 13) and str(seqs[1][1]["raw"]) == "THE CAT"


def test_lm_dataset_word_based_unknowns_and_delayed(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\n\nthe dog  ran\n")
    syms = tmp_path / "words.syms"
    syms.write_text("[START]\n[END]\n[UNKNOWN]\nthe\ncat\nsat\ndog\n")
    opts = {"class": "LmDataset", "corpus_file": str(corpus), "orth_symbols_file": str(syms), "word_based": True,
            "add_delayed_seq_data": True}
    with pytest.raises(DatasetError, match="missing orth symbol.*'ran'"):
        _all_seqs(init_dataset(opts))
    seqs = _all_seqs(init_dataset(dict(opts, auto_replace_unknown_symbol=True)))
    assert [t for t, _ in seqs] == ["line-0", "line-1"]
    assert seqs[1][1]["data"].tolist() == [3, 6, 2, 1] and seqs[1][1]["data"].dtype == numpy.int8
    assert seqs[1][1]["delayed"].tolist() == [0, 3, 6, 2]
    seqs = _all_seqs(init_dataset(dict(opts, error_on_invalid_seq=False)))
    assert [t for t, _ in seqs] == ["line-0"]


def test_lm_dataset_char_gz_and_bliss(tmp_path):
    with gzip.open(str(tmp_path / "c.txt.gz"), "wt") as f:
        f.write("ab (x)\nba")
    (tmp_path / "chars").write_text("[END]\n \na\nb\nx\n")
    ds = init_dataset({"class": "LmDataset", "corpus_file": str(tmp_path / "c.txt.gz"),
                       "orth_symbols_file": str(tmp_path / "chars")})
    assert [d["data"].tolist() for _, d in _all_seqs(ds)] == [[2, 3, 1, 4, 0], [3, 2, 0]]
    (tmp_path / "corpus.xml").write_text('<?xml version="1.0"?>\n<corpus name="c"><recording><segment>'
                                         "<orth> a  b </orth></segment></recording></corpus>\n")
    ds = init_dataset({"class": "LmDataset", "corpus_file": str(tmp_path / "corpus.xml"),
                       "orth_symbols_file": str(tmp_path / "chars"), "seq_end_symbol": None})
    assert [d["data"].tolist() for _, d in _all_seqs(ds)] == [[2, 1, 3]]


def test_translation_source_only_and_unknowns(tmp_path):
    (tmp_path / "source.dev").write_text("a b\nc\n")
    (tmp_path / "target.dev").write_text("x\ny z\n")
    (tmp_path / "source.vocab.pkl").write_bytes(pickle.dumps({"<S>": 0, "</S>": 0, "<UNK>": 1, "a": 2, "b": 3}))
    (tmp_path / "target.vocab.pkl").write_bytes(pickle.dumps({"<S>": 0, "<UNK>": 1, "x": 2, "y": 3}))
    base = {"class": "TranslationDataset", "path": str(tmp_path), "file_postfix": "dev"}
    with pytest.raises(DatasetError, match="'c' not in the data vocab"):
        init_dataset(base)
    ds = init_dataset(dict(base, unknown_label="<UNK>", source_postfix=" </S>"))
    seqs = _all_seqs(ds)
    assert [d["data"].tolist() for _, d in seqs] == [[2, 3, 0], [1, 0]]
    assert [d["classes"].tolist() for _, d in seqs] == [[2], [3, 1]]
    assert ds.labels["classes"] == ["<S>", "<UNK>", "x", "y"] and ds.get_data_dim("classes") == 4
    ds = init_dataset(dict(base, source_only=True, unknown_label={"data": "<UNK>"}, seq_ordering="sorted_reverse"))
    assert ds.get_data_keys() == ["data"]
    assert [t for t, _ in _all_seqs(ds)] == ["line-0", "line-1"]


def test_sprint_datasets_are_refused(tmp_path):
    with pytest.raises(DatasetError, match="'ExternSprintDataset' needs RASR/Sprint"):
        init_dataset({"class": "ExternSprintDataset", "sprintTrainerExecPath": "x"})
    from returnn_lite.datasets import check_dataset_opts
    with pytest.raises(DatasetError, match=r"config option 'train' datasets\['sprint'\] class 'ExternSprintDataset'"):
        check_dataset_opts({"class": "MetaDataset", "datasets": {"sprint": {"class": "ExternSprintDataset"}}},
                           what="config option 'train'")
