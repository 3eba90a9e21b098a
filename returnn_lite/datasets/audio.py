"""
Speech corpora of the original RETURNN: :class:`OggZipDataset` and :class:`LibriSpeechCorpus`.

Both give the data keys ``data`` (audio features, see :mod:`.audio_features`; absent with ``audio=None``),
``classes`` (the transcription through the ``targets`` vocabulary; absent with ``targets=None``), ``raw``
(the transcription string) and, for OggZip, ``orth`` (its utf8 bytes).
"""

from __future__ import annotations

import ast
import glob
import gzip
import os
import threading
import zipfile

import numpy

from .audio_features import ExtractAudioFeatures
from .basic import DatasetError
from .indexed import IndexedDataset
from .text_cleaners import get_post_processor_function
from .vocabulary import BytePairEncoding, CharacterTargets, vocab_from_opts

__all__ = ["OggZipDataset", "LibriSpeechCorpus", "EpochWiseFilter"]


class EpochWiseFilter:
    """
    ``{(first_epoch, last_epoch): {"max_mean_len": N}}`` (``last_epoch`` None or -1: open end): in those epochs,
    keep only the shortest seqs such that their mean length is at most ``max_mean_len`` (in the order given).
    """

    _KNOWN = {"max_mean_len", "use_new_filter", "subdirs"}

    def __init__(self, epochs_opts, what="epoch_wise_filter", allow_subdirs=False):
        if not isinstance(epochs_opts, dict):
            raise DatasetError("%s must be a dict {(first_epoch, last_epoch): options}, got %r" % (what, epochs_opts))
        self.epochs_opts = []
        for key, opts in sorted(epochs_opts.items(), key=lambda kv: (kv[0][0] or 1)):
            if not (isinstance(key, tuple) and len(key) == 2) or not isinstance(opts, dict):
                raise DatasetError("%s: entries must be (first_epoch, last_epoch): dict, got %r: %r" % (what, key, opts))
            known = self._KNOWN if allow_subdirs else self._KNOWN - {"subdirs"}
            unknown = sorted(set(opts) - known)
            if unknown:
                raise DatasetError("%s: unknown option(s) %s; known: %s" % (what, ", ".join(unknown),
                                                                           ", ".join(sorted(known))))
            start, end = key
            self.epochs_opts.append((start or 1, float("inf") if end in (None, -1) else end, opts))

    def active_opts(self, epoch):
        return [opts for start, end, opts in self.epochs_opts if start <= (epoch or 1) <= end]

    @staticmethod
    def max_mean_len_filter(seq_order, get_seq_len, max_mean_len, keep_order=True):
        lens_and_idx = sorted((get_seq_len(idx), idx) for idx in seq_order)
        if not lens_and_idx:
            return []
        cumsum = numpy.cumsum([length for length, _ in lens_and_idx], dtype=numpy.float64)
        means = cumsum / numpy.arange(1, len(cumsum) + 1)
        num = max(int(numpy.sum(means <= max_mean_len)), 1)  # means grow with num: a prefix qualifies
        if not keep_order:
            return [idx for _, idx in lens_and_idx[:num]]
        selected = {idx for _, idx in lens_and_idx[:num]}
        return [idx for idx in seq_order if idx in selected]

    def filter(self, epoch, seq_order, get_seq_len):
        for opts in self.active_opts(epoch):
            if opts.get("max_mean_len"):
                seq_order = self.max_mean_len_filter(seq_order, get_seq_len, opts["max_mean_len"])
        return seq_order


def _literal_eval_file(text, where):
    try:
        data = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise DatasetError("%s: not a python literal list of dicts: %s" % (where, exc)) from None
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise DatasetError("%s: expected a non-empty list of dicts with 'text', 'duration' and 'file' or "
                           "'seq_name'" % where)
    return data


class _AudioCorpus(IndexedDataset):
    """Common part: feature extractor, targets vocab, data keys, per-epoch seeding."""

    _scalar_keys = ("raw",)

    def _init_audio_and_targets(self, audio, targets):
        if audio is not None and not isinstance(audio, dict):
            raise DatasetError("%s: audio must be a dict of feature options (or None for text only), got %r"
                               % (self.name, audio))
        self._audio_random = numpy.random.RandomState(1)
        self.feature_extractor = (ExtractAudioFeatures(random_state=self._audio_random, **audio)
                                  if audio is not None else None)
        self.targets = targets
        self.num_outputs = {"raw": [0, 0]}
        if self.targets is not None:
            self.num_outputs["classes"] = [self.targets.num_labels, 1]
            self.labels["classes"] = self.targets.labels
        if self.feature_extractor is not None:
            self.num_inputs = self.feature_extractor.get_feature_dimension()
            self.num_outputs["data"] = [self.num_inputs, 2 if self.feature_extractor.num_channels is None else 3]
            self._apply_window_to_dims()
        self._read_lock = threading.Lock()

    def get_data_dtype(self, key):
        self._check_key(key)
        return {"raw": "string", "orth": "uint8", "classes": "int32"}.get(key, "float32")

    def get_data_shape(self, key):
        if key == "data" and self.feature_extractor is not None and self.feature_extractor.num_channels is not None:
            return [self.feature_extractor.num_channels, self.feature_extractor.get_feature_dimension()]
        return super().get_data_shape(key)

    def _on_new_epoch(self, epoch):
        seed = self.get_random_seed_for_epoch(epoch)
        self._audio_random.seed(seed)
        if self.targets is not None:
            self.targets.set_random_seed(seed)

    def _features(self, read_bytes, tag):
        with self._read_lock:
            raw = read_bytes()
        return self.feature_extractor.get_audio_features_from_raw_bytes(raw, seq_name=tag)


class OggZipDataset(_AudioCorpus):
    """
    :param str|list[str] path: zip file(s) ``NAME.zip`` holding ``NAME.txt`` (the meta: a python list of dicts
      with ``text``, ``duration`` and ``file`` and/or ``seq_name``) and the audio files ``NAME/<file>``;
      or a folder ``NAME`` next to ``NAME.txt``; ``NAME.txt.gz`` entries replace a zip's meta txt
    :param dict|None audio: :class:`ExtractAudioFeatures` options (``{}``: defaults; None: text only)
    :param dict|Vocabulary|None targets: vocabulary options for ``classes`` (None: no ``classes``)
    :param callable|str|list|None targets_post_process: applied to the text before the vocabulary: a function, or
        the original's named post processors (``datasets/text_cleaners.py``)
    :param str|None segment_file: seq tags to keep (text, optionally .gz)
    :param bool zip_audio_files_have_name_as_prefix: audio files lie in ``NAME/`` inside the zip
    :param float|int|None fixed_random_subset: fraction (<1) or number of seqs, fixed random choice (seed 42)
    :param dict|None epoch_wise_filter: see :class:`EpochWiseFilter`
    """

    def __init__(self, path, audio, targets, targets_post_process=None, use_cache_manager=False, segment_file=None,
                 zip_audio_files_have_name_as_prefix=True, fixed_random_subset=None, epoch_wise_filter=None,
                 **kwargs):
        self._separate_txt_files = {}
        if isinstance(path, str) and not path.endswith(".zip") and os.path.isdir(path) and os.path.isfile(
                path + ".txt"):
            self._zip_paths, self._names, self._use_zip = [os.path.dirname(path)], [os.path.basename(path)], False
        else:
            self._zip_paths, self._names, self._use_zip = [], [], True
            for p in (list(path) if isinstance(path, (list, tuple)) else [path]):
                if not isinstance(p, str):
                    raise DatasetError("OggZipDataset: path entries must be file names, got %r" % (p,))
                base = os.path.basename(p)
                if base.endswith(".txt.gz"):
                    self._separate_txt_files[base[:-len(".txt.gz")]] = p
                    continue
                if not base.endswith(".zip"):
                    raise DatasetError("OggZipDataset: path %r must be a .zip file, a folder NAME with NAME.txt next "
                                       "to it, or a NAME.txt.gz meta file" % p)
                if not os.path.isfile(p):
                    raise DatasetError("OggZipDataset: zip file not found: %r" % p)
                self._zip_paths.append(p)
                self._names.append(base[:-len(".zip")])
            if not self._zip_paths:
                raise DatasetError("OggZipDataset: path %r names no zip file" % (path,))
        kwargs.setdefault("name", self._names[0])
        super().__init__(**kwargs)
        self.targets_post_process = get_post_processor_function(
            targets_post_process, "%s: targets_post_process" % self.name)
        self._init_audio_and_targets(audio, vocab_from_opts(targets, "%s: targets" % self.name))
        self.num_outputs["orth"] = [256, 1]
        self.labels["orth"] = [chr(i) for i in range(256)]
        self.zip_audio_files_have_name_as_prefix = zip_audio_files_have_name_as_prefix
        self._segment_file = segment_file
        if fixed_random_subset is not None and not (
                (isinstance(fixed_random_subset, float) and 0 < fixed_random_subset < 1)
                or (isinstance(fixed_random_subset, int) and fixed_random_subset >= 1)):
            raise DatasetError("%s: fixed_random_subset must be a fraction in (0, 1) or an int >= 1, got %r"
                               % (self.name, fixed_random_subset))
        self._fixed_random_subset = fixed_random_subset
        self.epoch_wise_filter = (EpochWiseFilter(epoch_wise_filter, "%s: epoch_wise_filter" % self.name)
                                  if epoch_wise_filter else None)
        self._zip_files = None
        self._data = None

    # ---- meta

    def _read(self, filename, zip_index):
        if self._use_zip:
            try:
                return self._zip_files[zip_index].read(filename)
            except KeyError:
                raise DatasetError("%s: %r not in %s" % (self.name, filename, self._zip_paths[zip_index])) from None
        full = os.path.join(self._zip_paths[0], filename)
        try:
            with open(full, "rb") as f:
                return f.read()
        except OSError as exc:
            raise DatasetError("%s: cannot read %s: %s" % (self.name, full, exc)) from None

    def _lazy_init(self):
        if self._data is not None:
            return
        segments = None
        if self._segment_file:
            opener = gzip.open if self._segment_file.endswith(".gz") else open
            try:
                with opener(self._segment_file, "rb") as f:
                    segments = set(f.read().decode("utf8").splitlines())
            except OSError as exc:
                raise DatasetError("%s: segment_file: %s" % (self.name, exc)) from None
        if self._use_zip:
            self._zip_files = [zipfile.ZipFile(p) for p in self._zip_paths]
        data = []
        for index, name in enumerate(self._names):
            meta_name = name + ".txt"
            if name in self._separate_txt_files:
                with gzip.open(self._separate_txt_files[name], "rb") as f:
                    text = f.read()
            else:
                text = self._read(meta_name, index)
            part = _literal_eval_file(text.decode("utf8"), "%s: %s" % (self.name, meta_name))
            first = part[0]
            if "text" not in first or "duration" not in first:
                raise DatasetError("%s: %s: entries need 'text' and 'duration', got keys %s"
                                   % (self.name, meta_name, sorted(first)))
            if "file" not in first:
                if self.feature_extractor is not None:
                    raise DatasetError("%s: %s has no 'file' entries (text only); set audio=None"
                                       % (self.name, meta_name))
                if "seq_name" not in first:
                    raise DatasetError("%s: %s: entries need 'file' or 'seq_name'" % (self.name, meta_name))
            for entry in part:
                entry["_zip_file_index"] = index
            if segments is not None:
                part = [entry for entry in part if self._tag_of(entry) in segments]
            data += part
        subset = self._fixed_random_subset
        if subset:
            if 0 < subset < 1:
                subset = int(len(data) * subset)
            numpy.random.RandomState(42).shuffle(data)
            data = data[:subset]
        self._data = data

    @staticmethod
    def _tag_of(entry):
        return entry.get("seq_name", entry.get("file", ""))

    def _num_corpus_seqs(self):
        self._lazy_init()
        return len(self._data)

    def _corpus_seq_tag(self, corpus_idx):
        self._lazy_init()
        return self._tag_of(self._data[corpus_idx])

    def _sort_key_len(self, corpus_idx):
        self._lazy_init()
        return int(self._data[corpus_idx]["duration"] * 100)

    def init_seq_order(self, epoch=None, seq_list=None, seq_order=None):
        super().init_seq_order(epoch=epoch, seq_list=seq_list, seq_order=seq_order)
        if self.epoch_wise_filter is not None and seq_list is None and seq_order is None:
            self._seq_order = self.epoch_wise_filter.filter(epoch, self._seq_order, self._sort_key_len)
            self._num_seqs = len(self._seq_order)
        return True

    # ---- data

    def _load_corpus_seq(self, corpus_idx):
        self._lazy_init()
        entry = self._data[corpus_idx]
        tag = self._tag_of(entry)
        out = {}
        if self.feature_extractor is not None:
            audio_fn = entry["file"]
            if self.zip_audio_files_have_name_as_prefix:
                audio_fn = "%s/%s" % (self._names[entry["_zip_file_index"]], audio_fn)
            out["data"] = self._features(lambda: self._read(audio_fn, entry["_zip_file_index"]), tag)
        text = entry["text"]
        if self.targets is not None:
            targets_text = self.targets_post_process(text) if self.targets_post_process else text
            out["classes"] = numpy.array(self.targets.get_seq(targets_text), dtype="int32")
        out["raw"] = numpy.array(text, dtype="object")
        out["orth"] = numpy.frombuffer(text.encode("utf8"), dtype="uint8").copy()
        return out


class LibriSpeechCorpus(_AudioCorpus):
    """
    The LibriSpeech directory layout: ``path/<subdir>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt`` and
    ``<speaker>-<chapter>-<nnnn>.flac`` (``use_ogg``: ``.flac.ogg``), or ``path/<subdir>.zip`` holding
    ``LibriSpeech/<subdir>/...`` (``use_zip``). Seq tags: ``<subdir>-<speaker>-<chapter>-<nnnn>``.

    :param str prefix: subdirs starting with this, e.g. "train", "dev-clean", "test-other"
    :param dict|None audio: :class:`ExtractAudioFeatures` options (None: no ``data``)
    :param str|dict|None targets: "bpe" (with ``bpe``), "chars" (with ``chars``) or vocabulary options
    """

    def __init__(self, path, prefix, audio, orth_post_process=None, targets=None, chars=None, bpe=None,
                 use_zip=False, use_ogg=False, use_cache_manager=False, fixed_random_subset=None,
                 epoch_wise_filter=None, name=None, **kwargs):
        super().__init__(name=name or "prefix:" + prefix, **kwargs)
        if prefix.split("-")[0] not in ("train", "dev", "test"):
            raise DatasetError("%s: prefix must start with train, dev or test, got %r" % (self.name, prefix))
        self.path, self.prefix, self.use_zip, self.use_ogg = path, prefix, use_zip, use_ogg
        self.orth_post_process = get_post_processor_function(orth_post_process, "%s: orth_post_process" % self.name)
        if isinstance(targets, dict):
            if bpe is not None or chars is not None:
                raise DatasetError("%s: give either targets or bpe/chars" % self.name)
            vocab = vocab_from_opts(targets, "%s: targets" % self.name)
        elif targets == "bpe" or (targets is None and bpe is not None):
            if bpe is None or chars is not None:
                raise DatasetError("%s: targets='bpe' needs bpe=... (and no chars)" % self.name)
            vocab = BytePairEncoding(**bpe)
        elif targets == "chars" or (targets is None and chars is not None):
            if chars is None or bpe is not None:
                raise DatasetError("%s: targets='chars' needs chars=... (and no bpe)" % self.name)
            vocab = CharacterTargets(**chars)
        elif targets is None:
            vocab = None
        else:
            raise DatasetError("%s: invalid targets %r; use 'bpe', 'chars' or vocabulary options" % (self.name, targets))
        self._init_audio_and_targets(audio, vocab)
        self._zip_files = {}
        if use_zip:
            zip_fns = sorted(glob.glob("%s/%s*.zip" % (path, prefix)))
            if not zip_fns:
                raise DatasetError("%s: no zip files %s/%s*.zip" % (self.name, path, prefix))
            self._zip_files = {os.path.splitext(os.path.basename(fn))[0]: zipfile.ZipFile(fn) for fn in zip_fns}
        self.transs = self._collect_trans()
        self._reference_seq_order = sorted(self.transs)
        if fixed_random_subset:
            if 0 < fixed_random_subset < 1:
                fixed_random_subset = int(len(self._reference_seq_order) * fixed_random_subset)
            numpy.random.RandomState(42).shuffle(self._reference_seq_order)
            self._reference_seq_order = self._reference_seq_order[:fixed_random_subset]
            self.transs = {s: self.transs[s] for s in self._reference_seq_order}
        self.epoch_wise_filter = (EpochWiseFilter(epoch_wise_filter, "%s: epoch_wise_filter" % self.name,
                                                  allow_subdirs=True) if epoch_wise_filter else None)

    def _parse_trans(self, text, subdir, transs):
        for line in text.splitlines():
            if not line.strip():
                continue
            seq_name, txt = line.split(" ", 1)
            speaker, chapter, seq = map(int, seq_name.split("-"))
            transs[(subdir, speaker, chapter, seq)] = self.orth_post_process(txt) if self.orth_post_process else txt

    def _collect_trans(self):
        transs = {}
        if self.use_zip:
            for name, zip_file in self._zip_files.items():
                for info in zip_file.filelist:
                    parts = info.filename.split("/")
                    if len(parts) > 2 and parts[1].startswith(self.prefix) and parts[-1].endswith(".trans.txt"):
                        self._parse_trans(zip_file.read(info).decode("utf8"), parts[1], transs)
        else:
            for subdir in sorted(glob.glob("%s/%s*" % (self.path, self.prefix))):
                if os.path.isdir(subdir):
                    for fn in sorted(glob.glob("%s/*/*/*.trans.txt" % subdir)):
                        with open(fn, encoding="utf8") as f:
                            self._parse_trans(f.read(), os.path.basename(subdir), transs)
        if not transs:
            raise DatasetError("%s: no transcriptions found under %s/%s*/*/*/*.trans.txt%s"
                               % (self.name, self.path, self.prefix, " (zip)" if self.use_zip else ""))
        return transs

    def _num_corpus_seqs(self):
        return len(self._reference_seq_order)

    def _corpus_seq_tag(self, corpus_idx):
        return "%s-%i-%i-%04i" % self._reference_seq_order[corpus_idx]

    def _sort_key_len(self, corpus_idx):
        return len(self.transs[self._reference_seq_order[corpus_idx]])

    def init_seq_order(self, epoch=None, seq_list=None, seq_order=None):
        super().init_seq_order(epoch=epoch, seq_list=seq_list, seq_order=seq_order)
        if self.epoch_wise_filter is not None and seq_list is None and seq_order is None:
            order = self._seq_order
            for opts in self.epoch_wise_filter.active_opts(epoch):
                if opts.get("subdirs") is not None:
                    order = [i for i in order if self._reference_seq_order[i][0] in opts["subdirs"]]
                if opts.get("max_mean_len"):
                    order = EpochWiseFilter.max_mean_len_filter(order, self._sort_key_len, opts["max_mean_len"],
                                                                keep_order=bool(opts.get("use_new_filter")))
            self._seq_order, self._num_seqs = order, len(order)
        return True

    def _audio_bytes(self, key):
        subdir, speaker, chapter, seq = key
        fn = "%s/%i/%i/%i-%i-%04i.flac" % (subdir, speaker, chapter, speaker, chapter, seq)
        if self.use_ogg:
            fn += ".ogg"
        if self.use_zip:
            return self._zip_files[subdir].read("LibriSpeech/" + fn)
        with open(os.path.join(self.path, fn), "rb") as f:
            return f.read()

    def _load_corpus_seq(self, corpus_idx):
        key = self._reference_seq_order[corpus_idx]
        out = {}
        if self.feature_extractor is not None:
            out["data"] = self._features(lambda: self._audio_bytes(key), self._corpus_seq_tag(corpus_idx))
        txt = self.transs[key]
        if self.targets is not None:
            out["classes"] = numpy.array(self.targets.get_seq(txt), dtype="int32")
        out["raw"] = numpy.array(txt, dtype="object")
        return out
