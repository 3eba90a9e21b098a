"""
A speech-like dataset that any machine can generate: raw audio whose label sequence determines the signal.

Each label is a "phone" with its own two formant frequencies (a low and a high sine, fixed per label, spread over
the band); a seq is a random label sequence (no label twice in a row), each label sounding for a random duration
with raised-cosine on- and offsets, short random pauses in between, a random speaker pitch factor per seq, and white
noise. So the audio carries the labels, but with variable timing, like speech: a model reading log-mel features
can learn to transcribe it (e.g. with CTC).

Data: "data" [samples, 1] float32 (dense dim 1), "classes" [labels] int32 (sparse dim ``num_labels``).
"""

from __future__ import annotations

import numpy

from .generating import GeneratingDataset

__all__ = ["SyntheticSpeechDataset"]


class SyntheticSpeechDataset(GeneratingDataset):
    """
    ``{"class": "SyntheticSpeechDataset", "num_seqs": 1000}``; options:

    :param int num_seqs: seqs per epoch (fixed with ``fixed_random_seed``, e.g. for a dev set)
    :param int num_labels: vocabulary size (labels 0 .. num_labels - 1; names "a", "b", ...)
    :param tuple[int,int] seq_len_range: min and max number of labels of a seq (inclusive)
    :param tuple[float,float] label_duration_range: seconds one label sounds (uniform)
    :param float max_pause: seconds of silence at most between two labels (uniform from 0)
    :param int sampling_rate: samples per second
    :param float noise_level: stddev of the white noise (the tones have amplitude about 0.5)
    """

    def __init__(self, num_seqs, num_labels=8, seq_len_range=(3, 8), label_duration_range=(0.06, 0.14),
                 max_pause=0.03, sampling_rate=8000, noise_level=0.05, **kwargs):
        if num_labels < 2 or num_labels > 26:
            raise ValueError("SyntheticSpeechDataset: num_labels=%r must be in 2..26" % (num_labels,))
        min_len, max_len = seq_len_range
        if not 1 <= min_len <= max_len:
            raise ValueError("SyntheticSpeechDataset: seq_len_range=%r must be (min, max) with 1 <= min <= max" % (
                seq_len_range,))
        min_dur, max_dur = label_duration_range
        if not 0 < min_dur <= max_dur:
            raise ValueError("SyntheticSpeechDataset: label_duration_range=%r must be (min, max) with "
                             "0 < min <= max (seconds)" % (label_duration_range,))
        super().__init__(input_dim=1, output_dim={"data": [1, 2], "classes": [num_labels, 1]}, num_seqs=num_seqs,
                         **kwargs)
        self.num_labels = num_labels
        self.seq_len_range = (int(min_len), int(max_len))
        self.label_duration_range = (float(min_dur), float(max_dur))
        self.max_pause = float(max_pause)
        self.sampling_rate = int(sampling_rate)
        self.noise_level = float(noise_level)
        self.formants = self.label_formants(num_labels, sampling_rate)
        if not self.labels:
            self.labels = {"classes": [chr(ord("a") + i) for i in range(num_labels)]}

    @staticmethod
    def label_formants(num_labels, sampling_rate):
        """[num_labels, 2] Hz: label i's low formant rises with i, its high one follows a permutation of i, so no
        two labels share either formant; both stay well below the Nyquist frequency."""
        nyquist = sampling_rate / 2.0
        low = numpy.linspace(0.08, 0.25, num_labels) * nyquist
        high_steps = numpy.linspace(0.3, 0.8, num_labels) * nyquist
        perm = (numpy.arange(num_labels) * 3 + 1) % num_labels  # a fixed shuffle (3 is coprime to most sizes)
        if len(set(perm.tolist())) != num_labels:
            perm = numpy.arange(num_labels)[::-1]
        return numpy.stack([low, high_steps[perm]], axis=1)

    def generate_seq(self, seq_idx):
        rnd = self.random
        num = rnd.randint(self.seq_len_range[0], self.seq_len_range[1] + 1)
        labels = [rnd.randint(self.num_labels)]
        while len(labels) < num:
            label = rnd.randint(self.num_labels - 1)
            labels.append(label + 1 if label >= labels[-1] else label)  # never the same label twice in a row
        pitch = rnd.uniform(0.9, 1.1)
        parts = [numpy.zeros(int(rnd.uniform(0, self.max_pause) * self.sampling_rate), dtype=numpy.float32)]
        for label in labels:
            parts.append(self._tone(label, rnd.uniform(*self.label_duration_range), pitch, rnd))
            parts.append(numpy.zeros(int(rnd.uniform(0, self.max_pause) * self.sampling_rate), dtype=numpy.float32))
        audio = numpy.concatenate(parts)
        audio = audio + rnd.normal(0.0, self.noise_level, size=audio.shape)
        return {"data": audio.astype(numpy.float32)[:, None], "classes": numpy.array(labels, dtype=numpy.int32)}

    def _tone(self, label, duration, pitch, rnd):
        n = max(int(duration * self.sampling_rate), 8)
        t = numpy.arange(n) / float(self.sampling_rate)
        low, high = self.formants[label] * pitch
        phase = rnd.uniform(0, 2 * numpy.pi, size=2)
        signal = (0.3 * numpy.sin(2 * numpy.pi * low * t + phase[0]) +
                  0.2 * numpy.sin(2 * numpy.pi * high * t + phase[1]))
        ramp = min(n // 4, int(0.01 * self.sampling_rate))
        envelope = numpy.ones(n)
        if ramp > 0:
            rise = 0.5 - 0.5 * numpy.cos(numpy.pi * numpy.arange(ramp) / ramp)
            envelope[:ramp] = rise
            envelope[n - ramp:] = rise[::-1]
        return (signal * envelope).astype(numpy.float32)
