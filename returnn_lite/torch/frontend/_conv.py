"""rf conv, transposed conv, pooling and STFT of the torch backend (named dims <-> torch's [N, C, *spatial] layout)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...frontend._utils import FrontendError, call_site, dims_str
from ._common import _is_dyn, _new, _set_sizes, _sizes, _transposed
from ...frontend.conv import transposed_crop_left, transposed_out_len


def conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter, filter_size,  # noqa
         padding, strides=1, dilation_rate=1, groups=None, bias=None):
    n = len(in_spatial_dims)
    strides = tuple(strides) if isinstance(strides, (list, tuple)) else (strides or 1,) * n
    dilation_rate = tuple(dilation_rate) if isinstance(dilation_rate, (list, tuple)) else (dilation_rate,) * n
    ks = [d.dimension for d in filter_size]
    x, batch_like, shape_b = _to_nc(source, in_dim, in_spatial_dims)
    x = _same_pad(x, padding, ks, strides, dilation_rate, 0.0)
    w = _conv_filter(filter, out_dim, filter_size)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    y = fn(x, w, None if bias is None else _transposed(bias, [out_dim]), stride=strides, dilation=dilation_rate,
           padding=tuple(padding) if isinstance(padding, (list, tuple)) else 0, groups=groups or 1)
    _set_conv_out_sizes(in_spatial_dims, out_spatial_dims, ks, padding, strides, dilation_rate)
    return _from_nc(y, shape_b, batch_like, in_dim, out_dim, in_spatial_dims, out_spatial_dims, source)

def transposed_conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims, filter, filter_size,  # noqa
                    padding, remove_padding, output_padding, strides, bias=None):
    """torch's conv_transpose without padding (the full (n - 1) * stride + k frames), then cropped (and zero-padded
    on the right) to TF's conv_transpose output (see :func:`returnn_lite.frontend.conv.transposed_out_len`)."""
    n = len(in_spatial_dims)
    ks = [d.dimension for d in filter_size]
    x, batch_like, shape_b = _to_nc(source, in_dim, in_spatial_dims)
    w = _transposed(filter, [in_dim, out_dim] + list(filter_size))
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    y = fn(x, w, None, stride=tuple(strides))
    for i, (k, st, op, rp) in enumerate(zip(ks, strides, output_padding, remove_padding)):
        n_in, full = x.shape[2 + i], y.shape[2 + i]
        left = transposed_crop_left(k, st, padding, op)
        out_len = transposed_out_len(n_in, k, st, padding, op)
        if left + out_len > full:
            pads = [0, 0] * (n - 1 - i) + [0, left + out_len - full]
            y = F.pad(y, pads)
        y = y.narrow(2 + i, left + rp, out_len - 2 * rp)
    if bias is not None:
        y = y + _transposed(bias, [out_dim]).reshape([-1] + [1] * n)
    for d_in, d_out, k, st, op, rp in zip(in_spatial_dims, out_spatial_dims, ks, strides, output_padding,
                                          remove_padding):
        if _is_dyn(d_out) and d_out != d_in and d_out.dyn_size_ext is None:
            size, sdims = _sizes(d_in)
            _set_sizes(d_out, torch.clamp(transposed_out_len(size, k, st, padding, op, rp), min=0), sdims)
    return _from_nc(y, shape_b, batch_like, in_dim, out_dim, in_spatial_dims, out_spatial_dims, source)


def stft(x, *, in_spatial_dim, frame_step, frame_size, fft_length, frame_pad_left, window, out_spatial_dim,
         out_dim):
    """Frames of frame_size every frame_step, padded to fft_length, times window, rfft (see rf.stft)."""
    batch_like = [d for d in x.dims if d != in_spatial_dim]
    raw = _transposed(x, batch_like + [in_spatial_dim])
    if raw.shape[-1] < frame_size:
        raise FrontendError("rf.stft at %s: %i samples are fewer than one frame (%i)" % (
            call_site(), raw.shape[-1], frame_size))
    frames = raw.unfold(-1, frame_size, frame_step)
    if fft_length > frame_size:
        frames = F.pad(frames, (frame_pad_left, fft_length - frame_size - frame_pad_left))
    frames = frames * torch.as_tensor(window, dtype=frames.dtype, device=frames.device)
    y = torch.fft.rfft(frames, n=fft_length)
    _set_conv_out_sizes([in_spatial_dim], [out_spatial_dim], [frame_size], "valid", [frame_step], [1])
    return _new("stft", batch_like + [out_spatial_dim, out_dim], y)

def pool(source, *, mode, pool_size, padding="valid", dilation_rate=1, strides, in_spatial_dims,
         out_spatial_dims=None):
    rest = [d for d in source.dims if d not in in_spatial_dims]
    feat = source.feature_dim if source.feature_dim in rest and not source.feature_dim.is_batch_dim() else None
    if feat is None:
        raise FrontendError("rf.pool at %s: the input %s needs a feature dim" % (
            call_site(), dims_str(source.dims)))
    n = len(in_spatial_dims)
    x, batch_like, shape_b = _to_nc(source, feat, in_spatial_dims)
    pool_size, strides, dilation_rate = tuple(pool_size), tuple(strides), tuple(dilation_rate)
    x = _int_pad(x, padding, float("-inf") if mode == "max" else 0.0)
    if mode == "max":
        x = _same_pad(x, padding, pool_size, strides, dilation_rate, float("-inf"))
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
        y = fn(x, pool_size, stride=strides, dilation=dilation_rate)
    else:
        if any(d != 1 for d in dilation_rate):
            raise FrontendError("rf.pool at %s: avg pooling with dilation is not supported" % call_site())
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
        ones = torch.ones_like(x[:1, :1])
        xs = _same_pad(x, padding, pool_size, strides, dilation_rate, 0.0)
        cnt = _same_pad(ones, padding, pool_size, strides, dilation_rate, 0.0)
        y = fn(xs, pool_size, stride=strides) / fn(cnt, pool_size, stride=strides)
    _set_conv_out_sizes(in_spatial_dims, out_spatial_dims, pool_size, padding, strides, dilation_rate)
    return _from_nc(y, shape_b, batch_like, feat, feat, in_spatial_dims, out_spatial_dims, source)


def _to_nc(source, in_dim, in_spatial_dims):
    """source -> [N, C, *spatial] (the other dims merged into N)."""
    batch_like = [d for d in source.dims if d not in in_spatial_dims and d != in_dim]
    x = _transposed(source, batch_like + [in_dim] + list(in_spatial_dims))
    shape_b = list(x.shape[:len(batch_like)])
    x = x.reshape([-1] + list(x.shape[len(batch_like):]))
    return x, batch_like, shape_b


def _from_nc(y, shape_b, batch_like, in_dim, out_feat, in_spatial_dims, out_spatial_dims, source):
    """[N, C', *out_spatial] back to named dims, in the source's order with the dims replaced."""
    y = y.reshape(shape_b + list(y.shape[1:]))
    y_dims = batch_like + [out_feat] + list(out_spatial_dims)
    res = []
    for d in source.dims:
        if d in in_spatial_dims:
            res.append(out_spatial_dims[list(in_spatial_dims).index(d)])
        elif d == in_dim:
            res.append(out_feat)
        else:
            res.append(d)
    return _new("conv", res, _transposed(_new("y", y_dims, y), res))


def _conv_filter(filter, out_dim, filter_size):  # noqa: A002
    """The rf conv filter [out, in // groups, *filter_size] as torch's weight (its in dim may equal out_dim)."""
    dims = list(filter.dims)
    if dims[0] == out_dim and dims[2:] == list(filter_size):
        return filter.placeholder
    in_dims = [d for d in dims if d != out_dim and d not in filter_size]
    return _transposed(filter, [out_dim] + in_dims + list(filter_size))


def _int_pad(x, padding, value):
    """Explicit int padding (both sides) of the spatial axes of [N, C, *spatial]; 'same'/'valid' unchanged."""
    if not isinstance(padding, (list, tuple)) or not any(padding):
        return x
    flat = []
    for p in reversed(padding):
        flat += [p, p]
    return F.pad(x, flat, mode="constant", value=value)


def _same_pad(x, padding, ks, strides, dilation_rate, value):
    """TF "same" padding (more on the right) of the spatial axes of [N, C, *spatial]."""
    if not isinstance(padding, str) or padding.lower() != "same":
        return x
    pads = []
    for i, (k, s, d) in enumerate(zip(ks, strides, dilation_rate)):
        n = x.shape[2 + i]
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        pads.append((total // 2, total - total // 2))
    flat = []
    for left, right in reversed(pads):
        flat += [left, right]
    if not any(flat):
        return x
    return F.pad(x, flat, mode="constant", value=value)


def _set_conv_out_sizes(in_spatial_dims, out_spatial_dims, ks, padding, strides, dilation_rate):
    for d_in, d_out, k, s, dil in zip(in_spatial_dims, out_spatial_dims, ks, strides, dilation_rate):
        if not _is_dyn(d_out) or d_out == d_in:
            continue
        size, sdims = _sizes(d_in)
        if isinstance(padding, (list, tuple)):
            size = size + 2 * padding[list(in_spatial_dims).index(d_in)] - (k - 1) * dil
        elif padding.lower() == "valid":
            size = size - (k - 1) * dil
        _set_sizes(d_out, torch.clamp(torch.div(size + s - 1, s, rounding_mode="floor"), min=0), sdims)

