"""
Dimension tags (:class:`Dim`) and tensor templates (:class:`Data`).

A ``Data`` is a tuple of ``Dim`` objects plus dtype, sparsity and an optional placeholder.
Everything else (``batch_dim_axis``, ``time_dim_axis``, ``feature_dim_axis``, ``shape``, ``dim``,
``size_placeholder``) is derived from the dims, with the explicit time/feature overrides that classic
configs can set. A ``Dim`` owns its sequence lengths. Two axes are the same only if they are the same
tag or were declared the same (``declare_same_as``), never because their sizes are equal.
"""

from __future__ import annotations

import copy as _copy
import re

import tensorflow as tf

from .data_mixins.dim import DimFrontendMixin
from .data_mixins.tensor import TensorFrontendMixin
from .util import NotSpecified, as_list

tf1 = tf.compat.v1


class Dim(DimFrontendMixin):
    """One axis: batch, spatial (static or dynamic with per-sequence lengths) or feature."""

    class Types:
        Batch = "batch"
        Spatial = "spatial"
        Feature = "feature"
        Unspecified = None

    def __init__(self, dimension=None, name=None, *, kind=Types.Unspecified, description=None, dyn_size=None,
                 auto_generated=False, match_priority=0):
        if isinstance(dimension, str) and name is None:  # Dim("name") convenience
            dimension, name = None, dimension
        size_tensor = None
        if dimension is not None and not isinstance(dimension, int) and isinstance(dimension, Data):
            # Dim(size_tensor): a dynamic dim with these sizes (as the original)
            size_tensor, dimension = dimension, None
        if dimension is not None and not isinstance(dimension, int):
            raise TypeError("Dim dimension must be int, None or a Tensor of sizes, got %r" % (dimension,))
        self.dimension = dimension
        self.kind = kind
        self.description = description or name or ("dim%s" % ("" if dimension is None else ":%i" % dimension))
        self.auto_generated = auto_generated
        self.match_priority = match_priority  # of two equal axes of one tensor, matmul/reduce/... pick the higher
        self._same_as = None
        self._dyn_size = dyn_size
        if size_tensor is not None:
            self.dyn_size_ext = size_tensor

    def __copy__(self):
        return self  # a Dim is an identity: copies of a module or Tensor keep their dims (as the original)

    def __deepcopy__(self, memo=None):
        return self

    # identity
    def get_same_base(self):
        d = self
        while d._same_as is not None:
            d = d._same_as
        return d

    def declare_same_as(self, other):
        """Declare self to be the same axis as other (sequence lengths are shared from then on)."""
        base, other_base = self.get_same_base(), other.get_same_base()
        if base is other_base:
            return
        if other_base._dyn_size is None and base._dyn_size is not None:
            other_base._dyn_size = base._dyn_size
        base._same_as = other_base

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, Dim):
            return False
        a, b = self, other  # (get_same_base inlined: dims are compared very often)
        while a._same_as is not None:
            a = a._same_as
        while b._same_as is not None:
            b = b._same_as
        return a is b

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        d = self
        while d._same_as is not None:
            d = d._same_as
        return id(d)

    def is_equal(self, other, **_kwargs):
        return self == other

    # kind
    def is_batch_dim(self):
        return self.kind == Dim.Types.Batch

    def is_feature_dim(self):
        return self.kind == Dim.Types.Feature

    def is_spatial_dim(self):
        return self.kind == Dim.Types.Spatial

    def is_dynamic(self):
        return self.dimension is None and not self.is_batch_dim()

    def is_static(self):
        return self.dimension is not None

    @property
    def name(self):
        return self.description

    # sequence lengths
    @property
    def dyn_size(self):
        base = self.get_same_base()
        if "_derived_from" in base.__dict__:  # a frontend dim like ``T + 2``: lengths from the operands'
            return base.complete_dyn_size()
        return base._dyn_size

    @dyn_size.setter
    def dyn_size(self, value):
        self.get_same_base()._dyn_size = value

    def get_dim_value(self, like=None, axis=None):
        """Static int, or a scalar tensor: the padded length (from ``like``'s shape if given)."""
        if self.dimension is not None:
            return self.dimension
        if like is not None:
            return tensor_dim(like, axis)
        size = self.dyn_size
        if size is not None and not tf.is_tensor(size):  # eager lengths (torch backend): the raw max, as a scalar
            return size.max()
        if size is not None:
            return graph_cached(("max", size.ref()), lambda: tf.reduce_max(size))
        raise ValueError("%r: no static size and no sequence lengths" % self)

    def get_mask(self, max_len):
        """[B, T] bool sequence mask with padded length max_len (once per graph, lengths and max_len)."""
        size = self.dyn_size

        def create():
            with tf.name_scope("seq_mask"):
                return tf.sequence_mask(size, maxlen=max_len)

        return graph_cached(("mask", size.ref(), max_len if isinstance(max_len, int) else max_len.ref()), create)

    def get_derived(self, key, create):
        """
        The dim derived from this one by the operation ``key`` (e.g. ``("pad", 1, 2)``), created once by
        ``create()`` and cached on the base tag, so that two layers doing the same operation on the same axis
        give the same tag (as the original's dim math: ``T + 2`` is one tag).
        """
        base = self.get_same_base()
        cache = base.__dict__.setdefault("_derived_cache", {})
        if key not in cache:
            cache[key] = create()
        return cache[key]

    def copy(self, kind=None, description=None, same_as_self=True, match_priority=None):
        """A new Dim object; with same_as_self (default) equal to this one, e.g. with another match_priority."""
        d = Dim(self.dimension, kind=self.kind if kind is None else kind,
                description=description or self.description, auto_generated=self.auto_generated,
                match_priority=self.match_priority if match_priority is None else match_priority)
        if same_as_self:
            d._same_as = self.get_same_base()
        return d

    def __repr__(self):
        if self.is_batch_dim():
            return "Dim{B}"
        k = {"feature": "F", "spatial": "", None: "?"}.get(self.kind, "")
        return "Dim{%s%r(%s)}" % (k, self.description, "?" if self.dimension is None else self.dimension)

    def short_repr(self):
        if self.is_batch_dim():
            return "B"
        size = "?" if self.dimension is None else str(self.dimension)
        return "%s'%s'(%s)" % ("F" if self.is_feature_dim() else "", self.description, size)


def axes_of(dims, wanted, taken=()):
    """
    Axis indices (into ``dims``) of the Dims ``wanted``, a distinct axis each. When a tensor has the same Dim twice
    (e.g. the weight [in_dim, out_dim] of ``rf.Linear(d, d)``), of the equal axes not taken yet the one with the
    highest ``match_priority`` (see :func:`rf.dim_match_priority_when_needed`), then the identical object.
    Raises ValueError for a Dim without a free axis.
    """
    res = []
    taken = set(taken)
    for w in wanted:
        best = None
        for i, d in enumerate(dims):
            if i in taken or d != w:
                continue
            if best is None or (d.match_priority, d is w) > (dims[best].match_priority, dims[best] is w):
                best = i
        if best is None:
            raise ValueError("dim %s is not among the (free) dims [%s]" % (
                w.short_repr(), ", ".join(d.short_repr() for d in dims)))
        res.append(best)
        taken.add(best)
    return res


def has_repeated_dim(dims):
    """Whether a Dim occurs twice in ``dims`` (then axes must be resolved by :func:`axes_of`, not by ``index``)."""
    return len(dims) > 1 and len(set(dims)) < len(dims)


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


DimensionTag = Dim
batch_dim = Dim(kind=Dim.Types.Batch, description="batch")
single_step_dim = Dim(1, kind=Dim.Types.Spatial, description="single-step")


def SpatialDim(description, dimension=None, **kwargs):  # noqa: N802 (original's API name)
    return Dim(dimension, kind=Dim.Types.Spatial, description=description, **kwargs)


def FeatureDim(description, dimension, **kwargs):  # noqa: N802
    return Dim(dimension, kind=Dim.Types.Feature, description=description, **kwargs)


def _default_time_dim_axis(dims):
    for i, d in enumerate(dims):
        if not d.is_batch_dim() and d.dimension is None:
            return i
    return None


def _default_feature_dim_axis(batch_shape, batch_dim_axis, time_dim_axis, sparse):
    if sparse:
        return None
    axes = [i for i in range(len(batch_shape)) if i not in (batch_dim_axis, time_dim_axis)]
    if not axes:
        return None
    static_axes = [i for i in axes if batch_shape[i] is not None]
    return static_axes[-1] if static_axes else axes[-1]


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
        """The beam data of all these beams is brought to (the newest one); None if none has a beam."""
        res = None
        searched = [b for b in beams if b is not None and not b.invariant]
        if searched:  # repeated data (an invariant beam) goes with any searched beam of its size
            sizes = {b.beam_size for b in beams if b is not None}
            if len(sizes) > 1:
                raise ValueError("%sbeam mismatch: sources on beams of different sizes %s" % (
                    "%s: " % owner if owner else "", sorted(sizes)))
            beams = searched
        for b in beams:
            if b is None or b is res:
                continue
            if res is None or b.depends_on(res):
                res = b
            elif not res.depends_on(b):
                raise ValueError("%sbeam mismatch: sources are on different search beams %r and %r, which cannot be "
                                 "combined (neither was chosen from the other)" % (
                                     "%s: " % owner if owner else "", res, b))
        return res

    def __repr__(self):
        return "SearchBeam(%r, size=%i%s)" % (self.name, self.beam_size,
                                              ", dependency=%r" % self.dependency.name if self.dependency else "")


_IGNORED_KWARGS = {"control_flow_ctx", "same_dim_tags_as", "batch", "version", "vocab"}


class Data(TensorFrontendMixin):
    """Template of a tensor (dims, dtype, sparsity) with an optional placeholder."""

    size_dtype = "int32"
    beam = None  # the SearchBeam the data is on (batch*beam entries), None without search

    def __init__(self, name, shape=None, dtype=None, placeholder=None, sparse=None, dim=NotSpecified,
                 size_placeholder=None, batch_dim_axis=NotSpecified, time_dim_axis=NotSpecified,
                 feature_dim_axis=NotSpecified, available_for_inference=True, auto_create_placeholders=False,
                 dim_tags=None, dims=None, sparse_dim=NotSpecified, raw_tensor=None, feature_dim=None, **kwargs):
        if raw_tensor is not None:  # frontend (rf) name of the placeholder
            placeholder = raw_tensor
        if feature_dim is not None and dims is not None and feature_dim_axis is NotSpecified:
            feature_dim_axis = list(dims).index(feature_dim)
        unknown = set(kwargs) - _IGNORED_KWARGS - {"beam"}
        if unknown:
            raise TypeError("Data %r: unknown option(s) %s" % (name, sorted(unknown)))
        self.name = name
        self.available_for_inference = available_for_inference
        self.vocab = kwargs.get("vocab")
        if dims is not None:
            dim_tags = dims
        if isinstance(sparse_dim, Dim):
            sparse = True
        elif sparse_dim is None:
            sparse = False if sparse is None else sparse
        sparse = bool(sparse)
        if dim_tags is not None:
            self.dims = tuple(dim_tags)
            for d in self.dims:
                if not isinstance(d, Dim):
                    raise TypeError("Data %r: dims must be Dim objects, got %r" % (name, d))
        else:
            self.dims = self._dims_from_classic(
                name, shape, sparse, dim, batch_dim_axis, time_dim_axis, feature_dim_axis)
        self._time_dim_axis = time_dim_axis
        self._feature_dim_axis = feature_dim_axis
        if sparse:
            if isinstance(sparse_dim, Dim):
                self.sparse_dim = sparse_dim
            else:
                d = None if dim is NotSpecified else dim
                self.sparse_dim = Dim(d, kind=Dim.Types.Feature, description="%s:sparse-dim" % name)
        else:
            self.sparse_dim = None
        self.dtype = tf.as_dtype(dtype or ("int32" if sparse else "float32")).name
        if not sparse and dim is not NotSpecified and dim is not None and dim_tags is None:
            if self.feature_dim_axis is None or self.batch_shape[self.feature_dim_axis] not in (None, dim):
                raise ValueError("Data %r: dim=%r does not match shape %r" % (name, dim, self.shape))
        if size_placeholder:
            for axis_wo_b, size in size_placeholder.items():
                self.dims[self.get_batch_axis(axis_wo_b)].dyn_size = size
        self.placeholder = placeholder
        self.beam = kwargs.get("beam")
        if self.beam is not None and not isinstance(self.beam, SearchBeam):
            raise TypeError("Data %r: beam must be a SearchBeam, got %r" % (name, self.beam))
        if auto_create_placeholders:
            self._create_placeholders()

    @staticmethod
    def _dims_from_classic(name, shape, sparse, dim, batch_dim_axis, time_dim_axis, feature_dim_axis):
        if batch_dim_axis is NotSpecified:
            batch_dim_axis = 0
        dim = None if dim is NotSpecified else dim
        if shape is None:
            if time_dim_axis is None:
                shape = () if sparse else (dim,)
            else:
                shape = (None,) if sparse else (None, dim)
        batch_shape = list(shape)
        if batch_dim_axis is not None:
            batch_shape.insert(batch_dim_axis, None)
        if time_dim_axis is NotSpecified:
            time_dim_axis = next(
                (i for i, s in enumerate(batch_shape) if s is None and i != batch_dim_axis), None)
        if feature_dim_axis is NotSpecified:
            feature_dim_axis = _default_feature_dim_axis(batch_shape, batch_dim_axis, time_dim_axis, sparse)
        dims = []
        for i, size in enumerate(batch_shape):
            if i == batch_dim_axis:
                dims.append(batch_dim)
            elif i == time_dim_axis:
                dims.append(Dim(size, kind=Dim.Types.Spatial, description="time:%s" % name))
            elif i == feature_dim_axis:
                dims.append(Dim(size, kind=Dim.Types.Feature, description="feature:%s" % name))
            else:
                dims.append(Dim(size, kind=Dim.Types.Spatial, description="spatial%i:%s" % (i, name)))
        return tuple(dims)

    def _create_placeholders(self):
        with tf.name_scope("extern_data/placeholders/%s/" % self.name):
            self.placeholder = tf1.placeholder(self.dtype, self.batch_shape, name=self.name)
            for i, d in enumerate(self.dims):
                if d.is_dynamic() and d.dyn_size is None:
                    d.dyn_size = tf1.placeholder(
                        self.size_dtype, [None] if self.have_batch_axis() else [], name="%s_dim%i_size" % (
                            self.name, self.get_batch_axis_excluding_batch(i)))

    # ---- derived layout ----
    @property
    def batch_dim_axis(self):
        for i, d in enumerate(self.dims):
            if d.is_batch_dim():
                return i
        return None

    @property
    def time_dim_axis(self):
        if self._time_dim_axis is not NotSpecified:
            return self._time_dim_axis
        return _default_time_dim_axis(self.dims)

    @time_dim_axis.setter
    def time_dim_axis(self, axis):
        self._time_dim_axis = axis

    @property
    def time_dim_axis_or_unspecified(self):
        return self._time_dim_axis

    @property
    def feature_dim_axis(self):
        if self._feature_dim_axis is not NotSpecified:
            return self._feature_dim_axis
        return _default_feature_dim_axis(self.batch_shape, self.batch_dim_axis, self.time_dim_axis, self.sparse)

    @feature_dim_axis.setter
    def feature_dim_axis(self, axis):
        self._feature_dim_axis = axis

    @property
    def feature_dim_axis_or_unspecified(self):
        return self._feature_dim_axis

    @property
    def dim_tags(self):
        return self.dims

    @property
    def sparse(self):
        return self.sparse_dim is not None

    @property
    def batch_shape(self):
        return tuple(d.dimension for d in self.dims)

    @property
    def shape(self):
        return tuple(d.dimension for d in self.dims if not d.is_batch_dim())

    @property
    def batch_ndim(self):
        return len(self.dims)

    @property
    def ndim(self):
        return len(self.dims) - (1 if self.have_batch_axis() else 0)

    @property
    def dim(self):
        if self.sparse:
            return self.sparse_dim.dimension
        axis = self.feature_dim_axis
        return None if axis is None else self.dims[axis].dimension

    @property
    def feature_dim(self):
        """The feature Dim (the sparse dim for sparse data), or None."""
        if self.sparse:
            return self.sparse_dim
        axis = self.feature_dim_axis
        return None if axis is None else self.dims[axis]

    @feature_dim.setter
    def feature_dim(self, dim):
        """Make ``dim`` (one of the dims) the feature axis, or None for none (as the original's Tensor)."""
        if dim is None:
            self._feature_dim_axis = None
            return
        if dim not in self.dims:
            raise ValueError("feature_dim %s is not a dim of %r" % (dim, self))
        self._feature_dim_axis = list(self.dims).index(dim)

    @property
    def size_placeholder(self):
        return {
            self.get_batch_axis_excluding_batch(i): d.dyn_size
            for i, d in enumerate(self.dims)
            if d.is_dynamic() and d.dyn_size is not None
        }

    @size_placeholder.setter
    def size_placeholder(self, sizes):
        for axis_wo_b, size in (sizes or {}).items():
            self.dims[self.get_batch_axis(axis_wo_b)].dyn_size = size

    def have_batch_axis(self):
        return self.batch_dim_axis is not None

    def have_time_axis(self):
        return self.time_dim_axis is not None

    def have_feature_axis(self):
        return self.feature_dim_axis is not None

    def is_batch_major(self):
        return self.batch_dim_axis == 0

    def is_time_major(self):
        return self.time_dim_axis == 0

    def get_batch_axis(self, axis_wo_b):
        """Axis without batch -> axis with batch."""
        b = self.batch_dim_axis
        return axis_wo_b if b is None or axis_wo_b < b else axis_wo_b + 1

    def get_batch_axis_excluding_batch(self, axis):
        """Axis with batch -> axis without batch (None for the batch axis)."""
        b = self.batch_dim_axis
        if b is None or axis < b:
            return axis
        return None if axis == b else axis - 1

    def get_dim_tag(self, axis):
        return self.dims[axis]

    def get_time_dim_tag(self):
        return self.dims[self.time_dim_axis]

    def get_axis_by_tag(self, tag):
        for i, d in enumerate(self.dims):
            if d == tag:
                return i
        raise ValueError("%s: no axis with dim tag %r" % (self.short_repr(), tag))

    def get_dynamic_axes(self):
        return [i for i, d in enumerate(self.dims) if d.is_dynamic()]

    def get_spatial_batch_axes(self):
        return [i for i in range(self.batch_ndim) if i not in (self.batch_dim_axis, self.feature_dim_axis)]

    def get_spatial_axes(self):
        return [self.get_batch_axis_excluding_batch(i) for i in self.get_spatial_batch_axes()]

    def get_feature_batch_axes(self):
        return [] if self.feature_dim_axis is None else [self.feature_dim_axis]

    def get_axes(self, exclude_time=False, exclude_batch=False, exclude_feature=False):
        skip = set()
        if exclude_time:
            skip.add(self.time_dim_axis)
        if exclude_batch:
            skip.add(self.batch_dim_axis)
        if exclude_feature:
            skip.add(self.feature_dim_axis)
        return [i for i in range(self.batch_ndim) if i not in skip]

    # ---- runtime values ----
    def get_dim(self, axis):
        """Size of an axis: static int or scalar tensor from the placeholder's shape."""
        d = self.dims[axis].dimension
        if d is not None:
            return d
        return tensor_dim(self.placeholder, axis)

    def get_batch_dim(self):
        return tf.shape(self.placeholder)[self.batch_dim_axis]  # a tensor (callers use its dtype)

    def get_sequence_lengths(self):
        return self.dims[self.time_dim_axis].dyn_size

    def get_dynamic_size(self, axis):
        return self.dims[axis].dyn_size

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
        tag = self.dims[axis] if tag is None else tag
        if tag.dyn_size is None:
            raise ValueError("%s: axis %i has no sequence lengths" % (self.short_repr(), axis))
        mask = tag.get_mask(self.get_dim(axis) if max_len is None else max_len)
        ext = tag.get_same_base().__dict__.get("_dyn_size_ext")
        size_dims = list(ext.dims) if ext is not None else []
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

    # ---- axis descriptions ----
    def get_axes_from_description(self, axes, allow_int=True):
        """
        Resolve an axis description to a sorted-unique list of axes (counted with batch).
        Accepts ints (with batch axis), "B", "T", "F", "spatial", "dyn", "except_time",
        "except_batch", "stag:NAME", "dim:N", "static", "*", a Dim, and lists of these.
        """
        if axes is None or axes == "":
            return []
        if isinstance(axes, Dim):
            res = [i for i, d in enumerate(self.dims) if d == axes] or self._axes_fail(axes)
            if len(res) > 1:  # the same Dim twice (e.g. a [d, d] weight): the axes of the highest match priority
                top = max(self.dims[i].match_priority for i in res)
                res = [i for i in res if self.dims[i].match_priority == top]
            return res
        if isinstance(axes, int):
            if not allow_int:
                raise ValueError("%s: int axis %r not allowed here" % (self.short_repr(), axes))
            if not -self.batch_ndim <= axes < self.batch_ndim:
                self._axes_fail(axes)
            return [axes % self.batch_ndim]
        if isinstance(axes, (list, tuple)):
            res = []
            for a in axes:
                for i in self.get_axes_from_description(a, allow_int=allow_int):
                    if i not in res:
                        res.append(i)
            return res
        if not isinstance(axes, str):
            raise TypeError("%s: invalid axis description %r" % (self.short_repr(), axes))
        a = axes.lower()
        b, t, f = self.batch_dim_axis, self.time_dim_axis, self.feature_dim_axis
        if a in ("b", "batch"):
            return [b] if b is not None else self._axes_fail(axes)
        if a in ("t", "time"):
            return [t] if t is not None else self._axes_fail(axes)
        if a == "t?":
            return [t] if t is not None else []
        if a in ("f", "feature"):
            return self.get_feature_batch_axes() or self._axes_fail(axes)
        if a == "non_spatial":  # the original's old meaning: all static non-batch axes (the feature axes of old)
            res = [i for i, d in enumerate(self.dims) if i != b and d.dimension is not None]
            return res or self.get_feature_batch_axes() or self._axes_fail(axes)
        if a == "spatial":
            return self.get_spatial_batch_axes()
        if a == "spatial_except_time":
            return [i for i in self.get_spatial_batch_axes() if i != t]
        if a in ("dyn", "dynamic"):
            return self.get_dynamic_axes()
        if a == "static":
            return [i for i, d in enumerate(self.dims) if d.dimension is not None]
        if a == "except_time":
            return [i for i in range(self.batch_ndim) if i not in (b, t)]
        if a == "except_batch":
            return [i for i in range(self.batch_ndim) if i != b]
        if a == "*":
            return list(range(self.batch_ndim))
        m = re.match(r"^(s|spatial|d|dyn|dynamic|static):(-?\d+)$", a)
        if m:
            kind, idx = m.group(1), int(m.group(2))
            cands = (self.get_spatial_batch_axes() if kind in ("s", "spatial") else
                     self.get_dynamic_axes() if kind in ("d", "dyn", "dynamic") else
                     [i for i, d in enumerate(self.dims) if d.dimension is not None and i != b])
            if not -len(cands) <= idx < len(cands):
                self._axes_fail(axes)
            return [cands[idx]]
        m = re.match(r"^dim:(\d+)$", a)
        if m:
            n = int(m.group(1))
            return [i for i, d in enumerate(self.dims) if d.dimension == n] or self._axes_fail(axes)
        if axes.startswith("stag:"):
            tag_name = axes[len("stag:"):]
            res = [i for i, d in enumerate(self.dims) if d.description == tag_name]
            if not res:
                res = [i for i, d in enumerate(self.dims) if d.description.endswith(":" + tag_name)
                       or d.description.startswith(tag_name + ":")]
            return res or self._axes_fail(axes)
        if a and all(c in "btf" for c in a):
            return self.get_axes_from_description(list(a), allow_int=allow_int)
        raise ValueError("%s: invalid axis description %r" % (self.short_repr(), axes))

    def _axes_fail(self, axes):
        raise ValueError("axis %r not found in %s" % (axes, self.short_repr()))

    def get_axis_from_description(self, axis, allow_int=True):
        axes = self.get_axes_from_description(axis, allow_int=allow_int)
        if len(axes) != 1:
            raise ValueError("axis %r matches %s in %s, expected exactly one axis" % (
                axis, "no axis" if not axes else "axes %s" % axes, self.short_repr()))
        return axes[0]

    def get_axis_by_tag_name(self, name):
        return self.get_axis_from_description("stag:%s" % name)

    # ---- copies ----
    def copy(self, name=None, placeholder=NotSpecified):
        data = _copy.copy(self)
        if name:
            data.name = name
        if placeholder is not NotSpecified:
            data.placeholder = placeholder
        return data

    def copy_template(self, name=None, dtype=None):
        data = self.copy(name=name, placeholder=None)
        if dtype is not None:
            data.dtype = tf.as_dtype(dtype).name
        return data

    def _with_dims(self, dims, placeholder=NotSpecified, perm=None, removed_axis=None, inserted_axis=None):
        """Copy with new dims; explicit time/feature axes follow the given axis change."""
        data = self.copy(placeholder=placeholder)
        data.dims = tuple(dims)
        for attr in ("_time_dim_axis", "_feature_dim_axis"):
            old = getattr(self, attr)
            if old is NotSpecified or old is None:
                continue
            if perm is not None:
                new = perm.index(old)
            elif removed_axis is not None:
                new = NotSpecified if old == removed_axis else (old - 1 if old > removed_axis else old)
            elif inserted_axis is not None:
                new = old + 1 if old >= inserted_axis else old
            else:
                new = old
            setattr(data, attr, new)
        return data

    def copy_transpose(self, perm):
        if perm and isinstance(perm[0], Dim):  # frontend: the dims in the new order
            if self.placeholder is not None and not isinstance(self.placeholder, (tf.Tensor, tf.Variable)):
                return self.copy_transpose_by_dims(perm)
            perm = self._perm_from_dims(perm)
        perm = list(perm)
        if perm == list(range(self.batch_ndim)):
            return self.copy()
        x = None if self.placeholder is None else tf.transpose(self.placeholder, perm)
        return self._with_dims([self.dims[p] for p in perm], placeholder=x, perm=perm)

    def copy_move_axis(self, old_axis, new_axis):
        n = self.batch_ndim
        old_axis, new_axis = old_axis % n, new_axis % n
        perm = list(range(n))
        perm.pop(old_axis)
        perm.insert(new_axis, old_axis)
        return self.copy_transpose(perm)

    def copy_with_batch_dim_axis(self, axis):
        return self.copy_move_axis(self.batch_dim_axis, axis)

    def copy_with_time_dim_axis(self, axis):
        return self.copy_move_axis(self.time_dim_axis, axis)

    def copy_as_batch_major(self):
        return self.copy_with_batch_dim_axis(0)

    def copy_as_time_major(self):
        return self.copy_with_time_dim_axis(0)

    def copy_as_time_batch_major(self):
        return self.copy_as_batch_major().copy_as_time_major()

    def copy_with_feature_dim_axis(self, axis):
        return self.copy_move_axis(self.feature_dim_axis, axis)

    def copy_with_feature_last(self):
        if self.feature_dim_axis is None:
            return self.copy()
        return self.copy_move_axis(self.feature_dim_axis, -1)

    def copy_as_batch_feature_major(self):
        data = self.copy_as_batch_major()
        return data.copy_with_feature_dim_axis(1) if data.feature_dim_axis is not None else data

    def copy_as_batch_spatial_major(self):
        """Batch first, then the dynamic axes, other spatial axes, feature last."""
        b, f = self.batch_dim_axis, self.feature_dim_axis
        rest = [i for i in range(self.batch_ndim) if i not in (b, f)]
        dyn = [i for i in rest if self.dims[i].is_dynamic() and self.dims[i].dyn_size is not None]
        perm = ([b] if b is not None else []) + dyn + [i for i in rest if i not in dyn] + ([f] if f is not None else [])
        data = self.copy_transpose(perm)
        if data._feature_dim_axis is not NotSpecified and data._feature_dim_axis == _default_feature_dim_axis(
                data.batch_shape, data.batch_dim_axis, data.time_dim_axis, data.sparse):
            data._feature_dim_axis = NotSpecified
        return data

    def get_placeholder_as_batch_major(self):
        return self.copy_as_batch_major().placeholder

    def get_placeholder_as_time_major(self):
        return self.copy_as_time_major().placeholder

    def copy_add_dim_by_tag(self, dim_tag, unbroadcast=False, axis=None, size=None):
        """Insert a new axis with this tag (size 1 unless unbroadcast, then tiled to its size)."""
        if axis is None:
            axis = self.get_default_new_axis_for_dim_tag(dim_tag)
        axis = axis % (self.batch_ndim + 1)
        dims = list(self.dims)
        dims.insert(axis, dim_tag)
        x = self.placeholder
        if x is not None:
            x = tf.expand_dims(x, axis)
            if unbroadcast and dim_tag.dimension != 1:
                if size is None:
                    size = dim_tag.dimension if dim_tag.dimension is not None else tf.reduce_max(dim_tag.dyn_size)
                multiples = [1] * len(dims)
                multiples[axis] = size
                x = tf.tile(x, multiples)
        if not unbroadcast and dim_tag.dimension != 1 and not dim_tag.is_batch_dim():
            dims[axis] = Dim(1, kind=dim_tag.kind, description="%s:broadcast" % dim_tag.description)
        data = self._with_dims(dims, placeholder=x, inserted_axis=axis)
        return data

    def get_default_new_axis_for_dim_tag(self, dim_tag):
        """Batch first, features after F, dynamic axes after the last dynamic axis, others after the last spatial
        axis (else before F, else at the end)."""
        if dim_tag.is_batch_dim():
            return 0
        f = self.feature_dim_axis
        if dim_tag.is_feature_dim() and not self.sparse:
            return self.batch_ndim if f is None else f + 1
        if dim_tag.dimension is None:
            dyn = self.get_dynamic_axes()
            if dyn:
                return dyn[-1] + 1
        spatial = self.get_spatial_batch_axes()
        if spatial:
            return spatial[-1] + 1
        return self.batch_ndim if f is None else f

    def copy_add_batch_dim(self, batch_dim_axis=0, batch_size=None):
        """Add a batch axis; with batch_size the placeholder is tiled to it."""
        if self.have_batch_axis():
            raise ValueError("%s already has a batch axis" % self.short_repr())
        return self.copy_add_dim_by_tag(batch_dim, unbroadcast=batch_size is not None, axis=batch_dim_axis,
                                        size=batch_size)

    def copy_add_spatial_dim(self, spatial_dim_axis=None, dim=1, auto_time_dim_axis=True):
        tag = Dim(dim, kind=Dim.Types.Spatial, description="%s:added-spatial" % self.name)
        if spatial_dim_axis is None:
            spatial_dim_axis = self.batch_ndim if self.feature_dim_axis is None else self.feature_dim_axis
        return self.copy_add_dim_by_tag(tag, unbroadcast=True, axis=spatial_dim_axis)

    def copy_add_feature_dim(self, axis=None):
        tag = Dim(1, kind=Dim.Types.Feature, description="%s:added-feature" % self.name)
        data = self.copy_add_dim_by_tag(tag, unbroadcast=True, axis=axis)
        data._feature_dim_axis = data.get_axis_by_tag(tag) if axis is not None else data.batch_ndim - 1
        return data

    def copy_squeeze_axes(self, axes):
        axes = sorted(a % self.batch_ndim for a in axes)
        data = self
        x = None if self.placeholder is None else (tf.squeeze(self.placeholder, axes) if axes else self.placeholder)
        for a in reversed(axes):
            data = data._with_dims(data.dims[:a] + data.dims[a + 1:], removed_axis=a)
        return data.copy(placeholder=x)

    def copy_template_excluding_axis(self, exclude_axis):
        a = exclude_axis % self.batch_ndim
        return self._with_dims(self.dims[:a] + self.dims[a + 1:], placeholder=None, removed_axis=a)

    def copy_template_excluding_time_dim(self):
        return self.copy_template_excluding_axis(self.time_dim_axis)

    def copy_template_excluding_spatial_dim(self, spatial_axis_num):
        return self.copy_template_excluding_axis(self.get_spatial_batch_axes()[spatial_axis_num])

    def copy_template_replace_dim_tag(self, axis, new_dim_tag, name=None):
        dims = list(self.dims)
        dims[axis % self.batch_ndim] = new_dim_tag
        data = self._with_dims(dims, placeholder=None)
        if name:
            data.name = name
        return data

    def copy_template_replace_dim(self, axis, new_dim, new_size=None):
        tag = Dim(new_dim, kind=self.dims[axis].kind, description="%s:replaced-%i" % (self.name, axis))
        if new_size is not None:
            tag.dyn_size = new_size
        return self.copy_template_replace_dim_tag(axis, tag)

    def copy_template_new_dim_tags(self, new_dim_tags, name=None, keep_special_axes=False):
        data = self.copy_template(name=name)
        data.dims = tuple(new_dim_tags)
        if not keep_special_axes:
            data._time_dim_axis = NotSpecified
            data._feature_dim_axis = NotSpecified
        return data

    def copy_template_adding_time_dim(self, time_dim_axis=0, time_dim=None, name=None):
        tag = time_dim or Dim(None, kind=Dim.Types.Spatial, description="%s:added-time" % self.name)
        dims = list(self.dims)
        dims.insert(time_dim_axis, tag)
        data = self._with_dims(dims, placeholder=None, inserted_axis=time_dim_axis)
        data._time_dim_axis = time_dim_axis
        if name:
            data.name = name
        return data

    def copy_template_unpack_batch(self):
        return self.copy_template()

    def copy_split_feature_dim(self, new_feature_dim):
        """[..., F] -> [..., F // n, n] with the new last axis as feature."""
        f = self.feature_dim_axis
        old = self.dims[f].dimension
        if old % new_feature_dim:
            raise ValueError("%s: feature dim %i not divisible by %i" % (self.short_repr(), old, new_feature_dim))
        d1 = Dim(old // new_feature_dim, kind=Dim.Types.Spatial, description="%s:split-f-1" % self.name)
        d2 = Dim(new_feature_dim, kind=Dim.Types.Feature, description="%s:split-f-2" % self.name)
        dims = list(self.dims[:f]) + [d1, d2] + list(self.dims[f + 1:])
        x = None
        if self.placeholder is not None:
            shape = [self.get_dim(i) for i in range(self.batch_ndim)]
            shape = shape[:f] + [old // new_feature_dim, new_feature_dim] + shape[f + 1:]
            x = tf.reshape(self.placeholder, shape)
        data = self._with_dims(dims, placeholder=x, inserted_axis=f + 1)
        data._feature_dim_axis = f + 1
        return data

    # ---- matching and broadcasting (the one place where axes of two tensors are paired) ----
    def find_matching_axes(self, other):
        """
        Pair own axes with axes of other: same tags first, then the feature axes (feature axes of equal size
        are the same axis, as in classic configs), then remaining static axes of equal size when the pairing
        is unambiguous. Dynamic axes match only by tag.
        :return: dict own axis -> other axis
        """
        mapping = {}
        used = set()
        for i, d in enumerate(self.dims):
            for j, e in enumerate(other.dims):
                if j not in used and d == e:
                    mapping[i] = j
                    used.add(j)
                    break
        fi, fj = self.feature_dim_axis, other.feature_dim_axis
        if fi is not None and fj is not None and fi not in mapping and fj not in used:
            if self.dims[fi].dimension == other.dims[fj].dimension:
                mapping[fi] = fj
                used.add(fj)
        by_size = {}
        for i, d in enumerate(self.dims):
            if i in mapping or d.dimension is None or d.dimension == 1:
                continue
            cands = [j for j, e in enumerate(other.dims) if j not in used and e.dimension == d.dimension]
            own_cands = [k for k, e in enumerate(self.dims) if k not in mapping and e.dimension == d.dimension]
            if len(cands) == 1 and len(own_cands) == 1:
                by_size[i] = cands[0]
        # pairs by size only must keep their relative order (else e.g. (2,3) and (3,2) would silently transpose)
        if all((i1 < i2) == (by_size[i1] < by_size[i2]) for i1 in by_size for i2 in by_size if i1 != i2):
            mapping.update(by_size)
        return mapping

    def copy_compatible_to(self, data, unbroadcast=False, check_sparse=True, check_dtype=True):
        """Transpose and expand self so that its placeholder broadcasts against data's layout."""
        mapping = self.find_matching_axes(data)
        extra = [i for i in range(self.batch_ndim) if i not in mapping and self.dims[i].dimension != 1]
        if extra:
            raise ValueError("%s is not compatible to %s: axes %s have no counterpart" % (
                self.short_repr(), data.short_repr(), [self.dims[i].short_repr() for i in extra]))
        src = self
        squeeze = [i for i in range(self.batch_ndim) if i not in mapping]
        if squeeze:  # size-1 axes without counterpart broadcast
            src = self.copy_squeeze_axes(squeeze)
            mapping = src.find_matching_axes(data)
        inv = {j: i for i, j in mapping.items()}
        order = [inv[j] for j in range(data.batch_ndim) if j in inv]
        src = src.copy_transpose(order)
        x = src.placeholder
        dims = []
        for j in range(data.batch_ndim):
            if j in inv:
                dims.append(data.dims[j])
            else:
                dims.append(data.dims[j] if unbroadcast or data.dims[j].dimension == 1 else Dim(
                    1, kind=data.dims[j].kind, description="%s:broadcast" % data.dims[j].description))
                if x is not None:
                    x = tf.expand_dims(x, j)
                    if unbroadcast and data.dims[j].dimension != 1:
                        multiples = [1] * (j + 1) + [1] * (x.shape.rank - j - 1)
                        multiples[j] = data.get_dim(j) if data.placeholder is not None else data.dims[j].get_dim_value()
                        x = tf.tile(x, multiples)
        res = data.copy_template(name=self.name)
        res.dims = tuple(dims)
        res.sparse_dim = self.sparse_dim
        res.dtype = self.dtype
        res.placeholder = x
        return res

    @staticmethod
    def get_common_data(sources, name=None):
        """Template that every source broadcasts to: the source with most axes, plus axes only others have."""
        sources = [s for s in sources if s is not None]
        if not sources:
            return None
        base = max(sources, key=lambda s: s.batch_ndim)
        common = base.copy_template(name=name)
        for s in sources:
            if s is base:
                continue
            mapping = s.find_matching_axes(common)
            fi, fj = s.feature_dim_axis, common.feature_dim_axis
            if (fi is not None and fj is not None and fi not in mapping and fj not in mapping.values()
                    and s.dims[fi].dimension not in (None, 1) and common.dims[fj].dimension not in (None, 1)):
                raise ValueError("feature axes do not match: %s vs %s (sources %s)" % (
                    s.dims[fi].short_repr(), common.dims[fj].short_repr(), ", ".join(x.short_repr() for x in sources)))
            if (fi is not None and fj is not None and fi not in mapping and fj not in mapping.values()
                    and (s.dims[fi].dimension == 1) != (common.dims[fj].dimension == 1)):
                # feature dims 1 and N: one feature axis, broadcast (as the original)
                if common.dims[fj].dimension == 1:
                    dims = list(common.dims)
                    dims[fj] = s.dims[fi]
                    common = common.copy_template_new_dim_tags(dims, keep_special_axes=True)
                mapping = dict(mapping)
                mapping[fi] = fj
            for i, d in enumerate(s.dims):
                if i not in mapping and d.dimension != 1:
                    common = common.copy_add_dim_by_tag(d, unbroadcast=True)
        common.placeholder = None
        return common

    # ---- search beams ----
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
            if b.src_beams is None:
                raise ValueError("beam %r has no src_beams (not chosen yet)" % b)
            idx = flat_beam_indices(b.src_beams, b.dependency.beam_size)
            if x is not None and self.have_batch_axis():
                x = tf.gather(x, idx, axis=self.batch_dim_axis)
        for d in self.dims:
            if d.is_dynamic() and d.dyn_size is not None and getattr(d, "beam_base", None) is None:
                raise NotImplementedError("%s: selecting the beam of a dynamic axis %s" % (self.short_repr(), d))
        data.beam = beam
        data.placeholder = x
        return data

    # ---- description ----
    def get_kwargs(self):
        kwargs = {"name": self.name, "dims": self.dims, "dtype": self.dtype}
        if self.sparse:
            kwargs["sparse_dim"] = self.sparse_dim
        if self._time_dim_axis is not NotSpecified:
            kwargs["time_dim_axis"] = self._time_dim_axis
        if self._feature_dim_axis is not NotSpecified:
            kwargs["feature_dim_axis"] = self._feature_dim_axis
        if self.beam is not None:
            kwargs["beam"] = self.beam
        return kwargs

    def short_repr(self):
        parts = []
        t, f = self.time_dim_axis, self.feature_dim_axis
        for i, d in enumerate(self.dims):
            s = d.short_repr()
            if i == t:
                s = "T|" + s
            elif i == f and not d.is_batch_dim():
                s = "F|" + s
            parts.append(s)
        extra = ", dtype=%s" % self.dtype if self.dtype != ("int32" if self.sparse else "float32") else ""
        if self.sparse:
            extra += ", sparse_dim=%s" % self.sparse_dim.short_repr()
        if getattr(self, "beam", None) is not None:
            extra += ", beam=%i" % self.beam.beam_size
        return "Data{%r, [%s]%s}" % (self.name, ",".join(parts), extra)

    get_description = short_repr

    def __repr__(self):
        return self.short_repr()


Tensor = Data


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


__all__ = ["Dim", "DimensionTag", "Data", "Tensor", "SpatialDim", "FeatureDim", "batch_dim", "SearchBeam", "single_step_dim",
           "as_list", "mask_value_for", "axes_of", "has_repeated_dim"]
