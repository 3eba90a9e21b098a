"""
Audio feature extraction as the original RETURNN computes it (the ``audio`` option of :class:`OggZipDataset`).

Audio is read with ``soundfile`` and features are computed with ``librosa`` (extra ``[audio]``):

* ``mfcc``: ``librosa.feature.mfcc`` (n_mels=128), first coefficient replaced by the frame RMS energy
* ``log_mel_filterbank``: ``log(max(1e-3, mel power spectrogram))``
* ``log_log_mel_filterbank``: ``amplitude_to_db`` of that
* ``db_mel_filterbank``: ``20 * log10(max(min_amp, mel power spectrogram))``
* ``linear_spectrogram``: ``|stft|`` with ``n_fft = 2 * num_feature_filters``, DC bin dropped
* ``raw``: the samples, ``[T, 1]``

in frames of ``window_len`` seconds every ``step_len`` seconds. The order of the steps: resampling to
``sample_rate``, ``preemphasis``, ``peak_normalization``, ``random_permute``, ``pre_process``, features,
``with_delta``, ``norm_mean`` / ``norm_std_dev`` (arrays, files, numbers or ``"per_seq"``), ``join_frames``,
``post_process``.
"""

from __future__ import annotations

import io

import numpy

from .basic import DatasetError

__all__ = ["ExtractAudioFeatures", "import_audio_libs", "FEATURE_TYPES"]

FEATURE_TYPES = ("mfcc", "log_mel_filterbank", "log_log_mel_filterbank", "db_mel_filterbank",
                 "linear_spectrogram", "raw")

_RANDOM_PERMUTE_OPTS = {
    "rnd_scale_lower", "rnd_scale_upper", "rnd_zoom_switch", "rnd_zoom_lower", "rnd_zoom_upper", "rnd_zoom_order",
    "rnd_stretch_switch", "rnd_stretch_lower", "rnd_stretch_upper", "rnd_pitch_switch", "rnd_pitch_lower",
    "rnd_pitch_upper"}


def import_audio_libs(what="audio features", need_librosa=True):
    """-> (soundfile, librosa or None), with an error naming the extra when missing."""
    try:
        import soundfile  # noqa
        librosa = None
        if need_librosa:
            import librosa  # noqa
    except ImportError as exc:
        raise DatasetError("%s need the packages soundfile and librosa (%s): pip install 'returnn_lite[audio]' "
                           "(soundfile==0.14.0 librosa==0.11.0)" % (what, exc)) from None
    return soundfile, librosa


def _frames(window_len, step_len, sample_rate):
    return int(window_len * sample_rate), int(step_len * sample_rate)


def mfcc(audio, sample_rate, window_len=0.025, step_len=0.01, num_feature_filters=40, n_mels=128, fmin=0, fmax=None):
    import librosa
    n_fft, hop = _frames(window_len, step_len, sample_rate)
    features = librosa.feature.mfcc(y=audio, sr=sample_rate, n_mfcc=num_feature_filters, n_mels=n_mels, fmin=fmin,
                                    fmax=fmax, hop_length=hop, n_fft=n_fft)
    features[0] = librosa.feature.rms(y=audio, hop_length=hop, frame_length=n_fft)  # energy instead of c0
    return features.T.astype("float32")


def _mel_power(audio, sample_rate, window_len, step_len, num_feature_filters, **kwargs):
    import librosa
    n_fft, hop = _frames(window_len, step_len, sample_rate)
    return librosa.feature.melspectrogram(y=audio, sr=sample_rate, n_mels=num_feature_filters, hop_length=hop,
                                          n_fft=n_fft, **kwargs)


def log_mel_filterbank(audio, sample_rate, window_len=0.025, step_len=0.01, num_feature_filters=80):
    mel = _mel_power(audio, sample_rate, window_len, step_len, num_feature_filters)
    return numpy.log(numpy.maximum(1e-3, mel)).T.astype("float32")


def log_log_mel_filterbank(audio, sample_rate, window_len=0.025, step_len=0.01, num_feature_filters=80):
    import librosa
    mel = _mel_power(audio, sample_rate, window_len, step_len, num_feature_filters)
    return librosa.amplitude_to_db(numpy.log(numpy.maximum(1e-3, mel))).T.astype("float32")


def db_mel_filterbank(audio, sample_rate, window_len=0.025, step_len=0.01, num_feature_filters=80, fmin=0,
                      fmax=None, min_amp=1e-10, center=True):
    if fmin < 0 or min_amp <= 0:
        raise DatasetError("db_mel_filterbank: need fmin >= 0 and min_amp > 0, got fmin=%r min_amp=%r"
                           % (fmin, min_amp))
    mel = _mel_power(audio, sample_rate, window_len, step_len, num_feature_filters, fmin=fmin, fmax=fmax,
                     center=center)
    return (20 * numpy.log10(numpy.maximum(min_amp, mel))).T.astype("float32")


def linear_spectrogram(audio, sample_rate, window_len=0.025, step_len=0.01, num_feature_filters=512):
    import librosa
    n_fft, hop = _frames(window_len, step_len, sample_rate)
    if num_feature_filters % 2 != 0 or num_feature_filters * 2 < n_fft:
        raise DatasetError("linear_spectrogram: num_feature_filters must be even and >= window samples / 2 "
                           "(%i), got %i" % ((n_fft + 1) // 2, num_feature_filters))
    spec = numpy.abs(librosa.stft(audio, hop_length=hop, win_length=n_fft, n_fft=num_feature_filters * 2))
    return spec[1:].T.astype("float32")  # without the DC bin


_FEATURE_FUNCS = {"mfcc": mfcc, "log_mel_filterbank": log_mel_filterbank,
                  "log_log_mel_filterbank": log_log_mel_filterbank, "db_mel_filterbank": db_mel_filterbank,
                  "linear_spectrogram": linear_spectrogram}


class ExtractAudioFeatures:
    """
    :param float window_len: seconds
    :param float step_len: seconds
    :param int|None num_feature_filters: default 40 (1 for raw)
    :param bool|int with_delta: number of delta orders appended (librosa.feature.delta)
    :param numpy.ndarray|str|float|None norm_mean: array, text file (numpy.loadtxt), number or "per_seq"
    :param numpy.ndarray|str|float|None norm_std_dev: likewise (per_seq: std clipped at 1e-2)
    :param str|callable features: one of :data:`FEATURE_TYPES` or a function(audio, sample_rate, ...)
    :param dict|None feature_options: extra kwargs of the feature function
    :param dict|bool|None random_permute: random scale/zoom/stretch/pitch of the audio
    :param int|None sample_rate: resample to this rate
    :param bool peak_normalization: scale the audio to peak 1
    :param float|None preemphasis: ``y[t] = x[t] - preemphasis * x[t-1]``
    :param int|None join_frames: stack this many frames into one
    """

    def __init__(self, window_len=0.025, step_len=0.01, num_feature_filters=None, with_delta=False, norm_mean=None,
                 norm_std_dev=None, features="mfcc", feature_options=None, random_permute=None, random_state=None,
                 pre_process=None, post_process=None, sample_rate=None, num_channels=None, peak_normalization=True,
                 preemphasis=None, join_frames=None, raw_ogg_opts=None):
        if raw_ogg_opts is not None or features == "raw_ogg":
            raise DatasetError("audio: features='raw_ogg' / raw_ogg_opts need the original's ParseOggVorbis "
                               "extension, which returnn_lite does not have; use e.g. features='raw'")
        if not callable(features) and features not in FEATURE_TYPES:
            raise DatasetError("audio: unknown features=%r; known: %s (or a function)"
                               % (features, ", ".join(FEATURE_TYPES)))
        if num_channels is not None and features != "raw":
            raise DatasetError("audio: num_channels is only supported with features='raw'")
        if num_feature_filters is None:
            num_feature_filters = 1 if features == "raw" else 40
        self.window_len = window_len
        self.step_len = step_len
        self.num_feature_filters = int(num_feature_filters)
        if isinstance(with_delta, bool):
            with_delta = int(with_delta)
        if not isinstance(with_delta, int) or with_delta < 0:
            raise DatasetError("audio: with_delta must be a bool or an int >= 0, got %r" % (with_delta,))
        self.with_delta = with_delta
        self.join_frames = join_frames
        self.features = features
        self.feature_options = dict(feature_options or {})
        self.num_channels = num_channels
        self.num_dim = 3 if num_channels is not None else 2
        self.norm_mean = self._load_norm(norm_mean, "norm_mean")
        self.norm_std_dev = self._load_norm(norm_std_dev, "norm_std_dev")
        if random_permute:
            random_permute = {} if random_permute is True else dict(random_permute)
            unknown = sorted(set(random_permute) - _RANDOM_PERMUTE_OPTS)
            if unknown:
                raise DatasetError("audio: random_permute: unknown option(s) %s; known: %s"
                                   % (", ".join(unknown), ", ".join(sorted(_RANDOM_PERMUTE_OPTS))))
        self.random_permute = random_permute or None
        self.random_state = random_state if random_state is not None else numpy.random.RandomState(1)
        self.pre_process = pre_process
        self.post_process = post_process
        self.sample_rate = sample_rate
        self.peak_normalization = peak_normalization
        self.preemphasis = preemphasis
        import_audio_libs(need_librosa=features != "raw" or bool(with_delta) or bool(random_permute)
                          or sample_rate is not None)

    def _load_norm(self, value, name):
        if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            if value == "per_seq":
                return value
            try:
                value = numpy.loadtxt(value)
            except OSError as exc:
                raise DatasetError("audio: %s: cannot read %r: %s" % (name, value, exc)) from None
        value = numpy.asarray(value, dtype="float32")
        if value.shape != (self.get_feature_dimension(),):
            raise DatasetError("audio: %s has shape %s, expected (%i,) (the feature dimension)"
                               % (name, value.shape, self.get_feature_dimension()))
        return value

    def get_feature_dimension(self):
        return (self.with_delta + 1) * self.num_feature_filters * (self.join_frames or 1)

    def read_audio(self, raw_bytes):
        """bytes or file object -> (samples float64, sample_rate)"""
        soundfile, _ = import_audio_libs(need_librosa=False)
        if isinstance(raw_bytes, (bytes, bytearray)):
            raw_bytes = io.BytesIO(raw_bytes)
        return soundfile.read(raw_bytes)

    def get_audio_features_from_raw_bytes(self, raw_bytes, seq_name=None):
        audio, sample_rate = self.read_audio(raw_bytes)
        return self.get_audio_features(audio, sample_rate, seq_name=seq_name)

    def get_audio_features(self, audio, sample_rate, seq_name=None):
        """:return: float32 ``[T, get_feature_dimension()]`` (``[T, channels, dim]`` for multi-channel raw)"""
        if self.sample_rate is not None and sample_rate != self.sample_rate:
            import librosa
            audio = librosa.resample(numpy.asarray(audio), orig_sr=sample_rate, target_sr=self.sample_rate)
            sample_rate = self.sample_rate
        if self.preemphasis:
            from scipy import signal
            audio = signal.lfilter([1, -self.preemphasis], [1], audio)
        if self.peak_normalization:
            peak = numpy.max(numpy.abs(audio)) if audio.size else 0.0
            if peak != 0.0:
                audio = audio / peak
        if self.random_permute is not None:
            audio = self._random_permuted(audio, sample_rate)
        if self.pre_process:
            audio = self.pre_process(audio=audio, sample_rate=sample_rate, random_state=self.random_state)
        if self.features == "raw":
            data = audio[:, None] if audio.ndim == 1 else audio
            if self.num_channels is not None:
                data = data[:, :, None] if data.ndim == 2 else data
                if data.shape[1] != self.num_channels:
                    raise DatasetError("audio %s: %i channels, num_channels=%i"
                                       % (seq_name, data.shape[1], self.num_channels))
            data = data.astype("float32")
        else:
            kwargs = dict(audio=audio, sample_rate=sample_rate, window_len=self.window_len, step_len=self.step_len,
                          num_feature_filters=self.num_feature_filters)
            kwargs.update(self.feature_options)
            if callable(self.features):
                data = self.features(random_state=self.random_state, **kwargs)
            else:
                data = _FEATURE_FUNCS[self.features](**kwargs)
        if data.ndim != self.num_dim or data.shape[-1] != self.num_feature_filters:
            raise DatasetError("audio %s: features have shape %s, expected [T, %i]"
                               % (seq_name, data.shape, self.num_feature_filters))
        if self.with_delta:
            import librosa
            deltas = [librosa.feature.delta(data, order=i, axis=0).astype("float32")
                      for i in range(1, self.with_delta + 1)]
            data = numpy.concatenate([data] + deltas, axis=-1)
        data = self._normalize(data)
        if self.join_frames is not None:
            pad = (-data.shape[0]) % self.join_frames
            data = numpy.pad(data, [(0, pad)] + [(0, 0)] * (data.ndim - 1), mode="edge")
            new_shape = (data.shape[0] // self.join_frames,) + data.shape[1:-1] + (data.shape[-1] * self.join_frames,)
            data = data.reshape(new_shape)
        if self.post_process:
            data = self.post_process(data, seq_name=seq_name)
        return data

    def _normalize(self, data):
        if self.norm_mean is not None:
            if isinstance(self.norm_mean, str):
                data -= numpy.mean(data, axis=0, keepdims=True)
            else:
                data -= self.norm_mean
        if self.norm_std_dev is not None:
            if isinstance(self.norm_std_dev, str):
                data /= numpy.maximum(numpy.std(data, axis=0, keepdims=True), 1e-2)
            else:
                data /= self.norm_std_dev
        return data

    def _random_permuted(self, audio, sample_rate):
        import librosa
        import scipy.ndimage
        opts, rnd = self.random_permute, self.random_state
        audio = audio * rnd.uniform(opts.get("rnd_scale_lower", 0.8), opts.get("rnd_scale_upper", 1.0))
        if rnd.uniform(0.0, 1.0) < opts.get("rnd_zoom_switch", 0.2):
            factor = rnd.uniform(opts.get("rnd_zoom_lower", 0.9), opts.get("rnd_zoom_upper", 1.1))
            audio = scipy.ndimage.zoom(audio, factor, order=opts.get("rnd_zoom_order", 3))
        if rnd.uniform(0.0, 1.0) < opts.get("rnd_stretch_switch", 0.2):
            rate = rnd.uniform(opts.get("rnd_stretch_lower", 0.9), opts.get("rnd_stretch_upper", 1.2))
            audio = librosa.effects.time_stretch(audio, rate=rate)
        if rnd.uniform(0.0, 1.0) < opts.get("rnd_pitch_switch", 0.2):
            n_steps = rnd.uniform(opts.get("rnd_pitch_lower", -1.0), opts.get("rnd_pitch_upper", 1.0))
            audio = librosa.effects.pitch_shift(audio, sr=sample_rate, n_steps=n_steps)
        return audio
