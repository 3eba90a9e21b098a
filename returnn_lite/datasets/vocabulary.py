"""
Vocabularies of the original RETURNN: label <-> id maps that turn a text into a label id sequence.

* :class:`Vocabulary`: whitespace-separated words; the vocab file is a python dict literal ``{"label": id}``,
  a pickled dict (``.pkl``), or a plain text file with one label per line (id = line number).
* :class:`CharacterTargets`: one label per character (unknown characters -> ``unknown_label``, default ``"@"``).
* :class:`Utf8ByteTargets`: the utf8 bytes of the text (256 labels).
* :class:`BytePairEncoding`: subword-nmt style BPE (merge codes file + vocab), words split into ``"xx@@"`` units.
* :class:`SentencePieces`: a SentencePiece model (needs the ``sentencepiece`` package: extra ``[sentencepiece]``).

Create one from options with :func:`create_vocab` (``{"class": "BytePairEncoding", ...}``; without ``class``,
``bpe_file`` selects BPE, else :class:`Vocabulary`).
"""

from __future__ import annotations

import ast
import gzip
import os
import pickle
import re

from .basic import DatasetError

__all__ = ["Vocabulary", "CharacterTargets", "Utf8ByteTargets", "BytePairEncoding", "SentencePieces",
           "create_vocab", "vocab_class_names"]

_BPE_SEPARATOR = "@@"


def _read_vocab_file(filename):
    """-> (label -> id dict, list of labels by id)"""
    if not os.path.isfile(filename):
        raise DatasetError("vocab file not found: %r" % filename)
    if filename.endswith(".pkl"):
        with open(filename, "rb") as f:
            mapping = pickle.load(f)
        if not isinstance(mapping, dict):
            raise DatasetError("vocab file %r: the pickle must hold a dict label -> id, got %s"
                               % (filename, type(mapping).__name__))
    else:
        opener = gzip.open if filename.endswith(".gz") else open
        with opener(filename, "rt", encoding="utf8") as f:
            text = f.read()
        if text.startswith("{"):  # as the original: a dict literal only where the file starts with "{"
            try:
                mapping = ast.literal_eval(text)
            except (ValueError, SyntaxError) as exc:
                raise DatasetError("vocab file %r: not a valid python dict literal: %s" % (filename, exc)) from None
            if not isinstance(mapping, dict):
                raise DatasetError("vocab file %r: expected a dict label -> id" % filename)
        else:  # one label per line (str.splitlines, as the original); spaces are labels too, nothing is stripped
            lines = text.splitlines()
            # as the original: label i is line i, and a label on several lines maps to its last line
            return {line: i for i, line in enumerate(lines)}, lines
    # Several labels may share one id (e.g. "<s>" and "</s>"): the lexicographically last one names the id.
    by_id = {}
    for label, idx in sorted(mapping.items()):
        if not isinstance(idx, int):
            raise DatasetError("vocab file %r: id of %r must be an int, got %r" % (filename, label, idx))
        by_id[idx] = label
    if not by_id:
        raise DatasetError("vocab file %r is empty" % filename)
    if min(by_id) != 0 or max(by_id) != len(by_id) - 1:
        missing = sorted(set(range(max(by_id) + 1)) - set(by_id))[:5]
        raise DatasetError("vocab file %r: ids must be 0..%i without gaps (missing e.g. %s)"
                           % (filename, len(by_id) - 1, missing))
    return dict(mapping), [by_id[i] for i in range(len(by_id))]


_SPECIAL_SYMBOL_KEYS = ("unknown_label", "bos_label", "eos_label", "pad_label", "control_symbols",
                        "user_defined_symbols")


def _read_special_symbols(filename, unknown_label):
    """special_symbols_via_file: a dict literal; an unknown_label given directly (not the default) wins."""
    if not os.path.isfile(filename):
        raise DatasetError("special_symbols_via_file not found: %r" % filename)
    with open(filename, encoding="utf8") as f:
        try:
            special = ast.literal_eval(f.read())
        except (ValueError, SyntaxError) as exc:
            raise DatasetError("special_symbols_via_file %r: not a python dict literal: %s" % (filename, exc)) from None
    if not isinstance(special, dict) or not set(special).issubset(_SPECIAL_SYMBOL_KEYS):
        raise DatasetError("special_symbols_via_file %r: expected a dict with keys from %s, got %r"
                           % (filename, ", ".join(_SPECIAL_SYMBOL_KEYS), special))
    if unknown_label != "UNK":  # given directly
        special.pop("unknown_label", None)
    return special


class Vocabulary:
    """
    :param str|None vocab_file: dict literal, ``.pkl`` or one-label-per-line file
    :param list[int]|None seq_postfix: ids appended by :meth:`get_seq` (e.g. ``[0]`` for an end symbol)
    :param str|int|None unknown_label: out-of-vocabulary words map to this (None: OOV is an error)
    :param str|int|None bos_label, eos_label, pad_label: ids available as ``bos_label_id`` etc.
    :param int|None num_labels: checked against the file
    :param list[str]|None labels: instead of a file
    :param str|None special_symbols_via_file: a dict literal file with (some of) unknown_label, bos_label,
        eos_label, pad_label, control_symbols, user_defined_symbols; options given directly take precedence
    :param bool single_whitespace_split: get_seq undoes ``" ".join(labels)`` (labels may contain whitespace, e.g.
        a " " label), instead of ``str.split()``
    """

    _file_cache = {}  # (filename, mtime) -> (vocab, labels)

    def __init__(self, vocab_file=None, *, special_symbols_via_file=None, unknown_label="UNK", bos_label=None,
                 eos_label=None, pad_label=None, control_symbols=None, user_defined_symbols=None, num_labels=None,
                 seq_postfix=None, labels=None, single_whitespace_split=False):
        if vocab_file is not None and not isinstance(vocab_file, str):  # e.g. a pathlib.Path
            vocab_file = os.fspath(vocab_file)
        if special_symbols_via_file:
            special = _read_special_symbols(special_symbols_via_file, unknown_label)
            unknown_label = special.get("unknown_label", unknown_label)
            bos_label = special.get("bos_label") if bos_label is None else bos_label
            eos_label = special.get("eos_label") if eos_label is None else eos_label
            pad_label = special.get("pad_label") if pad_label is None else pad_label
            control_symbols = dict(special.get("control_symbols", {}), **(control_symbols or {}))
            user_defined_symbols = dict(special.get("user_defined_symbols", {}), **(user_defined_symbols or {}))
        self.vocab_file = vocab_file
        self._vocab, self._labels = None, None
        self.num_labels = None
        self._init_labels(vocab_file, labels)
        if num_labels is not None and num_labels != self.num_labels:
            raise DatasetError("%s(%r): num_labels=%i given, but the vocab has %i labels"
                               % (type(self).__name__, vocab_file, num_labels, self.num_labels))
        # The default unknown label "UNK" is only used when the vocab has it; an explicit one must exist.
        explicit_unknown = unknown_label is not None and unknown_label != "UNK"
        self.unknown_label_id = self._label_id(unknown_label, "unknown_label", required=explicit_unknown)
        self.unknown_label = None if self.unknown_label_id is None else self.id_to_label(self.unknown_label_id)
        self.bos_label_id = self._label_id(bos_label, "bos_label")
        self.eos_label_id = self._label_id(eos_label, "eos_label")
        self.pad_label_id = self._label_id(pad_label, "pad_label")
        self.control_symbol_ids = {k: self._label_id(v, "control_symbols") for k, v in (control_symbols or {}).items()}
        self.user_defined_symbol_ids = {k: self._label_id(v, "user_defined_symbols")
                                        for k, v in (user_defined_symbols or {}).items()}
        self.seq_postfix = list(seq_postfix or [])
        # as the original: a label, else any non-space run, each followed by one space (or the end)
        self._single_space_re = re.compile("(%s|\\S+)(?: |$)" % "|".join(re.escape(v) for v in self._labels)) \
            if single_whitespace_split else None

    def _init_labels(self, vocab_file, labels):
        if labels is not None:
            self._labels = list(labels)
            self._vocab = {label: i for i, label in enumerate(self._labels)}
        elif vocab_file is not None:
            key = (os.path.abspath(vocab_file), os.path.getmtime(vocab_file) if os.path.exists(vocab_file) else 0)
            if key not in self._file_cache:
                self._file_cache[key] = _read_vocab_file(vocab_file)
            self._vocab, self._labels = self._file_cache[key]
        else:
            raise DatasetError("%s: needs vocab_file or labels" % type(self).__name__)
        self.num_labels = len(self._labels)

    def _label_id(self, label, option, required=True):
        if label is None:
            return None
        if isinstance(label, int):
            if not self.is_id_valid(label):
                raise DatasetError("%s: %s=%i is not a valid label id (num_labels %i)"
                                   % (type(self).__name__, option, label, self.num_labels))
            return label
        idx = self.label_to_id(label, default=None)
        if idx is None and required:
            raise DatasetError("%s(%r): %s=%r is not in the vocab" % (type(self).__name__, self.vocab_file, option,
                                                                      label))
        return idx

    def __repr__(self):
        return "%s(%r, num_labels=%s)" % (type(self).__name__, self.vocab_file, self.num_labels)

    def set_random_seed(self, seed):
        """No randomness here (sampling vocabularies would reseed per epoch)."""

    @property
    def labels(self):
        return self._labels

    def is_id_valid(self, idx):
        return 0 <= idx < self.num_labels

    def label_to_id(self, label, default=KeyError):
        if default is KeyError:
            try:
                return self._vocab[label]
            except KeyError:
                raise KeyError("%s: label %r not in the vocab" % (type(self).__name__, label)) from None
        return self._vocab.get(label, default)

    def to_id(self, label, default=KeyError, allow_none=False):
        if label is None and allow_none:
            return None
        if isinstance(label, int):
            if self.is_id_valid(label):
                return label
            if default is KeyError:
                raise KeyError("invalid label id %i" % label)
            return default
        return self.label_to_id(label, default=default)

    def id_to_label(self, idx, default=KeyError):
        if self.is_id_valid(idx):
            return self._labels[idx]
        if default is KeyError:
            raise KeyError("%s: id %i out of range (num_labels %i)" % (type(self).__name__, idx, self.num_labels))
        return default

    def get_seq_indices(self, labels):
        if self.unknown_label_id is not None:
            unk = self.unknown_label_id
            return [self._vocab.get(label, unk) for label in labels]
        missing = [label for label in labels if label not in self._vocab]
        if missing:
            raise DatasetError("%s(%r): label(s) %s not in the vocab and no unknown_label set"
                               % (type(self).__name__, self.vocab_file, ", ".join(map(repr, missing[:5]))))
        return [self._vocab[label] for label in labels]

    def get_seq(self, sentence):
        """Text -> list of ids (whitespace-separated words), plus ``seq_postfix``."""
        if self._single_space_re is not None:
            return self.get_seq_indices(self._single_space_re.findall(sentence)) + self.seq_postfix
        return self.get_seq_indices(sentence.split()) + self.seq_postfix

    def get_seq_labels(self, seq):
        """Ids -> text (labels joined by spaces)."""
        return " ".join(self._labels[int(i)] for i in seq)


class CharacterTargets(Vocabulary):
    """One label per character; unknown characters map to ``unknown_label`` (default ``"@"``)."""

    def __init__(self, vocab_file=None, seq_postfix=None, unknown_label="@", labels=None, **kwargs):
        super().__init__(vocab_file=vocab_file, seq_postfix=seq_postfix, unknown_label=unknown_label, labels=labels,
                         **kwargs)

    def get_seq(self, sentence):
        return self.get_seq_indices(list(sentence)) + self.seq_postfix

    def get_seq_labels(self, seq):
        return "".join(self._labels[int(i)] for i in seq)


class Utf8ByteTargets(Vocabulary):
    """The utf8 bytes of the text: 256 labels ``chr(0) .. chr(255)``."""

    def __init__(self, seq_postfix=None, **opts):
        super().__init__(labels=[chr(i) for i in range(256)], seq_postfix=seq_postfix, unknown_label=None, **opts)

    def get_seq(self, sentence):
        return list(sentence.encode("utf8")) + self.seq_postfix

    def get_seq_labels(self, seq):
        return bytes(bytearray(int(i) for i in seq)).decode("utf8", "replace")


class _BpeCodes:
    """subword-nmt merge operations (``#version: 0.2`` codes files and the older 0.1 format)."""

    def __init__(self, filename, vocab_labels):
        if not os.path.isfile(filename):
            raise DatasetError("BytePairEncoding: bpe_file not found: %r" % filename)
        with open(filename, "rb") as f:
            lines = f.read().decode("utf8").splitlines()
        self.version = (0, 1)
        if lines and lines[0].startswith("#version:"):
            version = re.sub(r"(\.0+)*$", "", lines[0].split()[-1])
            self.version = tuple(int(x) for x in version.split("."))
        if self.version not in ((0, 1), (0, 2)):
            raise DatasetError("BytePairEncoding: %r has codes version %s; supported: 0.1, 0.2"
                               % (filename, ".".join(map(str, self.version))))
        self.rank = {}  # (left, right) -> merge priority (first occurrence wins)
        for i, line in enumerate(lines):
            pair = tuple(line.split())
            if pair not in self.rank:
                self.rank[pair] = i
        # where several merges give the same unit, the earliest merge in the file splits it
        self.split_of = {pair[0] + pair[1]: pair for pair in reversed(list(self.rank)) if len(pair) == 2}
        self.vocab = set(vocab_labels) if vocab_labels else None
        self._cache = {}

    def _merge(self, word):
        if self.version == (0, 1):
            symbols = list(word) + ["</w>"]
        else:
            symbols = list(word[:-1]) + [word[-1] + "</w>"]
        if len(symbols) < 2:
            return None
        inf = float("inf")
        while len(symbols) > 1:
            pairs = set(zip(symbols[:-1], symbols[1:]))
            best = min(pairs, key=lambda p: self.rank.get(p, inf))
            if best not in self.rank:
                break
            merged, i = [], 0
            while i < len(symbols):
                if i < len(symbols) - 1 and symbols[i] == best[0] and symbols[i + 1] == best[1]:
                    merged.append(best[0] + best[1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        if symbols[-1] == "</w>":
            symbols = symbols[:-1]
        elif symbols[-1].endswith("</w>"):
            symbols[-1] = symbols[-1][:-len("</w>")]
        return symbols

    def _in_vocab(self, unit, final):
        return (unit if final else unit + _BPE_SEPARATOR) in self.vocab

    def _split_oov(self, unit, final):
        """Undo merges of an out-of-vocabulary unit until its parts are in the vocab (or cannot be split)."""
        pair = self.split_of.get(unit + "</w>" if final else unit)
        if pair is None:
            return [unit]
        left, right = pair
        if final:
            right = right[:-len("</w>")]
        out = [left] if self._in_vocab(left, False) else self._split_oov(left, False)
        out += [right] if self._in_vocab(right, final) else self._split_oov(right, final)
        return out

    def encode_word(self, word):
        if word in self._cache:
            return self._cache[word]
        symbols = self._merge(word)
        if symbols is None:  # a single character: kept as it is
            return [word]
        if self.vocab is not None:
            checked = []
            for i, unit in enumerate(symbols):
                final = i == len(symbols) - 1
                checked += [unit] if self._in_vocab(unit, final) else self._split_oov(unit, final)
            symbols = checked
        self._cache[word] = symbols
        return symbols

    def segment(self, sentence):
        out = []
        in_category = skip_category = False
        for word in sentence.split():
            # "$CATEGORY { ... }" spans are kept unsegmented, as subword-nmt does
            if word[0] == "$" and len(word) > 1:
                in_category = True
                out.append(word)
            elif in_category and word[0] == "{":
                skip_category = True
                out.append(word)
            elif skip_category and word[0] != "}":
                out.append(word)
            else:
                in_category = skip_category = False
                units = self.encode_word(word)
                out += [unit + _BPE_SEPARATOR for unit in units[:-1]] + [units[-1]]
        return out


class BytePairEncoding(Vocabulary):
    """
    :param str vocab_file: the BPE units (dict literal or pickle)
    :param str bpe_file: subword-nmt merge codes
    """

    def __init__(self, vocab_file, bpe_file, seq_postfix=None, **kwargs):
        super().__init__(vocab_file=vocab_file, seq_postfix=seq_postfix, **kwargs)
        self.bpe_file = bpe_file
        self.bpe = _BpeCodes(bpe_file, self._labels)

    def get_seq(self, sentence):
        return self.get_seq_indices(self.bpe.segment(sentence)) + self.seq_postfix

    def get_seq_labels(self, seq):
        """Ids -> text with the ``@@ `` joints removed."""
        return " ".join(self._labels[int(i)] for i in seq).replace(_BPE_SEPARATOR + " ", "")


def _import_sentencepiece():
    try:
        import sentencepiece  # noqa
    except ImportError:
        raise DatasetError("SentencePieces needs the 'sentencepiece' package: pip install "
                           "'returnn_lite[sentencepiece]' (or pip install sentencepiece==0.2.3)") from None
    return sentencepiece


class SentencePieces(Vocabulary):
    """
    A SentencePiece model. Options go to ``sentencepiece.SentencePieceProcessor`` (``model_file``,
    ``model_proto``, ``out_type``, ``add_bos``, ``add_eos``, ``reverse``, ``enable_sampling``, ``nbest_size``,
    ``alpha``); ``control_symbols`` / ``user_defined_symbols`` as in :class:`Vocabulary`.
    """

    def __init__(self, **opts):
        spm = _import_sentencepiece()
        control_symbols = opts.pop("control_symbols", None)
        user_defined_symbols = opts.pop("user_defined_symbols", None)
        model_file = opts.get("model_file")
        if model_file is not None and not os.path.isfile(model_file):
            raise DatasetError("SentencePieces: model_file not found: %r" % model_file)
        self._opts = dict(opts)
        try:
            self.sp = spm.SentencePieceProcessor(**opts)
        except TypeError as exc:
            raise DatasetError("SentencePieces(%s): %s" % (", ".join(sorted(opts)), exc)) from None
        pieces = [self.sp.id_to_piece(i) for i in range(self.sp.vocab_size())]
        super().__init__(labels=pieces, unknown_label=self._valid(self.sp.unk_id()),
                         bos_label=self._valid(self.sp.bos_id()), eos_label=self._valid(self.sp.eos_id()),
                         pad_label=self._valid(self.sp.pad_id()), control_symbols=control_symbols,
                         user_defined_symbols=user_defined_symbols)
        self.vocab_file = model_file

    def _valid(self, idx):
        return idx if 0 <= idx < self.sp.vocab_size() else None

    def __repr__(self):
        return "SentencePieces(%r)" % (self._opts,)

    def set_random_seed(self, seed):
        _import_sentencepiece().set_random_generator_seed(seed)

    def label_to_id(self, label, default=KeyError):
        idx = self.sp.piece_to_id(label)
        if idx == self.unknown_label_id and label != self.id_to_label(idx):
            if default is KeyError:
                raise KeyError("SentencePieces: label %r not in the vocab" % label)
            return default
        return idx

    def get_seq(self, sentence):
        return list(self.sp.encode(sentence, out_type=int))

    def get_seq_labels(self, seq):
        return self.sp.decode([int(i) for i in seq])


_VOCAB_CLASSES = {cls.__name__: cls for cls in (Vocabulary, CharacterTargets, Utf8ByteTargets, BytePairEncoding,
                                                SentencePieces)}


def vocab_class_names():
    return sorted(_VOCAB_CLASSES)


def create_vocab(**opts):
    """Vocabulary from options: ``class`` (default: BytePairEncoding if ``bpe_file`` is given, else Vocabulary)."""
    opts = dict(opts)
    class_name = opts.pop("class", None)
    if class_name is None:
        cls = BytePairEncoding if "bpe_file" in opts else Vocabulary
    elif isinstance(class_name, type) and issubclass(class_name, Vocabulary):
        cls = class_name
    elif class_name in _VOCAB_CLASSES:
        cls = _VOCAB_CLASSES[class_name]
    else:
        raise DatasetError("unknown vocabulary class %r; known: %s" % (class_name, ", ".join(vocab_class_names())))
    try:
        return cls(**opts)
    except TypeError as exc:
        raise DatasetError("%s(%s): %s" % (cls.__name__, ", ".join(sorted(opts)), exc)) from None


Vocabulary.create_vocab = staticmethod(create_vocab)


def vocab_from_opts(opts, what):
    """``opts``: a Vocabulary, or a dict for :func:`create_vocab` (None stays None)."""
    if opts is None or isinstance(opts, Vocabulary):
        return opts
    if isinstance(opts, dict):
        return create_vocab(**opts)
    raise DatasetError("%s: expected vocabulary options (a dict) or a Vocabulary, got %r" % (what, opts))
