"""concat: concatenation of several sources along a named axis of each."""

from __future__ import annotations

import tensorflow as tf

from ..data import Dim
from .base import LayerBase


class ConcatLayer(LayerBase):
    """``"from": [("a", "T"), ("b", "T")]``: concatenates along the given axis of each source.

    :param sources: the (layer, axis) pairs from "from": each layer is concatenated along its given axis
    :param out_dim: Dim of the concatenated output axis (default None: a new tag, size = the sum of the sizes)
    """

    layer_class = "concat"
    default_from = ()
    from_form = "pairs"  # "from": [(layer name, axis), ...] -> sources [(layer, axis), ...]

    def __init__(self, sources, out_dim=None, **kwargs):
        layers, axes = [layer for layer, _ in sources], [axis for _, axis in sources]
        super().__init__(sources=layers, **kwargs)
        axis = layers[0].output.get_axis_from_description(axes[0])
        xs, sizes = [], []
        for layer, desc in zip(layers, axes):
            data = layer.output
            a = data.get_axis_from_description(desc)
            d = data.dims[a]
            if a != axis or any(x != y for i, (x, y) in enumerate(zip(data.dims, self.output.dims)) if i != axis):
                # another layout: bring the other axes into the output's order (matched by dim tag)
                try:
                    data = data.copy_compatible_to(self.output.copy_template_replace_dim_tag(axis, d),
                                                   check_dtype=False)
                except ValueError:  # tags that do not match: only move the concat axis
                    data = data.copy_move_axis(a, axis)
            xs.append(data.placeholder)
            sizes.append(d.dyn_size if d.dimension is None else tf.constant(d.dimension, tf.int32))
        self.output.placeholder = tf.concat(xs, axis=axis)
        tag = self.output.dims[axis]
        if tag.dimension is None and tag.dyn_size is None:
            tag.dyn_size = tf.add_n(sizes) if len(sizes) > 1 else sizes[0]

    @classmethod
    def get_out_data_from_opts(cls, name, sources, out_dim=None, **kwargs):
        layers, axes = [layer for layer, _ in sources], [axis for _, axis in sources]
        first = layers[0].output
        axis = first.get_axis_from_description(axes[0])
        dims = []
        for layer, a in zip(layers, axes):
            if layer.output.batch_ndim != first.batch_ndim:
                raise ValueError("concat: source %r has rank %i, but %r has rank %i" % (
                    layer.name, layer.output.batch_ndim, layers[0].name, first.batch_ndim))
            dims.append(layer.output.dims[layer.output.get_axis_from_description(a)])
        if out_dim is None:
            static = [d.dimension for d in dims]
            out_dim = Dim(sum(static) if None not in static else None, kind=dims[0].kind,
                          description="%s:concat" % name)
        return first.copy_template_replace_dim_tag(axis, out_dim, name="%s_output" % name)
