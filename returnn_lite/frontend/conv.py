"""
rf convolution and pooling: ``Conv1d/2d/3d`` (also grouped / depthwise: ``groups=``), :func:`conv`, :func:`pool`
(``max_pool``, ``pool1d/2d/3d``), :func:`make_conv_out_spatial_dims` and the transposed convolution
(``TransposedConv1d/2d/3d``, :func:`transposed_conv`), with the original's options.

Masking (``use_mask``): the padded frames of dynamic spatial dims are set to 0 (max pooling: -inf) before the op, so
that they do not leak into the last frames; the default follows the config (``rf_use_mask``) or the behavior version
(on from 23, as the original; off before, where padded frames enter the op as they are).
``padding="same"`` with strides > 1: TF's padding (depends on the padded length) up to behavior version 23, from 24
(or config ``rf_use_consistent_same_padding``) ``(k - 1) // 2`` left as with stride 1, independent of the length.
"""

from __future__ import annotations

from ..tensor import Dim
from . import array_, math_
from ._backend import get_backend_for_tensor
from ._utils import check_dims_in, error, is_tensor
from .dims import dim_match_priority_when_needed
from .module import Glorot, Module, Parameter

__all__ = ["conv", "Conv1d", "Conv2d", "Conv3d", "transposed_conv", "TransposedConv1d", "TransposedConv2d",
           "TransposedConv3d", "pool", "max_pool", "max_pool1d", "pool1d", "pool2d", "pool3d",
           "make_conv_out_spatial_dims", "make_transposed_conv_out_spatial_dims", "use_mask_default", "gating"]


def _config_value(key):
    from ..config import get_global_config

    config = get_global_config(raise_exception=False)
    if config is None:
        return None
    typed = getattr(config, "typed_dict", {})
    if key in typed:
        return typed[key]
    if key in getattr(config, "dict", {}):
        return config.bool(key, None)
    return None


def _behavior_version():
    from ..compat.util_basic import BehaviorVersion

    return BehaviorVersion.get()


def use_mask_default(*, default=None, default_false_for_behavior_version_up_to=None):
    """Whether ops mask padded frames by default: config ``rf_use_mask``, else False up to the given behavior version,
    else ``default``."""
    value = _config_value("rf_use_mask")
    if value is not None:
        return bool(value)
    if default_false_for_behavior_version_up_to is not None and \
            _behavior_version() <= default_false_for_behavior_version_up_to:
        return False
    return default


def _consistent_same_padding_enabled():
    value = _config_value("rf_use_consistent_same_padding")
    if value is not None:
        return bool(value)
    return _behavior_version() >= 24


def _seq(value, nd, name, func):
    """int -> [value] * nd; a sequence of nd values as a list."""
    if value is None:
        return None
    if isinstance(value, (int, Dim)):
        return [value] * nd
    value = list(value)
    if len(value) != nd:
        raise error(func, "%s=%r: expected %i values (one per spatial dim)" % (name, value, nd))
    return value


def _needs_masking(dim):
    return dim.dimension is None and not dim.is_batch_dim()


def _masked(source, dims, value):
    """source with the frames past the lengths of the dynamic ``dims`` set to value."""
    mask = array_.sequence_mask([d for d in dims if _needs_masking(d)])
    if mask is None:
        return source
    return math_.where(mask, source, value, allow_broadcast_all_sources=True)


def _any_non_default(values, default):
    if values is None:
        return False
    if isinstance(values, int):
        return values != default
    return any(v != default for v in values)


def _consistent_padding(filter_size, dilation_rate, nd, func):
    """The int padding (per spatial dim) of 'same' with stride 1: (k - 1) * dilation // 2 on both sides."""
    sizes = [s.dimension if isinstance(s, Dim) else s for s in _seq(filter_size, nd, "filter_size", func)]
    dilation_rate = _seq(dilation_rate or 1, nd, "dilation_rate", func)
    if any(s % 2 == 0 for s in sizes):
        raise error(func, "padding='same' with strides > 1 and an even filter size %r under the consistent 'same' "
                          "padding (behavior version >= 24 or rf_use_consistent_same_padding) is not supported" % (
                              sizes,))
    return [(s // 2) * d for s, d in zip(sizes, dilation_rate)]


def _check_padding(padding, nd, func):
    if isinstance(padding, str):
        if padding.lower() not in ("same", "valid"):
            raise error(func, "padding must be 'same', 'valid' or int(s), got %r" % padding)
        return padding.lower()
    padding = _seq(padding, nd, "padding", func)
    if not all(isinstance(p, int) and p >= 0 for p in padding):
        raise error(func, "padding must be 'same', 'valid' or ints >= 0, got %r" % (padding,))
    return padding


# ---- conv ----
def _set_conv_dims(module, name, in_dim, out_dim, filter_size):
    """Checks and sets module.in_dim/out_dim/filter_size (and nd from filter_size where the class leaves it open)."""
    if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
        raise error(name, "in_dim and out_dim must be Dims, got %r, %r" % (in_dim, out_dim))
    if isinstance(filter_size, (int, Dim)):
        filter_size = [filter_size] * (module.nd or 1)
    filter_size = list(filter_size)
    if module.nd is None:
        module.nd = len(filter_size)
    elif len(filter_size) != module.nd:
        raise error(name, "filter_size=%r: expected %i values" % (filter_size, module.nd))
    module.in_dim = dim_match_priority_when_needed(in_dim, out_dim)
    module.out_dim = out_dim
    module.filter_size = [s if isinstance(s, Dim) else Dim(int(s), name="filter-dim%i" % i)
                          for i, s in enumerate(filter_size)]


class _Conv(Module):
    """N-D convolution; params ``filter`` [out_dim, in_dim // groups, *filter_size] and ``bias`` [out_dim]."""

    nd = None

    def __init__(self, in_dim, out_dim, filter_size, *, padding, strides=None, dilation_rate=None, groups=None,
                 with_bias=True):
        super().__init__()
        name = type(self).__name__
        _set_conv_dims(self, name, in_dim, out_dim, filter_size)
        self.padding = _check_padding(padding, self.nd, name)
        self.strides = _seq(strides, self.nd, "strides", name)  # a list, as the original (int -> [s] * nd)
        self.dilation_rate = dilation_rate
        self.groups = groups
        filter_in_dim = in_dim
        if groups is not None and groups > 1:
            if in_dim.dimension is None or in_dim.dimension % groups or out_dim.dimension % groups:
                raise error(name, "groups=%r must divide in_dim %s and out_dim %s" % (
                    groups, in_dim.short_repr(), out_dim.short_repr()))
            filter_in_dim = in_dim // groups
        self.filter_in_dim = dim_match_priority_when_needed(filter_in_dim, out_dim)
        self.filter = Parameter([out_dim, self.filter_in_dim] + self.filter_size)
        self.filter.initial = Glorot()
        self.with_bias = with_bias
        self.bias = None
        if with_bias:
            self.bias = Parameter([out_dim])
            self.bias.initial = 0.0

    def __call__(self, source, *, in_spatial_dims, out_spatial_dims=None):
        return conv(source, in_dim=self.in_dim, out_dim=self.out_dim, in_spatial_dims=in_spatial_dims,
                    out_spatial_dims=out_spatial_dims, filter=self.filter, filter_size=self.filter_size,
                    padding=self.padding, strides=self.strides, dilation_rate=self.dilation_rate, groups=self.groups,
                    bias=self.bias if self.with_bias else None)


class _OneSpatialDim:
    """The 1D call form of a conv module: ``(y, out_spatial_dim) = mod(x, in_spatial_dim=)``."""

    def __call__(self, source, *, in_spatial_dim, out_spatial_dim=None):
        out, (out_spatial_dim,) = super().__call__(
            source, in_spatial_dims=[in_spatial_dim], out_spatial_dims=[out_spatial_dim] if out_spatial_dim else None)
        return out, out_spatial_dim


class Conv1d(_OneSpatialDim, _Conv):
    """1D conv: ``(y, out_spatial_dim) = conv1d(x, in_spatial_dim=)``; params filter [out, in // groups, k], bias."""

    nd = 1


class Conv2d(_Conv):
    """2D conv: ``(y, out_spatial_dims) = conv2d(x, in_spatial_dims=[a, b])``."""

    nd = 2


class Conv3d(_Conv):
    """3D conv over three spatial dims."""

    nd = 3


def conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter, filter_size,  # noqa: A002
         padding, strides=None, dilation_rate=None, groups=None, bias=None, use_mask=None):
    """N-D convolution of source over ``in_spatial_dims`` (1-3) -> (out, out_spatial_dims)."""
    in_spatial_dims = list(in_spatial_dims)
    nd = len(in_spatial_dims)
    if not 1 <= nd <= 3:
        raise error("conv", "1 to 3 in_spatial_dims are supported, got %i" % nd)
    check_dims_in("conv", source, [in_dim] + in_spatial_dims)
    padding = _check_padding(padding, nd, "conv")
    strides = _seq(strides if strides is not None else 1, nd, "strides", "conv")
    dilation_rate = _seq(dilation_rate if dilation_rate is not None else 1, nd, "dilation_rate", "conv")
    filter_size = list(filter_size)
    if groups is not None and groups > 1 and (in_dim.dimension or 0) % groups:
        raise error("conv", "groups=%r does not divide in_dim %s" % (groups, in_dim.short_repr()))
    if any(_needs_masking(d) for d in in_spatial_dims):
        if use_mask is None:
            use_mask = use_mask_default(default=True, default_false_for_behavior_version_up_to=22)
        if use_mask:
            source = _masked(source, in_spatial_dims, 0.0)
    if padding == "same" and _any_non_default(strides, 1) and _consistent_same_padding_enabled():
        padding = _consistent_padding(filter_size, dilation_rate, nd, "conv")
    if out_spatial_dims is None:
        out_spatial_dims = make_conv_out_spatial_dims(
            in_spatial_dims, filter_size=[d.dimension for d in filter_size], padding=padding, strides=strides,
            dilation_rate=dilation_rate)
    out = get_backend_for_tensor(source).conv(
        source, in_dim=in_dim, out_dim=out_dim, in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims,
        filter=filter, filter_size=filter_size, padding=padding, strides=strides, dilation_rate=dilation_rate,
        groups=groups if groups and groups > 1 else None, bias=bias)
    return out, list(out_spatial_dims)


# ---- transposed conv ----
class _TransposedConv(Module):
    """N-D transposed convolution; params ``filter`` [in_dim, out_dim, *filter_size] and ``bias`` [out_dim]."""

    nd = None

    def __init__(self, in_dim, out_dim, filter_size, *, padding, remove_padding=0, output_padding=None, strides=None,
                 with_bias=True):
        super().__init__()
        name = type(self).__name__
        _set_conv_dims(self, name, in_dim, out_dim, filter_size)
        self.padding = padding
        self.remove_padding = remove_padding
        self.output_padding = output_padding
        self.strides = strides
        self.filter = Parameter([self.in_dim, self.out_dim] + self.filter_size)
        self.filter.initial = Glorot()
        self.with_bias = with_bias
        self.bias = None
        if with_bias:
            self.bias = Parameter([out_dim])
            self.bias.initial = 0.0

    def __call__(self, source, *, in_spatial_dims, out_spatial_dims=None):
        return transposed_conv(
            source, in_dim=self.in_dim, out_dim=self.out_dim, in_spatial_dims=in_spatial_dims,
            out_spatial_dims=out_spatial_dims, filter=self.filter, filter_size=self.filter_size, padding=self.padding,
            remove_padding=self.remove_padding, output_padding=self.output_padding, strides=self.strides,
            bias=self.bias if self.with_bias else None)


class TransposedConv1d(_OneSpatialDim, _TransposedConv):
    """1D transposed conv: ``(y, out_spatial_dim) = tconv(x, in_spatial_dim=)``; upsamples by strides (default:
    the filter size)."""

    nd = 1


class TransposedConv2d(_TransposedConv):
    """2D transposed conv over two spatial dims."""

    nd = 2


class TransposedConv3d(_TransposedConv):
    """3D transposed conv over three spatial dims."""

    nd = 3


def transposed_out_len(n, filter_size, stride, padding, output_padding=None, remove_padding=0):
    """Length of a transposed conv's output over an axis of length n (an int or an int Tensor), as TF's
    conv_transpose with the keras output length: 'same' n * stride, 'valid' n * stride + max(k - stride, 0); with
    output_padding (n - 1) * stride + k - 2 * pad + output_padding (pad: k // 2 for 'same', else 0); minus
    2 * remove_padding."""
    if output_padding is None:
        res = n * stride
        if padding == "valid" and filter_size > stride:
            res = res + (filter_size - stride)
    else:
        pad = filter_size // 2 if padding == "same" else 0
        res = (n - 1) * stride + filter_size - 2 * pad + output_padding
    return res - 2 * remove_padding if remove_padding else res


def transposed_crop_left(filter_size, stride, padding, output_padding=None):
    """Frames to drop at the left of the full transposed conv output ((n - 1) * stride + k frames): the left pad of
    the conv whose gradient TF's conv_transpose is (independent of n: the full minus the output length is
    k - stride, or 2 * pad - output_padding)."""
    if padding != "same":
        return 0
    total = filter_size - stride if output_padding is None else 2 * (filter_size // 2) - output_padding
    return max(total, 0) // 2


def _transposed_opts(nd, filter_size, padding, remove_padding, output_padding, strides, func):
    if not isinstance(padding, str) or padding.lower() not in ("same", "valid"):
        raise error(func, "padding must be 'same' or 'valid', got %r" % (padding,))
    sizes = [d.dimension if isinstance(d, Dim) else int(d) for d in filter_size]
    strides = list(sizes) if strides is None else _seq(strides, nd, "strides", func)
    remove_padding = _seq(remove_padding or 0, nd, "remove_padding", func)
    output_padding = [output_padding] * nd if output_padding is None or isinstance(output_padding, int) else \
        _seq(output_padding, nd, "output_padding", func)
    if any(not isinstance(r, int) or r < 0 for r in remove_padding):
        raise error(func, "remove_padding=%r: ints >= 0 expected" % (remove_padding,))
    return padding.lower(), sizes, strides, remove_padding, output_padding


def make_transposed_conv_out_spatial_dims(in_spatial_dims, *, filter_size, padding, strides=None, output_padding=None,
                                          remove_padding=0):
    """The output spatial dims of a transposed conv: the input dim where it keeps its size, else a new dim (its
    lengths are set by the backend from the input lengths, see :func:`transposed_out_len`)."""
    in_spatial_dims = list(in_spatial_dims)
    padding, sizes, strides, remove_padding, output_padding = _transposed_opts(
        len(in_spatial_dims), filter_size, padding, remove_padding, output_padding, strides,
        "make_transposed_conv_out_spatial_dims")
    out = []
    for d, k, st, op, rp in zip(in_spatial_dims, sizes, strides, output_padding, remove_padding):
        if op is None and not rp and (k == st == 1 or (st == 1 and padding == "same")):
            out.append(d)
        elif d.dimension is not None:
            out.append(Dim(transposed_out_len(d.dimension, k, st, padding, op, rp), name="%s:tconv" % d.name))
        else:
            out.append(Dim(None, name="%s:tconv" % d.name, kind=Dim.Types.Spatial))
    return out


def transposed_conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter,  # noqa: A002
                    filter_size, padding, remove_padding=0, output_padding=None, strides=None, bias=None,
                    use_mask=None):
    """N-D transposed convolution (1-3 spatial dims) of source with filter [in_dim, out_dim, *filter_size]
    -> (out, out_spatial_dims); strides default to the filter size, padding 'same' or 'valid' (TF's
    conv_transpose), output_padding / remove_padding as the original."""
    in_spatial_dims = list(in_spatial_dims)
    nd = len(in_spatial_dims)
    if not 1 <= nd <= 3:
        raise error("transposed_conv", "1 to 3 in_spatial_dims are supported, got %i" % nd)
    check_dims_in("transposed_conv", source, [in_dim] + in_spatial_dims)
    filter_size = list(filter_size)
    padding, sizes, strides, remove_padding, output_padding = _transposed_opts(
        nd, filter_size, padding, remove_padding, output_padding, strides, "transposed_conv")
    if any(_needs_masking(d) for d in in_spatial_dims):
        if use_mask is None:
            use_mask = use_mask_default(default=True, default_false_for_behavior_version_up_to=22)
        if use_mask:
            source = _masked(source, in_spatial_dims, 0.0)
    if padding == "same" and _any_non_default(strides, 1) and _consistent_same_padding_enabled():
        raise error("transposed_conv", "padding='same' with strides %r under the consistent 'same' padding "
                                       "(behavior version >= 24 or rf_use_consistent_same_padding) is not defined "
                                       "(as the original)" % (strides,))
    if out_spatial_dims is None:
        out_spatial_dims = make_transposed_conv_out_spatial_dims(
            in_spatial_dims, filter_size=sizes, padding=padding, strides=strides, output_padding=output_padding,
            remove_padding=remove_padding)
    backend = get_backend_for_tensor(source)
    method = getattr(backend, "transposed_conv", None)
    if method is None:
        raise error("transposed_conv", "not implemented by the %s backend" % backend.name)
    out = method(source, in_dim=in_dim, out_dim=out_dim, in_spatial_dims=in_spatial_dims,
                 out_spatial_dims=list(out_spatial_dims), filter=filter, filter_size=filter_size, padding=padding,
                 remove_padding=remove_padding, output_padding=output_padding, strides=strides, bias=bias)
    return out, list(out_spatial_dims)


# ---- pooling ----
def pool(source, *, nd=None, mode, pool_size, padding="valid", dilation_rate=1, strides=None, in_spatial_dims,
         out_spatial_dims=None, use_mask=None):
    """N-D max/avg pooling; strides default to pool_size -> (out, out_spatial_dims)."""
    if isinstance(in_spatial_dims, Dim):
        in_spatial_dims = [in_spatial_dims]
    in_spatial_dims = list(in_spatial_dims)
    if nd is not None and nd != len(in_spatial_dims):
        raise error("pool", "nd=%r but %i in_spatial_dims" % (nd, len(in_spatial_dims)))
    nd = len(in_spatial_dims)
    if isinstance(out_spatial_dims, Dim):
        out_spatial_dims = [out_spatial_dims]
    check_dims_in("pool", source, in_spatial_dims)
    if mode not in ("max", "avg"):
        raise error("pool", "mode must be 'max' or 'avg', got %r" % mode)
    pool_size = _seq(pool_size, nd, "pool_size", "pool")
    strides = pool_size if not strides else _seq(strides, nd, "strides", "pool")
    dilation_rate = _seq(dilation_rate or 1, nd, "dilation_rate", "pool")
    padding = _check_padding(padding, nd, "pool")
    pad_value = {"max": float("-inf"), "avg": 0.0}[mode]
    if any(_needs_masking(d) for d in in_spatial_dims):
        if use_mask is None:
            use_mask = use_mask_default(default=True, default_false_for_behavior_version_up_to=22)
        if use_mask:
            source = _masked(source, in_spatial_dims, pad_value)
    else:
        use_mask = False
    if padding == "same" and _any_non_default(strides, 1) and _consistent_same_padding_enabled():
        padding = _consistent_padding(pool_size, dilation_rate, nd, "pool")
    if out_spatial_dims is None:
        out_spatial_dims = make_conv_out_spatial_dims(
            in_spatial_dims, filter_size=pool_size, padding=padding, strides=strides, dilation_rate=dilation_rate)
    out = get_backend_for_tensor(source).pool(
        source, mode=mode, pool_size=pool_size, padding=padding, dilation_rate=dilation_rate, strides=strides,
        in_spatial_dims=in_spatial_dims, out_spatial_dims=list(out_spatial_dims))
    if use_mask and mode == "max":
        out = _masked(out, out_spatial_dims, 0.0)  # no -inf left in the padded frames
    return out, list(out_spatial_dims)


def max_pool(source, *, pool_size, padding="valid", dilation_rate=1, strides=None, in_spatial_dims,
             out_spatial_dims=None):
    return pool(source, mode="max", pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                strides=strides, in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims)


def pool1d(source, *, mode, pool_size, padding="valid", dilation_rate=1, strides=None, in_spatial_dim,
           out_spatial_dim=None):
    if not isinstance(in_spatial_dim, Dim):
        raise error("pool1d", "in_spatial_dim must be a Dim, got %r" % (in_spatial_dim,))
    out, (d,) = pool(source, mode=mode, pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                     strides=strides, in_spatial_dims=[in_spatial_dim],
                     out_spatial_dims=[out_spatial_dim] if out_spatial_dim is not None else None)
    return out, d


def max_pool1d(source, *, pool_size, padding="valid", dilation_rate=1, strides=None, in_spatial_dim,
               out_spatial_dim=None):
    return pool1d(source, mode="max", pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                  strides=strides, in_spatial_dim=in_spatial_dim, out_spatial_dim=out_spatial_dim)


def _pool_nd(nd):
    def pool_nd(source, *, mode, pool_size, padding="valid", dilation_rate=1, strides=None, in_spatial_dims,
                out_spatial_dims=None):
        if len(in_spatial_dims) != nd:
            raise error("pool%id" % nd, "expected %i in_spatial_dims, got %i" % (nd, len(in_spatial_dims)))
        return pool(source, mode=mode, pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                    strides=strides, in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims)

    pool_nd.__name__ = pool_nd.__qualname__ = "pool%id" % nd
    pool_nd.__doc__ = "%iD pooling (strides default to pool_size) -> (out, out_spatial_dims)." % nd
    return pool_nd


pool2d = _pool_nd(2)
pool3d = _pool_nd(3)


# ---- output dims ----
def make_conv_out_spatial_dims(in_spatial_dims, *, filter_size, padding, strides=1, dilation_rate=1,
                               description_prefix=None):
    """The output spatial dims of a conv/pool: the input dim where it keeps its size, else a new (derived) dim."""
    in_spatial_dims = list(in_spatial_dims)
    nd = len(in_spatial_dims)
    filter_size = [d.dimension if isinstance(d, Dim) else d for d in _seq(filter_size, nd, "filter_size", "conv")]
    strides = _seq(strides, nd, "strides", "conv")
    dilation_rate = _seq(dilation_rate, nd, "dilation_rate", "conv")
    padding = _check_padding(padding, nd, "conv")
    paddings = [padding] * nd if isinstance(padding, str) else padding
    out = []
    for i, (d, fs, st, dil, pad) in enumerate(zip(in_spatial_dims, filter_size, strides, dilation_rate, paddings)):
        if (fs == st == 1 and pad in ("valid", "same", 0)) or (st == 1 and pad == "same"):
            out.append(d)
            continue
        new = d
        if pad == "valid" or isinstance(pad, int):
            ext = (fs - 1) * dil - (2 * pad if isinstance(pad, int) else 0)
            if ext > 0:
                new = new - ext
            elif ext < 0:
                new = new + (-ext)
        if st != 1:
            new = new.ceildiv_right(st)
        if new is d:
            new = d.copy(same_as_self=False)
        if description_prefix and new.dimension is None:
            new.description = "%s:spatial%i" % (description_prefix, i)
        out.append(new)
    return out


def gating(x, *, axis=None, gate_func=None, act_func=None, out_dim=None):
    """GLU-style gating (https://arxiv.org/abs/1612.08083), as used by the Conformer conv block: x split in halves
    (a, b) over axis (default: the feature dim) -> (act_func(a) * gate_func(b), out_dim); defaults gate_func=sigmoid,
    act_func=identity; out_dim defaults to axis // 2 (so a ``2 * d`` axis gives back d)."""
    if not is_tensor(x):
        raise error("gating", "expects a Tensor, got %r" % (x,))
    if axis is None:
        axis = x.feature_dim
        if axis is None:
            raise error("gating", "the input has no feature dim: pass axis=")
    if axis.dimension is None or axis.dimension % 2:
        raise error("gating", "axis %s must be static and even" % axis.short_repr())
    if not out_dim:
        out_dim = axis.div_left(2)
    a, b = array_.split(x, axis=axis, out_dims=[out_dim, out_dim])
    gate_func = gate_func or math_.sigmoid
    act_func = act_func or math_.identity
    return act_func(a) * gate_func(b), out_dim
