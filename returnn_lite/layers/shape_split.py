"""
Reshaping layers: merge_dims (combine_dims), split_dims, split (sub-layers name/0, name/1, ...),
split_batch_time, flatten_batch, unflatten_batch, unflatten_nd, split_concatenated_multichannel.

A merged or flattened batch axis is a new batch Dim; it remembers what it was made of
(``merged_dims``, ``flatten_info``) so that the inverse layers can undo it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..data import Dim, batch_dim
from ..layer_ref import LayerOption
from ..util import NotSpecified
from .base import ConcatInputLayer, InternalLayer, LayerBase, concat_sources_template
from .shape import _INHERIT, ShapeOf, _ints, ceildiv, make_data, rebatch_dims, reshape, set_rebatched_sizes


def _new_batch_dim(description, **info):
    tag = Dim(None, kind=Dim.Types.Batch, description=description)
    for k, v in info.items():
        setattr(tag, k, v)
    return tag


def _prod(sizes):
    """Product of ints / scalar tensors (an int where all are ints)."""
    if all(isinstance(m, int) for m in sizes):
        return int(np.prod(sizes)) if sizes else 1
    return tf.reduce_prod(tf.stack([tf.convert_to_tensor(m, dtype=tf.int32) for m in sizes]))


def _size_of(tag, x_shape, axis):
    """Static size of tag or the runtime size of axis."""
    return tag.dimension if tag.dimension is not None else x_shape[axis]


# ---------------------------------------------------------------------------------------------
# merge

class MergeDimsLayer(ConcatInputLayer):
    """
    Merges several axes into one (reshape). keep_order=False (default, behavior version 0) sorts the axes first.
    Without keep_order a merged batch axis comes first among the merged axes (the result is a new batch axis).
    Merged dynamic axes get sequence lengths = product of the merged sizes.

    :param axes: the axes to merge (descriptions like "BT", "except_time", "static", dim tags, or a list)
    :param keep_order: keep the given order of axes instead of sorting them (default False, behavior version 0)
    :param out_dim: Dim of the merged axis (default None: a new tag); not with a merged batch axis
    """

    layer_class = "merge_dims"

    def __init__(self, axes, keep_order=False, out_dim=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        axes = self._get_axes(data, axes, keep_order)
        if len(axes) <= 1:
            self.output.placeholder = data.placeholder
            return
        target = self._target_axis(data, axes)
        others = [i for i in range(data.batch_ndim) if i not in axes]
        perm = others[:target] + axes + others[target:]
        x = data.placeholder
        if perm != list(range(data.batch_ndim)):
            x = tf.transpose(x, perm)
        shape = ShapeOf(data.placeholder)
        sizes = [_size_of(data.dims[i], shape, i) for i in others]
        merged = [_size_of(data.dims[i], shape, i) for i in axes]
        if all(isinstance(s, int) for s in merged):
            merged_size = int(np.prod(merged))
        elif all(isinstance(s, int) for s in sizes):
            merged_size = None  # -1
        else:
            merged_size = merged[0]
            for s in merged[1:]:
                merged_size = merged_size * s
        sizes.insert(target, merged_size)
        self.output.placeholder = reshape(x, sizes)
        if data.batch_dim_axis in axes:  # index (p, b, r) row-major: each sequence repeated prod(r), tiled prod(p)
            i_b = axes.index(data.batch_dim_axis)
            n_before, n_after = _prod(merged[:i_b]), _prod(merged[i_b + 1:])

            def rebatch(lens):
                lens = tf.repeat(lens, n_after) if not (isinstance(n_after, int) and n_after == 1) else lens
                return tf.tile(lens, [n_before]) if not (isinstance(n_before, int) and n_before == 1) else lens

            set_rebatched_sizes(self.output, rebatch)
        tag = self.output.dims[target]
        if tag.is_dynamic():
            size = None
            for i in axes:
                d = data.dims[i]
                s = d.dyn_size if d.is_dynamic() else d.dimension
                if s is None:
                    raise ValueError("merge_dims: axis %s has no sequence lengths" % d.short_repr())
                size = s if size is None else size * s
            tag.dyn_size = size

    @staticmethod
    def _get_axes(data, axes, keep_order):
        axes = data.get_axes_from_description(axes)
        if not keep_order:  # sorted, a merged batch axis first (keep_order: the given order, also for batch)
            axes = sorted(axes)
            b = data.batch_dim_axis
            if b in axes:
                axes = [b] + [a for a in axes if a != b]
        return axes

    @staticmethod
    def _target_axis(data, axes):
        f = data.feature_dim_axis
        if f is not None and f in axes:
            return f - len([a for a in axes if a < f])
        return min(axes)

    @classmethod
    def get_out_data_from_opts(cls, name, axes, keep_order=False, sources=(), n_out=NotSpecified, out_type=None,
                               out_dim=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        axes = cls._get_axes(data, axes, keep_order)
        if len(axes) <= 1 and out_dim is None:
            return data
        tags = [data.dims[i] for i in axes]
        b, t, f = data.batch_dim_axis, data.time_dim_axis, data.feature_dim_axis
        f_in = f is not None and f in axes and not data.sparse
        if b in axes:
            tag = _new_batch_dim("%s:merged-batch" % name, merged_dims=tags)
        else:
            dim = int(np.prod([d.dimension for d in tags])) if all(d.dimension is not None for d in tags) else None
            tag = Dim(dim, kind=Dim.Types.Feature if f_in else Dim.Types.Spatial,
                      description="%s:merged:%s" % (name, "*".join(d.description for d in tags)))
            if out_dim is not None:
                if out_dim.dimension != dim:
                    raise ValueError("merge_dims layer %r: out_dim %s does not have the merged size %s" % (
                        name, out_dim, dim))
                tag = out_dim
        if out_dim is not None and b in axes:
            raise ValueError("merge_dims layer %r: out_dim with a merged batch axis is not supported" % name)
        # n_out is the output feature dim (as the original), which is the merged dim only if the feature axis is merged
        out_feature_dim = tag.dimension if f_in else (data.dim if f is not None else None)
        if n_out is not NotSpecified and n_out is not None and out_feature_dim not in (None, n_out):
            raise ValueError("merge_dims: n_out=%r does not match the output feature dim %r (merged axes %s of %s)" % (
                n_out, out_feature_dim, [d.short_repr() for d in tags], data.short_repr()))
        target = cls._target_axis(data, axes)
        dims = [d for i, d in enumerate(data.dims) if i not in axes]
        if b in axes:
            dims = rebatch_dims(dims, name)
        dims.insert(target, tag)
        time_tag = feature_tag = _INHERIT
        if f_in:
            feature_tag = tag
        if t is not None and t in axes:
            time_tag = None if (b in axes or f_in) else tag
        return make_data("%s_output" % name, dims, like=data, time_tag=time_tag, feature_tag=feature_tag)


class CombineDimsLayer(MergeDimsLayer):
    """Deprecated variant of merge_dims; always keeps the given order of the axes (keep_order=True)."""

    layer_class = "combine_dims"
    unsupported_options = {"keep_order": (True, None)}

    def __init__(self, **kwargs):
        kwargs.pop("keep_order", None)  # True (False is refused: unsupported_options)
        super().__init__(keep_order=True, **kwargs)

    @classmethod
    def get_out_data_from_opts(cls, **kwargs):
        kwargs.pop("keep_order", None)
        return super().get_out_data_from_opts(keep_order=True, **kwargs)


# ---------------------------------------------------------------------------------------------
# split

class SplitDimsLayer(ConcatInputLayer):
    """
    Splits one axis into several (reshape), e.g. axis="F", dims=(window, -1). A dynamic axis needs one -1 entry;
    by default it is padded (pad_value) to a multiple of the other sizes and the -1 axis gets ceildiv lengths.

    :param axis: the axis to split (description, dim tag or int of the batch-major input)
    :param dims: the new sizes (ints or Dims (the output tags; a dynamic one stands for -1), at most one -1 for
        the rest), product = the axis size
    :param pad_to_multiples: pad the axis to a multiple of the static sizes (default None: True for dynamic axes)
    :param pad_value: value of that padding (default 0)
    """

    layer_class = "split_dims"

    def __init__(self, axis, dims, pad_to_multiples=None, pad_value=0, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data.copy_as_batch_major() if isinstance(axis, int) else self.input_data
        a, dims, rest_idx, const, pad = self._resolve(self.name, data, axis, _dim_sizes(dims), pad_to_multiples)
        x = data.placeholder
        shape = ShapeOf(x)
        if pad:
            size = shape[a]
            amount = (-size) % const
            if not (isinstance(amount, int) and amount == 0):
                paddings = [[0, 0] for _ in range(data.batch_ndim)]
                paddings[a] = [0, amount]
                x = tf.pad(x, paddings, constant_values=tf.cast(pad_value, x.dtype))
        sizes = [_size_of(d, shape, i) for i, d in enumerate(data.dims)]
        new_sizes = list(dims)
        if rest_idx is not None:
            if data.dims[a].dimension is not None:
                new_sizes[rest_idx] = ceildiv(data.dims[a].dimension, const)
            elif any(i != a and not isinstance(s, int) for i, s in enumerate(sizes)):
                new_sizes[rest_idx] = tf.shape(x)[a] // const
            else:
                new_sizes[rest_idx] = None  # -1
        self.output.placeholder = reshape(x, sizes[:a] + new_sizes + sizes[a + 1:])
        tag = data.dims[a]
        if rest_idx is not None and tag.is_dynamic():
            out_tag = self.output.dims[a + rest_idx]
            if out_tag is not tag:
                lens = tag.dyn_size
                out_tag.dyn_size = -(-lens // const) if pad else lens // const

    @staticmethod
    def _resolve(name, data, axis, dims, pad_to_multiples):
        """:return: (axis, dims with -1 kept, index of -1 or None, product of the other dims, pad?)"""
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        dims = [_ints("dims entry", d) for d in dims]
        if not dims or any(d != -1 and d <= 0 for d in dims) or dims.count(-1) > 1:
            raise ValueError("split_dims: invalid dims %r (positive ints and at most one -1)" % (dims,))
        if tag.is_batch_dim():
            raise ValueError("split_dims: splitting the batch axis of %s is not supported" % data.short_repr())
        rest_idx = dims.index(-1) if -1 in dims else None
        const = int(np.prod([d for d in dims if d != -1]))
        if pad_to_multiples is None:
            pad_to_multiples = tag.is_dynamic()
        pad = bool(pad_to_multiples) and rest_idx is not None and const > 1
        if tag.dimension is not None:
            if rest_idx is None:
                if const != tag.dimension:
                    raise ValueError("split_dims: dims %r (product %i) do not match the size %i of axis %r in %s" % (
                        dims, const, tag.dimension, axis, data.short_repr()))
            elif tag.dimension % const and not pad:
                raise ValueError("split_dims: size %i of axis %r in %s is not a multiple of %i (dims %r)" % (
                    tag.dimension, axis, data.short_repr(), const, dims))
        elif rest_idx is None:
            raise ValueError("split_dims: axis %r of %s is dynamic, dims %r need a -1 entry" % (
                axis, data.short_repr(), dims))
        return a, dims, rest_idx, const, pad

    @classmethod
    def get_out_data_from_opts(cls, name, axis, dims, pad_to_multiples=None, sources=(), **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        if isinstance(axis, int):
            data = data.copy_as_batch_major()
        given = list(dims)
        a, dims, rest_idx, const, pad = cls._resolve(name, data, axis, _dim_sizes(dims), pad_to_multiples)
        tag = data.dims[a]
        is_f = a == data.feature_dim_axis and not data.sparse
        new_tags = []
        for i, d in enumerate(dims):
            kind = Dim.Types.Feature if is_f and i == len(dims) - 1 else (
                Dim.Types.Spatial if tag.kind == Dim.Types.Feature else tag.kind)
            if d == -1:
                if const == 1:  # the remaining axis is the split axis itself (its tag kept)
                    new_tags.append(tag)
                    continue
                size = None if tag.dimension is None else ceildiv(tag.dimension, const)
                new_tags.append(Dim(size, kind=kind, description="%s:split-dims%i" % (name, i)))
            else:
                new_tags.append(Dim(d, kind=kind, description="%s:split-dims%i" % (name, i)))
        new_tags = [g if isinstance(g, Dim) else t for g, t in zip(given, new_tags)]  # given Dims are the tags
        out_dims = list(data.dims[:a]) + new_tags + list(data.dims[a + 1:])
        time_tag = feature_tag = _INHERIT
        if is_f:
            feature_tag = new_tags[-1]
        if a == data.time_dim_axis:
            dyn = [d for d in new_tags if d.is_dynamic()]
            time_tag = dyn[0] if dyn else new_tags[rest_idx if rest_idx is not None else 0]
        return make_data("%s_output" % name, out_dims, like=data, time_tag=time_tag, feature_tag=feature_tag)


def _dim_sizes(dims):
    """split_dims' dims: a Dim entry stands for its size (-1 if dynamic)."""
    return [(-1 if d.dimension is None else d.dimension) if isinstance(d, Dim) else d for d in dims]


class SplitLayer(ConcatInputLayer):
    """
    tf.split of one axis (feature axis by default) into num_splits equal or size_splits parts.
    The output is the input; the parts are the sub-layers "<name>/0", "<name>/1", ...

    :param axis: the axis to split (default None: the feature axis); needs a static size
    :param num_splits: number of equal parts (must divide the dim)
    :param size_splits: list of part sizes (sum = the dim); either this or num_splits
    :param out_dims: the Dims of the parts (their sizes give size_splits where that is not given)
    """

    layer_class = "split"

    def __init__(self, axis=None, num_splits=None, size_splits=None, out_dims=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        self.output.placeholder = data.placeholder
        a, sizes = self._resolve(data, axis, num_splits, size_splits, out_dims)
        parts = tf.split(data.placeholder, sizes, axis=a)
        self.splits = sizes
        self._sub_layers = {}
        for i, (x, tmpl) in enumerate(zip(parts, self._sub_templates(self.name, data, a, sizes, out_dims))):
            tmpl.placeholder = x
            self._sub_layers[str(i)] = InternalLayer(name="%s/%i" % (self.name, i), network=self.network,
                                                     output=tmpl)

    @staticmethod
    def _resolve(data, axis, num_splits, size_splits, out_dims=None):
        if out_dims is not None:
            if not all(isinstance(d, Dim) and d.dimension is not None for d in out_dims):
                raise ValueError("split: option out_dims must be a list of static Dims, got %r" % (out_dims,))
            if size_splits is None:
                size_splits = [d.dimension for d in out_dims]
            elif [d.dimension for d in out_dims] != list(size_splits):
                raise ValueError("split: option out_dims %r does not match size_splits %r" % (out_dims, size_splits))
        if axis is None:
            if data.feature_dim_axis is None or data.sparse:
                raise ValueError("split: no axis given and %s has no feature axis" % data.short_repr())
            a = data.feature_dim_axis
        else:
            a = data.get_axis_from_description(axis)
        dim = data.dims[a].dimension
        if dim is None:
            raise ValueError("split: axis %r of %s has no static size" % (axis or "F", data.short_repr()))
        if size_splits is not None:
            sizes = [_ints("size_splits entry", s) for s in size_splits]
            if num_splits is not None and num_splits != len(sizes):
                raise ValueError("split: num_splits=%r does not match size_splits=%r" % (num_splits, size_splits))
            if sum(sizes) != dim or any(s < 0 for s in sizes):
                raise ValueError("split: invalid size_splits %r (sum %i) for dim %i of axis %r in %s" % (
                    sizes, sum(sizes), dim, axis or "F", data.short_repr()))
        elif num_splits is not None:
            n = _ints("num_splits", num_splits)
            if n <= 0 or dim % n:
                raise ValueError("split: num_splits=%r does not divide dim %i of axis %r in %s" % (
                    num_splits, dim, axis or "F", data.short_repr()))
            sizes = [dim // n] * n
        else:
            raise ValueError("split: needs num_splits or size_splits")
        return a, sizes

    @staticmethod
    def _sub_templates(name, data, a, sizes, out_dims=None):
        tag = data.dims[a]
        res = []
        for i, s in enumerate(sizes):
            new = out_dims[i] if out_dims else Dim(s, kind=tag.kind, description="%s/%i:split" % (name, i))
            res.append(data.copy_template_replace_dim_tag(a, new, name="%s/%i_output" % (name, i)))
        return res

    def get_sub_layer(self, layer_name):
        return self._sub_layers.get(layer_name)

    @classmethod
    def get_sub_layer_out_data_from_opts(cls, layer_name, parent_layer_kwargs):
        try:
            idx = int(layer_name)
        except ValueError:
            return None
        kw = parent_layer_kwargs
        data = concat_sources_template(kw["sources"], name="%s_output" % kw.get("name", "split"))
        a, sizes = cls._resolve(data, kw.get("axis"), kw.get("num_splits"), kw.get("size_splits"), kw.get("out_dims"))
        if not 0 <= idx < len(sizes):
            return None
        return cls._sub_templates(kw.get("name", "split"), data, a, sizes, kw.get("out_dims"))[idx], kw.get(
            "network"), InternalLayer

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), axis=None, num_splits=None, size_splits=None, out_dims=None,
                               **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        cls._resolve(data, axis, num_splits, size_splits, out_dims)
        return data


class SplitBatchTimeLayer(ConcatInputLayer):
    """(B*T, ...) -> (B, T, ...), with B and T (and its sequence lengths) from base.

    :param base: layer (default "data") whose batch and time axes (and lengths) are restored
    """

    derived_options = ("base",)  # default: "data"

    layer_class = "split_batch_time"
    layer_options = ("base",)

    def __init__(self, base, **kwargs):
        super().__init__(**kwargs)
        self.base = base
        x = self.input_data.copy_as_batch_major()
        b = base.output.copy_as_batch_major()
        b_shape = ShapeOf(b.placeholder)
        x_shape = ShapeOf(x.placeholder)
        sizes = [b_shape[0], _size_of(b.dims[b.time_dim_axis], b_shape, b.time_dim_axis)]
        sizes += [_size_of(d, x_shape, i) for i, d in enumerate(x.dims) if i > 0]
        self.output.placeholder = reshape(x.placeholder, sizes)

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        d.setdefault("base", "data")
        super().transform_config_dict(d, network=network, get_layer=get_layer)

    @classmethod
    def get_out_data_from_opts(cls, name, base, sources=(), **kwargs):
        x = concat_sources_template(sources, name="%s_output" % name).copy_as_batch_major()
        b = base.output.copy_as_batch_major()
        if not x.have_batch_axis() or not b.have_batch_axis() or b.time_dim_axis is None:
            raise ValueError("split_batch_time: needs an input with batch axis (%s) and a base with batch and time "
                             "axes (%s)" % (x.short_repr(), b.short_repr()))
        t_tag = b.dims[b.time_dim_axis]
        if any(d is t_tag for d in x.dims) or x.dims[0] is b.dims[0]:
            raise ValueError("split_batch_time: input %s is not merged (batch*time) from base %s" % (
                x.short_repr(), b.short_repr()))
        dims = [b.dims[0], t_tag] + list(x.dims[1:])
        return make_data("%s_output" % name, dims, like=x, time_tag=t_tag)


# ---------------------------------------------------------------------------------------------
# flatten / unflatten

class FlattenBatchLayer(ConcatInputLayer):
    """Merges an axis (time by default) into the batch axis, dropping padded frames: (B,T,...) -> (B',...).

    :param axis: the axis merged into the batch axis, padded frames dropped (default "T")
    :param batch_major: flatten in batch-major order b*T+t (default True); False: time-major order
    """

    layer_class = "flatten_batch"

    def __init__(self, axis="T", batch_major=True, **kwargs):
        super().__init__(**kwargs)
        data = self._input(self.input_data, axis)
        x = data.placeholder
        tag = data.dims[1]
        if not batch_major:
            x = tf.transpose(x, [1, 0] + list(range(2, data.batch_ndim)))
        shape = ShapeOf(data.placeholder)
        mask = None
        if tag.dyn_size is not None:
            mask = tag.get_mask(shape[1])  # [B,T]
            mask = mask if batch_major else tf.transpose(mask)
            x = tf.boolean_mask(x, mask)
        else:
            x = reshape(x, [None] + [shape[i] for i in range(2, data.batch_ndim)])

        def rebatch(lens):  # per-sequence lengths of other dynamic axes, per flat frame
            lens_bt = tf.broadcast_to(lens[:, None], tf.stack([tf.convert_to_tensor(shape[0]),
                                                               tf.convert_to_tensor(shape[1])]))
            lens_bt = lens_bt if batch_major else tf.transpose(lens_bt)
            return tf.boolean_mask(lens_bt, mask) if mask is not None else tf.reshape(lens_bt, [-1])

        set_rebatched_sizes(self.output, rebatch)
        self.output.placeholder = x

    @staticmethod
    def _input(data, axis):
        data = data.copy_as_batch_major()
        if not data.have_batch_axis():
            raise ValueError("flatten_batch: input %s has no batch axis" % data.short_repr())
        a = data.get_axis_from_description(axis)
        if a == 0:
            raise ValueError("flatten_batch: axis %r is the batch axis of %s" % (axis, data.short_repr()))
        return data.copy_move_axis(a, 1)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axis="T", batch_major=True, **kwargs):
        data = cls._input(concat_sources_template(sources, name="%s_output" % name), axis)
        tag = _new_batch_dim("%s:flat-batch" % name, flatten_info={
            "batch": data.dims[0], "time": data.dims[1], "batch_major": bool(batch_major)})
        return make_data("%s_output" % name, [tag] + rebatch_dims(data.dims[2:], name), like=data)


class UnflattenBatchLayer(ConcatInputLayer):
    """Inverse of flatten_batch: (B',...) -> (B,T,...) with the original batch and time axes (padding zeros)."""

    layer_class = "unflatten_batch"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data.copy_as_batch_major()
        info = self._info(data)
        x = data.placeholder
        shape = ShapeOf(x)
        rest = [shape[i] for i in range(1, data.batch_ndim)]
        t_tag = info["time"]
        if t_tag.dyn_size is None:
            n_t = t_tag.dimension
            y = reshape(x, [None, n_t] + rest)
            if not info["batch_major"]:
                y = tf.transpose(reshape(x, [n_t, None] + rest), [1, 0] + list(range(2, data.batch_ndim + 1)))
            self.output.placeholder = y
            return
        lens = t_tag.dyn_size
        n_b, n_t = tf.size(lens), tf.reduce_max(lens)
        mask = tf.sequence_mask(lens, maxlen=n_t)
        if info["batch_major"]:
            idx = tf.where(mask)
        else:
            idx = tf.reverse(tf.where(tf.transpose(mask)), axis=[1])
        out_shape = tf.stack([tf.convert_to_tensor(s, dtype=tf.int32) for s in [n_b, n_t] + rest])
        self.output.placeholder = tf.scatter_nd(tf.cast(idx, tf.int32), x, out_shape)

    @staticmethod
    def _info(data):
        info = getattr(data.dims[0], "flatten_info", None) if data.have_batch_axis() else None
        if info is None:
            raise ValueError("unflatten_batch: the batch axis of %s does not come from flatten_batch" % (
                data.short_repr(),))
        return info

    @classmethod
    def get_out_data_from_opts(cls, name, sources, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name).copy_as_batch_major()
        info = cls._info(data)
        dims = [info["batch"], info["time"]] + list(data.dims[1:])
        return make_data("%s_output" % name, dims, like=data,
                         time_tag=info["time"] if info["time"].is_dynamic() else _INHERIT)


class UnflattenNdLayer(ConcatInputLayer):
    """
    (B,T,...) with T a flattened N-d grid -> (B,T_1..T_N,...), per-sequence grid sizes from ``sizes`` (B,N):
    y[b,i_1..i_N] = x[b, row-major index]; each T_i is dynamic with lengths sizes[:, i].

    :param sizes: layer with int grid sizes per sequence, shape (B, num_axes)
    :param num_axes: number N of output axes T_1..T_N
    :param declare_same_sizes_as: dict i -> layer: output axis i gets the dim tag of that layer's time axis
    :param in_dim: the flattened input axis (default "T")
    :param out_dims: the Dims of the num_axes new axes (instead of new ones)
    """

    layer_class = "unflatten_nd"
    layer_options = ("sizes", LayerOption("declare_same_sizes_as", "dict"))  # {axis: layer name}
    required_options = ("sizes",)
    recurrent = True

    def __init__(self, sizes, num_axes, declare_same_sizes_as=None, in_dim="T", out_dims=None, **kwargs):
        super().__init__(**kwargs)
        self.sizes = sizes
        self.declare_same_sizes_as = declare_same_sizes_as or {}
        x = self._input(self.input_data, in_dim)
        sz = tf.cast(sizes.output.copy_as_batch_major().placeholder, tf.int32)  # [B,N]
        max_sz = tf.reduce_max(sz, axis=0)
        strides = tf.math.cumprod(sz, axis=1, exclusive=True, reverse=True)  # [B,N]
        idx, valid = 0, None
        for k in range(num_axes):
            shape = [1] * (num_axes + 1)
            shape[k + 1] = -1
            r = tf.reshape(tf.range(max_sz[k]), shape)  # broadcast over [B, T_1..T_N]
            bshape = [-1] + [1] * num_axes
            idx = idx + r * tf.reshape(strides[:, k], bshape)
            v = r < tf.reshape(sz[:, k], bshape)
            valid = v if valid is None else tf.logical_and(valid, v)
        idx = tf.where(valid, idx, tf.zeros_like(idx))
        self.output.placeholder = tf.gather(x.placeholder, idx, batch_dims=1)
        for k in range(num_axes):
            tag = self.output.dims[1 + k]
            if tag.dyn_size is None:
                tag.dyn_size = sz[:, k]

    @staticmethod
    def _input(data, in_dim="T"):
        """data as [B, flat axis (in_dim), rest...]"""
        data = data.copy_as_batch_major()
        if in_dim in ("T", "t") and data.time_dim_axis is None:
            raise ValueError("unflatten_nd: input %s has no time axis" % data.short_repr())
        a = data.get_axis_from_description(in_dim)
        if a == data.batch_dim_axis:
            raise ValueError("unflatten_nd: in_dim %r is the batch axis of %s" % (in_dim, data.short_repr()))
        return data.copy_move_axis(a, 1)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, num_axes, sizes=None, declare_same_sizes_as=None, in_dim="T",
                               out_dims=None, **kwargs):
        x = cls._input(concat_sources_template(sources, name="%s_output" % name), in_dim)
        num_axes = _ints("num_axes", num_axes)
        if sizes is not None:
            s = sizes.output
            if not s.dtype.startswith("int") or s.batch_ndim != 2 or s.batch_dim_axis is None:
                raise ValueError("unflatten_nd: sizes must be int (B,%i), got %s" % (num_axes, s.short_repr()))
            n = s.dims[1 - s.batch_dim_axis].dimension
            if n is not None and n != num_axes:
                raise ValueError("unflatten_nd: sizes %s has %i entries per sequence, num_axes=%i" % (
                    s.short_repr(), n, num_axes))
        tags = []
        same_sizes_as = {int(i): x for i, x in (declare_same_sizes_as or {}).items()}  # (keys may be given as str)
        if out_dims is not None and (len(out_dims) != num_axes or not all(isinstance(d, Dim) for d in out_dims)):
            raise ValueError("unflatten_nd: option out_dims must be %i Dims, got %r" % (num_axes, out_dims))
        for k in range(num_axes):
            other = same_sizes_as.get(k)
            if out_dims is not None:
                tags.append(out_dims[k])
            elif other is not None:
                tags.append(other.output.get_time_dim_tag())
            else:
                tags.append(Dim(None, kind=Dim.Types.Spatial, description="%s:unflatten-nd%i" % (name, k)))
        dims = [x.dims[0]] + tags + list(x.dims[2:])
        return make_data("%s_output" % name, dims, like=x, time_tag=tags[0] if tags else None)


class SplitConcatenatedMultichannelLayer(ConcatInputLayer):
    """
    Features that are a concatenation of nr_of_channels channels: (B,T,C*F) -> (B*C,T,F), i.e. each channel
    becomes its own sequence (index b*C+c), with the sequence lengths repeated per channel.

    :param nr_of_channels: number C of channels concatenated in the feature axis (default 1)
    """

    layer_class = "split_concatenated_multichannel"

    def __init__(self, nr_of_channels=1, **kwargs):
        super().__init__(**kwargs)
        data = self._input(self.input_data)
        x = data.placeholder
        shape = ShapeOf(x)
        c = nr_of_channels
        f = data.dims[2].dimension // c
        y = reshape(x, [shape[0], shape[1], c, f])  # B,T,C,F
        y = tf.transpose(y, [0, 2, 1, 3])  # B,C,T,F
        self.output.placeholder = reshape(y, [None, shape[1], f])
        t_in, t_out = data.dims[1], self.output.dims[1]
        if t_in.dyn_size is not None:
            t_out.dyn_size = tf.reshape(tf.tile(tf.reshape(t_in.dyn_size, [-1, 1]), [1, c]), [-1])

    @staticmethod
    def _input(data):
        data = data.copy_as_batch_major()
        if data.sparse or data.feature_dim_axis is None or data.time_dim_axis is None or data.batch_ndim != 3:
            raise ValueError("split_concatenated_multichannel: expects dense (B,T,F) input, got %s" % (
                data.short_repr(),))
        return data.copy_move_axis(data.time_dim_axis, 1)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, nr_of_channels=1, **kwargs):
        data = cls._input(concat_sources_template(sources, name="%s_output" % name))
        c = _ints("nr_of_channels", nr_of_channels)
        dim = data.dims[2].dimension
        if c <= 0 or dim is None or dim % c:
            raise ValueError("split_concatenated_multichannel: feature dim %r of %s is not a multiple of "
                             "nr_of_channels=%r" % (dim, data.short_repr(), nr_of_channels))
        b = _new_batch_dim("%s:batch*channels" % name, merged_dims=[data.dims[0], Dim(c, description="channels")])
        t_in = data.dims[1]
        t = Dim(t_in.dimension, kind=Dim.Types.Spatial, description="%s:time" % name)
        feat = Dim(dim // c, kind=Dim.Types.Feature, description="%s:feature" % name)
        return make_data("%s_output" % name, [b, t, feat], like=data, time_tag=t, feature_tag=feat)


__all__ = [
    "MergeDimsLayer", "CombineDimsLayer", "SplitDimsLayer", "SplitLayer", "SplitBatchTimeLayer",
    "FlattenBatchLayer", "UnflattenBatchLayer", "UnflattenNdLayer", "SplitConcatenatedMultichannelLayer",
    "batch_dim",
]
