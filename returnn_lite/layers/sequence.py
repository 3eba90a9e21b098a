"""
Sequence layers: window, cumsum, shift_axis, prefix_in_time, postfix_in_time, time_chunking,
time_unchunking, pad, seq_len_mask, range, range_in_axis, range_from_length, rand_int, search_sorted.

Layers that change the length of an axis give it a new :class:`Dim` whose sequence lengths are set in
``__init__`` (the template only knows the tag). window and cumsum keep state inside rec loops: their
``get_rec_initial_extra_outputs`` gives the initial state and ``__init__`` takes the previous state from
``rec_previous_layer.rec_vars_outputs["state"]`` when the network is inside a rec loop.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from ..data import Data, Dim, batch_dim
from ..util import NotSpecified
from .base import ConcatInputLayer, LayerBase, concat_sources_template


def _ceildiv(a, b):
    return -(-a // b)


def _new_dim_like(tag, dimension, description):
    """A new tag of the same kind as ``tag`` (static dimension or None for dynamic)."""
    return Dim(dimension, kind=tag.kind if tag.kind is not None else Dim.Types.Spatial, description=description)


def _batch_major(data):
    return data.copy_as_batch_major() if data.have_batch_axis() else data


def _dim_size(data, axis, x=None):
    """Padded size of an axis: static int or scalar tensor (from x or the placeholder)."""
    d = data.dims[axis].dimension
    if d is not None:
        return d
    return tf.shape(data.placeholder if x is None else x)[axis]


def _is_rec_step_axis(network, data, axis):
    """
    True if ``axis`` means the time axis of the rec loop we are built in (per step): then the layer keeps its
    state over the steps (``rec_previous_layer.rec_vars_outputs``) instead of working on an axis of data.
    """
    if network is None or not network.is_inside_rec_layer():
        return False
    if isinstance(axis, Dim):
        rec_dim = network.get_inside_rec_time_dim()
        return rec_dim is not None and axis == rec_dim and axis not in data.dims
    return isinstance(axis, str) and axis.lower() in ("t", "time") and not data.have_time_axis()


def _add_dim_keep_special_axes(data, tag, axis):
    """
    Insert tag at axis; the time axis stays the axis it was, the feature axis only where it was set explicitly
    (else it is the default of the new layout), as the original's copy_add_dim_by_tag.
    """
    out = data.copy_add_dim_by_tag(tag, unbroadcast=True, axis=axis)
    kinds = ["time_dim_axis"]
    if data.feature_dim_axis_or_unspecified is not NotSpecified:
        kinds.append("feature_dim_axis")
    for kind in kinds:
        old = getattr(data, kind)
        if old is None:
            continue
        new = old if old < axis else old + 1
        if getattr(out, kind) != new:
            setattr(out, kind, new)
    return out


def _get_prev_state(layer, key="state"):
    prev = layer.rec_previous_layer
    outputs = getattr(prev, "rec_vars_outputs", None) or {}
    if key not in outputs:
        raise ValueError("layer %r inside a rec loop: the previous step's state %r is not available (the rec layer "
                         "must pass rec_previous_layer with rec_vars_outputs from get_rec_initial_extra_outputs)" % (
                             layer.name, key))
    return outputs[key]


def _static_shape_wo_batch(data, what):
    shape = []
    for d in data.dims:
        if d.is_batch_dim():
            continue
        if d.dimension is None:
            raise NotImplementedError("%s: rec state with dynamic axis %r" % (what, d))
        shape.append(d.dimension)
    return shape


def _seq_mask(tag, max_len, data, axis):
    """Bool mask of tag's lengths at padded length max_len, shaped to broadcast against data's layout."""
    return data.get_sequence_mask_broadcast(axis, tag=tag, max_len=max_len)


# ---------------------------------------------------------------------------------------------------------------
# window

class WindowLayer(ConcatInputLayer):
    """
    Adds a window axis right after ``axis`` (sliding window over it); output is batch major.
    padding "same" keeps the length (window_left/window_right frames of zeros), "valid" shortens it;
    stride keeps every stride-th window.

    :param window_size: int size of the window (or give window_dim)
    :param window_dim: Dim of the new window axis (its dimension is the window size)
    :param window_left: frames to the left for padding "same" (default: window_size - window_right - 1)
    :param window_right: frames to the right (default: window_size // 2); window_left + window_right + 1 == window_size
    :param axis: the axis to window over (default "T")
    :param out_spatial_dim: Dim of the output spatial axis (default: derived from the input axis)
    :param padding: "same" (default, keeps the length) or "valid" (only full windows)
    :param stride: keep every stride-th window (default 1)
    """

    layer_class = "window"
    recurrent = True

    def __init__(self, window_size=None, window_dim=None, window_left=None, window_right=None, axis="T",
                 out_spatial_dim=None, padding="same", stride=1, **kwargs):
        super().__init__(**kwargs)
        self.rec_vars_outputs = {}
        window_size = self._get_window_size(window_size, window_dim)
        data = _batch_major(self.input_data)
        if _is_rec_step_axis(self.network, data, axis):
            prev = _get_prev_state(self)  # [B, W, ...]
            w = 1 if data.have_batch_axis() else 0
            rest = prev[(slice(None),) * w + (slice(1, None),)]
            state = tf.concat([rest, tf.expand_dims(data.placeholder, w)], axis=w)
            self.rec_vars_outputs["state"] = state
            self.output.placeholder = state
            return
        a = data.get_axis_from_description(axis)
        x = data.placeholder
        padding = padding.lower()
        n_in = _dim_size(data, a)
        if padding == "same":
            left, right = self._get_left_right(window_size, window_left, window_right)
            if left or right:
                pads = [(0, 0)] * data.batch_ndim
                pads[a] = (left, right)
                x = tf.pad(x, pads)
            n_out = _ceildiv(n_in, stride)
        elif padding == "valid":
            n_out = _ceildiv(n_in - window_size + 1, stride)
            n_out = max(n_out, 0) if isinstance(n_out, int) else tf.maximum(n_out, 0)
        else:
            raise ValueError("window layer %r: padding must be 'same' or 'valid', got %r" % (self.name, padding))
        if isinstance(n_out, int):
            idx = (np.arange(n_out)[:, None] * stride + np.arange(window_size)[None, :]).astype("int32")
        else:
            idx = tf.range(n_out)[:, None] * stride + tf.range(window_size)[None, :]
        self.output.placeholder = tf.gather(x, idx, axis=a)  # [..., T', W, ...]
        in_tag, out_tag = data.dims[a], self.output.dims[a]
        if out_tag is not in_tag and out_tag.dyn_size is None and in_tag.dyn_size is not None:
            size = in_tag.dyn_size
            if padding == "valid":
                size = tf.maximum(size - (window_size - 1), 0)
            if stride > 1:
                size = _ceildiv(size, stride)
            out_tag.dyn_size = size

    @staticmethod
    def _get_window_size(window_size, window_dim):
        if window_dim is not None:
            if window_size is not None and window_size != window_dim.dimension:
                raise ValueError("window_size %r does not match window_dim %r" % (window_size, window_dim))
            window_size = window_dim.dimension
        if not isinstance(window_size, int) or window_size < 1:
            raise ValueError("window_size must be a positive int, got %r" % (window_size,))
        return window_size

    @staticmethod
    def _get_left_right(window_size, window_left, window_right):
        if window_right is None:
            window_right = window_size - window_left - 1 if window_left is not None else window_size // 2
        if window_left is None:
            window_left = window_size - window_right - 1
        if window_left + window_right + 1 != window_size:
            raise ValueError("window_left %r + window_right %r + 1 != window_size %r" % (
                window_left, window_right, window_size))
        return window_left, window_right

    @classmethod
    def get_out_data_from_opts(cls, name, network, window_size=None, window_dim=None, axis="T", sources=(),
                               padding="same", stride=1, out_spatial_dim=None, **kwargs):
        window_size = cls._get_window_size(window_size, window_dim)
        data = _batch_major(concat_sources_template(sources, name="%s_output" % name))
        if window_dim is None:
            window_dim = Dim(window_size, kind=Dim.Types.Spatial, description="%s:window" % name)
        if _is_rec_step_axis(network, data, axis):
            return _add_dim_keep_special_axes(data, window_dim, 1 if data.have_batch_axis() else 0)
        a = data.get_axis_from_description(axis)
        in_tag = data.dims[a]
        if padding.lower() == "same" and stride == 1:
            out_tag = in_tag
        else:
            n = in_tag.dimension
            if n is not None:
                n = _ceildiv(n if padding.lower() == "same" else max(n - window_size + 1, 0), stride)
            key = ("conv-out", padding.lower(), window_size if padding.lower() == "valid" else 1, stride, 1)
            out_tag = in_tag.get_derived(key, lambda: _new_dim_like(in_tag, n, "%s:window-out" % name))
        if out_spatial_dim is not None:
            out_tag = out_spatial_dim
        if out_tag is not in_tag:
            data = data.copy_template_replace_dim_tag(a, out_tag)
        return _add_dim_keep_special_axes(data, window_dim, a + 1)

    @classmethod
    def get_rec_initial_extra_outputs(cls, batch_dim=None, rec_layer=None, window_size=None, window_dim=None,
                                      axis="T", sources=(), network=None, **kwargs):
        """Initial rec state: zeros [B, window_size, <input dims without batch>] (input as inside the loop)."""
        window_size = cls._get_window_size(window_size, window_dim)
        data = _batch_major(concat_sources_template(sources))
        if not _is_rec_step_axis(network, data, axis):
            return {}
        shape = ([batch_dim] if data.have_batch_axis() else []) + [window_size] + _static_shape_wo_batch(data, "window")
        return {"state": tf.zeros(shape, dtype=data.dtype)}


# ---------------------------------------------------------------------------------------------------------------
# cumsum

class CumsumLayer(ConcatInputLayer):
    """tf.cumsum over an axis (inside a rec loop: running sum over the steps).

    :param axis: the axis to sum over (default "T"); inside a rec loop: over the steps
    :param additional_left_summand_per_element: constant added to every element before summing (default None)
    :param reverse: sum from the end (default False; refused inside a rec loop)
    """

    layer_class = "cumsum"
    recurrent = True

    def __init__(self, axis="T", additional_left_summand_per_element=None, reverse=False, **kwargs):
        super().__init__(**kwargs)
        self.rec_vars_outputs = {}
        data = self.input_data
        in_loop = _is_rec_step_axis(self.network, data, axis)
        if in_loop:
            data = _batch_major(data)
        x = data.placeholder
        if isinstance(additional_left_summand_per_element, str) and x.dtype != tf.string:
            raise TypeError("option 'additional_left_summand_per_element' %r: a str only for string inputs (the "
                            "input is %s)" % (additional_left_summand_per_element, x.dtype.name))
        if additional_left_summand_per_element is not None:
            x = tf.constant(np.asarray(additional_left_summand_per_element).astype(x.dtype.as_numpy_dtype)) + x
        if in_loop:
            if reverse:
                raise NotImplementedError("cumsum layer %r: reverse=True inside a rec loop" % self.name)
            x = _get_prev_state(self) + x
            self.rec_vars_outputs["state"] = x
        else:
            a = data.get_axis_from_description(axis)
            x = tf.cumsum(x, axis=a, reverse=reverse)
        if x.dtype.base_dtype.name != self.output.dtype:
            x = tf.cast(x, self.output.dtype)
        self.output.placeholder = x

    @classmethod
    def get_out_data_from_opts(cls, name, network, sources=(), axis="T", **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        if _is_rec_step_axis(network, data, axis):
            return _batch_major(data)
        data.get_axis_from_description(axis)  # fail early on an axis that matches nothing
        return data

    @classmethod
    def get_rec_initial_extra_outputs(cls, batch_dim=None, rec_layer=None, axis="T", sources=(), network=None,
                                      **kwargs):
        """Initial rec state: zeros like one step of the input ([B, ...])."""
        data = _batch_major(concat_sources_template(sources))
        if not _is_rec_step_axis(network, data, axis):
            return {}
        shape = ([batch_dim] if data.have_batch_axis() else []) + _static_shape_wo_batch(data, "cumsum")
        return {"state": tf.zeros(shape, dtype=data.dtype)}


# ---------------------------------------------------------------------------------------------------------------
# shift_axis

class ShiftAxisLayer(ConcatInputLayer):
    """Shift the frames of an axis (amount < 0: left, > 0: right); pad keeps the size.

    :param axis: the axis to shift (description, dim tag or int)
    :param amount: non-zero int: > 0 shifts right, < 0 shifts left
    :param pad: pad with pad_value to keep the axis size (default True); False: the axis shrinks
    :param pad_value: value of the padded frames (default 0)
    :param adjust_size_info: adjust the sequence lengths by the shift (default True)
    """

    layer_class = "shift_axis"

    def __init__(self, axis, amount, pad=True, pad_value=0, adjust_size_info=True, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        a = data.get_axis_from_description(axis)
        x = data.placeholder
        slices = [slice(None)] * data.batch_ndim
        if amount < 0:  # left shift: drop the first -amount frames
            slices[a] = slice(-amount, None)
            paddings = (0, -amount)
        else:  # right shift: drop the last amount frames
            slices[a] = slice(None, -amount)
            paddings = (amount, 0)
        x = x[tuple(slices)]
        if pad:
            pads = [(0, 0)] * data.batch_ndim
            pads[a] = paddings
            x = tf.pad(x, pads, constant_values=tf.constant(pad_value, dtype=x.dtype))
        self.output.placeholder = x
        in_tag, out_tag = data.dims[a], self.output.dims[a]
        if out_tag is not in_tag and out_tag.dyn_size is None and in_tag.dyn_size is not None:
            size = in_tag.dyn_size
            if adjust_size_info:
                delta = amount if (amount < 0 or pad) else 0
                size = tf.clip_by_value(size + delta, 0, _dim_size(self.output, a))
            out_tag.dyn_size = size

    @classmethod
    def get_out_data_from_opts(cls, name, amount, axis, pad=True, adjust_size_info=True, sources=(), **kwargs):
        if not isinstance(amount, int) or amount == 0:
            raise ValueError("amount must be a non-zero int, got %r" % (amount,))
        data = concat_sources_template(sources, name="%s_output" % name)
        if pad and not adjust_size_info:  # same shape, same lengths: the same tag, as the original
            return data
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        if tag.dimension is not None:
            if pad:
                return data
            new = _new_dim_like(tag, max(0, tag.dimension - abs(amount)), "%s:shift_axis" % name)
        else:
            new = _new_dim_like(tag, None, "%s:shift_axis" % name)
        return data.copy_template_replace_dim_tag(a, new)


# ---------------------------------------------------------------------------------------------------------------
# prefix_in_time / postfix_in_time

def _const_or_layer_frame(value, data, axis, dtype):
    """A constant or a layer output (without ``axis``) as a tensor broadcastable against data with size-1 axis."""
    if isinstance(value, LayerBase):
        frame = data.copy_template_excluding_axis(axis)
        v = value.output.copy_compatible_to(frame, check_sparse=False).placeholder
        v = tf.expand_dims(v, axis)
        if v.dtype.base_dtype.name != dtype:
            v = tf.cast(v, dtype)
        return v
    return tf.constant(np.asarray(value).astype(dtype))


def _as_time_batch_major(data, axis=None):
    """Copy with layout [T, B, ...] (other axes keep their order); T is ``axis`` if given, else the time axis."""
    t, b = data.time_dim_axis, data.batch_dim_axis
    if axis is not None:
        t = data.get_axis_from_description(axis)
    if t is None or b is None:
        raise ValueError("%s needs a time and a batch axis" % data.short_repr())
    return data.copy_transpose([t, b] + [i for i in range(data.batch_ndim) if i not in (t, b)])


def _full_shape(data, x):
    return [data.dims[i].dimension if data.dims[i].dimension is not None else tf.shape(x)[i]
            for i in range(data.batch_ndim)]


class PrefixInTimeLayer(ConcatInputLayer):
    """Adds ``repeat`` frames of ``prefix`` (constant or layer) before each sequence.

    :param axis: the axis to prefix (default "T")
    :param out_dim: Dim of the output axis (default: a new tag)
    :param prefix: value of the prefix frames: constant (default 0.0) or layer
    :param repeat: number of prefix frames: int (default 1) or a layer with per-sequence counts [B]
    :param size_base: layer whose sequence lengths the output gets (repeat = its lengths - the input lengths)
    """

    layer_class = "prefix_in_time"
    layer_options = ("prefix", "repeat", "size_base")
    recurrent = True

    def __init__(self, axis="T", out_dim=None, prefix=0.0, repeat=1, size_base=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        a = data.get_axis_from_description(axis)
        x = data.placeholder
        in_tag = data.dims[a]
        new_tags = [d for d in self.output.dims if not any(d is e for e in data.dims)]
        out_tag = new_tags[0] if len(new_tags) == 1 else self.output.dims[a]  # the output may be batch major
        pre = _const_or_layer_frame(prefix, data, a, data.dtype)
        if size_base is not None:
            repeat = size_base.output.get_sequence_lengths() - in_tag.dyn_size
        elif isinstance(repeat, LayerBase):
            repeat = repeat.output.copy_as_batch_major().placeholder
        if isinstance(repeat, int):
            shape = _full_shape(data, x)
            shape[a] = repeat
            c = tf.broadcast_to(pre, shape) if isinstance(pre, tf.Tensor) and pre.shape.rank else tf.fill(shape, pre)
            self.output.placeholder = tf.concat([c, x], axis=a)
            if out_tag is not in_tag and out_tag.dyn_size is None and in_tag.dyn_size is not None:
                out_tag.dyn_size = in_tag.dyn_size + repeat
            return
        # per-sequence repeat [B]: out[b, t] = prefix if t < repeat[b] else x[b, t - repeat[b]]
        b = data.batch_dim_axis
        if b is None:
            raise ValueError("prefix_in_time %r: per-sequence repeat needs a batch axis" % self.name)
        repeat = tf.cast(repeat, tf.int32)
        max_rep = tf.maximum(tf.reduce_max(repeat), 0)
        shape = _full_shape(data, x)
        shape[a] = max_rep
        c = tf.broadcast_to(pre, shape) if pre.shape.rank else tf.fill(shape, pre)
        xp = tf.concat([c, x], axis=a)  # [.., max_rep + T, ..]
        n_out = tf.shape(xp)[a]
        idx = tf.range(n_out)[None, :] + (max_rep - repeat)[:, None]  # [B, T']
        idx = tf.minimum(idx, n_out - 1)
        perm = [b, a] + [i for i in range(data.batch_ndim) if i not in (b, a)]
        xt = tf.transpose(xp, perm)
        yt = tf.gather(xt, idx, axis=1, batch_dims=1)  # [B, T', rest...]
        # the output (batch-spatial-major template, as the original) in terms of the axes of yt
        yt_dims = [data.dims[b], out_tag] + [data.dims[i] for i in perm[2:]]
        out_perm = []
        for d in self.output.dims:
            j = next(j for j, e in enumerate(yt_dims) if (e is d or e == d) and j not in out_perm)
            out_perm.append(j)
        self.output.placeholder = tf.transpose(yt, out_perm) if out_perm != list(range(len(out_perm))) else yt
        if out_tag is not in_tag and out_tag.dyn_size is None:
            out_tag.dyn_size = in_tag.dyn_size + repeat

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), axis="T", out_dim=None, size_base=None, repeat=1, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        if size_base is not None:
            new = size_base.output.get_time_dim_tag()
        elif isinstance(repeat, int):
            new = tag.get_derived(("add_left", repeat), lambda: _new_dim_like(
                tag, None if tag.dimension is None else tag.dimension + repeat, "%s:prefix_in_time" % name))
        else:
            new = _new_dim_like(tag, None, "%s:prefix_in_time" % name)
        if out_dim is not None:
            new = out_dim
        out = data.copy_template_replace_dim_tag(a, new)
        if size_base is None and isinstance(repeat, LayerBase):  # per-sequence repeat: batch-spatial-major, as the original
            out = out.copy_as_batch_spatial_major()
        return out


class PostfixInTimeLayer(ConcatInputLayer):
    """Adds ``repeat`` frames of ``postfix`` (constant or layer) right after the end of each sequence.

    :param axis: the axis to postfix (default "T")
    :param out_dim: Dim of the output axis (default: a new tag)
    :param postfix: value of the added frames: constant (default 0.0) or layer
    :param repeat: number of added frames, an int >= 0 (default 1)
    """

    layer_class = "postfix_in_time"
    layer_options = ("postfix",)  # a layer name, or a constant
    recurrent = True

    def __init__(self, axis="T", out_dim=None, postfix=0.0, repeat=1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(repeat, int) or repeat < 0:
            raise ValueError("postfix_in_time %r: repeat must be an int >= 0, got %r" % (self.name, repeat))
        data = self.input_data
        a = data.get_axis_from_description(axis)
        x = data.placeholder
        in_tag, out_tag = data.dims[a], self.output.dims[a]
        post = _const_or_layer_frame(postfix, data, a, data.dtype)
        pads = [(0, 0)] * data.batch_ndim
        pads[a] = (0, repeat)
        xp = tf.pad(x, pads)
        if in_tag.dyn_size is not None:
            mask = _seq_mask(in_tag, tf.shape(xp)[a], data, a)
            if not post.shape.rank:
                post = tf.fill([1] * data.batch_ndim, post)
            self.output.placeholder = tf.where(mask, xp, post)
        else:  # static axis: postfix after the last frame
            shape = _full_shape(data, x)
            shape[a] = repeat
            c = tf.broadcast_to(post, shape) if post.shape.rank else tf.fill(shape, post)
            self.output.placeholder = tf.concat([x, c], axis=a)
        if out_tag is not in_tag and out_tag.dyn_size is None and in_tag.dyn_size is not None:
            out_tag.dyn_size = in_tag.dyn_size + repeat

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), axis="T", out_dim=None, repeat=1, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        new = tag.get_derived(("add_right", repeat), lambda: _new_dim_like(
            tag, None if tag.dimension is None else tag.dimension + repeat, "%s:postfix_in_time" % name))
        if out_dim is not None:
            new = out_dim
        return data.copy_template_replace_dim_tag(a, new)


# ---------------------------------------------------------------------------------------------------------------
# time_chunking / time_unchunking

class TimeChunkingLayer(ConcatInputLayer):
    """
    Splits the time axis into chunks of chunk_size frames every chunk_step frames. Output is time major
    [chunk_size, B * n_chunks, ...] (chunks of sequence b at b * n_chunks + c), with new time and batch tags.

    :param chunk_size: frames per chunk (the new time axis size)
    :param chunk_step: frames between chunk starts (chunks overlap if < chunk_size)
    :param axis: the axis to chunk (default "T")
    :param out_dim: Dim of the chunk time axis (default: a new tag)
    """

    layer_class = "time_chunking"
    recurrent = True

    def __init__(self, chunk_size, chunk_step, axis="T", out_dim=None, **kwargs):
        super().__init__(**kwargs)
        self.chunk_size, self.chunk_step = chunk_size, chunk_step
        data = _as_time_batch_major(self.input_data, axis)  # [T, B, ...]
        self.chunk_input = data
        x = data.placeholder
        n_time = _dim_size(data, 0)
        n_batch = tf.shape(x)[1]
        if isinstance(n_time, int):
            n_chunks = max(n_time - chunk_size + chunk_step - 1, 0) // chunk_step + 1
            idx = (np.arange(n_chunks)[:, None] * chunk_step + np.arange(chunk_size)[None, :]).astype("int32")
            pad_to = (n_chunks - 1) * chunk_step + chunk_size
        else:
            n_chunks = tf.maximum(n_time - chunk_size + chunk_step - 1, 0) // chunk_step + 1
            idx = tf.range(n_chunks)[:, None] * chunk_step + tf.range(chunk_size)[None, :]
            pad_to = (n_chunks - 1) * chunk_step + chunk_size
        self.n_chunks = n_chunks
        x = tf.pad(x, [(0, pad_to - n_time)] + [(0, 0)] * (data.batch_ndim - 1))
        y = tf.gather(x, idx, axis=0)  # [n_chunks, size, B, ...]
        rest = list(range(3, data.batch_ndim + 1))
        y = tf.transpose(y, [1, 2, 0] + rest)  # [size, B, n_chunks, ...]
        shape = [chunk_size, n_batch * n_chunks] + [_dim_size(data, i, x) for i in range(2, data.batch_ndim)]
        self.output.placeholder = tf.reshape(y, shape)
        lens = data.dims[0].dyn_size
        if lens is None:
            lens = tf.fill([n_batch], n_time)
        starts = tf.range(n_chunks) * chunk_step if not isinstance(n_chunks, int) else np.arange(
            n_chunks, dtype="int32") * chunk_step
        chunk_lens = tf.clip_by_value(lens[:, None] - starts[None, :], 0, chunk_size)  # [B, n_chunks]
        self.output.dims[0].dyn_size = tf.reshape(chunk_lens, [-1])

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), axis="T", out_dim=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        data = _as_time_batch_major(data, axis)
        time_tag = out_dim or Dim(None, kind=Dim.Types.Spatial, description="%s:chunk-time" % name)
        batch_tag = Dim(None, kind=Dim.Types.Batch, description="%s:chunk-batch" % name)
        out = data.copy_template_replace_dim_tag(0, time_tag).copy_template_replace_dim_tag(1, batch_tag)
        out.time_dim_axis = 0
        return out


class TimeUnChunkingLayer(ConcatInputLayer):
    """Inverse of time_chunking: overlap-add of the chunks (averaged where chunks overlap).

    :param chunking_layer: the time_chunking layer whose chunking is undone (restores its batch and time)
    """

    layer_class = "time_unchunking"
    layer_options = ("chunking_layer",)
    required_options = ("chunking_layer",)
    recurrent = True

    def __init__(self, chunking_layer, **kwargs):
        super().__init__(**kwargs)
        ch = chunking_layer
        size, step, n_chunks = ch.chunk_size, ch.chunk_step, ch.n_chunks
        data = _as_time_batch_major(self.input_data)  # [size, B*n, ...]
        x = data.placeholder
        n_time = _dim_size(ch.chunk_input, 0)
        n_batch = tf.shape(ch.chunk_input.placeholder)[1]
        rest_shape = [_dim_size(data, i) for i in range(2, data.batch_ndim)]
        x = tf.reshape(x, [size, n_batch, n_chunks] + rest_shape)
        rest = list(range(3, data.batch_ndim + 1))
        x = tf.transpose(x, [2, 0, 1] + rest)  # [n_chunks, size, B, ...]
        chunk_lens = data.dims[0].dyn_size
        mask = tf.sequence_mask(tf.reshape(chunk_lens, [n_batch, n_chunks]), maxlen=size, dtype=x.dtype)  # [B,n,size]
        mask = tf.transpose(mask, [1, 2, 0])  # [n, size, B]
        mask_x = tf.reshape(mask, tf.concat([tf.shape(mask), [1] * len(rest_shape)], 0)) if rest_shape else mask
        flat_pos = tf.reshape(tf.range(n_chunks)[:, None] * step + tf.range(size)[None, :], [-1])
        pad_to = (n_chunks - 1) * step + size
        summed = tf.math.unsorted_segment_sum(
            tf.reshape(x * mask_x, [-1, n_batch] + rest_shape), flat_pos, pad_to)  # [L, B, ...]
        count = tf.math.unsorted_segment_sum(tf.reshape(mask, [-1, n_batch]), flat_pos, pad_to)  # [L, B]
        count = tf.maximum(count, 1)
        if rest_shape:
            count = tf.reshape(count, tf.concat([tf.shape(count), [1] * len(rest_shape)], 0))
        self.output.placeholder = (summed / count)[:n_time]

    @classmethod
    def get_out_data_from_opts(cls, name, chunking_layer, sources=(), **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        data = _as_time_batch_major(data)
        chunked = _as_time_batch_major(chunking_layer.output)
        if data.dims[1] != chunked.dims[1]:
            raise ValueError("time_unchunking: option 'from': %s is not in the chunks of chunking_layer %r (batch %s); "
                             "unchunk a layer computed from the chunks" % (
                                 data.short_repr(), chunking_layer.name, chunked.dims[1]))
        orig = _as_time_batch_major(concat_sources_template(chunking_layer.sources),
                                    (chunking_layer.kwargs or {}).get("axis", "T"))
        out = data.copy_template_replace_dim_tag(0, orig.dims[0]).copy_template_replace_dim_tag(1, orig.dims[1])
        out.time_dim_axis = 0
        return out


# ---------------------------------------------------------------------------------------------------------------
# pad

def _reflect_index(i, n, mode):
    """Source index for (possibly out of range) index i into an axis of length n."""
    if mode == "replication":
        return tf.clip_by_value(i, 0, tf.maximum(n - 1, 0))
    if mode == "reflect":
        period = tf.maximum(2 * (n - 1), 1)
        j = tf.math.floormod(i, period)
        return tf.where(j >= n, period - j, j)
    if mode == "symmetric":
        period = tf.maximum(2 * n, 1)
        j = tf.math.floormod(i, period)
        return tf.where(j >= n, period - 1 - j, j)
    raise ValueError("unknown pad mode %r" % mode)


class PadLayer(ConcatInputLayer):
    """Pads axes left/right (constant value, reflect, symmetric, replication); dynamic lengths grow.

    :param axes: the axes to pad (description, dim tag, or a list)
    :param padding: int, (left, right), or a list of (left, right) per axis
    :param out_dims: Dim(s) of the padded output axes (default: new tags)
    :param handle_dynamic_dims: pad right after each sequence's end instead of after the max length (default None: False)
    :param value: the padding value for mode "constant" (default 0)
    :param mode: "constant" (default), "reflect", "symmetric" or "replication"
    """

    layer_class = "pad"

    def __init__(self, axes, padding, out_dims=None, handle_dynamic_dims=None, value=0, mode="constant", **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        axes_ = data.get_axes_from_description(axes)
        padding = self._transform_padding(padding, axes_)
        mode = mode.lower()
        if mode not in ("constant", "reflect", "symmetric", "replication"):
            raise ValueError("pad layer %r: unknown mode %r" % (self.name, mode))
        if handle_dynamic_dims is None:
            handle_dynamic_dims = False  # behavior version 0: plain tf.pad, no per-sequence padding
        x = data.placeholder
        dyn_axes = [(a, p) for a, p in zip(axes_, padding)
                    if handle_dynamic_dims and data.dims[a].dyn_size is not None and p[1] > 0]
        static_axes = [(a, p) for a, p in zip(axes_, padding) if (a, p) not in dyn_axes and sum(p) > 0]
        if static_axes:
            pads = [(0, 0)] * data.batch_ndim
            for a, p in static_axes:
                pads[a] = p
            if mode == "replication":
                for a, p in static_axes:
                    n = _dim_size(data, a, x)
                    idx = _reflect_index(tf.range(-p[0], n + p[1]), n, mode)
                    x = tf.gather(x, idx, axis=a)
            elif mode == "constant":
                x = tf.pad(x, pads, mode="CONSTANT", constant_values=tf.constant(value, dtype=x.dtype))
            else:
                x = tf.pad(x, pads, mode=mode.upper())
        for a, p in dyn_axes:  # per-sequence padding at the end of each sequence
            x = self._pad_dynamic(data, x, a, p, value, mode)
        self.output.placeholder = x
        for a, p in zip(axes_, padding):
            in_tag, out_tag = data.dims[a], self.output.dims[a]
            if out_tag is not in_tag and out_tag.dyn_size is None and in_tag.dyn_size is not None:
                out_tag.dyn_size = in_tag.dyn_size + (p[0] + p[1])

    @staticmethod
    def _pad_dynamic(data, x, a, p, value, mode):
        tag = data.dims[a]
        b = data.batch_dim_axis
        n_pad = tf.shape(x)[a] + p[0] + p[1]
        if mode == "constant":
            pads = [(0, 0)] * data.batch_ndim
            pads[a] = p
            xp = tf.pad(x, pads, constant_values=tf.constant(value, dtype=x.dtype))
            lens = tag.dyn_size + p[0]
            pos = tf.range(n_pad)
            mask = tf.logical_and(pos[None, :] >= p[0], pos[None, :] < lens[:, None])  # [B, T']
        else:
            if b is None:
                raise NotImplementedError("pad %r with handle_dynamic_dims needs a batch axis" % mode)
            lens = tag.dyn_size
            idx = _reflect_index(tf.range(n_pad)[None, :] - p[0], lens[:, None], mode)  # [B, T']
            perm = [b, a] + [i for i in range(data.batch_ndim) if i not in (b, a)]
            y = tf.gather(tf.transpose(x, perm), idx, axis=1, batch_dims=1)
            return tf.transpose(y, np.argsort(perm))
        if b is None:
            mask = mask[0]
            shape = [1] * data.batch_ndim
            shape[a] = -1
            mask = tf.reshape(mask, shape)
        else:
            if b > a:
                mask = tf.transpose(mask)
            for i in range(data.batch_ndim):
                if i not in (a, b):
                    mask = tf.expand_dims(mask, i)
        return tf.where(mask, xp, tf.constant(value, dtype=x.dtype))

    @staticmethod
    def _transform_padding(padding, axes):
        if isinstance(padding, (list, tuple)):
            if padding and isinstance(padding[0], (list, tuple)):
                if len(padding) != len(axes) or any(len(p) != 2 for p in padding):
                    raise ValueError("padding %r does not match axes %r" % (padding, axes))
                return [tuple(p) for p in padding]
            if len(padding) != 2:
                raise ValueError("padding must be int, (left, right) or a list of those, got %r" % (padding,))
            return [tuple(padding)] * len(axes)
        return [(padding, padding)] * len(axes)

    @classmethod
    def get_out_data_from_opts(cls, name, axes, padding, sources=(), out_dims=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        axes_ = data.get_axes_from_description(axes)
        if not axes_:
            raise ValueError("axes %r match no axis of %s" % (axes, data.short_repr()))
        padding = cls._transform_padding(padding, axes_)
        if out_dims is not None:
            out_dims = list(out_dims) if isinstance(out_dims, (list, tuple)) else [out_dims] * len(axes_)
        for i, (a, p) in enumerate(zip(axes_, padding)):
            tag = data.dims[a]
            if out_dims:
                new = out_dims[i]
            elif sum(p) == 0:
                continue
            else:
                new = tag.get_derived(("pad", p[0], p[1]), lambda: _new_dim_like(
                    tag, None if tag.dimension is None else tag.dimension + p[0] + p[1], "%s:pad%i" % (name, i)))
                new.arith_of = new.arith_of or ("add", (tag, p[0] + p[1]))  # as the original's p0 + dim + p1
            data = data.copy_template_replace_dim_tag(a, new)
        return data


# ---------------------------------------------------------------------------------------------------------------
# seq_len_mask

class SeqLenMaskLayer(ConcatInputLayer):
    """Sets frames outside the sequence (or outside [start, ...) / the window) to mask_value.

    :param mask_value: value set at the masked frames
    :param axis: the axis to mask (default "T")
    :param seq_len_source: layer whose sequence lengths define the mask (default: the input's own)
    :param start: layer with int start positions [B]: frames before them are masked
    :param window_start: int or layer: only frames in [window_start, window_start + window_size) are kept
    :param window_size: int or layer: the window size (needed with window_start)
    """

    layer_class = "seq_len_mask"
    layer_options = ("seq_len_source", "start", "window_start", "window_size")

    def __init__(self, mask_value, axis="T", seq_len_source=None, start=None, window_start=None, window_size=None,
                 **kwargs):
        super().__init__(**kwargs)
        x = self.input_data
        mask = self.build_mask(
            x, axis=axis, seq_len_source=seq_len_source.output if seq_len_source is not None else None,
            start=start.output if start is not None else None,
            window_start=window_start.output if isinstance(window_start, LayerBase) else window_start,
            window_size=window_size.output if isinstance(window_size, LayerBase) else window_size)
        if mask is None:
            self.output.placeholder = x.placeholder
        else:
            self.output.placeholder = tf.where(mask, x.placeholder, tf.constant(mask_value, dtype=x.placeholder.dtype))

    @classmethod
    def build_mask(cls, x, axis="T", seq_len_source=None, start=None, window_start=None, window_size=None):
        """Bool mask broadcastable to x (None if nothing is masked)."""
        a = x.get_axis_from_description(axis)
        n = _dim_size(x, a)
        mask = None
        if seq_len_source is not None:
            tag = seq_len_source.get_time_dim_tag() if seq_len_source.have_time_axis() else None
            if tag is None or tag.dyn_size is None:
                raise ValueError("seq_len_source %s has no sequence lengths" % seq_len_source.short_repr())
            mask = _seq_mask(tag, n, x, a)
        elif x.dims[a].dyn_size is not None:
            mask = x.get_sequence_mask_broadcast(a)
        if start is not None or window_start is not None:
            shape = [1] * x.batch_ndim
            shape[a] = -1
            idxs = tf.reshape(tf.range(n), shape)

            def compat(d):
                v = d.copy_compatible_to(x, check_sparse=False, check_dtype=False).placeholder
                return tf.cast(v, tf.int32)

            if start is not None:
                m = tf.greater_equal(idxs, compat(start))
                mask = m if mask is None else tf.logical_and(mask, m)
            if window_start is not None:
                if window_size is None:
                    raise ValueError("window_start needs window_size")
                ws = compat(window_start) if isinstance(window_start, Data) else window_start
                size = compat(window_size) if isinstance(window_size, Data) else window_size
                m = tf.logical_and(tf.greater_equal(idxs, ws), tf.less(idxs, ws + size))
                mask = m if mask is None else tf.logical_and(mask, m)
        return mask

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), axis="T", **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        data.get_axis_from_description(axis)
        return data


# ---------------------------------------------------------------------------------------------------------------
# range, range_in_axis, range_from_length, rand_int

class RangeLayer(LayerBase):
    """tf.range(start, limit, delta): a static axis without batch.

    :param limit: end of the range (exclusive), as tf.range
    :param start: start of the range (default 0)
    :param delta: step (default 1)
    :param dtype: output dtype (default None: int32 for ints, float32 for floats)
    :param sparse: mark the output sparse with dim = the range size (default False)
    :param out_spatial_dim: Dim of the output axis (must match the range size; default: a new tag)
    """

    layer_class = "range"
    default_from = ()

    def __init__(self, limit, start=0, delta=1, dtype=None, sparse=False, out_spatial_dim=None, **kwargs):
        super().__init__(**kwargs)
        if not tf.as_dtype(self.output.dtype).is_floating:
            start, limit, delta = int(start), int(limit), int(delta)
        self.output.placeholder = tf.range(start, limit, delta, dtype=self.output.dtype)

    @classmethod
    def get_out_data_from_opts(cls, name, limit, start=0, delta=1, dtype=None, sparse=False, out_spatial_dim=None,
                               **kwargs):
        if dtype is None:
            dtype = "float32" if any(float(v) != int(v) for v in (limit, start, delta)) else "int32"
        n = max(0, int(math.ceil((limit - start) / delta)))
        tag = out_spatial_dim or Dim(n, kind=Dim.Types.Spatial, description="%s:range" % name)
        if tag.dimension != n:
            raise ValueError("out_spatial_dim %r does not match the range size %i" % (tag, n))
        # the original's sparse range has a sparse dim of unknown size
        sparse_dim = Dim(None, kind=Dim.Types.Spatial, description="%s:range-indices" % name) if sparse else None
        return Data(name="%s_output" % name, dims=[tag], dtype=dtype, sparse_dim=sparse_dim)


class RangeInAxisLayer(LayerBase):
    """tf.range over the size of an axis of the source; the output has only that axis.

    :param axis: the axis of the source whose positions 0..n-1 are output
    :param dtype: output dtype (default "int32")
    :param unbroadcast: refused unless False (deprecated)
    :param keepdims: refused unless False (deprecated)
    :param sparse: mark the output sparse with dim = the axis size (default False)
    """

    layer_class = "range_in_axis"
    recurrent = True

    def __init__(self, axis, dtype="int32", unbroadcast=False, keepdims=False, sparse=False, **kwargs):
        super().__init__(**kwargs)
        data = self.sources[0].output
        if self.output.batch_ndim == 0:  # inside a rec loop over the rec time axis: the current step
            self.output.placeholder = tf.cast(self.network.get_rec_step_index(), dtype)
            return
        a = data.get_axis_from_description(axis)
        if a == data.batch_dim_axis:
            n = data.get_batch_dim()
        else:
            n = _dim_size(data, a)
        self.output.placeholder = tf.range(n, dtype=dtype)

    @classmethod
    def get_out_data_from_opts(cls, name, network, sources, axis, dtype="int32", sparse=False, unbroadcast=False,
                               keepdims=False, **kwargs):
        if len(sources) != 1:
            raise ValueError("range_in_axis needs exactly one source, got %i" % len(sources))
        if unbroadcast or keepdims:
            raise ValueError("range_in_axis: unbroadcast and keepdims are not supported (deprecated)")
        data = sources[0].output
        if (network.is_inside_rec_layer() and isinstance(axis, str) and axis.upper() == "T"
                and not data.have_time_axis()):
            return Data(name="%s_output" % name, dims=[], dtype=dtype,
                        sparse_dim=network.get_inside_rec_time_dim() if sparse else None)
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        return Data(name="%s_output" % name, dims=[tag], dtype=dtype, sparse_dim=tag if sparse else None)


def _find_dim_with_size(network, size):
    """An existing dim tag whose sequence lengths are the tensor ``size``, or None."""
    net = network
    while net is not None:
        for layer in list(net.layers.values()):
            out = getattr(layer, "output", None)
            for d in (out.dims if out is not None else ()):
                if d.dyn_size is size:
                    return d
        net = net.parent_net
    for data in network.get_root_network().extern_data.data.values():
        for d in data.dims:
            if d.dyn_size is size:
                return d
    return None


class RangeFromLengthLayer(LayerBase):
    """Sequence lengths [B] in, tf.range(max length) out, over the dim tag with these lengths (new if needed).

    :param dtype: output dtype (default "int32")
    :param sparse: mark the output sparse (default False)
    :param out_spatial_dim: Dim of the output axis (default: the dim tag with these lengths, new if needed)
    """

    layer_class = "range_from_length"
    recurrent = True

    def __init__(self, dtype="int32", sparse=False, out_spatial_dim=None, **kwargs):
        super().__init__(**kwargs)
        src = self.sources[0].output
        tag = self.output.dims[0]
        if tag.dyn_size is None:
            tag.dyn_size = src.placeholder
        self.output.placeholder = tf.range(tf.reduce_max(src.placeholder), dtype=dtype)

    @classmethod
    def get_out_data_from_opts(cls, name, network, sources, dtype="int32", sparse=False, out_spatial_dim=None,
                               **kwargs):
        if len(sources) != 1:
            raise ValueError("range_from_length needs exactly one source, got %i" % len(sources))
        src = sources[0].output
        if src.dtype not in ("int32", "int64"):
            raise TypeError("range_from_length: source %r must hold int lengths, got dtype %s" % (
                sources[0].name, src.dtype))
        tag = out_spatial_dim
        if tag is None and src.placeholder is not None:
            tag = _find_dim_with_size(network, src.placeholder)
        if tag is None:
            tag = Dim(None, kind=Dim.Types.Spatial, description="%s:range" % name)
        return Data(name="%s_output" % name, dims=[tag], dtype=dtype, sparse_dim=tag if sparse else None)


class RandIntLayer(LayerBase):
    """tf.random.uniform ints in [minval, maxval) of the given shape (Dims or ints).

    :param shape: output shape: a sequence of Dims or ints
    :param maxval: upper bound (exclusive): int or scalar layer
    :param minval: lower bound (inclusive): int (default 0) or scalar layer
    :param dtype: output dtype (default "int32")
    :param sparse_dim: Dim to mark the output as sparse (default None)
    :param seed: random seed (default None: derived from the network's random seed)
    """

    layer_class = "rand_int"
    layer_options = ("minval", "maxval")  # layer names, or constants
    default_from = ()

    def __init__(self, shape, maxval, minval=0, dtype="int32", sparse_dim=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        sizes = []
        for d in self.output.dims:
            if d.is_batch_dim():
                sizes.append(self.network.get_data_batch_dim())
            elif d.dimension is not None:
                sizes.append(d.dimension)
            else:
                sizes.append(tf.reduce_max(d.dyn_size))
        if seed is None:
            seed = self.network.random_seed_for(self, "rand_int")

        def bound(v):  # a scalar layer or a number
            if isinstance(v, LayerBase):
                if v.output.batch_ndim != 0:
                    raise ValueError("rand_int %r: minval/maxval layer %r must be a scalar" % (self.name, v.name))
                return tf.cast(v.output.placeholder, dtype)
            return v

        self.output.placeholder = tf.random.uniform(
            sizes, minval=bound(minval), maxval=bound(maxval), dtype=dtype, seed=seed)

    @classmethod
    def get_out_data_from_opts(cls, name, shape, maxval, minval=0, dtype="int32", sparse_dim=None, **kwargs):
        dims = []
        for i, s in enumerate(shape):
            if isinstance(s, Dim):
                dims.append(s)
            elif isinstance(s, int):
                dims.append(Dim(s, kind=Dim.Types.Feature if i == len(shape) - 1 else Dim.Types.Spatial,
                                description="%s:static:%i" % (name, i)))
            else:
                raise TypeError("rand_int shape entries must be Dim or int, got %r" % (s,))
        return Data(name="%s_output" % name, dims=dims, dtype=dtype, sparse_dim=sparse_dim)


# ---------------------------------------------------------------------------------------------------------------
# search_sorted

class SearchSortedLayer(LayerBase):
    """tf.searchsorted of ``values`` in ``sorted_sequence`` along ``axis``; output has the axes of values.

    :param sorted_sequence: layer with the sorted values along axis
    :param values: layer with the values to search; the output has its axes
    :param axis: the sorted axis of sorted_sequence (default "T")
    :param side: "left" (default: first index where it fits) or "right" (last index)
    """

    layer_class = "search_sorted"
    layer_options = ("sorted_sequence", "values")
    required_options = ("sorted_sequence", "values")
    default_from = ()
    recurrent = True

    def __init__(self, sorted_sequence, values, axis="T", side="left", **kwargs):
        super().__init__(**kwargs)
        if side not in ("left", "right"):
            raise ValueError("search_sorted %r: side must be 'left' or 'right', got %r" % (self.name, side))
        sdata = sorted_sequence.output
        vdata = values.output
        a, mapping = self._get_axes(sdata, vdata, axis)
        s = sdata.placeholder
        if sdata.dims[a].dyn_size is not None:  # padded frames sort last
            big = tf.constant(float("inf") if s.dtype.is_floating else s.dtype.max, dtype=s.dtype)
            s = tf.where(sdata.get_sequence_mask_broadcast(a), s, big)
        sorted_batch = sorted(mapping)  # axes of sorted except the search axis, in their order
        common_v = [mapping[i] for i in sorted_batch]  # the same axes in values
        rest_v = [j for j in range(vdata.batch_ndim) if j not in mapping.values()]
        s = tf.transpose(s, sorted_batch + [a])
        v = vdata.placeholder
        perm_v = common_v + rest_v  # the output layout (as the original: shared axes first)
        if perm_v != list(range(vdata.batch_ndim)):
            v = tf.transpose(v, perm_v)
        vshape = [_dim_size(vdata, j) for j in perm_v]
        nc = len(common_v)
        v = tf.reshape(v, vshape[:nc] + [-1])
        if v.dtype != s.dtype:
            v = tf.cast(v, s.dtype)
        y = tf.searchsorted(s, v, side=side, out_type=tf.int32)
        self.output.placeholder = tf.reshape(y, vshape)

    @staticmethod
    def _get_axes(sdata, vdata, axis):
        a = sdata.get_axis_from_description(axis)
        rest = sdata.copy_template_excluding_axis(a)
        m = rest.find_matching_axes(vdata)
        missing = [i for i in range(rest.batch_ndim) if i not in m]
        if missing:
            raise ValueError("search_sorted: axes %s of sorted_sequence %s are not in values %s" % (
                [rest.dims[i].short_repr() for i in missing], sdata.short_repr(), vdata.short_repr()))
        mapping = {(i if i < a else i + 1): j for i, j in m.items()}
        return a, mapping

    @classmethod
    def get_out_data_from_opts(cls, name, sorted_sequence, values, axis="T", **kwargs):
        _, mapping = cls._get_axes(sorted_sequence.output, values.output, axis)
        vdata = values.output
        common_v = [mapping[i] for i in sorted(mapping)]
        rest_v = [j for j in range(vdata.batch_ndim) if j not in mapping.values()]
        if len(rest_v) != 1:
            raise NotImplementedError("search_sorted %r: values %s need exactly one axis not in sorted_sequence %s" % (
                name, vdata.short_repr(), sorted_sequence.output.short_repr()))
        out = vdata.copy_template(name="%s_output" % name).copy_transpose(common_v + rest_v)
        out.dtype = "int32"  # the values' sparse dim stays, as the original
        return out


__all__ = [
    "WindowLayer", "CumsumLayer", "ShiftAxisLayer", "PrefixInTimeLayer", "PostfixInTimeLayer", "TimeChunkingLayer",
    "TimeUnChunkingLayer", "PadLayer", "SeqLenMaskLayer", "RangeLayer", "RangeInAxisLayer", "RangeFromLengthLayer",
    "RandIntLayer", "SearchSortedLayer",
]
