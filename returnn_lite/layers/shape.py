"""
Shape and axis layers that keep the number of frames per axis simple: slice, slice_nd, expand_dims,
squeeze, transpose, swap_axes, reinterpret_data, remove, stack, tile, repeat, resize.
Reshaping layers (merge/split/flatten) live in ``shape_split.py``.

Conventions: axes that stay the same keep their Dim object; every new axis gets a new Dim, and a new
dynamic axis gets its sequence lengths (``dyn_size``) set in ``__init__``.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..data import Data, Dim, tensor_dim
from ..util import NotSpecified
from .base import ConcatInputLayer, LayerBase, concat_sources_template

tf1 = tf.compat.v1

_DEFAULT = object()  # "derive this special axis from the dims"
_INHERIT = object()  # "take it over from the input"


# ---------------------------------------------------------------------------------------------
# helpers shared by the shape layers

def axis_of_tag(data, tag):
    """Axis of data holding exactly this Dim object (else an equal one), or None."""
    if tag is None:
        return None
    for i, d in enumerate(data.dims):
        if d is tag:
            return i
    for i, d in enumerate(data.dims):
        if d == tag:
            return i
    return None


def special_tags(data):
    """(time tag, feature tag) of data; None where there is no such axis."""
    t, f = data.time_dim_axis, data.feature_dim_axis
    return (None if t is None else data.dims[t]), (None if f is None or data.sparse else data.dims[f])


def set_special_axes(data, time=_DEFAULT, feature=_DEFAULT):
    """
    Set the time/feature axes of data (an axis index, None for "no such axis", or _DEFAULT to derive it);
    explicit only where the derived default differs.
    """
    data._time_dim_axis = NotSpecified
    data._feature_dim_axis = NotSpecified
    if time is not _DEFAULT and data.time_dim_axis != time:
        data._time_dim_axis = time
    if feature is not _DEFAULT and not data.sparse and data.feature_dim_axis != feature:
        data._feature_dim_axis = feature
    return data


def make_data(name, dims, like, time_tag=_INHERIT, feature_tag=_INHERIT, dtype=None, sparse_dim=NotSpecified):
    """
    New template with these dims and like's dtype/sparsity. time_tag/feature_tag: the Dim of the special
    axis, None for "no such axis", _DEFAULT to derive it from the dims, or _INHERIT: like's tag if it is
    still there (no such axis if like has none explicitly, else derived).
    """
    out = Data(name=name, dims=list(dims), dtype=dtype or like.dtype,
               sparse_dim=like.sparse_dim if sparse_dim is NotSpecified else sparse_dim)
    like_t, like_f = special_tags(like)

    def resolve(tag, like_tag, like_explicit):
        if tag is _INHERIT:
            if like_tag is not None:
                a = axis_of_tag(out, like_tag)
                return _DEFAULT if a is None else a
            return None if like_explicit is None else _DEFAULT
        if tag is _DEFAULT:
            return _DEFAULT
        return axis_of_tag(out, tag)

    time = resolve(time_tag, like_t, like.time_dim_axis_or_unspecified)
    feature = resolve(feature_tag, like_f, like.feature_dim_axis_or_unspecified)
    return set_special_axes(out, time=time, feature=feature)


def add_axis(data, axis, tag):
    """
    Template of data with the new axis tag inserted at axis (the original's copy_add_dim_by_tag): the time axis
    stays the time axis, an explicit feature axis stays where it was, an unspecified one is derived anew
    (so a static axis appended after the feature axis becomes the feature axis).
    """
    out = data.copy_template().copy_add_dim_by_tag(tag, unbroadcast=True, axis=axis)
    t = data.time_dim_axis
    if t is not None and out.time_dim_axis_or_unspecified is NotSpecified:
        a = axis % (data.batch_ndim + 1)
        out.time_dim_axis = t + (1 if t >= a else 0)
    return out


def rebatch_dims(dims, name):
    """
    For an output with a new batch axis (merged, tiled, flattened): the dynamic axes that stay get new tags
    (their per-sequence lengths change with the batch); set_rebatched_sizes fills in the lengths.
    """
    res = []
    for d in dims:
        if d.is_dynamic() and not d.is_batch_dim():
            new = Dim(None, kind=d.kind, description="%s:%s" % (name, d.description))
            new.rebatched_from = d
            d = new
        res.append(d)
    return res


def set_rebatched_sizes(data, fn):
    """Lengths of the tags made by rebatch_dims: fn(old [B] lengths) -> new lengths."""
    for d in data.dims:
        src = getattr(d, "rebatched_from", None)
        if src is not None and d.dyn_size is None and src.dyn_size is not None:
            d.dyn_size = fn(src.dyn_size) if src.dyn_size.shape.rank == 1 else src.dyn_size


class ShapeOf:
    """Sizes of the axes of a tensor: static ints where known, else from one shared tf.shape (:func:`tensor_dim`)."""

    def __init__(self, x):
        self.x = x
        self.static = x.shape.as_list() if x.shape.rank is not None else None

    def __getitem__(self, axis):
        if self.static is not None and self.static[axis] is not None:
            return self.static[axis]
        return tensor_dim(self.x, axis)


def reshape(x, sizes):
    """tf.reshape with a list of ints / scalar tensors; one unknown size (None) becomes -1."""
    sizes = [-1 if s is None else s for s in sizes]
    if all(isinstance(s, int) for s in sizes):
        return tf.reshape(x, sizes)
    return tf.reshape(x, tf.stack([tf.convert_to_tensor(s, dtype=tf.int32) for s in sizes]))


def ceildiv(a, b):
    return -(-a // b)


def broadcast_all(datas, common):
    """Placeholders of datas, transposed/expanded to common's layout and broadcast to its full shape."""
    aligned = [d.copy_compatible_to(common) for d in datas]
    sizes = [None] * common.batch_ndim
    for p in aligned:
        shape = ShapeOf(p.placeholder)
        for j, d in enumerate(p.dims):
            if sizes[j] is None and (d == common.dims[j] or common.dims[j].dimension == 1):
                sizes[j] = shape[j]
    xs = []
    for p in aligned:
        x = p.placeholder
        if any(p.dims[j] != common.dims[j] and common.dims[j].dimension != 1 for j in range(common.batch_ndim)):
            x = tf.broadcast_to(x, tf.stack([tf.convert_to_tensor(s, dtype=tf.int32) for s in sizes])
                                if not all(isinstance(s, int) for s in sizes) else sizes)
        xs.append(x)
    return xs


def _ints(name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError("%s must be an int, got %r" % (name, value))
    return int(value)


# ---------------------------------------------------------------------------------------------
# slice

class SliceLayer(ConcatInputLayer):
    """x[start:end:step] on one axis. A sliced dynamic axis gets a new Dim with adapted sequence lengths.

    :param axis: the axis to slice ("T", "F", a dim tag or int; not the batch axis)
    :param slice_start: start index as in x[start:end:step] (default None)
    :param slice_end: end index, exclusive (default None)
    :param slice_step: step (default None = 1; not 0; negative steps refused on dynamic axes)
    :param out_dim: Dim of the sliced axis (default None: a new tag; must have the sliced size)
    """

    layer_class = "slice"

    def __init__(self, axis, slice_start=None, slice_end=None, slice_step=None, out_dim=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        a = data.get_axis_from_description(axis)
        idx = [slice(None)] * data.batch_ndim
        idx[a] = slice(slice_start, slice_end, slice_step)
        self.output.placeholder = data.placeholder[tuple(idx)]
        in_tag, out_tag = data.dims[a], self.output.dims[a]
        if out_tag is not in_tag and out_tag.is_dynamic() and (out_dim is None or out_tag.dyn_size is None):
            out_tag.dyn_size = self._sliced_lengths(in_tag.dyn_size, slice_start, slice_end, slice_step,
                                                    padded=lambda: ShapeOf(data.placeholder)[a])

    @staticmethod
    def _sliced_lengths(lens, start, end, step, padded):
        """Per-sequence lengths after the slice (the original's dim arithmetic: len-start, len+end, ceildiv)."""
        start = start or 0
        if start < 0:  # only reached with end >= 0 (other cases are static): relative to the padded length
            start = tf.maximum(padded() + start, 0)
        if end is None:
            n = lens - start
        elif end >= 0:
            n = tf.minimum(lens, end) - start
        else:
            n = lens + end - start
        n = tf.maximum(n, 0)
        if step and step != 1:
            n = -(-n // abs(step))
        return n

    @classmethod
    def get_out_data_from_opts(cls, name, axis, sources=(), slice_start=None, slice_end=None, slice_step=None,
                               out_dim=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        for key, v in (("slice_start", slice_start), ("slice_end", slice_end), ("slice_step", slice_step)):
            if v is not None:
                _ints(key, v)
        if slice_step == 0:
            raise ValueError("slice_step must not be 0")
        if tag.is_batch_dim():
            raise ValueError("cannot slice the batch axis of %s" % data.short_repr())
        if not slice_start and slice_end is None and slice_step in (None, 1) and (out_dim is None or out_dim == tag):
            return data
        if tag.dimension is not None:
            dim = len(range(tag.dimension)[slice(slice_start, slice_end, slice_step)])
        else:
            if slice_step is not None and slice_step < 0:
                raise ValueError("negative slice_step %r on the dynamic axis %s of %s is not supported" % (
                    slice_step, tag.short_repr(), data.short_repr()))
            start = slice_start or 0
            if start >= 0 and slice_end is not None and slice_end >= 0:
                dim = max(slice_end - start, 0)
            elif start < 0 and (slice_end is None or slice_end < 0):
                dim = max((slice_end or 0) - start, 0)
            else:
                dim = None
            if dim is not None and slice_step:
                dim = ceildiv(dim, slice_step)
        if out_dim is not None and out_dim.dimension != dim:
            raise ValueError("slice layer %r: out_dim %s does not have the sliced size %s" % (name, out_dim, dim))
        new = out_dim or Dim(dim, kind=tag.kind, description="%s:slice" % name)
        return data.copy_template_replace_dim_tag(a, new)


class SliceNdLayer(ConcatInputLayer):
    """
    x[b, start[b]:start[b]+size] on the time axis (or ``axis``), per sequence (start may have more axes, e.g. (B,T)).
    Frames outside [0, seq_len) (and, for a size layer, beyond start+size) are zero. With size=None the slice axis
    is dynamic with lengths max(seq_len - start, min_size or 0).

    :param start: layer with int start positions ([B] or [B,T]), one slice per entry
    :param size: slice size: int, or None/layer for dynamic sizes (slices past the end are padded)
    :param min_size: with a dynamic size: the minimal slice size (default None)
    :param axis: the axis to slice in (default "T")
    :param out_spatial_dim: the Dim of the slice axis (instead of a new one)
    """

    layer_class = "slice_nd"
    layer_options = ("start", "size")  # size: a layer name, or a constant
    recurrent = True

    def __init__(self, start, size, min_size=None, axis="T", out_spatial_dim=None, **kwargs):
        super().__init__(**kwargs)
        self.start = start
        self.size = size
        x = self._input_bt(self.input_data, axis)
        st = start.output.copy_as_batch_major()
        start_t = tf.cast(st.placeholder, tf.int32)
        extra = st.batch_ndim - 1  # axes of start besides batch
        x_shape = ShapeOf(x.placeholder)
        tag = x.dims[1]
        lens = tag.dyn_size if tag.is_dynamic() else None
        limit = lens if lens is not None else x_shape[1]
        if lens is not None:
            limit = tf.reshape(lens, [-1] + [1] * extra)
        out_tag = self.output.dims[1 + extra]
        if size is None or isinstance(size, LayerBase):
            if isinstance(size, LayerBase):
                sizes = tf.cast(size.output.copy_as_batch_major().placeholder, tf.int32)
                sizes = tf.broadcast_to(sizes, tf.shape(start_t)) if extra else sizes
                if min_size:
                    sizes = tf.maximum(sizes, min_size)
            else:
                sizes = tf.maximum(limit - start_t, min_size or 0)
            size_t = tf.reduce_max(sizes)
            if out_spatial_dim is None or out_tag.dyn_size is None:  # (a given Dim may have its sizes already)
                out_tag.dyn_size = sizes
        else:
            size_t = _ints("size", size)
        pos = tf.expand_dims(start_t, -1) + tf.range(size_t)  # [B, S..., size]
        valid = tf.logical_and(pos >= 0, pos < tf.expand_dims(limit, -1) if lens is not None else pos < limit)
        if isinstance(size, LayerBase):
            valid = tf.logical_and(valid, pos < tf.expand_dims(start_t + sizes, -1))
        y = tf.gather(x.placeholder, tf.where(valid, pos, tf.zeros_like(pos)), batch_dims=1)  # [B,S...,size,rest]
        rest = x.batch_ndim - 2
        if rest:
            valid = tf.reshape(valid, tf.concat([tf.shape(valid), [1] * rest], axis=0))
        y = tf.where(valid, y, tf.zeros((), dtype=y.dtype))
        n_before = self._num_axes_before(self.input_data, axis)
        if n_before:  # input axes before the slice axis stay before the new axes (as the original's gather)
            new = list(range(1, 2 + extra))
            y = tf.transpose(y, [0] + [2 + extra + i for i in range(n_before)] + new +
                             list(range(2 + extra + n_before, y.shape.rank)))
        self.output.placeholder = y

    @staticmethod
    def _input_bt(data, axis="T"):
        """data as [B, T, rest...] (T: the slice axis)"""
        data = data.copy_as_batch_major()
        if axis in ("T", "t") and data.time_dim_axis is None:
            raise ValueError("slice_nd: input %s has no time axis" % data.short_repr())
        a = data.get_axis_from_description(axis)
        if a == data.batch_dim_axis:
            raise ValueError("slice_nd: axis %r is the batch axis of %s" % (axis, data.short_repr()))
        return data.copy_move_axis(a, 1)

    @staticmethod
    def _num_axes_before(data, axis):
        """How many non-batch input axes come before the slice axis (only the batch axis is shared with start)."""
        a = data.get_axis_from_description(axis)
        b = data.batch_dim_axis
        return max(a - 1, 0) if b is not None and b < a else a

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), start=None, size=None, axis="T", out_spatial_dim=None,
                               **kwargs):
        if start is None:
            raise ValueError("slice_nd needs 'start' (a layer)")
        x = cls._input_bt(concat_sources_template(sources, name="%s_output" % name), axis)
        if not start.output.have_batch_axis():
            raise ValueError("slice_nd: start %s needs a batch axis" % start.output.short_repr())
        st = start.output.copy_as_batch_major()
        if not st.dtype.startswith("int"):
            raise ValueError("slice_nd: start must be int, got %s" % st.short_repr())
        tag = Dim(None if size is None or isinstance(size, LayerBase) else _ints("size", size),
                  kind=Dim.Types.Spatial, description="%s:slice-nd" % name)
        if out_spatial_dim is not None:
            if not isinstance(out_spatial_dim, Dim) or out_spatial_dim.dimension != tag.dimension:
                raise ValueError("slice_nd: option out_spatial_dim %r does not match the slice size %r" % (
                    out_spatial_dim, tag.dimension))
            tag = out_spatial_dim
        n_before = cls._num_axes_before(concat_sources_template(sources), axis)
        dims = [x.dims[0]] + list(x.dims[2:2 + n_before]) + list(st.dims[1:]) + [tag] + list(x.dims[2 + n_before:])
        return make_data("%s_output" % name, dims, like=x)


# ---------------------------------------------------------------------------------------------
# adding / removing / reordering axes

class ExpandDimsLayer(ConcatInputLayer):
    """Adds an axis of size dim (tiled): "F" appends a feature axis, "T"/"spatial" one before the last axis.

    :param axis: where to add the new axis: "F", "T", "spatial" or an int (of the batch-major input)
    :param dim: size of the new axis (default 1; the input is tiled), or a static Dim: the new axis' tag
    """

    layer_class = "expand_dims"

    def __init__(self, axis, dim=1, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data.copy_as_batch_major() if isinstance(axis, int) else self.input_data
        a = self._get_axis(data, axis)
        x = tf.expand_dims(data.placeholder, a)
        if isinstance(dim, Dim):
            dim = dim.dimension
        if dim != 1:
            multiples = [1] * (data.batch_ndim + 1)
            multiples[a] = dim
            x = tf.tile(x, multiples)
        self.output.placeholder = x

    @staticmethod
    def _get_axis(data, axis):
        if isinstance(axis, int):
            if not -(data.batch_ndim + 1) <= axis <= data.batch_ndim:
                raise ValueError("expand_dims: axis %i out of range for %s" % (axis, data.short_repr()))
            return axis % (data.batch_ndim + 1)
        if not isinstance(axis, str):
            raise TypeError("expand_dims: invalid axis %r" % (axis,))
        a = axis.lower()
        if a in ("f", "feature"):
            if data.sparse:
                raise ValueError("expand_dims: cannot add a feature axis to sparse %s" % data.short_repr())
            return data.batch_ndim
        if a in ("spatial", "time", "t"):
            return data.batch_ndim if data.sparse else max(data.batch_ndim - 1, 0)
        raise ValueError("expand_dims: invalid axis %r (use 'F', 'T', 'spatial' or an int)" % axis)

    @classmethod
    def get_out_data_from_opts(cls, name, axis, dim=1, sources=(), **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        if isinstance(axis, int):
            data = data.copy_as_batch_major()
        a = cls._get_axis(data, axis)
        # only "f" (not "feature") makes a feature-kind axis and sets it as the feature axis explicitly
        is_f = isinstance(axis, str) and axis.lower() == "f"
        if isinstance(dim, Dim):
            if dim.dimension is None:
                raise ValueError("expand_dims layer %r: dim %s must be static" % (name, dim))
            tag = dim
        else:
            tag = Dim(_ints("dim", dim), kind=Dim.Types.Feature if is_f else Dim.Types.Spatial,
                      description="%s_expand_dims" % name)
        out = add_axis(data, a, tag)
        if isinstance(axis, str) and axis.lower() in ("t", "time", "spatial") and data.time_dim_axis is None:
            out.time_dim_axis = a  # the new axis becomes the time axis only if there is none
        return out


class SqueezeLayer(ConcatInputLayer):
    """Removes axes of size 1 (axis counted with batch, or a description like "F", "spatial", "dim:1").

    :param axis: axis or axes of size 1 to remove (description, dim tag or int, or a list of them)
    :param enforce_batch_dim_axis: move the batch axis to this position first (default None)
    :param allow_no_op: no error if no axis matches (default False)
    """

    layer_class = "squeeze"

    def __init__(self, axis, enforce_batch_dim_axis=None, allow_no_op=False, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        if enforce_batch_dim_axis is not None and data.batch_dim_axis != enforce_batch_dim_axis:
            data = data.copy_with_batch_dim_axis(enforce_batch_dim_axis)
        axes = self._get_axes(data, axis, allow_no_op)
        self.output.placeholder = tf.squeeze(data.placeholder, axes) if axes else data.placeholder

    @staticmethod
    def _get_axes(data, axis, allow_no_op):
        if axis == "auto":
            axes = [i for i, d in enumerate(data.dims) if d.dimension == 1]
        else:
            axes = data.get_axes_from_description(axis)
            if isinstance(axis, str) and len(axes) > 1:  # e.g. "spatial": the size-1 ones among them
                axes = [i for i in axes if data.dims[i].dimension == 1]
        # no matching axis: a no-op (as the original, also without allow_no_op)
        # a dynamic axis is squeezed too (as the original: its size must be 1 at run time, tf.squeeze checks)
        bad = [i for i in axes if data.dims[i].dimension not in (1, None) or data.dims[i].is_batch_dim()]
        if bad:
            raise ValueError("squeeze: axis %r of %s has size %s, not 1" % (
                axis, data.short_repr(), ", ".join(str(data.dims[i].dimension or "?") for i in bad)))
        return sorted(axes)

    @classmethod
    def get_out_data_from_opts(cls, name, axis, enforce_batch_dim_axis=None, allow_no_op=False, sources=(),
                               **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        if enforce_batch_dim_axis is not None and data.batch_dim_axis != enforce_batch_dim_axis:
            data = data.copy_with_batch_dim_axis(enforce_batch_dim_axis)
        out = data
        for a in reversed(cls._get_axes(data, axis, allow_no_op)):
            out = out.copy_template_excluding_axis(a)
        return out


def _perm_from_dict(data, perm):
    """{target axis: source axis} (descriptions) -> full permutation list (output axis i <- input axis p[i])."""
    perm_int = {}
    for tgt, src in perm.items():
        a, b = data.get_axis_from_description(tgt), data.get_axis_from_description(src)
        if a in perm_int:
            raise ValueError("transpose: target axis %r given twice in perm %r" % (tgt, perm))
        perm_int[a] = b
    if len(set(perm_int.values())) != len(perm_int):
        raise ValueError("transpose: perm %r uses a source axis twice (axes %s)" % (perm, perm_int))
    rem_tgt = [i for i in range(data.batch_ndim) if i not in perm_int]
    rem_src = [i for i in range(data.batch_ndim) if i not in perm_int.values()]
    perm_int.update(zip(rem_tgt, rem_src))
    return [perm_int[i] for i in range(data.batch_ndim)]


class TransposeLayer(ConcatInputLayer):
    """tf.transpose with perm as dict target axis -> source axis; dim tags move with their axes.

    :param perm: dict target axis -> source axis (descriptions or dim tags), e.g. {"T": "F", "F": "T"}
    """

    layer_class = "transpose"

    def __init__(self, perm, **kwargs):
        super().__init__(**kwargs)
        self.output.placeholder = self.input_data.copy_transpose(
            _perm_from_dict(self.input_data, perm)).placeholder

    @classmethod
    def transpose(cls, input_data, perm, name=None):
        return input_data.copy_transpose(_perm_from_dict(input_data, perm)).copy(name=name)

    @classmethod
    def get_perm_int(cls, input_data, perm):
        return dict(enumerate(_perm_from_dict(input_data, perm)))

    @classmethod
    def get_out_data_from_opts(cls, name, sources, perm, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        return data.copy_transpose(_perm_from_dict(data, perm))


class SwapAxesLayer(ConcatInputLayer):
    """Swaps two axes (the dim tags move with them).

    :param axis1: first axis to swap (description, dim tag or int)
    :param axis2: second axis to swap (must differ from axis1)
    """

    layer_class = "swap_axes"

    def __init__(self, axis1, axis2, **kwargs):
        super().__init__(**kwargs)
        self.output.placeholder = self.input_data.copy_transpose(
            self._perm(self.input_data, axis1, axis2)).placeholder

    @staticmethod
    def _perm(data, axis1, axis2):
        a1, a2 = data.get_axis_from_description(axis1), data.get_axis_from_description(axis2)
        if a1 == a2:
            raise ValueError("swap_axes: axis1=%r and axis2=%r are the same axis %i of %s" % (
                axis1, axis2, a1, data.short_repr()))
        perm = list(range(data.batch_ndim))
        perm[a1], perm[a2] = a2, a1
        return perm

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axis1, axis2, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        return data.copy_transpose(cls._perm(data, axis1, axis2))


_SPECIAL_AXIS_KEYS = {"b": "B", "batch": "B", "t": "T", "time": "T", "f": "F", "feature": "F",
                      "batch_dim_axis": "B", "time_dim_axis": "T", "feature_dim_axis": "F"}


class ReinterpretDataLayer(ConcatInputLayer):
    """Copy that reinterprets axes or sparsity (no data movement, except enforce_batch/time_major).

    :param switch_axes: two of "T", "F" whose roles are swapped (the batch axis is refused)
    :param size_base: layer whose time axis (sequence lengths) replaces the input's time axis
    :param set_axes: dict "T"/"F" -> axis, to set which axis is the time/feature axis
    :param set_dim_tags: dict axis -> Dim, replacing the dim tags of these axes
    :param enforce_batch_major: make the output batch major (default False)
    :param enforce_time_major: make the output time major (default False)
    :param set_sparse: True: make dense data sparse (dim from set_sparse_dim or the feature dim); False: dense
    :param set_sparse_dim: new sparse dim (int) of sparse data (default: unchanged)
    :param increase_sparse_dim: add this to the sparse dim (sparse data with known dim)
    :param batch_dim_base: layer whose batch dim tag replaces the input's batch dim tag
    """

    layer_class = "reinterpret_data"
    layer_options = ("size_base", "batch_dim_base")

    def __init__(self, switch_axes=None, size_base=None, set_axes=None, set_dim_tags=None, enforce_batch_major=False,
                 enforce_time_major=False, set_sparse=None, set_sparse_dim=NotSpecified, increase_sparse_dim=None,
                 batch_dim_base=None, **kwargs):
        super().__init__(**kwargs)
        self.size_base = size_base
        data = self.input_data
        if enforce_batch_major:
            data = data.copy_as_batch_major()
        if enforce_time_major:
            data = data.copy_as_time_major()
        self.output.placeholder = data.placeholder

    @classmethod
    def get_out_data_from_opts(cls, name, sources, switch_axes=None, size_base=None, set_axes=None,
                               set_dim_tags=None, enforce_batch_major=False, enforce_time_major=False, set_sparse=None,
                               set_sparse_dim=NotSpecified, increase_sparse_dim=None, batch_dim_base=None, **kwargs):
        out = concat_sources_template(sources, name="%s_output" % name)
        if enforce_batch_major:
            out = out.copy_as_batch_major()
        if enforce_time_major:
            out = out.copy_as_time_major()
        if switch_axes:
            keys = [_SPECIAL_AXIS_KEYS.get(str(k).lower()) for k in switch_axes]
            if len(keys) != 2 or None in keys:
                raise ValueError("reinterpret_data: switch_axes %r must name two of 'B', 'T', 'F'" % (switch_axes,))
            if "B" in keys:
                raise ValueError("reinterpret_data: switch_axes %r with the batch axis is not supported" % (
                    switch_axes,))
            t, f = out.time_dim_axis, out.feature_dim_axis
            set_special_axes(out, time=f, feature=t)
        if size_base is not None:
            base = size_base.output
            if base.time_dim_axis is None or out.time_dim_axis is None:
                raise ValueError("reinterpret_data: size_base %r (%s) and the input %s both need a time axis" % (
                    size_base.name, base.short_repr(), out.short_repr()))
            out = out.copy_template_replace_dim_tag(out.time_dim_axis, base.get_time_dim_tag())
        if set_axes:
            time, feature = _DEFAULT, _DEFAULT
            t0, f0 = out.time_dim_axis, out.feature_dim_axis
            for key, value in set_axes.items():
                k = _SPECIAL_AXIS_KEYS.get(str(key).lower())
                if k is None or k == "B":
                    raise ValueError("reinterpret_data: set_axes key %r must be 'T' or 'F'" % (key,))
                if value is None:
                    a = None
                elif isinstance(value, int):
                    if not (enforce_batch_major or enforce_time_major):  # as the original: ints need a fixed layout
                        raise ValueError("reinterpret_data: set_axes %r with an int axis needs enforce_batch_major "
                                         "or enforce_time_major" % (set_axes,))
                    a = value % out.batch_ndim
                else:
                    a = out.get_axis_from_description(value)
                if k == "T":
                    time = a
                else:
                    feature = a
            set_special_axes(out, time=t0 if time is _DEFAULT else time,
                             feature=(f0 if f0 != time else _DEFAULT) if feature is _DEFAULT else feature)
        if set_dim_tags:
            for key, tag in set_dim_tags.items():
                if not isinstance(tag, Dim):
                    raise TypeError("reinterpret_data: set_dim_tags[%r] must be a Dim, got %r" % (key, tag))
                a = out.get_axis_from_description(key)
                old = out.dims[a]
                if old.dimension is not None and tag.dimension is not None and old.dimension != tag.dimension:
                    raise ValueError("reinterpret_data: set_dim_tags[%r]: %r does not fit axis %s" % (
                        key, tag, old.short_repr()))
                out = out.copy_template_replace_dim_tag(a, tag)
                if tag.is_dynamic() and tag.dyn_size is None and old.dyn_size is not None:
                    tag.dyn_size = old.dyn_size
        if set_sparse is not None:
            if set_sparse and not out.sparse:
                dim = None if set_sparse_dim is NotSpecified else set_sparse_dim
                f = out.feature_dim_axis
                if dim is None and f is not None:
                    dim = out.dims[f].dimension
                out.sparse_dim = Dim(dim, kind=Dim.Types.Feature, description="%s:sparse" % name)
            elif not set_sparse and out.sparse:
                out.sparse_dim = None
                set_special_axes(out, time=out.time_dim_axis)
        if set_sparse_dim is not NotSpecified and not (set_sparse and out.sparse_dim.dimension == set_sparse_dim):
            if not out.sparse:
                raise ValueError("reinterpret_data: set_sparse_dim needs sparse data, got %s" % out.short_repr())
            out.sparse_dim = Dim(set_sparse_dim, kind=Dim.Types.Feature, description="%s:sparse" % name)
        if increase_sparse_dim:
            if not out.sparse or out.sparse_dim.dimension is None:
                raise ValueError("reinterpret_data: increase_sparse_dim needs sparse data with a known dim, got %s" % (
                    out.short_repr(),))
            out.sparse_dim = Dim(out.sparse_dim.dimension + increase_sparse_dim, kind=Dim.Types.Feature,
                                 description="%s:sparse" % name)
        if batch_dim_base is not None:
            b = out.batch_dim_axis
            base_b = batch_dim_base.output.batch_dim_axis
            if b is None or base_b is None:
                raise ValueError("reinterpret_data: batch_dim_base needs batch axes")
            out = out.copy_template_replace_dim_tag(b, batch_dim_base.output.dims[base_b])
        return out


class RemoveLayer(LayerBase):
    """Removes every occurrence of symbol from sparse [B,T] data; the remaining labels move to the front.

    :param symbol: label index to remove from the sparse [B,T] input (negative: counted from the vocab end)
    :param axis: must be the time axis (default "T"); the output gets new sequence lengths
    """

    layer_class = "remove"

    def __init__(self, symbol, axis="T", **kwargs):
        super().__init__(**kwargs)
        src = self.sources[0].output.copy_as_batch_major()
        x = src.placeholder
        if symbol < 0:
            symbol += src.sparse_dim.dimension
        keep = tf.not_equal(x, tf.cast(symbol, x.dtype))
        tag = src.dims[1]
        if tag.dyn_size is not None:
            keep = tf.logical_and(keep, tag.get_mask(ShapeOf(x)[1]))
        keep_i = tf.cast(keep, tf.int32)
        lens = tf.reduce_sum(keep_i, axis=1)
        order = tf.argsort(1 - keep_i, axis=1, stable=True)  # kept positions first, in order
        y = tf.gather(x, order, batch_dims=1)[:, :tf.reduce_max(lens)]
        mask = tf.sequence_mask(lens, maxlen=tf.shape(y)[1])
        self.output.placeholder = tf.where(mask, y, tf.zeros_like(y))
        self.output.dims[1].dyn_size = lens

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), axis="T", **kwargs):
        src = sources[0].output.copy_as_batch_major()
        if not src.sparse or src.batch_ndim != 2 or src.batch_dim_axis != 0:
            raise ValueError("remove: expects sparse [B,T] input, got %s" % src.short_repr())
        if src.get_axis_from_description(axis) != 1:
            raise ValueError("remove: axis=%r must be the time axis of %s" % (axis, src.short_repr()))
        tag = Dim(None, kind=Dim.Types.Spatial, description="%s:removed" % name)
        return make_data("%s_output" % name, [src.dims[0], tag], like=src, time_tag=tag)


# ---------------------------------------------------------------------------------------------
# stacking / repeating

class StackLayer(LayerBase):
    """tf.stack of the sources (broadcast to a common shape) on a new spatial axis.

    :param axis: position of the new stack axis in the output (default None: after the last axis)
    :param out_spatial_dim: the Dim of the new axis (size: the number of sources; default a new one)
    """

    layer_class = "stack"

    def __init__(self, axis=None, out_spatial_dim=None, **kwargs):
        super().__init__(**kwargs)
        common = Data.get_common_data([s.output for s in self.sources])
        xs = broadcast_all([s.output for s in self.sources], common)
        a = self._get_axis(common, axis, self.output.dims)
        self.output.placeholder = tf.stack(xs, axis=a)

    @staticmethod
    def _get_axis(common, axis, out_dims=None):
        if axis is None:
            if out_dims is not None:
                return [i for i, d in enumerate(out_dims) if d not in common.dims][0]
            return None
        n = common.batch_ndim + 1
        if not -n <= axis < n:
            raise ValueError("stack: axis %r out of range for %i output axes" % (axis, n))
        return axis % n

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axis=None, out_spatial_dim=None, **kwargs):
        if not sources:
            raise ValueError("stack needs at least one source")
        dtypes = {s.output.dtype for s in sources}
        if len(dtypes) > 1:
            raise ValueError("stack: sources have different dtypes %s" % sorted(dtypes))
        common = Data.get_common_data([s.output for s in sources], name="%s_output" % name)
        tag = Dim(len(sources), kind=Dim.Types.Spatial, description="%s:stack" % name)
        if out_spatial_dim is not None:
            if not isinstance(out_spatial_dim, Dim) or out_spatial_dim.dimension != len(sources):
                raise ValueError("stack: option out_spatial_dim %r must be a Dim of size %i (the number of sources)" % (
                    out_spatial_dim, len(sources)))
            tag = out_spatial_dim
        a = cls._get_axis(common, axis)
        if a is None:
            a = common.get_default_new_axis_for_dim_tag(tag)
        return add_axis(common, a, tag)


class TileLayer(ConcatInputLayer):
    """tf.tile with multiples per axis ({axis description: int}); tiled dynamic axes multiply their lengths.

    :param multiples: dict axis -> int factor (axes as descriptions or dim tags), e.g. {"T": 2}
    :param out_dims: dict axis (as in multiples) -> the Dim of the tiled axis (instead of a new one)
    """

    layer_class = "tile"

    def __init__(self, multiples, out_dims=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        full = [1] * data.batch_ndim
        mults = self._multiples(data, multiples)
        m_b = mults.get(data.batch_dim_axis, 1)

        def rebatch(lens):
            return tf.tile(lens, [m_b]) if m_b != 1 else lens

        for a, m in mults.items():
            full[a] = m
            tag = self.output.dims[a]
            if tag is not data.dims[a] and tag.is_dynamic() and data.dims[a].dyn_size is not None:
                tag.dyn_size = rebatch(data.dims[a].dyn_size * m)
        set_rebatched_sizes(self.output, rebatch)
        self.output.placeholder = tf.tile(data.placeholder, full)

    @staticmethod
    def _multiples(data, multiples):
        res = {}
        for key, m in multiples.items():
            a = data.get_axis_from_description(key)
            if a in res:
                raise ValueError("tile: axis %r given twice in multiples %r" % (key, multiples))
            res[a] = _ints("multiples[%r]" % (key,), m)
        return res

    @classmethod
    def get_out_data_from_opts(cls, name, multiples, sources=(), out_dims=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        mults = cls._multiples(data, multiples)
        given = {}
        for key, d in (out_dims or {}).items():
            a = data.get_axis_from_description(key)
            if a not in mults or not isinstance(d, Dim):
                raise ValueError("tile: option out_dims: key %r is not an axis of multiples %r (or %r no Dim)" % (
                    key, multiples, d))
            given[a] = d
        if mults.get(data.batch_dim_axis, 1) != 1:
            dims = rebatch_dims([d for a, d in enumerate(data.dims) if a not in mults or mults[a] == 1], name)
            for a, d in enumerate(data.dims):
                if a in mults and mults[a] != 1:
                    dims.insert(a, d)
            data = make_data(data.name, dims, like=data)
        for a, m in mults.items():
            if m == 1:
                continue
            tag = data.dims[a]
            if tag.is_batch_dim():
                new = Dim(None, kind=Dim.Types.Batch, description="%s:batch*%i" % (name, m))
            else:
                new = Dim(None if tag.dimension is None else tag.dimension * m, kind=tag.kind,
                          description="%s:tile%i" % (name, m))
            if a in given:
                if given[a].dimension != new.dimension:
                    raise ValueError("tile: option out_dims: %r for axis %s, expected size %r" % (
                        given[a], tag.short_repr(), new.dimension))
                new = given[a]
            data = data.copy_template_replace_dim_tag(a, new)
        return data


class RepeatLayer(ConcatInputLayer):
    """
    tf.repeat on one axis (moved to axis 1 of the batch-major output); repetitions is an int or a layer
    ([B,T] or [B] or scalar) with per-frame counts. The repeated axis gets new lengths (sum of counts).

    :param repetitions: int >= 0 or a layer with int counts ([B,T], [B] or scalar) per frame
    :param axis: the axis to repeat (default "T"; not the batch axis)
    """

    layer_class = "repeat"
    layer_options = ("repetitions",)  # a layer name, or a constant

    def __init__(self, repetitions, axis="T", **kwargs):
        super().__init__(**kwargs)
        self.repetitions = repetitions
        data = self.input_data
        if self._broadcast_batch(data, repetitions):
            rep = repetitions.output
            data = data.copy_add_batch_dim(0, batch_size=tf.shape(rep.placeholder)[rep.batch_dim_axis])
        data = self._input(data, axis)
        x = data.placeholder
        tag, out_tag = data.dims[1], self.output.dims[1]
        if not isinstance(repetitions, LayerBase):
            self.output.placeholder = tf.repeat(x, repetitions, axis=1)
            if tag.dyn_size is not None:
                out_tag.dyn_size = tag.dyn_size * repetitions
            return
        shape = ShapeOf(x)
        n_b, n_t = shape[0], shape[1]
        rep = repetitions.output
        reps = self._reps_bt(rep, data)
        reps = tf.broadcast_to(reps, tf.stack([tf.convert_to_tensor(n_b), tf.convert_to_tensor(n_t)]))
        # mask by the lengths of the repetitions' own axis (for scalar/[B] repetitions: the input's axis)
        rep_tag = rep.dims[1 - rep.batch_dim_axis] if rep.batch_ndim == 2 and rep.have_batch_axis() else tag
        if rep_tag.dyn_size is not None:
            reps = tf.where(tf.sequence_mask(rep_tag.dyn_size, maxlen=n_t), reps, tf.zeros_like(reps))
        lens = tf.reduce_sum(reps, axis=1)
        rest = [shape[i] for i in range(2, data.batch_ndim)]
        flat = tf.repeat(reshape(x, [None] + rest), tf.reshape(reps, [-1]), axis=0)  # [sum(lens), rest]
        max_len = tf.reduce_max(lens)
        idx = tf.cast(tf.where(tf.sequence_mask(lens, maxlen=max_len)), tf.int32)
        out_shape = tf.stack([tf.convert_to_tensor(s, dtype=tf.int32) for s in [n_b, max_len] + rest])
        self.output.placeholder = tf.scatter_nd(idx, flat, out_shape)
        out_tag.dyn_size = lens

    @staticmethod
    def _input(data, axis):
        if not data.have_batch_axis():
            raise ValueError("repeat: input %s has no batch axis" % data.short_repr())
        data = data.copy_as_batch_major()
        a = data.get_axis_from_description(axis)
        if a == data.batch_dim_axis:
            raise ValueError("repeat: cannot repeat the batch axis of %s" % data.short_repr())
        return data.copy_move_axis(a, 1)

    @staticmethod
    def _broadcast_batch(data, repetitions):
        """An input without batch axis gets the batch axis of the repetitions layer."""
        return (isinstance(repetitions, LayerBase) and not data.have_batch_axis()
                and repetitions.output.have_batch_axis())

    @staticmethod
    def _reps_bt(rep, data):
        """repetitions as int32 tensor broadcastable to [B,T] of data (batch-major, repeated axis at 1)."""
        if rep.have_batch_axis():
            rep = rep.copy_as_batch_major()
        if not rep.dtype.startswith("int"):
            raise ValueError("repeat: repetitions must be int, got %s" % rep.short_repr())
        x = rep.placeholder
        if rep.batch_ndim == 0:
            return tf.reshape(x, [1, 1])
        if rep.batch_ndim == 1:
            return tf.expand_dims(x, 1) if rep.have_batch_axis() else tf.expand_dims(x, 0)
        if rep.batch_ndim == 2 and rep.have_batch_axis():
            return x
        raise ValueError("repeat: repetitions %s must be scalar, [B] or [B,T]" % rep.short_repr())

    @classmethod
    def get_out_data_from_opts(cls, name, repetitions, axis="T", sources=(), **kwargs):
        if not isinstance(repetitions, LayerBase) and (
                not isinstance(repetitions, int) or isinstance(repetitions, bool) or repetitions < 0):
            raise ValueError("repeat: option 'repetitions' must be an int >= 0 or a layer, got %r" % (repetitions,))
        data = concat_sources_template(sources, name="%s_output" % name)
        if cls._broadcast_batch(data, repetitions):
            data = data.copy_add_batch_dim(0)
        data = cls._input(data, axis)
        tag = data.dims[1]
        if isinstance(repetitions, LayerBase):
            dim = None
        else:
            rep = _ints("repetitions", repetitions)
            dim = None if tag.dimension is None else tag.dimension * rep
        new = Dim(dim, kind=tag.kind if dim is not None else Dim.Types.Spatial, description="%s:repeat" % name)
        return data.copy_template_replace_dim_tag(1, new)


_RESIZE_OPS = {
    "linear": tf.raw_ops.ResizeBilinear, "cubic": tf.raw_ops.ResizeBicubic,
    "nn": tf.raw_ops.ResizeNearestNeighbor, "nearest_neighbor": tf.raw_ops.ResizeNearestNeighbor,
}
_RESIZE_KINDS = tuple(_RESIZE_OPS) + ("fill",)


class ResizeLayer(ConcatInputLayer):
    """Up-/downsampling of one axis by an int factor (axis moved to 1 of the batch-major output).

    :param factor: int factor of the new axis size
    :param axis: the axis to resize (not the batch axis)
    :param kind: "nn" (default), "nearest_neighbor", "linear", "cubic" (tf.image resize) or "fill"
    :param fill_value: for kind="fill": the value of the inserted frames (default None: 0)
    :param fill_dropout: for kind="fill": drop this fraction of inserted frames randomly (dynamic output length)
    """

    layer_class = "resize"

    def __init__(self, factor, axis, kind="nn", fill_value=None, fill_dropout=None, **kwargs):
        super().__init__(**kwargs)
        data = self._input(self.input_data, axis)
        x = data.placeholder
        shape = ShapeOf(x)
        n_b, size = shape[0], shape[1]
        rest = [shape[i] for i in range(2, data.batch_ndim)]
        n_rest = int(np.prod(rest)) if all(isinstance(s, int) for s in rest) else tf.reduce_prod(tf.stack(rest))
        new_size = size * factor
        img = reshape(x, [n_b, size, 1, n_rest])  # [B,H,W=1,C]
        if kind in _RESIZE_OPS:  # the v1 image ops (align_corners=False, half_pixel_centers=False)
            out_hw = [new_size, 1] if isinstance(new_size, int) else tf.stack([new_size, 1])
            img = _RESIZE_OPS[kind](images=img, size=out_hw, align_corners=False, half_pixel_centers=False)
        else:  # fill
            if fill_value is None:
                fill_value = 0
            if data.sparse and fill_value < 0:
                fill_value += data.sparse_dim.dimension
            fill = tf.fill(tf.shape(img), tf.cast(fill_value, img.dtype))
            img = tf.concat([img] + [fill] * (factor - 1), axis=2)  # [B,H,factor,C]
        y = reshape(img, [n_b, new_size] + rest)
        if y.dtype != x.dtype:
            y = tf.cast(y, x.dtype)
        tag, out_tag = data.dims[1], self.output.dims[1]
        lens = tag.dyn_size * factor if tag.dyn_size is not None else None
        if fill_dropout:
            keep = (1.0 - fill_dropout) + tf1.random_uniform(
                tf.stack([tf.convert_to_tensor(size), factor - 1]), seed=self.network.random.randint(2 ** 31))
            keep = tf.concat([tf.ones(tf.stack([tf.convert_to_tensor(size), 1]), dtype=tf.bool),
                              tf.cast(tf.floor(keep), tf.bool)], axis=1)
            keep = tf.reshape(keep, [-1])  # [new_size]
            n_kept = tf.reduce_sum(tf.cast(keep, tf.int32))
            y = tf.boolean_mask(y, keep, axis=1)
            if lens is not None:
                valid = tf.logical_and(keep[None, :], tf.sequence_mask(lens, maxlen=new_size))
                lens = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)
            else:
                lens = tf.fill([n_b], n_kept)
        if out_tag is not tag and out_tag.is_dynamic():
            out_tag.dyn_size = lens
        self.output.placeholder = y

    @staticmethod
    def _input(data, axis):
        if not data.have_batch_axis():
            raise ValueError("resize: input %s has no batch axis" % data.short_repr())
        data = data.copy_as_batch_major()
        a = data.get_axis_from_description(axis)
        if a == data.batch_dim_axis:
            raise ValueError("resize: cannot resize the batch axis of %s" % data.short_repr())
        return data.copy_move_axis(a, 1)

    @classmethod
    def get_out_data_from_opts(cls, name, factor, axis, sources, kind="nn", fill_dropout=None, **kwargs):
        if kind not in _RESIZE_KINDS:
            raise ValueError("resize: invalid kind %r, expected one of %s" % (kind, list(_RESIZE_KINDS)))
        factor = _ints("factor", factor)
        data = cls._input(concat_sources_template(sources, name="%s_output" % name), axis)
        tag = data.dims[1]
        dim = None if tag.dimension is None or fill_dropout else tag.dimension * factor
        new = Dim(dim, kind=tag.kind, description="%s:resize" % name)
        return data.copy_template_replace_dim_tag(1, new)


__all__ = [
    "SliceLayer", "SliceNdLayer", "ExpandDimsLayer", "SqueezeLayer", "TransposeLayer", "SwapAxesLayer",
    "ReinterpretDataLayer", "RemoveLayer", "StackLayer", "TileLayer", "RepeatLayer", "ResizeLayer",
    "make_data", "set_special_axes", "rebatch_dims", "set_rebatched_sizes", "special_tags", "axis_of_tag", "ShapeOf", "reshape", "broadcast_all",
]
