"""concat: concatenation of several sources along a named axis of each."""

from __future__ import annotations

import tensorflow as tf

from ..data import Dim
from .base import LayerBase


class ConcatLayer(LayerBase):
    """``"from": [("a", "T"), ("b", "T")]``: concatenates along the given axis of each source.

    :param sources: the (layer, axis) pairs from "from": each layer is concatenated along its given axis
    :param out_dim: Dim of the concatenated output axis (default None: a new tag, size = the sum of the sizes)
    :param handle_dynamic_dims: True: concatenate per sequence along dynamic axes (each sequence's frames of a source
        within its length, right after the previous source's; the output padded to the longest sum); needs a batch axis
        and sequence lengths of shape [B]. None/False (default): concatenate the padded tensors
    """

    layer_class = "concat"
    default_from = ()
    from_form = "pairs"  # "from": [(layer name, axis), ...] -> sources [(layer, axis), ...]

    def __init__(self, sources, out_dim=None, handle_dynamic_dims=None, **kwargs):
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
        tag = self.output.dims[axis]
        total = sizes[0]
        for size in sizes[1:]:
            total = total + size
        if handle_dynamic_dims and tag.dimension is None:
            self.output.placeholder = self._concat_per_seq(xs, sizes, axis, tf.reduce_max(total))
        else:
            self.output.placeholder = tf.concat(xs, axis=axis)
        if tag.dimension is None and tag.dyn_size is None:
            tag.dyn_size = total

    def _concat_per_seq(self, xs, sizes, axis, n_out):
        """Per sequence: gather each output frame from the padded concat of xs (zeros after the sequence's end)."""
        b = self.output.batch_dim_axis
        if b is None or any(s.shape.rank not in (0, 1) for s in sizes):
            raise ValueError("concat layer %r: handle_dynamic_dims needs a batch axis and sequence lengths of shape "
                             "[B] for the dynamic concat axes" % self.name)
        perm = [b, axis] + [i for i in range(len(self.output.dims)) if i not in (b, axis)]
        cat = tf.transpose(tf.concat(xs, axis=axis), perm)  # [B, sum of padded sizes, rest...]
        pos = tf.range(n_out)[None, :]  # [1, T]
        idx = tf.zeros_like(pos)
        offset, pad_start = tf.zeros([1, 1], tf.int32), 0
        for x, size in zip(xs, sizes):
            size = tf.reshape(size, [-1, 1])
            inside = tf.logical_and(pos >= offset, pos < offset + size)  # [B, T]
            idx = tf.where(inside, pad_start + pos - offset, idx)
            offset, pad_start = offset + size, pad_start + tf.shape(x)[axis]
        y = tf.gather(cat, idx, axis=1, batch_dims=1)  # [B, T, rest...]
        mask = tf.reshape(pos < offset, [-1, n_out] + [1] * (len(perm) - 2))
        y = tf.where(mask, y, tf.zeros_like(y))
        return tf.transpose(y, [perm.index(i) for i in range(len(perm))])

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
