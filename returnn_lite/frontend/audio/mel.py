"""Mel filterbank (Huang, Acero, Hon 2001, "Spoken Language Processing", eq. 6.141) and log-mel features."""

from __future__ import annotations

import functools
import math

import numpy

from ..array_ import convert_to_tensor, squeeze
from ..math_ import abs as _abs
from ..math_ import cast, matmul, safe_log
from ..signal import stft

__all__ = ["mel_filterbank", "log_mel_filterbank_from_raw", "mel_filterbank_matrix_np"]


def mel_filterbank(x, *, in_dim, out_dim, sampling_rate, fft_length=None, f_min=None, f_max=None):
    """
    x [..., in_dim] (a power spectrum with ``fft_length // 2 + 1`` bins; fft_length defaults to
    ``2 * (in_dim - 1)``) -> [..., out_dim], out_dim triangular mel filters between f_min (0) and f_max (Nyquist).
    """
    fft_length = fft_length or (in_dim.dimension - 1) * 2
    matrix = mel_filterbank_matrix_np(f_min=f_min or 0, f_max=f_max or sampling_rate / 2.0,
                                      sampling_rate=sampling_rate, fft_size=fft_length,
                                      nr_of_filters=out_dim.dimension)
    matrix = cast(convert_to_tensor(matrix, dims=(in_dim, out_dim), dtype="float32"), x.dtype)
    out = matmul(x, matrix, reduce=in_dim)
    return out


def _mel(freq):
    return 1125.0 * numpy.log(1.0 + freq / 700.0)


def _inv_mel(mel):
    return 700.0 * (numpy.exp(mel / 1125.0) - 1.0)


@functools.lru_cache()
def mel_filterbank_matrix_np(*, f_min, f_max, sampling_rate, fft_size, nr_of_filters):
    """
    [fft_size // 2 + 1, nr_of_filters]: filter m is a triangle over the FFT bins, rising from centre m-1 to 1 at
    centre m and falling to centre m+1 (0 outside, bins strictly between the outer centres); the nr_of_filters + 2
    centres (in bins) are equally spaced on the mel scale (1125 ln(1 + f / 700)) from f_min to f_max.
    """
    mel_points = _mel(float(f_min)) + numpy.arange(nr_of_filters + 2) * (
        (_mel(float(f_max)) - _mel(float(f_min))) / (nr_of_filters + 1))
    centres = (float(fft_size) / sampling_rate * _inv_mel(mel_points)).astype(numpy.float32)
    bins = numpy.arange(fft_size // 2 + 1, dtype=numpy.float64)[:, None]
    left, centre, right = (centres[None, :-2].astype(numpy.float64), centres[None, 1:-1].astype(numpy.float64),
                           centres[None, 2:].astype(numpy.float64))
    rising = (bins - left) / (centre - left)
    falling = (right - bins) / (right - centre)
    inside = (bins > left) & (bins < right)
    return numpy.where(inside, numpy.where(bins < centre, rising, falling), 0.0)


def next_power_of_two(n):
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def log_mel_filterbank_from_raw(raw_audio, *, in_spatial_dim, out_dim, sampling_rate=16_000, window_len=0.025,
                                step_len=0.010, n_fft=None, log_base=10):
    """
    raw_audio [..., in_spatial_dim] (a feature dim of size 1 is squeezed) -> (log-mel features [..., out_spatial_dim,
    out_dim], out_spatial_dim): STFT with window_len / step_len seconds (n_fft: the next power of two of the window
    samples), power spectrum, :func:`mel_filterbank`, log (floor 1e-10) in ``log_base``.
    """
    if raw_audio.feature_dim is not None and raw_audio.feature_dim.dimension == 1:
        raw_audio = squeeze(raw_audio, axis=raw_audio.feature_dim)
    window_num_frames = int(window_len * sampling_rate)
    step_num_frames = int(step_len * sampling_rate)
    n_fft = n_fft or next_power_of_two(window_num_frames)
    spectrogram, out_spatial_dim, freq_dim = stft(
        raw_audio, in_spatial_dim=in_spatial_dim, frame_step=step_num_frames, frame_length=window_num_frames,
        fft_length=n_fft)
    power = cast(_abs(spectrogram) ** 2.0, raw_audio.dtype)
    mel = mel_filterbank(power, in_dim=freq_dim, out_dim=out_dim, sampling_rate=sampling_rate)
    log_mel = safe_log(mel, eps=1e-10)
    if log_base != math.e:
        log_mel = log_mel * (1.0 / math.log(log_base))
    return log_mel, out_spatial_dim
