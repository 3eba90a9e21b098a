"""The original's named text post processors (orth_post_process / targets_post_process) and their use."""

import pytest

from corpora import write_chars_vocab, write_ogg_zip
from returnn_lite.datasets import DatasetError, init_dataset
from returnn_lite.datasets.text_cleaners import get_post_processor_function


def test_named_post_processors():
    pp = get_post_processor_function
    assert pp("lowercase")("Hello [NOISE] <Unk>") == "hello [noise] <unk>"
    assert pp("lowercase_keep_special")("Hello [NOISE] <Unk> World") == "hello [NOISE] <Unk> world"
    assert pp("collapse_whitespace")("  a \t b\n c  ") == "a b c"
    assert pp("basic_cleaners")(" Mr.  Smith ") == "mr. smith"
    assert pp("expand_abbreviations")("Dr. Who and mr. X, st. Paul") == "doctor Who and mister X, saint Paul"
    assert pp("get_remove_chars(',/')")("a,b / c") == "a b c"
    assert pp("get_replace('a', 'o')")("banana") == "bonono"
    assert pp(["lowercase", "get_remove_chars('.')"])("A.B  C") == "a b c"
    assert pp(None) is None and pp(str.upper)("x") == "X"
    with pytest.raises(DatasetError, match="unknown post processor 'shout'.*lowercase"):
        pp("shout", "targets_post_process")


def test_cleaners_needing_missing_packages_name_them():
    try:
        import unidecode  # noqa: F401
    except ImportError:
        with pytest.raises(DatasetError, match="'unidecode'"):
            get_post_processor_function("english_cleaners")("Hello 12")
    else:
        pytest.skip("unidecode installed")


def test_lm_dataset_orth_post_process_by_name(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The  Cat, sat\n")
    syms = tmp_path / "syms.txt"
    syms.write_text("".join(s + "\n" for s in ["[END]", " "] + list("abcdefghijklmnopqrstuvwxyz")))
    ds = init_dataset({"class": "LmDataset", "corpus_file": str(corpus), "orth_symbols_file": str(syms),
                       "orth_post_process": ["lowercase", "get_remove_chars(',')"]})
    ds.init_seq_order(1)
    ds.load_seqs(0, 1)
    labels = ds.labels["data"]
    assert "".join(labels[i] for i in ds.get_data(0, "data")) == "the cat sat[END]"


def test_oggzip_targets_post_process_by_name(tmp_path):
    path, entries = write_ogg_zip(str(tmp_path), "txt", 2, text_only=True,
                                  sentences=["Hello   World", "A  B"])
    chars = write_chars_vocab(str(tmp_path / "chars.txt"))
    ds = init_dataset({"class": "OggZipDataset", "path": path, "audio": None,
                       "targets": {"class": "CharacterTargets", "vocab_file": chars},
                       "targets_post_process": "basic_cleaners"})
    ds.init_seq_order(1)
    ds.load_seqs(0, 2)
    labels = ds.labels["classes"]
    texts = sorted("".join(labels[i] for i in ds.get_data(s, "classes")) for s in range(2))
    assert texts == ["a b", "hello world"]
