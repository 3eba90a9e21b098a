"""
Indexing layers: gather, gather_nd (deprecated form of gather on the first non-batch axis), scatter_nd.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..data import Data
from .base import LayerBase, concat_sources, concat_sources_template


def _dim_size(data, axis, x=None):
    d = data.dims[axis].dimension
    if d is not None:
        return d
    return tf.shape(data.placeholder if x is None else x)[axis]


def _check_int_positions(layer_name, position_data, option="position"):
    if position_data.dtype not in ("int32", "int64"):
        raise TypeError("layer %r: %s %s must have an int dtype (int32/int64), got %s" % (
            layer_name, option, position_data.short_repr(), position_data.dtype))


def _position_data(name, position):
    """Position as Data: a layer's output, or a scalar int constant (no batch)."""
    if isinstance(position, LayerBase):
        return position.output
    if isinstance(position, (int, np.integer)) and not isinstance(position, bool):
        return Data(name="%s_position" % name, dims=[], dtype="int32")
    raise TypeError("layer %r: position must be a layer or an int, got %r" % (name, position))


class GatherLayer(LayerBase):
    """
    Gathers slices of the input on ``axis`` at ``position`` (layer or int). Axes that input and position
    share (same dim tag) act as batch axes. Output axes: the shared axes, the input axes before the gather
    axis, the position axes, the input axes after the gather axis.

    :param position: the indices: a layer with int positions, or a constant int (negative: counted from the end)
    :param axis: the input axis to gather from
    :param clip_to_valid: clip the positions to [0, size - 1] (per-sequence size for dynamic axes) (default False)
    """

    layer_class = "gather"
    layer_options = ("position",)  # a layer name, or a constant index

    def __init__(self, position, axis, clip_to_valid=False, **kwargs):
        super().__init__(**kwargs)
        input_data = self.sources[0].output
        a = input_data.get_axis_from_description(axis)
        if not isinstance(position, LayerBase):
            pos = int(position)
            if pos < 0 and input_data.dims[a].dimension is not None:
                pos += input_data.dims[a].dimension
            self.output.placeholder = tf.gather(input_data.placeholder, pos, axis=a)
            return
        pos_data = position.output
        common_in, common_pos, in_rest, pos_rest = self._get_common_axes(input_data, pos_data, a)
        x = input_data.placeholder
        before, after = self._split_input_axes(in_rest, a, len(common_in))
        perm_in = common_in + before + [a] + after
        if perm_in != list(range(input_data.batch_ndim)):
            x = tf.transpose(x, perm_in)
        p = pos_data.placeholder
        perm_pos = common_pos + pos_rest
        if perm_pos != list(range(pos_data.batch_ndim)):
            p = tf.transpose(p, perm_pos)
        n = len(common_in)
        if clip_to_valid:
            p = self._clip_positions(input_data, a, p, common_in, pos_data.batch_ndim)
        else:
            p = self._check_positions_in_range(x, p, n + len(before), position.name)
        self.output.placeholder = tf.gather(x, p, axis=n + len(before), batch_dims=n)

    def _check_positions_in_range(self, x, p, axis, position_name):
        """A run-time check naming the layer and the option (instead of TF's ``indices[1] = -1 is not in [0, 5)``,
        e.g. for a position from data whose values are not indices of this axis)."""
        size = tf.cast(tf.shape(x)[axis], p.dtype)
        valid = tf.reduce_all(tf.logical_and(p >= 0, p < size))
        check = tf.debugging.Assert(valid, [
            "layer %r (class 'gather'): option 'position' (%r) has values outside [0, size) of the gathered axis; "
            "size, min, max:" % (self.name, position_name), size, tf.reduce_min(p), tf.reduce_max(p)], summarize=3)
        with tf.control_dependencies([check]):
            return tf.identity(p)

    @staticmethod
    def _split_input_axes(in_rest, gather_axis, n_common):
        """
        The input axes (neither shared nor the gather axis) that go before / after the position axes: as the
        original, the first ``gather_axis - n_common`` of them go before (counting the shared axes even where
        they come after the gather axis).
        """
        specific = [i for i in in_rest if i != gather_axis]
        nb = max(0, gather_axis - n_common)
        return specific[:nb], specific[nb:]

    @staticmethod
    def _clip_positions(input_data, a, p, common_in, pos_ndim):
        """Clip positions to [0, size-1] of the gather axis (per sequence if it is dynamic and batch is shared)."""
        tag = input_data.dims[a]
        b = input_data.batch_dim_axis
        if tag.dyn_size is not None and b in common_in and tag.dyn_size.shape.rank == 1:
            size = tf.cast(tag.dyn_size, p.dtype)
            shape = [1] * pos_ndim
            shape[common_in.index(b)] = -1
            size = tf.reshape(size, shape)
        else:
            size = tf.cast(_dim_size(input_data, a), p.dtype)
        return tf.clip_by_value(p, 0, tf.maximum(size - 1, 0))

    @staticmethod
    def _get_common_axes(input_data, pos_data, gather_axis):
        """
        :return: (common axes in input, the same in position (input order), other input axes (incl. the gather
          axis), other position axes)
        """
        pairs = []
        used_pos = set()
        for i, d in enumerate(input_data.dims):
            if i == gather_axis:
                continue
            for j, e in enumerate(pos_data.dims):
                if j not in used_pos and d == e:
                    pairs.append((i, j))
                    used_pos.add(j)
                    break
        fi, fj = input_data.feature_dim_axis, pos_data.feature_dim_axis
        if (fi is not None and fj is not None and fi != gather_axis and fi not in [i for i, _ in pairs]
                and fj not in used_pos and input_data.dims[fi].dimension == pos_data.dims[fj].dimension):
            pairs.append((fi, fj))
            used_pos.add(fj)
        pairs.sort()
        common_in = [i for i, _ in pairs]
        common_pos = [j for _, j in pairs]
        in_rest = [i for i in range(input_data.batch_ndim) if i not in common_in]
        pos_rest = [j for j in range(pos_data.batch_ndim) if j not in used_pos]
        return common_in, common_pos, in_rest, pos_rest

    @classmethod
    def get_out_data_from_opts(cls, name, sources, position, axis, **kwargs):
        if not sources:
            raise ValueError("gather layer %r needs a source" % name)
        input_data = sources[0].output
        pos_data = _position_data(name, position)
        _check_int_positions(name, pos_data)
        a = input_data.get_axis_from_description(axis)
        size = input_data.dims[a].dimension
        if pos_data.sparse and pos_data.dim is not None and size is not None and pos_data.dim > size:
            raise ValueError("layer %r: option 'position' %s: sparse with dim %i, but the gathered axis %s has %i "
                             "entries" % (name, pos_data.short_repr(), pos_data.dim, input_data.dims[a], size))
        common_in, common_pos, in_rest, pos_rest = cls._get_common_axes(input_data, pos_data, a)
        before, in_after = cls._split_input_axes(in_rest, a, len(common_in))
        in_order = common_in + before
        dims = ([input_data.dims[i] for i in in_order] + [pos_data.dims[j] for j in pos_rest]
                + [input_data.dims[i] for i in in_after])

        def translate_input(i):
            if i in in_order:
                return in_order.index(i)
            return len(in_order) + len(pos_rest) + in_after.index(i)

        def translate_pos(j):
            return len(in_order) + pos_rest.index(j) if j in pos_rest else None

        out = Data(name="%s_output" % name, dims=dims, dtype=input_data.dtype, sparse_dim=input_data.sparse_dim)
        for kind in ("time_dim_axis", "feature_dim_axis"):
            ia = getattr(input_data, kind)
            pa = getattr(pos_data, kind)
            if ia is not None and ia != a:
                new = translate_input(ia)
            elif pa is not None and translate_pos(pa) is not None:
                new = translate_pos(pa)
            else:
                continue
            default = getattr(out, kind)
            if new != default:
                setattr(out, kind, new)
        return out


class GatherNdLayer(LayerBase):
    """Deprecated: x[b, position[b, ...]] on the first axis after batch (input batch major).

    :param position: layer with int positions [B, ...] into the first axis after batch
    """

    layer_class = "gather_nd"
    layer_options = ("position",)

    def __init__(self, position, **kwargs):
        super().__init__(**kwargs)
        x = concat_sources(self.sources).copy_as_batch_major()
        pos = position.output
        if pos.have_batch_axis():
            p = pos.copy_as_batch_major().placeholder
            self.output.placeholder = tf.gather(x.placeholder, p, axis=1, batch_dims=1)
        else:
            self.output.placeholder = tf.gather(x.placeholder, pos.placeholder, axis=1)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, position, **kwargs):
        x = concat_sources_template(sources, name="%s_output" % name).copy_as_batch_major()
        if not x.have_batch_axis() or x.batch_ndim < 2:
            raise ValueError("gather_nd layer %r: input %s needs a batch axis and one more axis" % (
                name, x.short_repr()))
        pos = position.output
        _check_int_positions(name, pos)
        if pos.have_batch_axis():
            pos = pos.copy_as_batch_major()
            dims = list(pos.dims) + list(x.dims[2:])
        else:
            dims = [x.dims[0]] + list(pos.dims) + list(x.dims[2:])
        out = Data(name="%s_output" % name, dims=dims, dtype=x.dtype, sparse_dim=x.sparse_dim)
        f = x.feature_dim_axis
        if f is not None and f >= 2:
            new = f - 2 + len(dims) - (x.batch_ndim - 2)
            if new != out.feature_dim_axis:
                out.feature_dim_axis = new
        return out


class ScatterNdLayer(LayerBase):
    """
    Inverse of gather: out[..., position[...], ...] = input, where the axis ``position_axis`` of position is
    replaced by the time axis of ``output_dim_via_time_from``. Output axes: the position axes, then input axes
    that position does not have. Updates to the same index are summed.

    :param position: layer with int target positions
    :param position_axis: the axis of position that is replaced by the output axis
    :param output_dim_via_time_from: layer whose time axis is the output axis (or give out_spatial_dim)
    :param out_spatial_dim: Dim of the output axis (or give output_dim_via_time_from)
    :param filter_invalid_indices: drop updates with positions outside [0, output size) (default False)
    """

    layer_class = "scatter_nd"
    layer_options = ("position", "output_dim_via_time_from")

    def __init__(self, position, position_axis, output_dim_via_time_from=None, out_spatial_dim=None,
                 filter_invalid_indices=False, **kwargs):
        super().__init__(**kwargs)
        input_data = concat_sources(self.sources)
        pos_data = position.output
        common, r, extra_in = self._get_common(self.name, input_data, pos_data, position_axis)
        out_tag = self.output.dims[r]
        if output_dim_via_time_from is not None:
            out_src = output_dim_via_time_from.output
            n_out = _dim_size(out_src, out_src.time_dim_axis)
        elif out_tag.dimension is not None:
            n_out = out_tag.dimension
        else:
            n_out = tf.reduce_max(out_tag.dyn_size)
        # updates broadcast to the common layout [pos axes..., extra input axes...]
        shape = [_dim_size(pos_data, j) for j in range(pos_data.batch_ndim)] + [
            _dim_size(input_data, i) for i in extra_in]
        upd = input_data.copy_compatible_to(common, check_sparse=False, check_dtype=False).placeholder
        upd = tf.broadcast_to(upd, shape)
        p = tf.cast(pos_data.placeholder, tf.int32)
        p = tf.reshape(p, [shape[j] for j in range(pos_data.batch_ndim)] + [1] * len(extra_in))
        p = tf.broadcast_to(p, shape)
        perm = [r] + [i for i in range(len(shape)) if i != r]
        upd = tf.transpose(upd, perm)  # [R, others...]
        p = tf.transpose(p, perm)
        others = [shape[i] for i in perm[1:]]
        n_others = 1
        for s in others:
            n_others = n_others * s
        if filter_invalid_indices:
            valid = tf.logical_and(p >= 0, p < n_out)
            upd = tf.where(valid, upd, tf.zeros_like(upd))
            p = tf.where(valid, p, tf.zeros_like(p))
        lin = tf.reshape(tf.range(n_others), [1] + others)
        seg = p * n_others + lin
        out = tf.math.unsorted_segment_sum(tf.reshape(upd, [-1]), tf.reshape(seg, [-1]), n_out * n_others)
        out = tf.reshape(out, [n_out] + others)
        inv = np.argsort(perm)
        self.output.placeholder = tf.transpose(out, inv) if list(inv) != list(range(len(perm))) else out

    @staticmethod
    def _get_common(name, input_data, pos_data, position_axis):
        """Common template [position axes..., extra input axes...], the replaced axis, the extra input axes."""
        common = pos_data.copy_template(name="%s_output" % name)
        common.dtype = input_data.dtype
        common.sparse_dim = input_data.sparse_dim
        mapping = input_data.find_matching_axes(pos_data)
        extra_in = [i for i in range(input_data.batch_ndim) if i not in mapping]
        dims = list(pos_data.dims) + [input_data.dims[i] for i in extra_in]
        common = common.copy_template_new_dim_tags(dims)
        r = pos_data.get_axis_from_description(position_axis)
        return common, r, extra_in

    @classmethod
    def get_out_data_from_opts(cls, name, sources, position, position_axis, output_dim_via_time_from=None,
                               out_spatial_dim=None, **kwargs):
        if (output_dim_via_time_from is None) == (out_spatial_dim is None):
            raise ValueError("scatter_nd %r: give either output_dim_via_time_from or out_spatial_dim" % name)
        input_data = concat_sources_template(sources, name="%s_output" % name)
        _check_int_positions(name, position.output)
        common, r, _ = cls._get_common(name, input_data, position.output, position_axis)
        dims = list(common.dims)
        if out_spatial_dim is not None:
            dims[r] = out_spatial_dim
        else:
            src = output_dim_via_time_from.output
            if src.time_dim_axis is None:
                raise ValueError("output_dim_via_time_from %s has no time axis" % src.short_repr())
            dims[r] = src.dims[src.time_dim_axis]
        return Data(name="%s_output" % name, dims=dims, dtype=input_data.dtype, sparse_dim=input_data.sparse_dim)


__all__ = ["GatherLayer", "GatherNdLayer", "ScatterNdLayer"]
