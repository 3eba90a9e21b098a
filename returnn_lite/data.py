"""
The TF compiler's tensors: :class:`Data` is the :class:`~returnn_lite.tensor.Tensor` of the layer classes, a subclass
with what only the TF graph needs (placeholders of extern data, search beams, sequence masks as TF ops), and
:class:`TFCompilerBackend`, the backend of raw ``tf.Tensor``s (the raw-tensor helpers Tensor/Dim use: transposes,
the size of an axis, masks and max lengths cached per graph). :class:`Dim` and the layout logic (``batch_dim_axis``,
``time_dim_axis``, ``feature_dim_axis``, axis descriptions, ``copy_*``) are those of :mod:`returnn_lite.tensor`.
"""

from __future__ import annotations

import tensorflow as tf

from .tensor.backend import Backend
from .tensor.tensor import (  # noqa: F401 (the compiler's names for them)
    Dim, DimensionTag, FeatureDim, SpatialDim, Tensor, axes_of, batch_dim, dtype_name, has_repeated_dim,
    single_step_dim)
from .util import as_list  # noqa: F401 (re-exported)

tf1 = tf.compat.v1


def graph_cached(key, create):
    """
    create() once per key in the current graph and control flow context (a v2 loop body or cond branch is a graph
    of its own, a v1 loop a context), for values that only depend on the tensors named in the key (e.g. the mask of
    a lengths tensor), so that every layer asking gets the same ops instead of new ones. Keys hold tensor refs,
    which keep the tensors alive as long as the graph that owns the cache.
    """
    if tf.executing_eagerly():
        return create()
    graph = tf1.get_default_graph()
    cache = getattr(graph, "_returnn_lite_cache", None)
    if cache is None:
        cache = graph._returnn_lite_cache = {}
    ctx = graph._get_control_flow_context()  # noqa (no public API; None outside v1 control flow)
    key = (id(ctx),) + key
    entry = cache.get(key)
    if entry is None or entry[0] is not ctx:
        entry = cache[key] = (ctx, create())
    return entry[1]


def tensor_dim(x, axis):
    """
    Size of axis of the tensor x: the static int if TF knows it, else a scalar tensor. The dynamic sizes of one
    tensor come from one shared tf.shape, unstacked if the rank is known (2 ops for all axes instead of a strided
    slice and its 3 index constants per axis).
    """
    if isinstance(x, (tf.Tensor, tf.Variable)) and x.shape.rank is not None:
        if x.shape[axis] is not None:
            return x.shape[axis]
        return graph_cached(("shape", x.ref()), lambda: tf.unstack(tf.shape(x), num=x.shape.rank))[axis]
    return tf.shape(x)[axis]


def padded_length(data, axis):
    """
    Size of the axis of data (static int or scalar tensor). A dynamic axis gets one tensor per dim tag (per beam for
    the batch axis) and graph: the shape of the first data asking. All tensors with the tag have that size, so the
    layers share it (and the masks and reshape shapes made from it) instead of each taking the shape of its own input.
    """
    tag = data.dims[axis]
    if tag.dimension is not None:
        return tag.dimension
    x = data.placeholder
    if not isinstance(x, (tf.Tensor, tf.Variable)) or tf.executing_eagerly() or x.shape.rank is None or \
            x.shape[axis] is not None:  # (a size TF knows statically)
        return tensor_dim(x, axis)
    return graph_cached(("padded_length", tag, data.beam if tag.is_batch_dim() else None),
                        lambda: tensor_dim(x, axis))


def shape_vector(*dims):
    """
    A shape for tf.reshape from ints and scalar tensors: the list itself if all are ints, else their stacked vector,
    once per graph for these dims (layers reshaping to the same shape share it).
    """
    tensors = [isinstance(d, (tf.Tensor, tf.Variable)) for d in dims]
    if not any(tensors):
        return [int(d) for d in dims]
    key = tuple(d.ref() if is_tensor else int(d) for d, is_tensor in zip(dims, tensors))
    return graph_cached(("shape_vector",) + key, lambda: tf.stack(dims))


class TFCompilerBackend(Backend):
    """The backend of raw TF tensors: the raw-tensor helpers of Tensor/Dim (no rf ops: rf runs on the layers)."""

    name = "tensorflow"
    RawTensorType = (tf.Tensor, tf.Variable)
    is_tensorflow = True
    implements_rf_ops = False

    @staticmethod
    def is_stale_raw(raw):
        """Whether raw is a tensor of another graph than the current one (e.g. the net was rebuilt)."""
        graph = getattr(raw, "graph", None)
        if graph is None or (tf.executing_eagerly() and not tf1.get_default_graph().get_operations()):
            return False
        current = tf1.get_default_graph()
        while current is not None:  # a loop body / cond branch (function graph) sees the tensors of its outer graphs
            if graph is current:
                return False
            current = getattr(current, "outer_graph", None)
        return True

    @staticmethod
    def get_device(x):
        return None

    @staticmethod
    def get_ndim_raw(raw):
        return raw.shape.rank

    @staticmethod
    def get_dim_raw(raw, axis):
        return tensor_dim(raw, axis)

    @staticmethod
    def transpose_raw(raw, perm):
        return tf.transpose(raw, perm)

    @staticmethod
    def expand_dims_raw(raw, axis):
        return tf.expand_dims(raw, axis)

    @staticmethod
    def squeeze_raw(raw, axes):
        return tf.squeeze(raw, axes)

    @staticmethod
    def reshape_raw(raw, shape):
        return tf.reshape(raw, shape)

    @staticmethod
    def tile_raw(raw, multiples):
        return tf.tile(raw, multiples)

    @staticmethod
    def reduce_max_raw(raw):
        """The max of lengths (the padded length), once per graph."""
        return graph_cached(("max", raw.ref()), lambda: tf.reduce_max(raw))

    @staticmethod
    def sequence_mask_raw(lengths, max_len):
        """[B, T] bool sequence mask with padded length max_len (once per graph, lengths and max_len)."""
        def create():
            with tf.name_scope("seq_mask"):
                return tf.sequence_mask(lengths, maxlen=max_len)

        return graph_cached(("mask", lengths.ref(), max_len if isinstance(max_len, int) else max_len.ref()), create)


class SearchBeam:
    """
    A beam of a search (the original's ``SearchBeam``): data with this beam has batch*beam_size entries, batch
    entry b's hypotheses in rows b*beam_size ... b*beam_size+beam_size-1. ``dependency`` is the beam it was
    chosen from (the previous search step); at runtime a beam chosen by a choice layer also carries ``src_beams``
    ([B, beam_size] int32, the index in the dependency's beam of each hypothesis) and ``beam_scores`` ([B, beam]).
    """

    def __init__(self, beam_size, dependency=None, name=None, invariant=False):
        self.beam_size = int(beam_size)
        self.dependency = dependency
        self.name = name
        self.invariant = invariant  # data on it is the same for all hypotheses of a sequence (repeated, not searched)
        self.src_beams = None
        self.beam_scores = None
        self._tiled_dims = {}

    def depends_on(self, other):
        b = self.dependency
        while b is not None:
            if b is other:
                return True
            b = b.dependency
        return False

    @staticmethod
    def get_combined_beam(*beams, owner=None):
        """
        The beam data of all these beams is brought to (the newest one, chosen from all the others, also where
        its size differs, e.g. a second choice on the beam of a first one); None if none has a beam.
        """
        res = None
        searched = [b for b in beams if b is not None and not b.invariant]
        prefix = "%s: " % owner if owner else ""
        for b in searched or beams:
            if b is None or b is res:
                continue
            if res is None or b.depends_on(res):
                res = b
            elif not res.depends_on(b):
                if res.beam_size != b.beam_size:
                    raise ValueError("%sbeam mismatch: sources on beams of different sizes %s" % (
                        prefix, sorted({res.beam_size, b.beam_size})))
                raise ValueError("%sbeam mismatch: sources are on different search beams %r and %r, which cannot be "
                                 "combined (neither was chosen from the other)" % (prefix, res, b))
        if searched:  # repeated data (an invariant beam) goes with a searched beam of its size
            sizes = {b.beam_size for b in beams if b is not None and b.invariant} | {res.beam_size}
            if len(sizes) > 1:
                raise ValueError("%sbeam mismatch: sources on beams of different sizes %s" % (prefix, sorted(sizes)))
        return res

    def __repr__(self):
        return "SearchBeam(%r, size=%i%s)" % (self.name, self.beam_size,
                                              ", dependency=%r" % self.dependency.name if self.dependency else "")


class Data(Tensor):
    """A Tensor of the TF compiler: its raw tensor (``placeholder``) is a ``tf.Tensor``; search beams."""

    def __init__(self, name, dims=None, dtype=None, *, auto_create_placeholders=False, **kwargs):
        super().__init__(name, dims, dtype, **kwargs)  # (name, dims, dtype) as Tensor; classic options by keyword
        if self.beam is not None and not isinstance(self.beam, SearchBeam):
            raise TypeError("Data %r: beam must be a SearchBeam, got %r" % (name, self.beam))
        if auto_create_placeholders:
            self._create_placeholders()

    def _create_placeholders(self):
        with tf.name_scope("extern_data/placeholders/%s/" % self.name):
            self.placeholder = tf1.placeholder(self.dtype, self.batch_shape, name=self.name)
            for i, d in enumerate(self.dims):
                if d.is_dynamic() and d.dyn_size is None:
                    d.dyn_size = tf1.placeholder(
                        self.size_dtype, [None] if self.have_batch_axis() else [], name="%s_dim%i_size" % (
                            self.name, self.get_batch_axis_excluding_batch(i)))

    def get_batch_dim(self):
        return tf.shape(self.placeholder)[self.batch_dim_axis]  # a tensor (callers use its dtype)

    def get_dim(self, axis):
        """Size of an axis: static int, or the scalar tensor of its dim tag in this graph (:func:`padded_length`)."""
        if self.dims[axis].dimension is None and self.placeholder is not None:
            return padded_length(self, axis)
        return super().get_dim(axis)


    def get_sequence_mask(self):
        """[B,T] (or [T,B] if time-major) bool mask of the time axis."""
        mask = self.dims[self.time_dim_axis].get_mask(self.get_dim(self.time_dim_axis))
        if self.is_time_major():
            mask = tf.transpose(mask)
        return mask


    def get_sequence_mask_broadcast(self, axis=None, tag=None, max_len=None):
        """
        Bool mask of a dynamic axis, shaped to broadcast against the placeholder.
        tag/max_len: use these lengths and padded length instead of the axis' own (e.g. for a new output axis).
        """
        if axis is None:
            axis = self.time_dim_axis
        own_tag = tag is None or tag == self.dims[axis]
        tag = self.dims[axis] if tag is None else tag
        if tag.dyn_size is None:
            raise ValueError("%s: axis %i has no sequence lengths" % (self.short_repr(), axis))
        if own_tag and max_len is None and isinstance(tag.dyn_size, tf.Tensor):
            # depends only on the layout: one mask op chain per graph for all data with these dims
            return graph_cached(("mask_broadcast", tuple(self.dims), axis, self.beam, tag.dyn_size.ref()),
                                lambda: self._sequence_mask_broadcast(axis, tag, self.get_dim(axis)))
        return self._sequence_mask_broadcast(axis, tag, self.get_dim(axis) if max_len is None else max_len)

    def _sequence_mask_broadcast(self, axis, tag, max_len):
        mask = tag.get_mask(max_len)
        size_dims = tag.lengths_dims()
        if size_dims and not (len(size_dims) == 1 and size_dims[0].is_batch_dim()) and \
                all(d in self.dims for d in size_dims):
            # lengths over other dims (e.g. a causal history: length i + 1 at query frame i): mask [size dims..., axis]
            mask_axes = [list(self.dims).index(d) for d in size_dims] + [axis]
            order = sorted(range(len(mask_axes)), key=lambda i: mask_axes[i])
            if order != list(range(len(order))):
                mask = tf.transpose(mask, order)
            for i in range(self.batch_ndim):
                if i not in mask_axes:
                    mask = tf.expand_dims(mask, i)
            return mask
        b = self.batch_dim_axis
        if b is None or tag.dyn_size.shape.rank == 0:
            kept = [axis]
        else:
            kept = [b, axis]
            if b > axis:
                mask = tf.transpose(mask)
                kept = [axis, b]
        for i in range(self.batch_ndim):
            if i not in kept:
                mask = tf.expand_dims(mask, i)
        return mask


    def copy_masked(self, mask_value=0.0, axes=None):
        """Copy where padded frames of the dynamic axes (or the given axes) are set to mask_value."""
        x = self.placeholder
        for axis in (self.get_dynamic_axes() if axes is None else axes):
            if self.dims[axis].dyn_size is None:
                continue
            mask = self.get_sequence_mask_broadcast(axis)
            x = tf.where(mask, x, tf.cast(mask_value, x.dtype) if not isinstance(mask_value, tf.Tensor) else mask_value)
        return self.copy(placeholder=x)


    def copy_extend_with_beam(self, beam):
        """
        This data (without beam) repeated for each hypothesis of beam (batch b -> rows b*beam .. b*beam+beam-1);
        dynamic axes get a tag with the repeated sequence lengths (one per beam, so templates can tell them apart).
        """
        if self.beam is beam or beam is None:
            return self.copy()
        if self.beam is not None:
            raise ValueError("%s has beam %r, cannot extend it to beam %r" % (self.short_repr(), self.beam, beam))
        data = self.copy()
        data.beam = beam
        if not self.have_batch_axis():
            return data
        k = beam.beam_size

        def tile(x, axis):
            x = tf.expand_dims(x, axis + 1)
            mult = [1] * x.shape.rank
            mult[axis + 1] = k
            x = tf.tile(x, mult)
            shape = tf.shape(x)
            return tf.reshape(x, tf.concat([shape[:axis], [shape[axis] * k], shape[axis + 2:]], 0))

        dims = list(self.dims)
        for i, d in enumerate(dims):
            if d.is_dynamic() and d.dyn_size is not None and d.dyn_size.shape.rank == 1:
                key = d.get_same_base()
                if key not in beam._tiled_dims:
                    new = Dim(None, kind=d.kind, description="%s*beam" % d.description)
                    new.dyn_size = tile(d.dyn_size, 0)
                    new.beam_base = key
                    beam._tiled_dims[key] = new
                dims[i] = beam._tiled_dims[key]
        data = data._with_dims(dims, placeholder=None)
        if self.placeholder is not None:
            data.placeholder = tile(self.placeholder, self.batch_dim_axis)
        return data


    def copy_select_beam(self, beam):
        """This data on beam.dependency (or an older beam) brought to beam by following beam.src_beams."""
        if self.beam is beam:
            return self.copy()
        if self.beam is None:
            return self.copy_extend_with_beam(beam)
        if self.beam.invariant and self.beam.beam_size == beam.beam_size:  # repeated data: the same on any beam
            data = self.copy()
            data.beam = beam
            return data
        chain = []
        b = beam
        while b is not None and b is not self.beam:
            chain.append(b)
            b = b.dependency
        if b is None:
            raise ValueError("%s: beam %r is not an ancestor of %r" % (self.short_repr(), self.beam, beam))
        data = self.copy()
        x = self.placeholder
        for b in reversed(chain):
            if x is None or not self.have_batch_axis():  # (a template)
                continue
            if b.src_beams is None:
                raise ValueError("beam %r has no src_beams (not chosen yet)" % b)
            x = tf.gather(x, flat_beam_indices(b.src_beams, b.dependency.beam_size), axis=self.batch_dim_axis)
        for d in self.dims:
            if d.is_dynamic() and d.dyn_size is not None and getattr(d, "beam_base", None) is None:
                raise NotImplementedError("%s: selecting the beam of a dynamic axis %s" % (self.short_repr(), d))
        data.beam = beam
        data.placeholder = x
        return data



def flat_beam_indices(src_beams, beam_in):
    """src_beams [B, beam] (indices into a beam of size beam_in) -> [B*beam] row indices into the [B*beam_in] data."""
    b = tf.shape(src_beams)[0]
    base = tf.range(b)[:, None] * beam_in
    return tf.reshape(base + src_beams, [-1])


def mask_value_for(dtype, kind):
    """Neutral element of a reduction, for masking padded frames."""
    dtype = tf.as_dtype(dtype)
    if kind in ("max", "argmax"):
        return dtype.min if not dtype.is_floating else float("-inf")
    if kind in ("min", "argmin"):
        return dtype.max if not dtype.is_floating else float("inf")
    if kind in ("prod",):
        return 1
    return 0


__all__ = ["Dim", "DimensionTag", "Data", "Tensor", "SpatialDim", "FeatureDim", "batch_dim", "SearchBeam",
           "single_step_dim", "as_list", "mask_value_for", "axes_of", "has_repeated_dim", "TFCompilerBackend"]
