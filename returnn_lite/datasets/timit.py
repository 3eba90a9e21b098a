"""
The TIMIT corpus datasets of the original: :class:`TimitDataset` (a TIMIT copy on disk) and
:class:`NltkTimitDataset` (the 160-utterance sample NLTK ships, split 90% train / 10% dev).

Data keys: ``data`` (audio features, MFCC 40 by default, ``with_delta`` appends deltas) and ``classes``
(the phone labels of the ``num_phones`` set: 61, 48 or 39). Label ids: the sorted phones of that set with the
silence phone (``pau`` for 61, ``sil`` otherwise) moved to id 0, as in the original. :meth:`get_label_map` gives
the id mapping between two phone sets (configs use it for the 39-phone error rate at load time).

The corpus files are read when the dataset is built; without them it fails with one line naming the missing
path. Nothing is downloaded.
"""

from __future__ import annotations

import glob
import os
import sys

import numpy

from .basic import DatasetError
from .indexed import IndexedDataset

__all__ = ["TimitDataset", "NltkTimitDataset"]

# The 61 TIMIT phones folded to the 39 and 48 phone sets (the common Kaldi phones.60-48-39 map); q: dropped.
_PHONE_MAP_TO_39 = {
    "aa": "aa", "ae": "ae", "ah": "ah", "ao": "aa", "aw": "aw", "ax": "ah", "ax-h": "ah", "axr": "er", "ay": "ay",
    "b": "b", "bcl": "sil", "ch": "ch", "d": "d", "dcl": "sil", "dh": "dh", "dx": "dx", "eh": "eh", "el": "l",
    "em": "m", "en": "n", "eng": "ng", "epi": "sil", "er": "er", "ey": "ey", "f": "f", "g": "g", "gcl": "sil",
    "h#": "sil", "hh": "hh", "hv": "hh", "ih": "ih", "ix": "ih", "iy": "iy", "jh": "jh", "k": "k", "kcl": "sil",
    "l": "l", "m": "m", "n": "n", "ng": "ng", "nx": "n", "ow": "ow", "oy": "oy", "p": "p", "pau": "sil",
    "pcl": "sil", "q": None, "r": "r", "s": "s", "sh": "sh", "t": "t", "tcl": "sil", "th": "th", "uh": "uh",
    "uw": "uw", "ux": "uw", "v": "v", "w": "w", "y": "y", "z": "z", "zh": "sh"}
_FOLD_TO_48 = {"ao": "ao", "ax": "ax", "ax-h": "ax", "bcl": "vcl", "dcl": "vcl", "gcl": "vcl", "el": "el", "en": "en",
               "epi": "epi", "ix": "ix", "kcl": "cl", "pcl": "cl", "tcl": "cl", "zh": "zh"}
_PHONE_MAP_TO_48 = {p: _FOLD_TO_48.get(p, v) for p, v in _PHONE_MAP_TO_39.items()}


class TimitDataset(IndexedDataset):
    """
    DARPA TIMIT. ``timit_dir`` holds ``train/filelist.phn`` and ``test/filelist.core.phn`` (one
    ``<seq_tag>.phn`` per line) and per seq ``<seq_tag>.wav`` / ``<seq_tag>.phn``. ``train`` picks the train
    list or the core test list.
    """

    PhoneMapTo39 = _PHONE_MAP_TO_39
    PhoneMapTo48 = _PHONE_MAP_TO_48
    PhoneMapTo61 = {p: p for p in _PHONE_MAP_TO_39}
    Phones61 = list(_PHONE_MAP_TO_39)

    @classmethod
    def _get_phone_map(cls, num_phones=61):
        """61-set phone -> phone of the num_phones set (None: dropped)."""
        maps = {61: cls.PhoneMapTo61, 48: cls.PhoneMapTo48, 39: cls.PhoneMapTo39}
        if num_phones not in maps:
            raise DatasetError("TimitDataset: num_phones must be 61, 48 or 39, got %r" % (num_phones,))
        return maps[num_phones]

    @classmethod
    def get_labels(cls, num_phones=61):
        """The label names of the num_phones set by id (silence first)."""
        labels = sorted({p for p in cls._get_phone_map(num_phones).values() if p})
        silence = "pau" if "pau" in labels else "sil"
        labels.remove(silence)
        return [silence] + labels

    @classmethod
    def get_label_map(cls, source_num_phones=61, target_num_phones=39):
        """:return: label id of the source set -> label id of the target set (None where the phone is dropped)"""
        src_map, tgt_map = cls._get_phone_map(source_num_phones), cls._get_phone_map(target_num_phones)
        src_labels, tgt_labels = cls.get_labels(source_num_phones), cls.get_labels(target_num_phones)
        to_61 = {v: k for k, v in sorted(src_map.items())}  # source phone -> a 61-set phone folding to it
        result = {}
        for idx, phone in enumerate(src_labels):
            target = tgt_map[to_61[phone] if source_num_phones != 61 else phone]
            result[idx] = tgt_labels.index(target) if target else None
        return result

    def __init__(self, timit_dir, train=True, preload=False, features="mfcc", num_feature_filters=40,
                 feature_window_len=0.025, feature_step_len=0.010, with_delta=False, norm_mean=None,
                 norm_std_dev=None, random_permute_audio=None, num_phones=61, demo_play_audio=False, **kwargs):
        super().__init__(**kwargs)
        if demo_play_audio:
            raise DatasetError("%s: demo_play_audio (playing the audio with pyaudio) is not supported" % self.name)
        self._phone_map = self._get_phone_map(num_phones)
        self.labels = {"classes": self.get_labels(num_phones)}
        self._label_ids = {p: i for i, p in enumerate(self.labels["classes"])}
        with_delta = int(with_delta) if isinstance(with_delta, bool) else with_delta
        if not isinstance(with_delta, int) or with_delta < 0:
            raise DatasetError("%s: with_delta must be a bool or an int >= 0, got %r" % (self.name, with_delta))
        self._feature_opts = dict(
            features=features, num_feature_filters=num_feature_filters, window_len=feature_window_len,
            step_len=feature_step_len, with_delta=with_delta, norm_mean=norm_mean, norm_std_dev=norm_std_dev,
            random_permute=train if random_permute_audio is None else random_permute_audio)
        self._feature_extractor = None  # built on the first seq (needs soundfile/librosa)
        self._audio_random = numpy.random.RandomState(1)
        self.num_inputs = num_feature_filters * (1 + with_delta)
        self.num_outputs = {"data": [self.num_inputs, 2], "classes": [len(self.labels["classes"]), 1]}
        self._is_train = bool(train)
        self._corpus_dir, self._seq_tags = self._find_corpus(timit_dir)
        self._phone_seqs = {}
        if preload:
            for idx in range(len(self._seq_tags)):
                self._phones(idx)

    def _find_corpus(self, timit_dir):
        """-> (folder of the seqs, seq tags); fails naming the first missing path."""
        _require_path(self.name, timit_dir, "the TIMIT folder (option timit_dir)")
        corpus_dir = os.path.join(timit_dir, "train" if self._is_train else "test")
        _require_path(self.name, corpus_dir, "its %s part" % ("train" if self._is_train else "test"))
        file_list = os.path.join(corpus_dir, "filelist.phn" if self._is_train else "filelist.core.phn")
        _require_path(self.name, file_list, "the seq list")
        with open(file_list) as f:
            tags = [os.path.splitext(line.strip())[0] for line in f if line.strip()]
        return corpus_dir, tags

    # ---- IndexedDataset

    def _num_corpus_seqs(self):
        return len(self._seq_tags)

    def _corpus_seq_tag(self, corpus_idx):
        return self._seq_tags[corpus_idx]

    def _sort_key_len(self, corpus_idx):
        # the end sample of the last phone, in frames: no audio decoding for the ordering
        segments = self._read_phn(corpus_idx)
        return int(segments[-1][1] / 16000.0 / self._feature_opts["step_len"]) if segments else 0

    def _on_new_epoch(self, epoch):
        self._audio_random.seed(self.get_random_seed_for_epoch(epoch))

    def get_data_dtype(self, key):
        self._check_key(key)
        return "int32" if key == "classes" else "float32"

    def _load_corpus_seq(self, corpus_idx):
        if self._feature_extractor is None:
            from .audio_features import ExtractAudioFeatures

            self._feature_extractor = ExtractAudioFeatures(random_state=self._audio_random, **self._feature_opts)
        wav = os.path.join(self._corpus_dir, self._seq_tags[corpus_idx] + ".wav")
        _require_path(self.name, wav, "the audio of seq %r" % self._seq_tags[corpus_idx])
        audio, sample_rate = self._feature_extractor.read_audio(wav)
        features = self._feature_extractor.get_audio_features(audio, sample_rate, seq_name=self._seq_tags[corpus_idx])
        return {"data": features, "classes": numpy.array(self._phones(corpus_idx), dtype="int32")}

    # ---- phones

    def _read_phn(self, corpus_idx):
        """-> list of (start sample, end sample, 61-set phone)"""
        phn = os.path.join(self._corpus_dir, self._seq_tags[corpus_idx] + ".phn")
        _require_path(self.name, phn, "the phone transcription of seq %r" % self._seq_tags[corpus_idx])
        segments = []
        with open(phn) as f:
            for line_nr, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) != 3 or parts[2] not in self._phone_map:
                    raise DatasetError("%s: %s:%i: expected '<start> <end> <TIMIT phone>', got %r"
                                       % (self.name, phn, line_nr, line.strip()))
                segments.append((int(parts[0]), int(parts[1]), parts[2]))
        return segments

    def _phones(self, corpus_idx):
        if corpus_idx not in self._phone_seqs:
            mapped = (self._phone_map[p] for _, _, p in self._read_phn(corpus_idx))
            self._phone_seqs[corpus_idx] = [self._label_ids[p] for p in mapped if p]
        return self._phone_seqs[corpus_idx]


class NltkTimitDataset(TimitDataset):
    """
    The TIMIT sample of NLTK (160 utterances of the train data): ``<nltk data>/corpora/timit/<speaker>/<utt>``
    with ``.wav`` and ``.phn`` files. The first 90% of the utterances (sorted) are ``train=True``, the rest
    ``train=False``. ``nltk_download_dir``: the NLTK data folder (default: NLTK's own default).
    """

    def __init__(self, nltk_download_dir=None, **kwargs):
        self._nltk_download_dir = nltk_download_dir
        super().__init__(timit_dir=None, **kwargs)

    def _find_corpus(self, timit_dir):
        corpus_dir = os.path.join(_nltk_data_dir(self._nltk_download_dir), "corpora", "timit")
        if not os.path.isdir(corpus_dir):
            raise DatasetError("%s: the NLTK TIMIT sample is not at %r (the original downloads it with "
                               "nltk.download('timit'); returnn_lite does not download: put the corpus there or set "
                               "nltk_download_dir)" % (self.name, corpus_dir))
        _require_path(self.name, os.path.join(corpus_dir, "timitdic.txt"), "the TIMIT dictionary (broken download?)")
        tags = sorted(os.path.relpath(p, corpus_dir)[:-len(".phn")]
                      for p in glob.glob(os.path.join(corpus_dir, "*", "*.phn")))
        if not tags:
            raise DatasetError("%s: no utterances (<speaker>/<utt>.phn) in %r" % (self.name, corpus_dir))
        split = int(len(tags) * 0.9)
        return corpus_dir, tags[:split] if self._is_train else tags[split:]


def _nltk_data_dir(download_dir):
    if download_dir:
        return download_dir
    candidates = [p for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    candidates += [os.path.expanduser("~/nltk_data"), os.path.join(sys.prefix, "nltk_data"), "/usr/share/nltk_data",
                   "/usr/local/share/nltk_data", "/usr/lib/nltk_data", "/usr/local/lib/nltk_data"]
    for path in candidates:
        if os.path.isdir(os.path.join(path, "corpora", "timit")):
            return path
    return candidates[0]


def _require_path(dataset_name, path, what):
    if not path or not os.path.exists(path):
        raise DatasetError("%s: %s %r does not exist" % (dataset_name, what, path))
