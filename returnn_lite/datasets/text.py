"""
Text datasets of the original RETURNN: :class:`LmDataset` (one seq per corpus line, for language models) and
:class:`TranslationDataset` (parallel ``source.<postfix>`` / ``target.<postfix>`` files with pickled vocabs).
Seq tags are ``line-<n>`` (n: index of the line among the used lines).
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import pickle
import re
import xml.etree.ElementTree as ElementTree

import numpy

from .basic import DatasetError
from .indexed import IndexedDataset
from .text_cleaners import get_post_processor_function
from .vocabulary import vocab_from_opts

__all__ = ["LmDataset", "TranslationDataset", "parse_orthography", "parse_orthography_into_symbols"]


def parse_orthography_into_symbols(orthography, upper_case_special=True, word_based=False,
                                   square_brackets_for_specials=True):
    """
    ``"hello [noise] x"`` -> chars ``h e l l o " "`` + ``"[NOISE]"`` + ``" " x`` (word_based: words).
    Bracketed specials are one symbol (upper-cased unless ``upper_case_special=False``).
    """
    out = []
    depth = 0
    for c in orthography:
        if depth:
            if c == "[":
                depth += 1
            elif c == "]":
                depth -= 1
            out[-1] += c.upper() if upper_case_special and c not in "[]" else c
        elif square_brackets_for_specials and c == "[":
            depth = 1
            if out and not out[-1]:
                out[-1] = "["
            else:
                out.append("[")
        elif word_based:
            if c.isspace():
                out.append("")
            else:
                if not out:
                    out.append("")
                out[-1] += c
        else:
            out.append(c)
    return out


def parse_orthography(orthography, prefix=(), postfix=("[END]",), remove_chars="(){}", collapse_spaces=True,
                      final_strip=True, **kwargs):
    """Remove ``remove_chars``, collapse whitespace, strip, split into symbols, add prefix/postfix."""
    for c in remove_chars:
        orthography = orthography.replace(c, "")
    if collapse_spaces:
        orthography = " ".join(orthography.split())
    if final_strip:
        orthography = orthography.strip()
    return list(prefix) + parse_orthography_into_symbols(orthography, **kwargs) + list(postfix)


def _open_maybe_gz(filename, what):
    if not os.path.isfile(filename):
        raise DatasetError("%s: file not found: %r" % (what, filename))
    return gzip.open(filename, "rb") if filename.endswith(".gz") else open(filename, "rb")


def _is_bliss(filename):
    try:
        with _open_maybe_gz(filename, "LmDataset") as f:
            for _, elem in ElementTree.iterparse(f, events=("start",)):
                return elem.tag == "corpus"
    except (OSError, ElementTree.ParseError, EOFError):
        return False
    return False


def _read_corpus_lines(filename, skip_empty_lines, what):
    """Lines as the original reads them: plain text up to the last newline; gzip and Bliss XML whole."""
    if _is_bliss(filename):
        with _open_maybe_gz(filename, what) as f:
            return [" ".join((seg.findtext("orth") or "").split())
                    for seg in ElementTree.parse(f).getroot().iter("segment")]
    with _open_maybe_gz(filename, what) as f:
        content = f.read()
    if filename.endswith(".gz"):
        lines = content.split(b"\n")
        if content.endswith(b"\n"):
            lines.pop()
        lines = [line.decode("utf8", "replace").strip() for line in lines]
        return [line for line in lines if line or not skip_empty_lines]
    parts = content.split(b"\n")[:-1]  # text after the last newline is not a line
    return [p.decode("utf8").strip() for p in parts if p or not skip_empty_lines]


def _read_seq_list_file(filename, what):
    if filename.endswith((".pkl", ".pkl.gz")):
        with _open_maybe_gz(filename, what) as f:
            tags = pickle.load(f)
    else:
        with _open_maybe_gz(filename, what) as f:
            tags = f.read().decode("utf8").splitlines()
    return [t for t in tags if t]


def _dtype_for(num_labels):
    for limit, dtype in ((2 ** 7, "int8"), (2 ** 8, "uint8"), (2 ** 31, "int32"), (2 ** 32, "uint32")):
        if num_labels <= limit:
            return dtype
    return "int64"


class LmDataset(IndexedDataset):
    """
    :param str|list[str]|callable corpus_file: line-based text (optionally .gz) or Bliss XML corpus files
    :param dict|Vocabulary|None orth_vocab: vocabulary (e.g. BytePairEncoding) for the lines
    :param str|None orth_symbols_file: one symbol per line (chars, or words with ``word_based``)
    :param str|None orth_symbols_map_file: ``"<symbol> <index>"`` lines, a dict literal, or a pickled dict
    :param str|None orth_replace_map_file: JSON dict symbol -> replacement text
    :param bool word_based: symbols are whitespace-separated words, not characters
    :param str|None word_end_symbol: char-based: replaces spaces (and ends the seq before ``seq_end_symbol``)
    :param str|None seq_end_symbol: appended to each seq (default ``"[END]"``; None: nothing)
    :param str|None unknown_symbol: used by ``auto_replace_unknown_symbol``
    :param bool auto_replace_unknown_symbol: unknown symbols -> ``unknown_symbol`` (else the seq is invalid)
    :param bool error_on_invalid_seq: invalid seqs are an error (False: they are left out)
    :param bool add_delayed_seq_data: adds ``delayed`` = ``[delayed_seq_data_start_symbol] + data[:-1]``
    :param str|None dtype: default: the smallest of int8/uint8/int32/... for the number of labels
    :param str|None tag_prefix: default ``"line-"``
    :param str|list[str]|None seq_list_file: seq tags to use instead of ``line-<n>`` (one per line, or .pkl)
    """

    def __init__(self, corpus_file, skip_empty_lines=True, seq_list_file=None, orth_vocab=None,
                 orth_symbols_file=None, orth_symbols_map_file=None, orth_replace_map_file=None,
                 orth_post_process=None, word_based=False, word_end_symbol=None, seq_end_symbol="[END]",
                 unknown_symbol="[UNKNOWN]", parse_orth_opts=None, phone_info=None, add_random_phone_seqs=0,
                 auto_replace_unknown_symbol=False, log_auto_replace_unknown_symbols=10, log_skipped_seqs=10,
                 error_on_invalid_seq=True, add_delayed_seq_data=False, delayed_seq_data_start_symbol="[START]",
                 dtype=None, tag_prefix=None, use_cache_manager=False, **kwargs):
        super().__init__(**kwargs)
        if phone_info is not None or add_random_phone_seqs:
            raise DatasetError("%s: phone_info / add_random_phone_seqs (lexicon-based phone seqs) are not supported "
                               "by returnn_lite" % self.name)
        sources = [x for x in (orth_vocab, orth_symbols_file, orth_symbols_map_file) if x]
        if len(sources) != 1:
            raise DatasetError("%s: need exactly one of orth_vocab, orth_symbols_file, orth_symbols_map_file"
                               % self.name)
        self._corpus_file = corpus_file
        self._skip_empty_lines = skip_empty_lines
        self._seq_list_file = seq_list_file
        self.orth_post_process = get_post_processor_function(orth_post_process, "%s: orth_post_process" % self.name)
        self.word_based = word_based
        self.word_end_symbol = word_end_symbol
        self.seq_end_symbol = seq_end_symbol
        self.unknown_symbol = unknown_symbol
        self.auto_replace_unknown_symbol = auto_replace_unknown_symbol
        self.error_on_invalid_seq = error_on_invalid_seq
        self.orth_vocab = None
        self.orth_symbols_map = None
        if orth_vocab:
            if auto_replace_unknown_symbol or orth_replace_map_file:
                raise DatasetError("%s: with orth_vocab, unknowns are handled by the vocab's unknown_label "
                                   "(auto_replace_unknown_symbol / orth_replace_map_file not allowed)" % self.name)
            self.orth_vocab = vocab_from_opts(orth_vocab, "%s: orth_vocab" % self.name)
            labels = list(self.orth_vocab.labels)
        elif orth_symbols_file:
            with open(orth_symbols_file, encoding="utf8") as f:
                labels = f.read().splitlines()
            self.orth_symbols_map = {sym: i for i, sym in enumerate(labels)}
        else:
            self.orth_symbols_map, labels = self._read_symbols_map(orth_symbols_map_file)
        self.labels["data"] = labels
        self.parse_orth_opts = None
        self.orth_replace_map = {}
        if self.orth_symbols_map is not None:
            self.parse_orth_opts = dict(parse_orth_opts or {})
            self.parse_orth_opts.setdefault("word_based", word_based)
            postfix = [seq_end_symbol] if seq_end_symbol is not None else []
            if word_end_symbol and not word_based:
                postfix = [word_end_symbol] + postfix
            self.parse_orth_opts.setdefault("postfix", postfix)
            if orth_replace_map_file:
                with open(orth_replace_map_file, encoding="utf8") as f:
                    replace = json.load(f)
                self.orth_replace_map = {k: parse_orthography_into_symbols(v, word_based=word_based)
                                         for k, v in replace.items()}
            if word_end_symbol and not word_based:
                self.orth_replace_map[" "] = [word_end_symbol]
        elif parse_orth_opts:
            raise DatasetError("%s: parse_orth_opts only apply with orth_symbols_file / orth_symbols_map_file"
                               % self.name)
        num_labels = len(labels)
        self.dtype = dtype or _dtype_for(num_labels)
        self.num_outputs = {"data": [num_labels, 1]}
        self.num_inputs = num_labels
        self.tag_prefix = tag_prefix or "line-"
        self.add_delayed_seq_data = add_delayed_seq_data
        self.delayed_seq_data_start_symbol = delayed_seq_data_start_symbol
        if add_delayed_seq_data:
            self.num_outputs["delayed"] = list(self.num_outputs["data"])
            self.labels["delayed"] = labels
            self._delayed_start_id = self._symbol_id(delayed_seq_data_start_symbol, "delayed_seq_data_start_symbol")
        self._orths = None
        self._tags = None
        self._invalid = None  # corpus idx -> error message (error_on_invalid_seq=False: left out)

    def _read_symbols_map(self, filename):
        if filename.endswith(".pkl"):
            with open(filename, "rb") as f:
                mapping = pickle.load(f)
            pairs = sorted((int(i), sym) for sym, i in mapping.items())
        else:
            with open(filename, encoding="utf8") as f:
                text = f.read()
            if re.search(r"^{[\"'].+[\"']:[0-9]+,", text[:1024].replace(" ", "").replace("\n", "")):
                pairs = sorted((int(i), sym) for sym, i in ast.literal_eval(text).items())
            else:
                pairs = sorted((int(i), sym) for sym, i in (line.split(None, 1) for line in text.splitlines()))
        if not pairs or pairs[0][0] != 0:
            raise DatasetError("%s: orth_symbols_map_file %r: ids must start at 0" % (self.name, filename))
        mapping = {sym: i for i, sym in pairs}
        by_id = dict(pairs)
        return mapping, [by_id[i] for i in sorted(by_id)]

    def _symbol_id(self, symbol, option):
        if self.orth_symbols_map is not None:
            if symbol not in self.orth_symbols_map:
                raise DatasetError("%s: %s=%r is not an orth symbol" % (self.name, option, symbol))
            return self.orth_symbols_map[symbol]
        idx = self.orth_vocab.label_to_id(symbol, default=None)
        if idx is None:
            raise DatasetError("%s: %s=%r is not in orth_vocab" % (self.name, option, symbol))
        return idx

    # ---- corpus

    def _lazy_init(self):
        if self._orths is not None:
            return
        files = self._corpus_file() if callable(self._corpus_file) else self._corpus_file
        files = [files] if isinstance(files, str) else list(files)
        orths, lens_per_file = [], []
        for fn in files:
            lines = _read_corpus_lines(fn, self._skip_empty_lines, self.name)
            orths += lines
            lens_per_file.append(len(lines))
        tags = None
        if self._seq_list_file:
            lists = [self._seq_list_file] if isinstance(self._seq_list_file, str) else list(self._seq_list_file)
            tags = []
            for fn in lists:
                tags += _read_seq_list_file(fn, self.name)
            if len(tags) != len(orths):
                raise DatasetError("%s: seq_list_file has %i tags for %i corpus lines" % (self.name, len(tags),
                                                                                        len(orths)))
        self._orths, self._tags = orths, tags
        if not self.error_on_invalid_seq:
            self._invalid = set()
            for i in range(len(orths)):
                try:
                    self._encode(orths[i])
                except _InvalidSeq:
                    self._invalid.add(i)

    def _num_corpus_seqs(self):
        self._lazy_init()
        return len(self._orths)

    def _corpus_seq_tag(self, corpus_idx):
        self._lazy_init()
        return self._tags[corpus_idx] if self._tags is not None else self.tag_prefix + str(corpus_idx)

    def _sort_key_len(self, corpus_idx):
        self._lazy_init()
        return len(self._orths[corpus_idx].encode("utf8"))

    def init_seq_order(self, epoch=None, seq_list=None, seq_order=None):
        super().init_seq_order(epoch=epoch, seq_list=seq_list, seq_order=seq_order)
        if self._invalid and seq_list is None and seq_order is None:
            self._seq_order = [i for i in self._seq_order if i not in self._invalid]
            self._num_seqs = len(self._seq_order)
        return True

    def _encode(self, orth):
        if self.orth_post_process:
            orth = self.orth_post_process(orth)
        if self.orth_vocab is not None:
            return numpy.array(self.orth_vocab.get_seq(orth), dtype=self.dtype)
        syms = parse_orthography(orth, **self.parse_orth_opts)
        space = self.word_end_symbol if self.word_end_symbol and not self.word_based else " "
        while True:
            syms = [r for s in syms for r in self.orth_replace_map.get(s, [s])]
            i = 0
            while i < len(syms) - 1:
                if syms[i] == space and syms[i + 1] == space:
                    del syms[i + 1]
                else:
                    i += 1
            missing = [s for s in syms if s not in self.orth_symbols_map]
            if missing and self.auto_replace_unknown_symbol:
                self.orth_replace_map[missing[0]] = [self.unknown_symbol] if self.unknown_symbol is not None else []
                continue
            break
        if missing:
            raise _InvalidSeq("%s: invalid seq %r, missing orth symbol(s) %s (set auto_replace_unknown_symbol=True "
                              "to map them to %r)" % (self.name, orth, ", ".join(map(repr, missing[:5])),
                                                      self.unknown_symbol))
        return numpy.array([self.orth_symbols_map[s] for s in syms], dtype=self.dtype)

    def _load_corpus_seq(self, corpus_idx):
        self._lazy_init()
        try:
            data = self._encode(self._orths[corpus_idx])
        except _InvalidSeq as exc:
            raise DatasetError(str(exc)) from None
        out = {"data": data}
        if self.add_delayed_seq_data:
            out["delayed"] = numpy.concatenate([[self._delayed_start_id], data[:-1]]).astype(self.dtype)
        return out

    def get_data_keys(self):
        return (["delayed"] if self.add_delayed_seq_data else []) + ["data"]

    def get_target_list(self):
        return ["data"]

    def get_data_dtype(self, key):
        self._check_key(key)
        return self.dtype

    def is_data_sparse(self, key):
        self._check_key(key)
        return True


class _InvalidSeq(Exception):
    pass


class TranslationDataset(IndexedDataset):
    """
    ``path/source.<file_postfix>`` and ``path/target.<file_postfix>`` (optionally .gz), one sentence per line,
    with vocabularies ``path/source.vocab.pkl`` / ``path/target.vocab.pkl`` (pickled dict word -> id).
    Keys ``data`` (source) and ``classes`` (target).

    :param str source_postfix / target_postfix: appended to each line before splitting (e.g. ``" </S>"``)
    :param bool source_only: no target file, only ``data``
    :param bool search_without_reference: the target file is not read (``classes`` are empty)
    :param str|dict|None unknown_label: OOV words -> this word (per key with a dict); None: OOV is an error
    :param str|None seq_list_file: line numbers, one per line: the fixed seq order (repeats allowed)
    """

    _MAIN_KEYS = {"source": "data", "target": "classes"}

    def __init__(self, path, file_postfix, source_postfix="", target_postfix="", source_only=False,
                 search_without_reference=False, unknown_label=None, seq_list_file=None, use_cache_manager=False,
                 **kwargs):
        super().__init__(**kwargs)
        if not os.path.isdir(path):
            raise DatasetError("%s: path %r is not a directory" % (self.name, path))
        self.path, self.file_postfix = path, file_postfix
        self.source_only, self.search_without_reference = source_only, search_without_reference
        self._postfix = {"source": source_postfix or "", "target": target_postfix or ""}
        prefixes = ["source"] if source_only else ["source", "target"]
        self._vocabs = {self._MAIN_KEYS[p]: self._load_vocab(p) for p in prefixes}
        own_dims = {key: max(vocab.values()) + 1 for key, vocab in self._vocabs.items()}
        self.num_inputs = own_dims["data"]
        # As the original: every key reports the source dim (unless its own vocab is larger).
        self.num_outputs = {key: [max(dim, self.num_inputs), 1] for key, dim in own_dims.items()}
        for key, vocab in self._vocabs.items():
            by_id = {i: word for word, i in sorted(vocab.items())}
            self.labels[key] = [by_id[i] for i in range(own_dims[key])]
        if not isinstance(unknown_label, dict):
            unknown_label = {key: unknown_label for key in self._vocabs}
        self._unknown_id = {}
        for key, label in unknown_label.items():
            if key not in self._vocabs:
                raise DatasetError("%s: unknown_label for unknown data key %r" % (self.name, key))
            if label is not None:
                if label not in self._vocabs[key]:
                    raise DatasetError("%s: unknown_label %r is not in the %s vocab" % (self.name, label, key))
                self._unknown_id[key] = self._vocabs[key][label]
        self._data = {}
        for prefix in prefixes:
            if prefix == "target" and search_without_reference:
                continue
            key = self._MAIN_KEYS[prefix]
            self._data[key] = [self._words_to_ids(key, (line.decode("utf8").strip() + self._postfix[prefix]).split())
                               for line in self._read_lines(prefix)]
        lens = {key: len(v) for key, v in self._data.items()}
        if len(set(lens.values())) > 1:
            raise DatasetError("%s: source and target files have different numbers of lines: %s" % (self.name, lens))
        self._fixed_order = None
        if seq_list_file:
            with open(seq_list_file, encoding="utf8") as f:
                self._fixed_order = [int(n) for n in f.read().splitlines() if n.strip()]

    def _load_vocab(self, prefix):
        filename = os.path.join(self.path, "%s.vocab.pkl" % prefix)
        if not os.path.isfile(filename):
            raise DatasetError("%s: vocab file not found: %r" % (self.name, filename))
        with open(filename, "rb") as f:
            vocab = pickle.load(f)
        if not isinstance(vocab, dict) or not vocab:
            raise DatasetError("%s: %r must hold a non-empty dict word -> id" % (self.name, filename))
        return vocab

    def _read_lines(self, prefix):
        filename = os.path.join(self.path, "%s.%s" % (prefix, self.file_postfix))
        if not os.path.exists(filename) and os.path.exists(filename + ".gz"):
            filename += ".gz"
        if not os.path.exists(filename):
            raise DatasetError("%s: data file not found: %r (.gz)" % (self.name, filename))
        with _open_maybe_gz(filename, self.name) as f:
            content = f.read()
        lines = content.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        return lines

    def _words_to_ids(self, key, words):
        vocab = self._vocabs[key]
        unk = self._unknown_id.get(key)
        if unk is None:
            missing = [w for w in words if w not in vocab]
            if missing:
                raise DatasetError("%s: word(s) %s not in the %s vocab and no unknown_label given"
                                   % (self.name, ", ".join(map(repr, missing[:5])), key))
            return numpy.array([vocab[w] for w in words], dtype="int32")
        return numpy.array([vocab.get(w, unk) for w in words], dtype="int32")

    def _num_corpus_seqs(self):
        return len(self._data["data"])

    def _corpus_seq_tag(self, corpus_idx):
        return "line-%i" % corpus_idx

    def _sort_key_len(self, corpus_idx):
        return len(self._data["data"][corpus_idx])

    def init_seq_order(self, epoch=None, seq_list=None, seq_order=None):
        if seq_list is None and seq_order is None and self._fixed_order is not None:
            seq_order = self._fixed_order
        return super().init_seq_order(epoch=epoch, seq_list=seq_list, seq_order=seq_order)

    def _load_corpus_seq(self, corpus_idx):
        out = {key: values[corpus_idx] for key, values in self._data.items()}
        if "classes" in self._vocabs and "classes" not in out:
            out["classes"] = numpy.zeros((0,), dtype="int32")
        return out

    def is_data_sparse(self, key):
        self._check_key(key)
        return True
