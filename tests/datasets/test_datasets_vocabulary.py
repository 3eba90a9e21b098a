"""Vocabularies: file formats, unknowns, postfix, BPE segmentation, SentencePieces."""

import pickle

import pytest

from corpora import write_bpe
from returnn_lite.datasets import (BytePairEncoding, CharacterTargets, DatasetError, SentencePieces,
                                   Utf8ByteTargets, Vocabulary, create_vocab)


def test_vocabulary_dict_literal_shared_ids_and_unknown(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text(repr({"<s>": 0, "</s>": 0, "<unk>": 1, "hello": 2, "world": 3}))
    vocab = Vocabulary(str(path), unknown_label="<unk>", seq_postfix=[0], eos_label="</s>")
    assert vocab.num_labels == 4
    assert vocab.labels == ["<s>", "<unk>", "hello", "world"]  # "<s>" > "</s>": it names id 0
    assert vocab.get_seq("hello big world") == [2, 1, 3, 0]
    assert vocab.get_seq_labels([2, 3]) == "hello world"
    assert vocab.id_to_label(3) == "world" and vocab.eos_label_id == 0 and vocab.unknown_label_id == 1
    with pytest.raises(DatasetError, match="unknown_label='<oov>' is not in the vocab"):
        Vocabulary(str(path), unknown_label="<oov>")


def test_vocabulary_pickle_and_no_unknown(tmp_path):
    path = tmp_path / "vocab.pkl"
    path.write_bytes(pickle.dumps({"a": 0, "b": 1}))
    vocab = Vocabulary(str(path), unknown_label=None)
    assert vocab.get_seq("b a") == [1, 0]
    with pytest.raises(DatasetError, match="'c'"):
        vocab.get_seq("a c")


def test_vocabulary_gaps_are_an_error(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text(repr({"a": 0, "b": 2}))
    with pytest.raises(DatasetError, match="without gaps"):
        Vocabulary(str(path))


def test_character_targets_line_vocab_keeps_space(tmp_path):
    path = tmp_path / "chars.txt"
    path.write_text("@\n \na\nb\n")
    vocab = create_vocab(**{"class": "CharacterTargets", "vocab_file": str(path)})
    assert isinstance(vocab, CharacterTargets) and vocab.labels == ["@", " ", "a", "b"]
    assert vocab.get_seq("ab xa") == [2, 3, 1, 0, 2]
    assert vocab.get_seq_labels([2, 1, 3]) == "a b"


def test_utf8_bytes():
    vocab = Utf8ByteTargets(seq_postfix=[0])
    assert vocab.get_seq("aé") == [97, 0xc3, 0xa9, 0]
    assert vocab.get_seq_labels([97, 0xc3, 0xa9]) == "aé"


def test_bpe_segmentation(tmp_path):
    codes, vocab_file = write_bpe(str(tmp_path))
    vocab = create_vocab(bpe_file=codes, vocab_file=vocab_file, unknown_label="<unk>", seq_postfix=[0])
    assert isinstance(vocab, BytePairEncoding)
    ids = vocab.get_seq("the cat sat on the mat")
    assert [vocab.labels[i] for i in ids] == ["the", "cat", "sat", "on", "the", "m@@", "at", "<s>"]
    assert vocab.get_seq_labels(ids[:-1]) == "the cat sat on the mat"
    # "dog" merges to "dog", OOV units are split back along the merges; single chars stay
    assert [vocab.labels[i] for i in vocab.get_seq("dog x")] == ["dog", "x", "<s>"]


def test_bpe_missing_codes_file(tmp_path):
    _, vocab_file = write_bpe(str(tmp_path))
    with pytest.raises(DatasetError, match="bpe_file not found"):
        BytePairEncoding(vocab_file=vocab_file, bpe_file=str(tmp_path / "nope.codes"))


def test_unknown_vocab_class():
    with pytest.raises(DatasetError, match="unknown vocabulary class 'Bpe'"):
        create_vocab(**{"class": "Bpe"})


def test_sentencepieces(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["the cat sat on the mat", "a dog ran to the park", "hello world"] * 20) + "\n")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=20,
                                   model_type="unigram", minloglevel=2)
    vocab = create_vocab(**{"class": "SentencePieces", "model_file": str(tmp_path / "spm.model")})
    assert isinstance(vocab, SentencePieces)
    assert vocab.num_labels == 20 and len(vocab.labels) == 20
    ids = vocab.get_seq("the cat sat")
    assert ids == list(vocab.sp.encode("the cat sat", out_type=int))
    assert vocab.get_seq_labels(ids) == "the cat sat"
    assert vocab.unknown_label_id == vocab.sp.unk_id()


def test_missing_extras_name_the_extra(monkeypatch, tmp_path):
    for name in ("soundfile", "librosa", "sentencepiece"):
        monkeypatch.setitem(__import__("sys").modules, name, None)
    from returnn_lite.datasets import init_dataset
    with pytest.raises(DatasetError, match=r"pip install 'returnn_lite\[sentencepiece\]'"):
        create_vocab(**{"class": "SentencePieces", "model_file": "x.model"})
    (tmp_path / "c.txt").write_text(repr([{"text": "a b", "duration": 1.0, "file": "a.ogg"}]))
    (tmp_path / "c").mkdir()
    with pytest.raises(DatasetError, match=r"pip install 'returnn_lite\[audio\]'"):
        init_dataset({"class": "OggZipDataset", "path": str(tmp_path / "c"), "audio": {}, "targets": None})
    ds = init_dataset({"class": "OggZipDataset", "path": str(tmp_path / "c"), "audio": None, "targets": None})
    ds.init_seq_order(1)
    assert str(ds.get_data(0, "raw")) == "a b"  # text only: no audio packages needed


def test_character_targets_line_vocab_parsed_as_the_original(tmp_path):
    # as the original's line-based parsing (str.splitlines; a dict literal only where the file starts with "{"):
    # Windows line ends are line breaks, a first label " " before a "{" label keeps the file line-based
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"@\r\n \r\na\r\nb\r\n")
    vocab = CharacterTargets(str(crlf))
    assert vocab.labels == ["@", " ", "a", "b"] and vocab.get_seq("a b") == [2, 1, 3]
    braces = tmp_path / "braces.txt"
    braces.write_text(" \n{\n}\na\n")
    vocab = CharacterTargets(str(braces), unknown_label=None)
    assert vocab.labels == [" ", "{", "}", "a"] and vocab.get_seq("a {}") == [3, 0, 1, 2]


def test_line_vocab_label_on_two_lines_maps_to_the_last(tmp_path):
    # as the original: labels are the lines (ids 0..n-1), the label -> id map keeps the last line of a label
    path = tmp_path / "dup.txt"
    path.write_text(" \n \n@\na\n")
    vocab = CharacterTargets(str(path))
    assert vocab.labels == [" ", " ", "@", "a"] and vocab.num_labels == 4
    assert vocab.get_seq("a a") == [3, 1, 3]


def test_gzipped_line_vocab(tmp_path):
    import gzip
    path = tmp_path / "chars.txt.gz"
    with gzip.open(str(path), "wt", encoding="utf8") as f:
        f.write("@\n \na\nb\n")
    vocab = CharacterTargets(str(path))
    assert vocab.labels == ["@", " ", "a", "b"] and vocab.get_seq("b a") == [3, 1, 2]


def test_vocabulary_single_whitespace_split_keeps_space_labels(tmp_path):
    # as the original: the text is " ".join(labels), so a " " label is three spaces in a row
    path = tmp_path / "labels.txt"
    path.write_text("<unk>\n \nab\nc\n")
    vocab = Vocabulary(str(path), unknown_label="<unk>", single_whitespace_split=True)
    assert vocab.get_seq("ab   c") == [2, 1, 3]
    assert vocab.get_seq("ab xy") == [2, 0]
    assert Vocabulary(str(path), unknown_label="<unk>").get_seq("ab   c") == [2, 3]  # str.split() drops it


def test_vocabulary_special_symbols_via_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text(repr({"<s>": 0, "<unk>": 1, "a": 2}))
    special = tmp_path / "special.txt"
    special.write_text(repr({"unknown_label": "<unk>", "eos_label": "<s>", "bos_label": "<s>"}))
    vocab = Vocabulary(str(path), special_symbols_via_file=str(special), bos_label="a")
    assert vocab.unknown_label_id == 1 and vocab.eos_label_id == 0 and vocab.bos_label_id == 2  # given one wins
    assert vocab.get_seq("a b") == [2, 1]
    with pytest.raises(DatasetError, match="expected a dict with keys"):
        special.write_text(repr({"unk": "<unk>"}))
        Vocabulary(str(path), special_symbols_via_file=str(special))
