"""
Math and reduction layers: reduce, reduce_out, math_norm, dot, weighted_sum, elemwise_prod,
softmax_over_spatial, batch_softmax, gating, accumulate_mean, variable, top_k, gradient,
synthetic_gradient, tikhonov_regularization, identity, print, train_flag, complex_linear_projection
(sparse_softmax_cross_entropy_with_logits lives in layers/loss.py).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..activations import get_activation_function
from ..data import Data, Dim, batch_dim
from ..util import NotSpecified
from .base import ConcatInputLayer, CopyLayer, InternalLayer, LayerBase, concat_sources_template

tf1 = tf.compat.v1


# ---------------------------------------------------------------------------------------------------------------
# reduce

_REDUCE_FUNCS = {
    "sum": tf.reduce_sum, "max": tf.reduce_max, "min": tf.reduce_min, "mean": tf.reduce_mean,
    "logsumexp": tf.reduce_logsumexp, "any": tf.reduce_any, "all": tf.reduce_all, "prod": tf.reduce_prod,
}
_ARG_FUNCS = {"argmax": tf.argmax, "argmin": tf.argmin}


def _norm_reduce_mode(mode, layer_name=None):
    m = str(mode).lower()
    if m == "avg":
        m = "mean"
    if m not in _REDUCE_FUNCS and m not in _ARG_FUNCS:
        raise ValueError("reduce layer %r: invalid mode %r, choose from %s" % (
            layer_name, mode, sorted(list(_REDUCE_FUNCS) + list(_ARG_FUNCS))))
    return m


def _has_int_axis(axes):
    if isinstance(axes, bool):
        return False
    if isinstance(axes, int):
        return True
    if isinstance(axes, (list, tuple)):
        return any(_has_int_axis(a) for a in axes)
    return False


def _reduce_input(data, axes, enforce_batch_dim_axis, layer_name):
    """Input (batch axis moved if enforced / int axes given) and the resolved axes to reduce."""
    if axes is None:
        raise ValueError("reduce layer %r: no axes given (use axes='T', 'F', 'B', ...)" % layer_name)
    if enforce_batch_dim_axis is None and _has_int_axis(axes):
        enforce_batch_dim_axis = 0
    if enforce_batch_dim_axis is not None and data.have_batch_axis() and data.batch_dim_axis != enforce_batch_dim_axis:
        data = data.copy_with_batch_dim_axis(enforce_batch_dim_axis)
    try:
        res = data.get_axes_from_description(axes)
    except ValueError as exc:
        raise ValueError("reduce layer %r: cannot reduce over axis %r: %s" % (layer_name, axes, exc)) from exc
    if not res:
        raise ValueError("reduce layer %r: axis %r matches no axis of the input %s" % (
            layer_name, axes, data.short_repr()))
    return data, sorted(res)


def reduce_template(data, mode, axes, keep_dims=False, name="reduce"):
    """Output template of reducing data (already with the final layout) over axes (resolved ints)."""
    dims = list(data.dims)
    t, f = data.time_dim_axis, data.feature_dim_axis_or_unspecified
    b = data.batch_dim_axis
    if keep_dims:
        for i in axes:
            kind = dims[i].kind if not dims[i].is_batch_dim() else Dim.Types.Spatial
            dims[i] = Dim(1, kind=kind, description="%s:keep-dim-%i" % (name, i), auto_generated=True)
        out_t, out_f = t, f
    else:
        out_t = None if t is None else NotSpecified if t in axes else t - len([a for a in axes if a < t])
        out_f = NotSpecified if f is NotSpecified or f is None or f in axes else f - len([a for a in axes if a < f])
        if f is None:
            out_f = None
        for i in reversed(axes):
            del dims[i]
    sparse_dim = None
    dtype = data.dtype
    if mode in _ARG_FUNCS:
        if len(axes) != 1:
            raise ValueError("%s: %s supports only one reduction axis, got axes %s" % (name, mode, axes))
        sparse_dim = data.dims[axes[0]]
        dtype = "int32"
        out_f = None
    out = Data(name="%s_output" % name, dims=dims, dtype=dtype, sparse_dim=sparse_dim)
    if out_t is None:
        if out.time_dim_axis is not None:
            out.time_dim_axis = None
    elif out_t is not NotSpecified and out_t < len(dims) and not dims[out_t].is_batch_dim():
        if out_t != out.time_dim_axis:
            out.time_dim_axis = out_t
    if out_f is not NotSpecified:
        if out_f is None or (out_f < len(dims) and not dims[out_f].is_batch_dim()):
            if out_f != out.feature_dim_axis:
                out.feature_dim_axis = out_f
    del b
    return out


def reduce_tensor(data, mode, axes, keep_dims=False, use_time_mask=None):
    """
    Reduce data.placeholder over axes; padded frames of dynamic axes are masked with the neutral element
    (dtype min for max/logsumexp/argmax, dtype max for min/argmin; mean counts only the valid frames).
    """
    x = data.placeholder
    if use_time_mask is None:
        use_time_mask = any(data.dims[a].is_dynamic() and data.dims[a].dyn_size is not None for a in axes)
    dyn_axes = [a for a in axes if a != data.batch_dim_axis and data.dims[a].is_dynamic()
                and data.dims[a].dyn_size is not None] if use_time_mask else []
    dtype = x.dtype
    if dyn_axes and dtype.is_bool and mode not in ("any", "all"):
        raise ValueError("reduce: mode %r with masking of a bool input is not supported" % mode)
    if dyn_axes and not dtype.is_bool and mode in ("any", "all"):
        raise ValueError("reduce: mode %r with masking of a non-bool input is not supported" % mode)
    mask = None
    if dyn_axes:
        if mode in ("max", "logsumexp", "argmax"):
            repl = dtype.min
        elif mode in ("min", "argmin"):
            repl = dtype.max
        elif mode == "all":
            repl = True
        elif mode == "prod":
            repl = 1
        else:  # sum, mean, any
            repl = False if dtype.is_bool else 0
        for a in dyn_axes:
            m = data.get_sequence_mask_broadcast(a)
            mask = m if mask is None else tf.logical_and(mask, m)
        x = tf.where(mask, x, tf.constant(repl, dtype=dtype))
    if mode in _ARG_FUNCS:
        y = _ARG_FUNCS[mode](x, axis=axes[0], output_type=tf.int32)
        if keep_dims:
            y = tf.expand_dims(y, axes[0])
        return y
    if not dyn_axes:
        return _REDUCE_FUNCS[mode](x, axis=axes, keepdims=keep_dims)
    if mode != "mean":
        return _REDUCE_FUNCS[mode](x, axis=axes, keepdims=keep_dims)
    total = tf.reduce_sum(x, axis=axes, keepdims=keep_dims)
    cnt = tf.maximum(tf.reduce_sum(tf.cast(mask, dtype), axis=axes, keepdims=keep_dims), 1)  # empty seqs: 0
    other = 1
    for a in axes:
        if mask.shape[a] == 1:
            other = other * data.get_dim(a)
    if not isinstance(other, int) or other != 1:
        cnt = cnt * tf.cast(other, dtype)
    return total / cnt


class ReduceLayer(ConcatInputLayer):
    """Reduce axes with sum, max, min, mean (avg), logsumexp, prod, any, all, argmax, argmin.
    :param mode: reduce function: "sum", "max", "min", "mean" (or "avg"), "logsumexp", "prod", "any", "all", "argmax",
        "argmin" (padded frames of dynamic axes count as the neutral element: 0 for sum, 1 for prod, ...)
    :param axes: axis or list of axes to reduce (Dim, "T", "F", "B", "spatial", ...)
    :param axis: alias for axes, for compatibility; give only one of both
    :param keep_dims: keep the reduced axes with dimension 1
    :param enforce_batch_dim_axis: move the batch axis to this position in the output
    :param use_time_mask: mask padded frames of a dynamic axis before reducing (default: True when reducing a dynamic axis)
    """

    layer_class = "reduce"

    def __init__(self, mode, axes=None, axis=None, keep_dims=False, enforce_batch_dim_axis=None, use_time_mask=None,
                 **kwargs):
        super().__init__(**kwargs)
        if axis is not None:
            axes = axis
        mode = _norm_reduce_mode(mode, self.name)
        data, axes = _reduce_input(self.input_data, axes, enforce_batch_dim_axis, self.name)
        self.output.placeholder = reduce_tensor(data, mode, axes, keep_dims=keep_dims, use_time_mask=use_time_mask)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, mode="", axes=None, axis=None, keep_dims=False,
                               enforce_batch_dim_axis=None, **kwargs):
        if axis is not None:
            if axes is not None:
                raise ValueError("reduce layer %r: don't provide both 'axes' and 'axis'" % name)
            axes = axis
        mode = _norm_reduce_mode(mode, name)
        src = concat_sources_template(sources, name="%s_output" % name)
        if src.sparse:
            raise ValueError("reduce layer %r: input %s is sparse" % (name, src.short_repr()))
        data, axes = _reduce_input(src, axes, enforce_batch_dim_axis, name)
        return reduce_template(data, mode, axes, keep_dims=keep_dims, name=name)


class ReduceOutLayer(ConcatInputLayer):
    """Split the feature axis into (dim // num_pieces, num_pieces) and reduce the pieces (e.g. maxout).
    :param mode: "sum", "max" or "mean" ("avg"): how the pieces of the feature axis are combined
    :param num_pieces: the feature dim is split into this many consecutive pieces, reduced to feature_dim // num_pieces
    :param out_dim: the output feature Dim (default: a new dim of size feature_dim // num_pieces)
    """

    layer_class = "reduce_out"

    def __init__(self, mode, num_pieces, out_dim=None, **kwargs):
        super().__init__(**kwargs)
        funcs = {"max": tf.reduce_max, "sum": tf.reduce_sum, "mean": tf.reduce_mean, "avg": tf.reduce_mean}
        if mode not in funcs:
            raise ValueError("reduce_out layer %r: invalid mode %r" % (self.name, mode))
        data = self.input_data.copy_with_feature_last()
        shape = [data.get_dim(i) for i in range(data.batch_ndim - 1)]
        x = tf.reshape(data.placeholder, shape + [self.output.dim, num_pieces])
        x = funcs[mode](x, axis=data.batch_ndim)
        f_in, f_out = self.input_data.feature_dim_axis, self.output.feature_dim_axis
        if f_in != data.batch_ndim - 1:
            x = Data(name="tmp", dims=[d for i, d in enumerate(self.input_data.dims) if i != f_in] + [
                self.output.dims[f_out]], placeholder=x).copy_move_axis(-1, f_out).placeholder
        self.output.placeholder = x

    @classmethod
    def get_out_data_from_opts(cls, name, sources, num_pieces, out_dim=None, **kwargs):
        out = concat_sources_template(sources, name="%s_output" % name)
        if out.sparse or out.feature_dim_axis is None:
            raise ValueError("reduce_out layer %r: needs a dense input with a feature axis" % name)
        if out.dim % num_pieces:
            raise ValueError("reduce_out layer %r: feature dim %i not divisible by num_pieces %i" % (
                name, out.dim, num_pieces))
        new = out_dim or Dim(out.dim // num_pieces, kind=Dim.Types.Feature, description="%s:reduce-out" % name)
        return out.copy_template_replace_dim_tag(out.feature_dim_axis, new, name="%s_output" % name)


class MathNormLayer(ConcatInputLayer):
    """sum(|x| ** p) ** (1/p) over axes.
    :param p: the norm order, e.g. 2 for the euclidean norm (sum(abs(x) ** p) ** (1/p))
    :param axes: axis or axes to take the norm over
    :param axis: alias for axes; give only one of both
    :param keep_dims: keep the reduced axes with dimension 1
    """

    layer_class = "math_norm"

    def __init__(self, p, axes=None, axis=None, keep_dims=False, **kwargs):
        super().__init__(**kwargs)
        axes = axes if axes is not None else axis
        data, axes = _reduce_input(self.input_data, axes, None, self.name)
        x = data.copy(placeholder=tf.abs(data.placeholder) ** p)
        self.output.placeholder = reduce_tensor(x, "sum", axes, keep_dims=keep_dims) ** (1.0 / p)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axes=None, axis=None, keep_dims=False, **kwargs):
        axes = axes if axes is not None else axis
        src = concat_sources_template(sources, name="%s_output" % name)
        data, axes = _reduce_input(src, axes, None, name)
        return reduce_template(data, "sum", axes, keep_dims=keep_dims, name=name)


# ---------------------------------------------------------------------------------------------------------------
# dot, weighted_sum, elemwise_prod


def _dot_axes(data, desc, what, layer_name, taken=()):
    """The axes of desc; Dims that the source has twice (e.g. a [d, d] weight) resolve to axes not in taken."""
    if desc is None:
        return []
    try:
        dims = [desc] if isinstance(desc, Dim) else desc
        if taken and isinstance(dims, (list, tuple)) and all(isinstance(d, Dim) for d in dims):
            free = [i for i in range(data.batch_ndim) if i not in taken]
            res = []
            for d in dims:
                cands = [i for i in free if data.dims[i] == d and i not in res] or data._axes_fail(d)
                res.append(max(cands, key=lambda i: data.dims[i].match_priority))
            return res
        return data.get_axes_from_description(desc)
    except ValueError as exc:
        raise ValueError("dot layer %r: %s %r: %s" % (layer_name, what, desc, exc)) from exc


def _dot_plan(name, a, b, red1, red2, var1, var2, add_var2_if_empty):
    """
    Resolve the axes of a dot product.
    :return: einsum spec, output dims, red1 axes, red2 axes, whether a size-1 var2 axis is appended,
        the output time axis (int, None, or NotSpecified for the default)
    """
    red1_ = _dot_axes(a, red1, "red1", name)
    red2_ = _dot_axes(b, red2, "red2", name)
    if not red1_ or not red2_ or len(red1_) != len(red2_):
        raise ValueError("dot layer %r: red1 %r gives %i axes of %s but red2 %r gives %i axes of %s" % (
            name, red1, len(red1_), a.short_repr(), red2, len(red2_), b.short_repr()))
    for i, j in zip(red1_, red2_):
        da, db = a.dims[i], b.dims[j]
        if da != db and da.dimension != db.dimension:
            raise ValueError("dot layer %r: reduce axes do not match: %s vs %s" % (name, da, db))
    var1_ = _dot_axes(a, var1, "var1", name, taken=red1_)
    var2_ = _dot_axes(b, var2, "var2", name, taken=red2_)
    if set(var1_) & set(red1_) or set(var2_) & set(red2_):
        raise ValueError("dot layer %r: var and red axes overlap (red1 %r, var1 %r, red2 %r, var2 %r)" % (
            name, red1, var1, red2, var2))
    rest1 = [i for i in range(a.batch_ndim) if i not in red1_ and i not in var1_]
    rest2 = [i for i in range(b.batch_ndim) if i not in red2_ and i not in var2_]
    # pair the shared axes: same tag first, then by order among equal static sizes
    pair = {}
    used = set()
    for i in rest1:
        for j in rest2:
            if j not in used and a.dims[i] == b.dims[j]:
                pair[i] = j
                used.add(j)
                break
    for i in rest1:
        if i in pair:
            continue
        for j in rest2:
            da, db = a.dims[i], b.dims[j]
            if j in used or da.is_batch_dim() or db.is_batch_dim():
                continue
            if da.dimension == db.dimension:
                pair[i] = j
                used.add(j)
                break
    if len(rest1) != len(rest2) or len(pair) != len(rest1):
        raise ValueError(
            "dot layer %r: the remaining (shared) axes do not match: %s of %s vs %s of %s "
            "(red1 %r, var1 %r, red2 %r, var2 %r)" % (
                name, [a.dims[i].short_repr() for i in rest1], a.short_repr(),
                [b.dims[j].short_repr() for j in rest2], b.short_repr(), red1, var1, red2, var2))
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    la = [None] * a.batch_ndim
    lb = [None] * b.batch_ndim
    for i, j in zip(red1_, red2_):
        la[i] = lb[j] = next(letters)
    out_letters, out_dims = [], []
    for i in rest1:
        la[i] = lb[pair[i]] = next(letters)
        out_letters.append(la[i])
        out_dims.append(a.dims[i])
    for i in var1_:
        la[i] = next(letters)
        out_letters.append(la[i])
        out_dims.append(a.dims[i])
    for j in var2_:
        lb[j] = next(letters)
        out_letters.append(lb[j])
        out_dims.append(b.dims[j])
    # the time axis follows the time axis of a (else of b); reduced away -> default
    inv_pair = {j: i for i, j in pair.items()}
    time_axis = None
    ta, tb = a.time_dim_axis, b.time_dim_axis
    if ta is not None and ta in rest1:
        time_axis = rest1.index(ta)
    elif ta is not None and ta in var1_:
        time_axis = len(rest1) + var1_.index(ta)
    elif tb is not None and tb in inv_pair:
        time_axis = rest1.index(inv_pair[tb])
    elif tb is not None and tb in var2_:
        time_axis = len(rest1) + len(var1_) + var2_.index(tb)
    elif ta is not None or tb is not None:
        time_axis = NotSpecified
    added = False
    if not var2_ and add_var2_if_empty:
        out_dims.append(Dim(1, kind=Dim.Types.Spatial, description="%s:dot:dummy-var2" % name))
        added = True
    spec = "%s,%s->%s" % ("".join(la), "".join(lb), "".join(out_letters))
    return spec, out_dims, red1_, red2_, added, time_axis


def _mask_fits(x, axes):
    """Whether the lengths of these axes of x broadcast against x (lengths per sequence need its batch axis)."""
    return x.have_batch_axis() or all(x.dims[i].dyn_size.shape.rank == 0 for i in axes)


def _dot_defaults(reduce, red1, red2, var1, var2, add_var2_if_empty):
    if reduce is not NotSpecified:
        if red1 is not NotSpecified or red2 is not NotSpecified:
            raise ValueError("dot: give either 'reduce' or 'red1'/'red2'")
        red1 = red2 = reduce
    return (-1 if red1 is NotSpecified else red1, -2 if red2 is NotSpecified else red2,
            -2 if var1 is NotSpecified else var1, -1 if var2 is NotSpecified else var2,
            True if add_var2_if_empty is NotSpecified else add_var2_if_empty)


class DotLayer(LayerBase):
    """
    Dot product of two sources: reduce red1/red2, keep var1/var2, the other axes are shared.
    Output axes: shared (in the order of the first source), var1, var2. Padded frames of dynamic reduce axes
    are masked with 0. Defaults as in behavior version 0: red1=-1, red2=-2, var1=-2, var2=-1.
    :param reduce: the axis or axes (same Dims in both sources) that are summed over
    :param red1: old style: axes of the first source to reduce (with red2)
    :param red2: old style: axes of the second source to reduce (with red1)
    :param var1: old style: the non-shared axes of the first source kept in the output
    :param var2: old style: the non-shared axes of the second source kept in the output
    :param add_var2_if_empty: old style: if var2 is empty, add a dim-1 axis to the second source (legacy behaviour)
    :param debug: print the shapes of the matmul operands
    :param use_mask: mask the padded frames of dynamic reduce axes with 0 (default True; False: as they are)
    """

    layer_class = "dot"

    def __init__(self, reduce=NotSpecified, red1=NotSpecified, red2=NotSpecified, var1=NotSpecified,
                 var2=NotSpecified, add_var2_if_empty=NotSpecified, debug=False, use_mask=True, **kwargs):
        super().__init__(**kwargs)
        red1, red2, var1, var2, add_var2_if_empty = _dot_defaults(reduce, red1, red2, var1, var2, add_var2_if_empty)
        a, b = self.sources[0].output, self.sources[1].output
        spec, _, red1_, red2_, added, _ = _dot_plan(self.name, a, b, red1, red2, var1, var2, add_var2_if_empty)
        xa, xb = a.placeholder, b.placeholder
        dyn_a = [i for i in red1_ if a.dims[i].is_dynamic() and a.dims[i].dyn_size is not None]
        dyn_b = [j for j in red2_ if b.dims[j].is_dynamic() and b.dims[j].dyn_size is not None]
        # padded frames zeroed in one source (the smaller one) zero their products
        fit_a, fit_b = dyn_a and _mask_fits(a, dyn_a), dyn_b and _mask_fits(b, dyn_b)
        if not use_mask:
            pass
        elif fit_a and (not fit_b or a.batch_ndim <= b.batch_ndim):
            xa = a.copy_masked(0.0, axes=dyn_a).placeholder
        elif fit_b:
            xb = b.copy_masked(0.0, axes=dyn_b).placeholder
        elif dyn_a or dyn_b:
            raise ValueError("dot layer %r: cannot mask the padded frames of the reduce axes: their lengths are per "
                             "sequence, and neither %s nor %s has the batch axis (use_mask=False: summed as they are)"
                             % (self.name, a.short_repr(), b.short_repr()))
        if debug:  # as the original: only a print of the operands' shapes when run (to stderr)
            print_op = tf.print("dot layer %r: einsum %s, shapes" % (self.name, spec), tf.shape(xa), tf.shape(xb))
            with tf.control_dependencies([print_op]):
                xa = tf.identity(xa)
        y = tf.einsum(spec, xa, xb)
        if added:
            y = tf.expand_dims(y, -1)
        self.output.placeholder = y

    @classmethod
    def get_out_data_from_opts(cls, name, sources, reduce=NotSpecified, red1=NotSpecified, red2=NotSpecified,
                               var1=NotSpecified, var2=NotSpecified, add_var2_if_empty=NotSpecified, **kwargs):
        if len(sources) != 2:
            raise ValueError("dot layer %r: needs exactly two sources, got %i" % (name, len(sources)))
        red1, red2, var1, var2, add_var2_if_empty = _dot_defaults(reduce, red1, red2, var1, var2, add_var2_if_empty)
        a, b = sources[0].output, sources[1].output
        _, dims, _, _, _, time_axis = _dot_plan(name, a, b, red1, red2, var1, var2, add_var2_if_empty)
        out = Data(name="%s_output" % name, dims=dims, dtype=a.dtype if not a.sparse else b.dtype)
        if time_axis is not NotSpecified and time_axis != out.time_dim_axis:
            out.time_dim_axis = time_axis
        return out


class WeightedSumLayer(ConcatInputLayer):
    """Trainable weighted sum over fixed axes, or over windows of them (a correlation with the weights).
    :param axes: the two axes (or one axis) to apply the learned weight window over
    :param padding: padding of the window: "valid" or "same"
    :param size: the window size per axis (the trainable weight shape)
    :param keep_dims: keep the summed axes with dimension 1 (default: False for valid padding)
    """

    layer_class = "weighted_sum"

    def __init__(self, axes, padding=None, size=None, keep_dims=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        axes_ = data.get_axes_from_description(axes)
        size, padding, keep_dims = self._defaults(data, axes_, size, padding, keep_dims)
        w = self.create_param("W", tuple(size), 1.0 / float(np.prod(size)))
        axes_ = sorted(axes_)  # as the original: the weights' axes follow the given order, the input's are sorted
        rest = [i for i in range(data.batch_ndim) if i not in axes_]
        perm = rest + axes_
        x = tf.transpose(data.placeholder, perm) if perm != list(range(data.batch_ndim)) else data.placeholder
        rest_shape = [data.get_dim(i) for i in rest]
        ax_shape = [data.get_dim(i) for i in axes_]
        x = tf.reshape(x, [-1] + ax_shape + [1])
        y = tf.nn.convolution(x, tf.reshape(w, list(size) + [1, 1]), padding=padding.upper())
        y_ax = [d if d is not None else tf.shape(y)[k + 1] for k, d in enumerate(y.shape.as_list()[1:-1])]
        if keep_dims:
            y = tf.reshape(y, rest_shape + y_ax)
            inv = [perm.index(i) for i in range(data.batch_ndim)]
            y = tf.transpose(y, inv)
        else:
            y = tf.reshape(y, rest_shape)
        self.output.placeholder = y

    @staticmethod
    def _defaults(data, axes, size, padding, keep_dims):
        if size is None:
            size = [data.dims[i].dimension for i in axes]
            if any(s is None for s in size):
                raise ValueError("weighted_sum: axes must be static without size, got %s" % data.short_repr())
            if keep_dims is None:
                keep_dims = False
            if padding is None:
                padding = "valid"
        else:
            size = list(size)
            if keep_dims is None:
                keep_dims = True
            if padding is None:
                raise ValueError("weighted_sum: padding must be given with size")
        if len(size) != len(axes):
            raise ValueError("weighted_sum: size %r does not match axes %r" % (size, axes))
        return size, padding, keep_dims

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axes, padding=None, size=None, keep_dims=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        axes_ = data.get_axes_from_description(axes)
        size, padding, keep_dims = cls._defaults(data, axes_, size, padding, keep_dims)
        if not keep_dims:
            if padding.lower() != "valid" or any(data.dims[a].dimension != s for a, s in zip(axes_, size)):
                raise ValueError("weighted_sum layer %r: keep_dims=False needs the full axes with valid padding" % name)
            out = data
            for a in sorted(axes_, reverse=True):
                out = out.copy_template_excluding_axis(a)
            return out.copy_template(name="%s_output" % name)
        out = data.copy_template(name="%s_output" % name)
        if padding.lower() == "valid":
            for a, s in zip(axes_, size):
                d = data.dims[a]
                out = out.copy_template_replace_dim_tag(a, Dim(
                    d.dimension - s + 1, kind=d.kind, description="%s:weighted-sum-%i" % (name, a)))
        elif padding.lower() != "same":
            raise ValueError("weighted_sum layer %r: invalid padding %r" % (name, padding))
        return out


class ElemwiseProdLayer(ConcatInputLayer):
    """x * W with a trainable W over the given (static) axes.
    :param axes: the axes the trainable scale vector spans (e.g. "spatial" or "F")
    :param size: shape of the scale param (default: from the input dims of the axes)
    """

    layer_class = "elemwise_prod"

    def __init__(self, axes, size=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        axes_ = sorted(data.get_axes_from_description(axes))
        shape = tuple(data.dims[a].dimension for a in axes_)
        if any(s is None for s in shape):
            raise ValueError("elemwise_prod layer %r: axes %r must be static in %s" % (
                self.name, axes, data.short_repr()))
        if size is not None and tuple(size) != shape:
            raise ValueError("elemwise_prod layer %r: size %r does not match %r" % (self.name, size, shape))
        w = self.create_param("W", shape, 1.0)
        bc = [1] * data.batch_ndim
        for a, s in zip(axes_, shape):
            bc[a] = s
        self.output.placeholder = data.placeholder * tf.reshape(w, bc)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, **kwargs):
        return concat_sources_template(sources, name="%s_output" % name)


# ---------------------------------------------------------------------------------------------------------------
# softmax variants, gating


def _softmax_axis(data, axis, name):
    if axis is None:
        if data.time_dim_axis is None:
            raise ValueError("softmax_over_spatial layer %r: input %s has no time axis" % (name, data.short_repr()))
        return data.time_dim_axis
    return data.get_axis_from_description(axis, allow_int=False)


def _move_to_last_keep_special(data, axis):
    """copy_move_axis(axis, -1) where the time and feature axes follow their dims."""
    t, f = data.time_dim_axis, data.feature_dim_axis
    n = data.batch_ndim
    perm = [i for i in range(n) if i != axis] + [axis]
    out = data.copy_transpose(perm) if perm != list(range(n)) else data.copy()
    new_t = None if t is None else perm.index(t)
    new_f = None if f is None else perm.index(f)
    if out.time_dim_axis != new_t:
        out.time_dim_axis = new_t
    if out.feature_dim_axis != new_f:
        out.feature_dim_axis = new_f
    return out


def build_seq_mask(data, axis, start=None, window_start=None, window_size=None):
    """Bool mask broadcastable to data for the axis: valid frames, optionally >= start and inside a window."""
    mask = None
    for key, v in (("start", start), ("window_start", window_start), ("window_size", window_size)):
        if v is not None and not isinstance(v, Data) and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError("option %r must be a layer name or an int, got %r" % (key, v))
    if data.dims[axis].dyn_size is not None:
        mask = data.get_sequence_mask_broadcast(axis)
    if start is not None or window_start is not None:
        n = data.get_dim(axis)
        shape = [1] * data.batch_ndim
        shape[axis] = -1
        idxs = tf.reshape(tf.range(n), shape)

        def bc(v):
            if isinstance(v, Data):
                t = v.copy_compatible_to(data.copy_template(), check_dtype=False, check_sparse=False)
                return tf.cast(t.placeholder, tf.int32)
            return tf.constant(v, dtype=tf.int32)

        if start is not None:
            m = tf.greater_equal(idxs, bc(start))
            mask = m if mask is None else tf.logical_and(mask, m)
        if window_start is not None:
            ws = bc(window_start)
            m = tf.greater_equal(idxs, ws)
            if window_size is not None:
                m = tf.logical_and(m, tf.less(idxs, ws + bc(window_size)))
            mask = m if mask is None else tf.logical_and(mask, m)
    return mask


class SoftmaxOverSpatialLayer(ConcatInputLayer):
    """Softmax over a spatial axis (the time axis by default), masking padded frames; the axis becomes last.
    :param axis: the axis to take the softmax over (default: the time axis)
    :param energy_factor: scale the energies by this factor before the softmax (e.g. 1/sqrt(dim))
    :param start: layer with per-sequence start positions; frames before it get zero weight
    :param window_start: layer (or int) with the start of a window; frames outside the window get zero weight
    :param window_size: layer or int: size of the window starting at window_start
    :param use_time_mask: mask the padded frames of the axis (default: True for a dynamic axis)
    :param log_space: output log-softmax instead of softmax
    """

    layer_class = "softmax_over_spatial"
    layer_options = ("start", "window_start", "window_size")

    def __init__(self, axis=None, energy_factor=None, start=None, window_start=None, window_size=None,
                 use_time_mask=None, log_space=False, **kwargs):
        super().__init__(**kwargs)
        self.start, self.window_start, self.window_size = start, window_start, window_size
        data = self.input_data
        ax = _softmax_axis(data, axis, self.name)
        data = _move_to_last_keep_special(data, ax)
        ax = data.batch_ndim - 1
        x = data.placeholder
        if use_time_mask is None:
            use_time_mask = data.dims[ax].is_dynamic()
        if use_time_mask:
            mask = build_seq_mask(
                data, ax, start=start.output if start is not None else None,
                window_start=window_start.output if isinstance(window_start, LayerBase) else window_start,
                window_size=window_size.output if isinstance(window_size, LayerBase) else window_size)
            if mask is not None:
                x = tf.where(mask, x, tf.constant(float("-inf"), dtype=x.dtype))
        if energy_factor:
            x = x * energy_factor
        self.output.placeholder = tf.nn.log_softmax(x) if log_space else tf.nn.softmax(x)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axis=None, **kwargs):
        out = concat_sources_template(sources, name="%s_output" % name)
        ax = _softmax_axis(out, axis, name)
        return _move_to_last_keep_special(out, ax)


class BatchSoftmaxLayer(ConcatInputLayer):
    """Softmax over the spatial and feature axes together (per batch entry), masking padded frames."""

    layer_class = "batch_softmax"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data.copy_as_batch_major()
        x = data.placeholder
        mask = None
        for a in data.get_dynamic_axes():
            if data.dims[a].dyn_size is not None:
                m = data.get_sequence_mask_broadcast(a)
                mask = m if mask is None else tf.logical_and(mask, m)
        if mask is not None:
            x = tf.where(mask, x, tf.constant(float("-inf"), dtype=x.dtype))
        shape = tf.shape(x)
        y = tf.reshape(tf.nn.softmax(tf.reshape(x, [shape[0], -1])), shape)
        out = data.copy(placeholder=y)
        self.output.placeholder = out.copy_compatible_to(self.output).placeholder if out.dims != self.output.dims \
            else y

    @classmethod
    def get_out_data_from_opts(cls, name, sources, **kwargs):
        return concat_sources_template(sources, name="%s_output" % name).copy_as_batch_major()


class GatingLayer(ConcatInputLayer):
    """Split the feature axis in halves a, b: activation(a) * gate_activation(b).
    :param activation: activation applied to the first half of the input features
    :param gate_activation: activation of the gate (second half), multiplied with the first half
    :param out_dim: the output feature Dim (size: half the input features)
    """

    layer_class = "gating"

    def __init__(self, activation, gate_activation="sigmoid", out_dim=None, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        a, b = tf.split(data.placeholder, 2, axis=data.feature_dim_axis)
        act = get_activation_function(activation) if activation else tf.identity
        gate = get_activation_function(gate_activation) if gate_activation else tf.identity
        self.output.placeholder = act(a) * gate(b)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, n_out=NotSpecified, out_dim=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        if data.sparse or data.feature_dim_axis is None:
            raise ValueError("gating layer %r: needs a dense input with a feature axis" % name)
        if data.dim % 2:
            raise ValueError("gating layer %r: feature dim %i is not even" % (name, data.dim))
        dim = data.dim // 2
        if n_out is not NotSpecified and n_out is not None and n_out != dim:
            raise ValueError("gating layer %r: n_out %r != input dim / 2 = %i" % (name, n_out, dim))
        new = out_dim or Dim(dim, kind=Dim.Types.Feature, description="%s:gating" % name)
        return data.copy_template_replace_dim_tag(data.feature_dim_axis, new, name="%s_output" % name)


# ---------------------------------------------------------------------------------------------------------------
# variables and statistics


class VariableLayer(LayerBase):
    """A trainable variable <layer>/<layer>, optionally with a batch axis (tiled) and a size-1 time axis.
    :param shape: shape of the variable (ints or Dims), without batch/time (required)
    :param dtype: dtype of the variable
    :param add_batch_axis: add a batch axis in front (the variable tiled over the batch)
    :param add_time_axis: add a time axis of length 1 in front
    :param init: initializer of the variable (name, number, or config string; default: zeros)
    :param init_by_layer: name of a layer whose output initializes the variable (instead of init)
    :param param_name: name of the variable in the checkpoint (default: the layer name)
    :param non_critical_for_restore: a missing value in a checkpoint is no error; refused (only False)
    :param saveable: whether the variable is saved in checkpoints; refused (only True)
    """

    layer_class = "variable"
    layer_options = ("init_by_layer",)
    default_from = ()
    required_options = ("shape",)
    unsupported_options = {"non_critical_for_restore": (False,), "saveable": (True,)}

    def __init__(self, shape, dtype="float32", add_batch_axis=False, add_time_axis=False, trainable=True, init=None,
                 init_by_layer=None, param_name=None, non_critical_for_restore=False, saveable=True, **kwargs):
        super().__init__(trainable=trainable, **kwargs)
        if self.sources:
            raise ValueError("variable layer %r: does not take sources" % self.name)
        self.init_by_layer = init_by_layer
        dims = list(self.output.dims)
        if add_batch_axis:
            dims = dims[1:]
        if add_time_axis:
            dims = dims[1:]
        shape = tuple(d.dimension for d in dims)
        if init_by_layer is not None:
            base = Data(name=self.output.name, dims=dims, dtype=dtype)
            init_value = init_by_layer.output.copy_compatible_to(base).placeholder

            def init(*_args, **_kwargs):
                return tf.cast(init_value, dtype)
        elif init is None:
            init = 0
        var = self.create_param(param_name or self.name, shape, init, dtype=dtype, trainable=trainable)
        x = tf.convert_to_tensor(var)
        if add_time_axis:
            x = tf.expand_dims(x, 0)
        if add_batch_axis:
            x = tf.expand_dims(x, 0)
            x = tf.tile(x, [self.network.get_data_batch_dim()] + [1] * (x.shape.rank - 1))
        self.output.placeholder = x

    @classmethod
    def get_out_data_from_opts(cls, name, network, shape, dtype="float32", add_batch_axis=False,
                               add_time_axis=False, **kwargs):
        dims = []
        for i, d in enumerate(shape):
            if isinstance(d, Dim):
                dims.append(d)
            else:
                kind = Dim.Types.Feature if i == len(shape) - 1 else Dim.Types.Spatial
                dims.append(Dim(int(d), kind=kind, description="%s:%s:%i" % (
                    name, "feature" if kind == Dim.Types.Feature else "static", i)))
        if add_time_axis:
            dims.insert(0, Dim(1, kind=Dim.Types.Spatial, description="%s:time" % name))
        if add_batch_axis:
            dims.insert(0, batch_dim)
        return Data(name="%s_output" % name, dims=dims, dtype=dtype)


class AccumulateMeanLayer(ReduceLayer):
    """Exponential moving average of the mean over axes (batch and time by default), a non-trainable param.
    :param exp_average: momentum of the exponential moving average (e.g. 0.01)
    :param axes: axes averaged over in each step before accumulating
    :param initial_value: initial value of the accumulated mean
    :param is_prob_distribution: normalize the mean to a probability distribution (initial value uniform)
    """

    layer_class = "accumulate_mean"
    unsupported_options = {"mode": ("mean",), "keep_dims": (False,)}  # (the reduce options it fixes)

    def __init__(self, exp_average, axes="bt", initial_value=None, is_prob_distribution=None, **kwargs):
        kwargs.pop("mode", None)  # "mean" (others are refused: unsupported_options)
        kwargs.pop("keep_dims", None)  # False (likewise)
        super().__init__(mode="mean", axes=axes, keep_dims=False, **kwargs)
        out = self.output
        if out.have_batch_axis() or any(d is None for d in out.batch_shape):
            raise ValueError("accumulate_mean layer %r: the output %s must have a fixed shape without batch axis "
                             "(axes %r must contain batch and time)" % (self.name, out.short_repr(), axes))
        if initial_value is None:
            initial_value = 1.0 / out.batch_shape[0] if is_prob_distribution and len(out.batch_shape) == 1 else 0.0
        # The running mean is a param (named as the original's, whose "mean" name collides with an op);
        # its exponential-average update belongs to the updater (custom update with the current mean).
        var = self.create_param("mean_1", tuple(out.batch_shape), initial_value, dtype=out.dtype, trainable=False)
        self.current_mean = self.output.placeholder
        self.exp_average = exp_average
        self.output.placeholder = tf.convert_to_tensor(var)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axes="bt", **kwargs):
        kwargs.pop("mode", None)
        kwargs.pop("keep_dims", None)
        for k in ("exp_average", "initial_value", "is_prob_distribution"):
            kwargs.pop(k, None)
        return super().get_out_data_from_opts(name=name, sources=sources, mode="mean", axes=axes, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# gradient tricks


@tf.custom_gradient
def _synthetic_gradient(x, grad_x):
    def grad(dy):
        return tf.cast(grad_x, dy.dtype), None

    return tf.identity(x), grad


class SyntheticGradientLayer(ConcatInputLayer):
    """Identity forward; the gradient w.r.t. the input is replaced by the output of the ``gradient`` layer.
    :param gradient: layer with the predicted gradient; the output equals the input, its gradient is replaced
    :param meta_loss_scale: scale of the meta loss (squared difference between predicted and true gradient)
    """

    layer_class = "synthetic_gradient"
    layer_options = ("gradient",)
    options_without_effect = {"meta_loss_scale": "the scale of the original's meta loss, which is not part of the "
                                                 "objective nor of its gradients (as there); returnn_lite's updater "
                                                 "has no meta losses"}
    required_options = ("gradient",)

    def __init__(self, gradient, meta_loss_scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.gradient = gradient
        self.meta_loss_scale = meta_loss_scale
        g = gradient.output.copy_compatible_to(self.input_data).placeholder
        self.output.placeholder = _synthetic_gradient(self.input_data.placeholder, g)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, **kwargs):
        return concat_sources_template(sources, name="%s_output" % name)


class TikhonovRegularizationLayer(CopyLayer):
    """Identity forward; the Tikhonov regularization is a meta loss (only seen by a meta-loss updater).
    :param meta_loss_scale: scale of the added loss (squared norm of the input's gradient penalty)
    """

    layer_class = "tikhonov_regularization"
    options_without_effect = {"meta_loss_scale": "the scale of the original's meta loss, which is not part of the "
                                                 "objective nor of its gradients (as there); returnn_lite's updater "
                                                 "has no meta losses"}

    def __init__(self, meta_loss_scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.meta_loss_scale = meta_loss_scale
        self.dummy = self.create_param("dummy", (), 1.0)
        self.output.placeholder = tf.identity(self.output.placeholder)


class GradientLayer(LayerBase):
    """d y / d x, with y and x layers (output like x).
    :param y: layer whose output is differentiated (summed)
    :param x: layer with respect to whose output the gradient is taken; the output has x's shape
    """

    layer_class = "gradient"
    layer_options = ("y", "x")
    required_options = ("y", "x")
    default_from = ()

    def __init__(self, y, x, **kwargs):
        super().__init__(**kwargs)
        self.y, self.x = y, x
        g = tf.gradients(y.output.placeholder, x.output.placeholder)[0]
        if g is None:
            g = tf.zeros_like(x.output.placeholder)
        self.output.placeholder = g

    @classmethod
    def get_out_data_from_opts(cls, name, x, **kwargs):
        out = x.output.copy_template(name="%s_output" % name)
        if out.sparse:
            raise ValueError("gradient layer %r: x %r is sparse" % (name, x.name))
        return out


class IdentityLayer(CopyLayer):
    """Output is the input (tf.identity)."""

    layer_class = "identity"


class PrintLayer(CopyLayer):
    """Identity that prints its input (with sequence lengths) when evaluated.
    :param summarize: how many entries of each tensor are printed
    :param extra_print_args: further values printed with the tensor
    """

    layer_class = "print"

    def __init__(self, summarize=99, extra_print_args=(), **kwargs):
        super().__init__(**kwargs)
        x = self.output.placeholder
        args = ["layer %r:" % self.name, x] + list(extra_print_args)
        for d in self.output.dims:
            if d.is_dynamic() and d.dyn_size is not None:
                args += ["seq lens:", d.dyn_size]
        op = tf.print(*args, summarize=summarize if summarize is not None else -1)
        with tf.control_dependencies([op]):
            self.output.placeholder = tf.identity(x)


class TrainFlagLayer(LayerBase):
    """Scalar bool: the network's train flag."""

    layer_class = "train_flag"
    default_from = ()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        flag = self.network.train_flag
        self.output.placeholder = tf.constant(flag, dtype=tf.bool) if isinstance(flag, bool) else \
            tf.convert_to_tensor(flag)

    @classmethod
    def get_out_data_from_opts(cls, name, **kwargs):
        return Data(name="%s_output" % name, dims=(), dtype="bool")


# ---------------------------------------------------------------------------------------------------------------
# top_k


class TopKLayer(ConcatInputLayer):
    """
    Top k values along an axis (tf.math.top_k): the axis is moved last and replaced by a new size-k tag;
    the time and feature axes follow their dims (the feature axis is gone if it was the top-k axis).
    Sub-layer ``indices``: int32, sparse over the original axis.
    :param axis: the axis (or axes, flattened) to take the top k over (required)
    :param k: number of top entries: an int or a layer with a scalar int
    :param k_dim: the Dim of the new top-k axis (default: a new dim named after the layer)
    :param sorted: return the top-k entries sorted descending
    """

    layer_class = "top_k"
    layer_options = ("k",)  # a layer name, or a constant

    def __init__(self, axis, k, k_dim=None, sorted=True, **kwargs):  # noqa: A002 (original's option name)
        super().__init__(**kwargs)
        data = self.input_data
        ax = data.get_axis_from_description(axis)
        x = data.copy_move_axis(ax, -1) if ax != data.batch_ndim - 1 else data
        k_value = k.output.placeholder if isinstance(k, LayerBase) else k
        values, indices = tf.math.top_k(x.placeholder, k=k_value, sorted=sorted)
        self.output.placeholder = values
        idx_out = self.output.copy_template(name="%s_indices_output" % self.name)
        idx_out.dtype = "int32"
        idx_out.sparse_dim = data.dims[ax]
        if idx_out.feature_dim_axis is not None:
            idx_out.feature_dim_axis = None
        idx_out.placeholder = indices
        self.indices_layer = InternalLayer(name="%s/indices" % self.name, network=self.network, output=idx_out)

    @staticmethod
    def _k_dim(name, k, k_dim):
        if k_dim is not None:
            return k_dim
        if isinstance(k, int):
            return Dim(k, kind=Dim.Types.Spatial, description="%s:topk" % name)
        return Dim(None, kind=Dim.Types.Spatial, description="%s:topk" % name)

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axis, k, k_dim=None, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name)
        ax = data.get_axis_from_description(axis)
        kd = cls._k_dim(name, k, k_dim)
        t, f = data.time_dim_axis, data.feature_dim_axis
        out = _move_to_last_keep_special(data, ax)
        out = out.copy_template_replace_dim_tag(out.batch_ndim - 1, kd, name="%s_output" % name)
        # the time and feature axes stay with their dims (the defaults would pick the new static k axis)
        new_t = NotSpecified if t is None or t == ax else (t if t < ax else t - 1)
        new_f = None if f is None or f == ax else (f if f < ax else f - 1)
        if new_t is not NotSpecified and out.time_dim_axis != new_t:
            out.time_dim_axis = new_t
        elif new_t is NotSpecified:
            out.time_dim_axis = NotSpecified
        if out.feature_dim_axis != new_f:
            out.feature_dim_axis = new_f
        return out

    def get_sub_layer(self, layer_name):
        if layer_name == "indices":
            return self.indices_layer
        return None



# ---------------------------------------------------------------------------------------------------------------
# misc


class ComplexLinearProjectionLayer(ConcatInputLayer):
    """log |W x| for complex inputs stored as interleaved real/imag features; param clp_kernel (2, dim/2, n).
    :param nr_of_filters: number of output filters (the output feature dim)
    :param clp_weights_init: initializer of the projection weights
    """

    layer_class = "complex_linear_projection"

    def __init__(self, nr_of_filters, clp_weights_init="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        data = self.input_data.copy_with_feature_last()
        n_in = data.dim
        kernel = self.create_param("clp_kernel", (2, n_in // 2, nr_of_filters), clp_weights_init)
        x = data.placeholder
        x_re, x_im = x[..., 0::2], x[..., 1::2]
        k_re, k_im = kernel[0], kernel[1]
        out_re = tf.matmul(x_re, k_re) - tf.matmul(x_im, k_im)
        out_im = tf.matmul(x_im, k_re) + tf.matmul(x_re, k_im)
        y = tf.math.log(tf.maximum(tf.sqrt(out_re ** 2 + out_im ** 2), 1e-20))
        out = Data(name="tmp", dims=list(data.dims[:-1]) + [self.output.feature_dim], placeholder=y)
        self.output.placeholder = out.copy_compatible_to(self.output).placeholder if out.dims != self.output.dims \
            else y

    @classmethod
    def get_out_data_from_opts(cls, name, sources, nr_of_filters, n_out=NotSpecified, **kwargs):
        data = concat_sources_template(sources, name="%s_output" % name).copy_with_feature_last()
        if data.dim % 2:
            raise ValueError("complex_linear_projection layer %r: input dim %i must be even" % (name, data.dim))
        new = Dim(nr_of_filters, kind=Dim.Types.Feature, description="%s:clp" % name)
        return data.copy_template_replace_dim_tag(data.feature_dim_axis, new, name="%s_output" % name)


__all__ = ["ReduceLayer", "reduce_tensor", "reduce_template", "build_seq_mask"]
