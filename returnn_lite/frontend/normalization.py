"""rf normalization beyond LayerNorm / BatchNorm (nn.py): :func:`moments`, :class:`RMSNorm`, :class:`GroupNorm`,
:func:`normalize` and :class:`Normalize`."""

from __future__ import annotations

from ..tensor import Dim
from . import array_, math_
from ._utils import as_dims, check_dims_in, error, is_tensor
from .module import Module, Parameter

__all__ = ["moments", "RMSNorm", "GroupNorm", "normalize", "Normalize"]


def moments(x, axis, *, use_mask=True, correction=0):
    """(mean, variance) of x over axis (a Dim or Dims; masked frames excluded with use_mask); the variance is
    ``sum((x - mean) ** 2) / (n - correction)`` (0: biased, 1: Bessel's correction)."""
    axes = as_dims(axis)
    check_dims_in("moments", x, axes)
    mean = math_.reduce_mean(x, axis=axes, use_mask=use_mask)
    variance = math_.reduce_mean(math_.squared_difference(x, array_.stop_gradient(mean)), axis=axes,
                                 use_mask=use_mask)
    if is_tensor(correction) or correction != 0:
        n = math_.num_elements_of_shape(axes, use_mask=use_mask)
        variance = variance * (n / (n - correction))
    return mean, variance


class RMSNorm(Module):
    """x * rsqrt(mean(x ** 2) + eps) * scale (+ bias, off by default) over in_dim (a Dim or Dims)."""

    def __init__(self, in_dim, *, eps=1e-6, with_bias=False):
        super().__init__()
        self.in_dim = in_dim
        self.eps = eps
        self.scale = Parameter([in_dim] if isinstance(in_dim, Dim) else list(in_dim))
        self.scale.initial = 1.0
        self.bias = None
        if with_bias:
            self.bias = Parameter(self.scale.dims)
            self.bias.initial = 0.0

    def __call__(self, x):
        check_dims_in("RMSNorm", x, as_dims(self.in_dim), what="in_dim")
        variance = math_.reduce_mean(math_.square(x), axis=self.in_dim)
        out = x * math_.rsqrt(variance + self.eps) * self.scale
        return out + self.bias if self.bias is not None else out


class GroupNorm(Module):
    """Group norm: in_dim split into num_groups groups, each normalized over its channels; scale and bias."""

    def __init__(self, in_dim, *, num_groups, eps=1e-6):
        super().__init__()
        if not isinstance(in_dim, Dim) or in_dim.dimension is None:
            raise error("GroupNorm", "in_dim must be a static Dim, got %r" % (in_dim,))
        self.in_dim = in_dim
        self.num_groups = num_groups if isinstance(num_groups, Dim) else Dim(int(num_groups), name="groups")
        if in_dim.dimension % self.num_groups.dimension:
            raise error("GroupNorm", "num_groups=%i does not divide in_dim %s" % (
                self.num_groups.dimension, in_dim.short_repr()))
        self.in_group_dim = Dim(in_dim.dimension // self.num_groups.dimension, name="%s/group" % in_dim.name)
        self.eps = eps
        self.scale = Parameter([in_dim])
        self.scale.initial = 1.0
        self.bias = Parameter([in_dim])
        self.bias.initial = 0.0

    def __call__(self, x):
        check_dims_in("GroupNorm", x, [self.in_dim], what="in_dim")
        x = array_.split_dims(x, axis=self.in_dim, dims=[self.num_groups, self.in_group_dim])
        mean, variance = moments(x, axis=self.in_group_dim)
        norm_x = (x - mean) * math_.rsqrt(variance + self.eps)
        norm_x, _ = array_.merge_dims(norm_x, dims=[self.num_groups, self.in_group_dim], out_dim=self.in_dim)
        return norm_x * self.scale + self.bias


def normalize(a, *, axis, epsilon=1e-6):
    """(a - mean) / sqrt(variance + epsilon), the moments over axis."""
    mean, variance = moments(a, axis=axis)
    return (a - mean) * math_.rsqrt(variance + epsilon)


class Normalize(Module):
    """:func:`normalize` with a trainable scale and bias of param_dims."""

    def __init__(self, *, param_dims, epsilon=1e-6, scale=True, bias=True):
        super().__init__()
        self.epsilon = epsilon
        param_dims = [param_dims] if isinstance(param_dims, Dim) else list(param_dims)
        self.scale = None
        if scale:
            self.scale = Parameter(param_dims)
            self.scale.initial = 1.0
        self.bias = Parameter(param_dims) if bias else None
        if self.bias is not None:
            self.bias.initial = 0.0

    def __call__(self, a, *, axis):
        norm = normalize(a, axis=axis, epsilon=self.epsilon)
        if self.scale is not None:
            norm = self.scale * norm
        return norm + self.bias if self.bias is not None else norm
