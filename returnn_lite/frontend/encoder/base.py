"""
Encoder interfaces: any function x -> y with a dense output feature dim ``out_dim``.
Plain classes (no ABC): the bodies raise NotImplementedError; subclasses implement ``__call__``.
"""

from __future__ import annotations

from ..module import Module

__all__ = ["IEncoder", "ISeqFramewiseEncoder", "ISeqDownsamplingEncoder"]


class IEncoder(Module):
    """``y = encoder(x)``: x sparse or dense, y dense with feature dim ``out_dim``."""

    out_dim = None

    def __call__(self, source):
        raise NotImplementedError("%s.__call__(source)" % type(self).__name__)


class ISeqFramewiseEncoder(Module):
    """``y = encoder(x, spatial_dim=)``: one output frame per input frame."""

    out_dim = None

    def __call__(self, source, *, spatial_dim):
        raise NotImplementedError("%s.__call__(source, spatial_dim=)" % type(self).__name__)


class ISeqDownsamplingEncoder(Module):
    """
    ``(y, out_spatial_dim) = encoder(x, in_spatial_dim=)``: a shorter output sequence (e.g. 10ms input frames, 60ms
    output frames). ``downsample_factor``: the output length is about input length / factor (in the limit).
    """

    out_dim = None
    downsample_factor = None

    def __call__(self, source, *, in_spatial_dim):
        raise NotImplementedError("%s.__call__(source, in_spatial_dim=)" % type(self).__name__)
