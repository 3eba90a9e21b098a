"""
Signal processing layers: stft, istft, mel_filterbank, multichannel_stft_layer,
multichannel_multiresolution_stft_layer.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..data import Data, Dim
from ..util import NotSpecified
from .base import ConcatInputLayer, concat_sources_template
from .conv import ConvLayer, TransposedConvLayer, _merge_batch, transform_input


def _single_channel_input(layer_name, data, in_spatial_dims):
    """[B, ..., T] signal (feature axis of size 1 squeezed), number of batch-like axes."""
    if in_spatial_dims:
        in_spatial_dims = list(in_spatial_dims)
        if len(in_spatial_dims) != 1:
            raise ValueError("in_spatial_dims=%r: exactly one axis expected" % (in_spatial_dims,))
    elif data.time_dim_axis is not None:
        in_spatial_dims = [data.dims[data.time_dim_axis]]
    data, n_batch, _ = transform_input(data, layer_name, in_spatial_dims, 1, filter_opt="frame_size")
    x = data.placeholder
    if data.feature_dim_axis is not None:
        if data.dim != 1:
            raise ValueError("only single-channel input is supported, got %s" % data.short_repr())
        x = tf.squeeze(x, axis=-1)
    return data, x, n_batch


class StftLayer(ConcatInputLayer):
    """tf.signal.stft (Hann window) over the time axis; output [B, T', fft_size // 2 + 1] complex64.
    :param frame_shift: shift between frames in samples
    :param frame_size: window (frame) size in samples
    :param fft_size: FFT size (default: frame_size); output features fft_size // 2 + 1 (complex)
    :param in_spatial_dims: the time Dim of the input samples (default: the time axis)
    :param out_spatial_dims: the Dim of the output frames (default: a new dim)
    :param out_dim: the output feature Dim (default: fft_size // 2 + 1)
    :param use_time_mask: mask the padded samples
    """

    layer_class = "stft"
    recurrent = True

    def __init__(self, frame_shift, frame_size, fft_size=None, in_spatial_dims=None, out_spatial_dims=None,
                 out_dim=None, use_time_mask=False, **kwargs):
        super().__init__(**kwargs)
        fft_size = fft_size or frame_size
        data = self.input_data
        if use_time_mask:
            data = data.copy_masked(0.0)
        data, x, n_batch = _single_channel_input(self.name, data, in_spatial_dims)
        d_in, d_out = data.dims[n_batch], self.output.dims[n_batch]
        if d_out is not d_in and d_out.dimension is None and d_in.dyn_size is not None:
            d_out.dyn_size = tf.maximum((d_in.dyn_size - frame_size) // frame_shift + 1, 0)
        x, restore = _merge_batch(x, n_batch)
        y = tf.signal.stft(x, frame_length=frame_size, frame_step=frame_shift, fft_length=fft_size)
        self.output.placeholder = restore(y)

    @classmethod
    def get_out_data_from_opts(cls, name, frame_shift, frame_size, sources=(), fft_size=None,
                               in_spatial_dims=None, out_spatial_dims=None, out_dim=None, **kwargs):
        fft_size = fft_size or frame_size
        data = concat_sources_template(sources, name="%s_input" % name)
        if not in_spatial_dims and data.time_dim_axis is not None:
            in_spatial_dims = [data.dims[data.time_dim_axis]]
        out = ConvLayer.get_out_data_from_opts(
            name=name, sources=sources, n_out=fft_size // 2 + 1, filter_size=[frame_size], strides=[frame_shift],
            padding="valid", in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims, out_dim=out_dim)
        out.dtype = "complex64"
        return out


class IstftLayer(ConcatInputLayer):
    """tf.signal.inverse_stft (with the matching inverse window); output [B, T', 1] float32.
    :param frame_shift: shift between frames in samples
    :param frame_size: window (frame) size in samples
    :param fft_size: FFT size (default: frame_size)
    :param in_spatial_dims: the frames Dim of the input (default: the time axis)
    :param out_spatial_dims: the Dim of the output samples (default: a new dim)
    :param out_dim: the output feature Dim (default: 1)
    :param use_time_mask: mask the padded frames
    """

    layer_class = "istft"
    recurrent = True

    def __init__(self, frame_shift, frame_size, fft_size=None, in_spatial_dims=None, out_spatial_dims=None,
                 out_dim=None, use_time_mask=False, **kwargs):
        super().__init__(**kwargs)
        fft_size = fft_size or frame_size
        data = self.input_data
        if data.dim != fft_size // 2 + 1:
            raise ValueError("input feature dim %r does not match fft_size=%i (expected %i)" % (
                data.dim, fft_size, fft_size // 2 + 1))
        if use_time_mask:
            data = data.copy_masked(0.0)
        if not in_spatial_dims and data.time_dim_axis is not None:
            in_spatial_dims = [data.dims[data.time_dim_axis]]
        data, n_batch, _ = transform_input(data, self.name, in_spatial_dims, 1, filter_opt="frame_size")
        d_in, d_out = data.dims[n_batch], self.output.dims[n_batch]
        if d_out is not d_in and d_out.dimension is None and d_in.dyn_size is not None:
            d_out.dyn_size = d_in.dyn_size * frame_shift + max(frame_size - frame_shift, 0)
        x, restore = _merge_batch(data.placeholder, n_batch)
        y = tf.signal.inverse_stft(x, frame_length=frame_size, frame_step=frame_shift, fft_length=fft_size,
                                   window_fn=tf.signal.inverse_stft_window_fn(frame_shift))
        if frame_shift > frame_size:  # inverse_stft gives (T-1)*shift + size samples; pad to T*shift
            y = tf.pad(y, [[0, 0], [0, frame_shift - frame_size]])
        self.output.placeholder = restore(tf.expand_dims(y, -1))

    @classmethod
    def get_out_data_from_opts(cls, name, frame_shift, frame_size, sources=(), fft_size=None,
                               in_spatial_dims=None, out_spatial_dims=None, out_dim=None, **kwargs):
        data = concat_sources_template(sources, name="%s_input" % name)
        if not in_spatial_dims and data.time_dim_axis is not None:
            in_spatial_dims = [data.dims[data.time_dim_axis]]
        out = TransposedConvLayer.get_out_data_from_opts(
            name=name, sources=sources, n_out=1, filter_size=[frame_size], strides=[frame_shift], padding="valid",
            in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims, out_dim=out_dim)
        out.dtype = "float32"
        return out


def mel_filter_matrix(f_min, f_max, sampling_rate, fft_size, nr_of_filters):
    """[fft_size // 2 + 1, nr_of_filters] triangular filters on the mel scale (Huang & Acero, eq. 6.141)."""

    def mel(freq):
        return 1125.0 * np.log(1.0 + float(freq) / 700.0)

    def inv_mel(m):
        return 700.0 * (np.exp(float(m) / 1125.0) - 1.0)

    step = (mel(f_max) - mel(f_min)) / (nr_of_filters + 1)
    centers = np.array([(float(fft_size) / sampling_rate) * inv_mel(mel(f_min) + i * step)
                        for i in range(nr_of_filters + 2)], dtype=np.float32)
    mat = np.zeros((fft_size // 2 + 1, nr_of_filters))
    for k in range(mat.shape[0]):
        for j in range(1, nr_of_filters + 1):
            lo, mid, hi = centers[j - 1], centers[j], centers[j + 1]
            if lo < k < hi:
                mat[k, j - 1] = (k - lo) / (mid - lo) if k < mid else (hi - k) / (hi - mid)
    return mat.astype(np.float32)


class MelFilterbankLayer(ConcatInputLayer):
    """Applies a mel filterbank matrix to the (power/magnitude) spectrum on the feature axis.
    :param sampling_rate: sampling rate of the signal in Hz
    :param fft_size: FFT size the input (power) spectrum was computed with
    :param nr_of_filters: number of mel filters (the output feature dim)
    :param f_min: lowest frequency of the filterbank in Hz (default 0)
    :param f_max: highest frequency of the filterbank in Hz (default: sampling_rate / 2)
    """

    layer_class = "mel_filterbank"

    def __init__(self, sampling_rate=16000, fft_size=1024, nr_of_filters=80, f_min=None, f_max=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        if data.dim != fft_size // 2 + 1:
            raise ValueError("input feature dim %r does not match fft_size=%i (expected %i)" % (
                data.dim, fft_size, fft_size // 2 + 1))
        mat = mel_filter_matrix(f_min or 0, f_max or sampling_rate / 2.0, sampling_rate, fft_size, nr_of_filters)
        f = data.feature_dim_axis
        y = tf.tensordot(data.placeholder, tf.constant(mat), [[f], [0]])
        if f != data.batch_ndim - 1:
            perm = list(range(data.batch_ndim - 1))
            perm.insert(f, data.batch_ndim - 1)
            y = tf.transpose(y, perm)
        self.output.placeholder = y

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, nr_of_filters=80, out_type=None, **kwargs):
        if n_out is not NotSpecified and n_out is not None and n_out != nr_of_filters:
            raise ValueError("n_out=%r can not be different from nr_of_filters=%r" % (n_out, nr_of_filters))
        return cls._base_out_data(name, sources, nr_of_filters, out_type)


class MultiChannelMultiResolutionStftLayer(ConcatInputLayer):
    """
    STFT of every channel (the feature axis holds the channels), for several frame/FFT sizes; outputs are
    concatenated on the feature axis ([res_0-ch_0, ..., res_0-ch_N, res_1-ch_0, ...]). The number of frames
    follows the first frame size: T' = (T - frame_sizes[0]) // frame_shift + 1.
    :param frame_shift: shift between frames in samples
    :param frame_sizes: list of window sizes, one per resolution
    :param fft_sizes: list of FFT sizes, one per resolution
    :param window: window function, e.g. "hanning"
    :param use_rfft: use the real FFT (only the non-redundant half); False is refused
    :param nr_of_channels: number of input channels (the input's feature dim)
    :param pad_last_frame: pad the signal so that the last partial frame is kept
    """

    layer_class = "multichannel_multiresolution_stft_layer"
    recurrent = True

    def __init__(self, frame_shift, frame_sizes, fft_sizes, window="hanning", use_rfft=True, nr_of_channels=1,
                 pad_last_frame=False, **kwargs):
        super().__init__(**kwargs)
        if not use_rfft:
            raise NotImplementedError("use_rfft=False is not supported")
        data = self.input_data.copy_as_batch_major()
        if data.time_dim_axis != 1 or data.feature_dim_axis != 2 or data.batch_ndim != 3:
            data = data.copy_with_time_dim_axis(1).copy_with_feature_last()
        if data.dim != nr_of_channels:
            raise ValueError("nr_of_channels=%i does not match the input feature dim %r" % (nr_of_channels, data.dim))
        ref = frame_sizes[0]
        x = data.placeholder  # [B, T, C]
        results = []
        for fft_size, frame_size in zip(fft_sizes, frame_sizes):
            sig = x
            if frame_size > ref:
                sig = tf.concat([sig, tf.ones([tf.shape(sig)[0], frame_size - ref, nr_of_channels]) * 1e-7], axis=1)
            y = tf.signal.stft(tf.transpose(sig, [0, 2, 1]), frame_length=frame_size, frame_step=frame_shift,
                               fft_length=fft_size, window_fn=_window_fn(window, frame_size), pad_end=pad_last_frame)
            y = tf.transpose(y, [0, 2, 1, 3])  # [B, T', C, F]
            y = tf.reshape(y, [tf.shape(y)[0], tf.shape(y)[1], nr_of_channels * (fft_size // 2 + 1)])
            if results:
                y = y[:, :tf.shape(results[0])[1]]
            results.append(y)
        self.output.placeholder = tf.concat(results, axis=2) if len(results) > 1 else results[0]
        d_in, d_out = data.dims[1], self.output.dims[1]
        if d_in.dyn_size is not None and d_out.dyn_size is None:
            if pad_last_frame:
                d_out.dyn_size = (d_in.dyn_size - ref - 1) // frame_shift + 2
            else:
                d_out.dyn_size = (d_in.dyn_size - ref) // frame_shift + 1

    @classmethod
    def get_out_data_from_opts(cls, name, frame_shift, frame_sizes, fft_sizes, sources=(), use_rfft=True,
                               nr_of_channels=1, n_out=NotSpecified, pad_last_frame=False, **kwargs):
        total = sum((f // 2 + 1 if use_rfft else f) * nr_of_channels for f in fft_sizes)
        if n_out is not NotSpecified and n_out is not None and n_out != total:
            raise ValueError("n_out=%r does not match the fft configuration (%i)" % (n_out, total))
        data = concat_sources_template(sources, name="%s_input" % name).copy_as_batch_major()
        t = data.time_dim_axis
        if t is None:
            raise ValueError("input %s has no time axis" % data.short_repr())
        d_t = data.dims[t]
        size = None
        if d_t.dimension is not None:
            ref = frame_sizes[0]
            size = ((d_t.dimension - ref - 1) // frame_shift + 2) if pad_last_frame else (
                (d_t.dimension - ref) // frame_shift + 1)
        time = Dim(size, kind=Dim.Types.Spatial, description="%s:stft-time" % name)
        feat = Dim(total, kind=Dim.Types.Feature, description="%s:stft-feature" % name)
        return Data(name="%s_output" % name, dims=[data.dims[data.batch_dim_axis], time, feat], dtype="complex64",
                    time_dim_axis=1)


def _window_fn(window, frame_size):
    if window == "hanning":
        return tf.signal.hann_window
    if window in ("None", "ones", None):
        return lambda n, dtype: tf.ones((n,), dtype=dtype)
    if window == "blackman":
        n = np.arange(frame_size)
        w = 0.42 - 0.5 * np.cos(2 * np.pi * n / (frame_size - 1)) + 0.08 * np.cos(4 * np.pi * n / (frame_size - 1))
        return lambda length, dtype: tf.constant(w, dtype=dtype)
    raise ValueError("window=%r: unknown window (hanning, blackman, ones)" % (window,))


class MultiChannelStftLayer(MultiChannelMultiResolutionStftLayer):
    """Single-resolution variant: frame_size/fft_size instead of lists.
    :param frame_shift: shift between frames in samples
    :param frame_size: window size in samples
    :param fft_size: FFT size
    """

    layer_class = "multichannel_stft_layer"

    def __init__(self, frame_shift, frame_size, fft_size, **kwargs):
        super().__init__(frame_shift=frame_shift, frame_sizes=[frame_size], fft_sizes=[fft_size], **kwargs)

    @classmethod
    def get_out_data_from_opts(cls, frame_size, fft_size, **kwargs):
        return super().get_out_data_from_opts(frame_sizes=[frame_size], fft_sizes=[fft_size], **kwargs)
