"""rf.stft: the short-time Fourier transform (Hann window) over a spatial dim, with the original's options."""

from __future__ import annotations

from ..tensor import Dim
from ._backend import get_backend_for_tensor
from ._utils import check_dims_in, error
from .conv import _masked, _needs_masking, make_conv_out_spatial_dims, use_mask_default

__all__ = ["stft", "hann_window_np"]


def stft(x, *, in_spatial_dim, frame_step, frame_length, fft_length=None, window_use_frame_length=True,
         align_window_left=True, window_enforce_even=True, out_spatial_dim=None, out_dim=None, use_mask=None):
    """
    STFT of x over in_spatial_dim (other dims: batch) -> (complex spectrogram, out_spatial_dim, out_dim).

    Frames of ``frame_length`` samples every ``frame_step`` (no padding: ceil((T - frame_length + 1) / step)
    frames, as TF/SciPy; with ``window_use_frame_length=False`` frames of ``fft_length``, as PyTorch/librosa), times a
    periodic Hann window of frame_length samples (one less where odd and ``window_enforce_even``, as TF), placed left
    (``align_window_left``, TF) or centred (PyTorch) in the frame, zero-padded to fft_length (default frame_length);
    out_dim has ``fft_length // 2 + 1`` frequency bins.
    """
    check_dims_in("stft", x, [in_spatial_dim])
    if _needs_masking(in_spatial_dim):
        if use_mask is None:
            use_mask = use_mask_default(default=True, default_false_for_behavior_version_up_to=22)
        if use_mask:
            x = _masked(x, [in_spatial_dim], 0.0)
    fft_length = fft_length or frame_length
    if frame_length > fft_length:
        raise error("stft", "frame_length=%i > fft_length=%i" % (frame_length, fft_length))
    if out_dim is None:
        out_dim = Dim(fft_length // 2 + 1, name="stft-freq")
    frame_size = frame_length if window_use_frame_length else fft_length
    if out_spatial_dim is None:
        (out_spatial_dim,) = make_conv_out_spatial_dims(
            [in_spatial_dim], filter_size=frame_size, strides=frame_step, padding="valid")
    window = framed_window_np(frame_length=frame_length, frame_size=frame_size, fft_length=fft_length,
                              align_window_left=align_window_left, window_enforce_even=window_enforce_even)
    out = get_backend_for_tensor(x).stft(
        x, in_spatial_dim=in_spatial_dim, frame_step=frame_step, frame_size=frame_size, fft_length=fft_length,
        frame_pad_left=0 if align_window_left else (fft_length - frame_size) // 2, window=window,
        out_spatial_dim=out_spatial_dim, out_dim=out_dim)
    return out, out_spatial_dim, out_dim


def hann_window_np(size):
    """The periodic Hann window: 0.5 - 0.5 cos(2 pi n / size), n < size."""
    import numpy

    n = numpy.arange(size, dtype=numpy.float64)
    return (0.5 - 0.5 * numpy.cos(2.0 * numpy.pi * n / size)).astype(numpy.float32) if size else numpy.zeros(0)


def framed_window_np(*, frame_length, frame_size, fft_length, align_window_left, window_enforce_even):
    """
    The window to multiply each frame of ``frame_size`` samples with, as a length-fft_length vector: the frame is
    zero-padded to fft_length (on the right, or on both sides when not left-aligned), so the window covers the
    padded frame and is zero where padding is.
    """
    import numpy

    window_size = frame_length - 1 if window_enforce_even and frame_length % 2 else frame_length
    full = numpy.zeros(fft_length, dtype=numpy.float32)
    offset = 0 if align_window_left else (fft_length - window_size) // 2
    full[offset:offset + window_size] = hann_window_np(window_size)
    return full
