"""
The tensor types, pure Python (neither TensorFlow nor PyTorch is imported)::

    from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim, TensorDict

:class:`Dim` is one axis (batch, spatial, feature; static, or dynamic with per-sequence lengths ``dyn_size_ext``);
:class:`Tensor` is a tuple of Dims plus dtype, sparse dim and an optional raw tensor of some backend (a
``torch.Tensor``, a ``tf.Tensor``, a layer of the RETURNN-layers backend). Everything else (``batch_dim_axis``,
``time_dim_axis``, ``feature_dim_axis``, ``shape``, ``dim``, ``size_placeholder``) is derived from the dims, with the
explicit time/feature overrides that classic configs can set. Two axes are the same only if they are the same Dim or
were declared the same (``declare_same_as``), never because their sizes are equal.

Work on raw tensors (transposes, masks, the max of the lengths) goes through the backend of the raw tensor
(:mod:`returnn_lite.tensor.backend`); the operators of a Tensor are rf functions (:mod:`._tensor_ops`). The TF
compiler's :class:`returnn_lite.data.Data` is a subclass (placeholders, search beams, TF sequence masks).
"""

from __future__ import annotations

import copy as _copy
import re

from ..util import NotSpecified
from ._tensor_ops import TensorOperators
from .backend import backend_for_raw, frontend, raw_backend

_ARITH_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "ceildiv": "/^"}


def _undo_mul(kind, a, b):
    """``(n * d) // n`` / ``(d * n) // n`` -> d (e.g. rf.gating of a ``2 * d`` feature dim gives back d)."""
    if kind != "floordiv" or not isinstance(b, int) or isinstance(a, int):
        return None
    kind_a, operands = a.get_same_base().arith_of or (None, ())
    if kind_a != "mul":
        return None
    x, y = operands
    if isinstance(x, int) and x == b and not isinstance(y, int):
        return y
    if isinstance(y, int) and y == b and not isinstance(x, int):
        return x
    return None


def _apply_arith(kind, a, b):
    if kind in ("add", "sub") and isinstance(b, int) and b == 0:
        return a
    if kind == "add":
        return a + b
    if kind == "sub":
        return a - b
    if kind == "mul":
        return a * b
    if kind == "floordiv":
        return a // b
    if kind == "ceildiv":
        return -(-a // b)
    raise ValueError(kind)


def _align_size_raw(raw, dims, out_dims, dim):
    """Raw lengths with ``dims`` transposed/expanded to broadcast against ``out_dims`` (a superset of ``dims``)."""
    if isinstance(raw, int) or not dims or list(dims) == list(out_dims)[len(out_dims) - len(dims):]:
        return raw  # (the trailing dims in order: broadcasting does the rest)
    backend = raw_backend(raw, "lengths of the dim %r" % (dim,))
    perm = sorted(range(len(dims)), key=lambda i: list(out_dims).index(dims[i]))
    if perm != list(range(len(dims))):
        raw = backend.transpose_raw(raw, perm)
    present = [d for d in out_dims if d in dims]
    for axis, d in enumerate(out_dims):
        if d not in present:
            raw = backend.expand_dims_raw(raw, axis)
    return raw


def _raw_ndim(raw):
    try:
        return len(raw.shape)
    except (TypeError, ValueError):  # (unknown rank)
        return 1


class Dim:
    """
    One axis: batch, spatial (static or dynamic with per-sequence lengths) or feature.

    Fields: ``dimension`` (int or None), ``kind``, ``description``, ``same_as`` (the Dim this one was declared the
    same as), ``dyn_size_ext`` (the lengths as a Tensor, dims ``[batch]``), ``derived_from`` (``(op, (a, b))`` for
    dims of dim arithmetic like ``time + 2``: lengths computed from the operands'), ``match_priority`` (of two equal
    axes of one tensor, matmul/reduce/... take the one with the higher priority, see
    :func:`rf.dim_match_priority_when_needed`), ``auto_generated``. ``Dim(size_tensor, name=...)`` is a dynamic dim
    with these lengths.
    """

    class Types:
        Batch = "batch"
        Spatial = "spatial"
        Feature = "feature"
        Unspecified = None

    beam_base = None  # search (TF compiler): the Dim that this one repeats for each hypothesis of a beam

    def __init__(self, dimension=None, name=None, *, kind=Types.Unspecified, description=None, dyn_size=None,
                 auto_generated=False, match_priority=0, derived_from=None):
        if isinstance(dimension, str) and name is None:  # Dim("name") convenience
            dimension, name = None, dimension
        size_tensor = None
        if dimension is not None and not isinstance(dimension, (int, str)) and isinstance(dimension, Tensor):
            # Dim(size_tensor): a dynamic dim with these sizes (as the original)
            size_tensor, dimension = dimension, None
        if dimension is not None and not isinstance(dimension, int):
            raise TypeError("Dim dimension must be int, None or a Tensor of sizes, got %r" % (dimension,))
        self.dimension = dimension
        self.kind = kind
        self.description = description or name or ("dim%s" % ("" if dimension is None else ":%i" % dimension))
        self.auto_generated = auto_generated
        self.match_priority = match_priority
        self.same_as = None
        self.derived_from = derived_from
        self._dyn_size_ext = None  # the lengths as a Tensor (any backend; see dyn_size_ext)
        self._dyn_size = dyn_size  # the lengths as a raw tensor of the TF compiler (see dyn_size)
        self._derived_cache = None  # operation key -> Dim (get_derived)
        self.arith_of = None  # (kind, (a, b)) of a dim made by dim arithmetic, also static (see _undo_mul)
        self._derived_size_dims = None  # dims of the lengths complete_dyn_size computed (derived dims)
        if size_tensor is not None:
            self.dyn_size_ext = size_tensor

    def __copy__(self):
        return self  # a Dim is an identity: copies of a module or Tensor keep their dims (as the original)

    def __deepcopy__(self, memo=None):
        return self

    # ---- identity ----
    def get_same_base(self):
        d = self
        while d.same_as is not None:
            d = d.same_as
        return d

    def declare_same_as(self, other):
        """Declare self to be the same axis as other (sequence lengths are shared from then on)."""
        base, other_base = self.get_same_base(), other.get_same_base()
        if base is other_base:
            return
        if other_base._dyn_size is None and base._dyn_size is not None:
            other_base._dyn_size = base._dyn_size
        base.same_as = other_base

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, Dim):
            return False
        a, b = self, other  # (get_same_base inlined: dims are compared very often)
        while a.same_as is not None:
            a = a.same_as
        while b.same_as is not None:
            b = b.same_as
        return a is b

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        d = self
        while d.same_as is not None:
            d = d.same_as
        return id(d)

    def is_equal(self, other, **_kwargs):
        return self == other

    # ---- kind ----
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

    @property
    def capacity(self):
        return self.dimension

    # ---- sequence lengths ----
    @property
    def dyn_size_ext(self):
        """The sequence lengths as a Tensor (dims [batch] or []), or None (static dim / lengths not known yet)."""
        base = self.get_same_base()
        ext = base._dyn_size_ext
        if ext is not None:
            return ext
        if base.dimension is not None or base.is_batch_dim():
            return None
        size = base.complete_dyn_size()
        if size is None:
            return None
        dims = base._derived_size_dims
        if dims is None or len(dims) != _raw_ndim(size):
            dims = [] if _raw_ndim(size) == 0 else [batch_dim]
        return Tensor("%s:size" % base.description, dims=list(dims), dtype="int32", raw_tensor=size)

    @dyn_size_ext.setter
    def dyn_size_ext(self, value):
        base = self.get_same_base()
        base._dyn_size_ext = value
        if not base.is_batch_dim():
            raw = None if value is None else value.raw_tensor
            backend = backend_for_raw(raw) if raw is not None else None
            # (layers of a net dict are no values: the compiler gets the lengths when it builds that layer)
            base._dyn_size = None if backend is not None and backend.builds_net_dict else raw

    @property
    def dyn_size(self):
        """The sequence lengths as a raw tensor (the TF compiler's view), or None; computed for a derived dim."""
        base = self.get_same_base()
        if base.derived_from is not None:
            return base.complete_dyn_size()
        return base._dyn_size

    @dyn_size.setter
    def dyn_size(self, value):
        self.get_same_base()._dyn_size = value

    def reset_eager(self):
        """
        Forget the sequence lengths of this dim, e.g. before a new step or graph, and of the dims derived from it
        (``T - 1 + T'``, a conv's output dim, ...: their lengths follow this one's).
        """
        todo, seen = [self.get_same_base()], set()
        while todo:
            base = todo.pop().get_same_base()
            if id(base) in seen:
                continue
            seen.add(id(base))
            base._dyn_size_ext = None
            if base.dimension is None and not base.is_batch_dim():
                base._dyn_size = None
            todo.extend((base._derived_cache or {}).values())

    reset_raw = reset_eager

    def complete_dyn_size(self):
        """The raw lengths; for a derived dim (``T + 2``) computed from the operands' lengths."""
        base = self.get_same_base()
        if base.dimension is not None:
            return base._dyn_size
        if base._dyn_size is not None:
            backend = backend_for_raw(base._dyn_size)
            if backend is None or not backend.is_stale_raw(base._dyn_size):
                return base._dyn_size
            base._dyn_size = None  # lengths of a previous graph (e.g. the net was rebuilt)
        if base.derived_from is None:
            return None
        kind, operands = base.derived_from
        values = []
        for x in operands:
            if isinstance(x, int):
                values.append((x, ()))
            elif x.dimension is not None:
                values.append((x.dimension, ()))
            else:
                value = x._size_value()
                if value is None:
                    return None
                values.append(value)
        (raw_a, dims_a), (raw_b, dims_b) = values
        # lengths over different dims broadcast (e.g. [B] and [T] give [B, T], as the original's dim math)
        dims = list(dims_a) + [d for d in dims_b if d not in dims_a]
        raw_a, raw_b = _align_size_raw(raw_a, dims_a, dims, base), _align_size_raw(raw_b, dims_b, dims, base)
        base._dyn_size = _apply_arith(kind, raw_a, raw_b)
        base._derived_size_dims = tuple(dims)
        return base._dyn_size

    def lengths_dims(self):
        """The dims of the lengths as known without computing them (those of ``dyn_size_ext``; a derived dim's
        once computed), else []."""
        base = self.get_same_base()
        if base._dyn_size_ext is not None:
            return list(base._dyn_size_ext.dims)
        return list(base._derived_size_dims or ())

    def _size_value(self):
        """(raw lengths, their dims) of this dynamic dim, or None: the values (TF compiler) of lengths that the
        layers backend gave as a layer (``Dim(size_tensor)``) have the dims of that layer."""
        base = self.get_same_base()
        ext = base._dyn_size_ext
        if ext is not None and ext.raw_tensor is not None:
            backend = backend_for_raw(ext.raw_tensor)
            if backend is None or not backend.builds_net_dict:
                return ext.raw_tensor, tuple(ext.dims)
            raw = base.complete_dyn_size()
            return None if raw is None or _raw_ndim(raw) != len(ext.dims) else (raw, tuple(ext.dims))
        ext = self.dyn_size_ext
        if ext is None or ext.raw_tensor is None:
            return None
        return ext.raw_tensor, tuple(ext.dims)

    def get_dim_value(self, like=None, axis=None):
        """Static int, or a scalar raw tensor: the padded length (from the shape of the raw tensor ``like``)."""
        if self.dimension is not None:
            return self.dimension
        if like is not None:
            return raw_backend(like, "Dim.get_dim_value").get_dim_raw(like, axis)
        size = self.dyn_size
        if size is not None:
            return raw_backend(size, "Dim.get_dim_value").reduce_max_raw(size)
        raise ValueError("%r: no static size and no sequence lengths" % self)

    def get_mask(self, max_len):
        """Raw bool sequence mask [B, T] of the lengths, padded length max_len (by the lengths' backend)."""
        size = self.dyn_size
        return raw_backend(size, "Dim.get_mask").sequence_mask_raw(size, max_len)

    def get_dim_value_tensor(self):
        """Scalar Tensor: the static size, or the max over the sequence lengths (the padded length)."""
        return frontend().get_backend_for_dims().dim_value_tensor(self)

    def get_size_tensor(self, *, device=None):
        """Tensor of the sizes: [batch] lengths for a dynamic dim, a scalar for a static one (on ``device``)."""
        return frontend().get_backend_for_dims().dim_size_tensor(self, device=device)

    # ---- derived dims ----
    def get_derived(self, key, create):
        """
        The dim derived from this one by the operation ``key`` (e.g. ``("pad", 1, 2)``), created once by
        ``create()`` and cached on the base tag, so that two layers doing the same operation on the same axis
        give the same tag (as the original's dim math: ``T + 2`` is one tag).
        """
        base = self.get_same_base()
        if base._derived_cache is None:
            base._derived_cache = {}
        if key not in base._derived_cache:
            base._derived_cache[key] = create()
        return base._derived_cache[key]

    def copy(self, kind=None, description=None, same_as_self=True, match_priority=None):
        """A new Dim object; with same_as_self (default) equal to this one, e.g. with another match_priority."""
        d = Dim(self.dimension, kind=self.kind if kind is None else kind,
                description=description or self.description, auto_generated=self.auto_generated,
                match_priority=self.match_priority if match_priority is None else match_priority)
        if same_as_self:
            d.same_as = self.get_same_base()
        return d

    def _derive(self, kind, other, reverse=False):
        """The dim ``self <op> other`` (one Dim per operation and operands, static when all operands are)."""
        if not isinstance(other, (int, Dim)):
            return NotImplemented
        a, b = (other, self) if reverse else (self, other)
        if isinstance(a, int) and isinstance(b, int):
            return _apply_arith(kind, a, b)
        anchor = a if isinstance(a, Dim) else b

        simplified = _undo_mul(kind, a, b)
        if simplified is not None:
            return simplified

        def _key(x):
            return ("int", x) if isinstance(x, int) else ("dim", id(x.get_same_base()))

        def _name(x):
            return str(x) if isinstance(x, int) else x.description

        def _create():
            va, vb = (x if isinstance(x, int) else x.dimension for x in (a, b))
            static = None if va is None or vb is None else _apply_arith(kind, va, vb)
            d = Dim(static, kind=anchor.kind if not anchor.is_batch_dim() else Dim.Types.Spatial,
                    description="%s%s%s" % (_name(a), _ARITH_SYMBOLS[kind], _name(b)), auto_generated=True,
                    derived_from=(kind, (a, b)) if static is None else None)
            d.arith_of = (kind, (a, b))
            return d

        return anchor.get_derived(("arith", kind, _key(a), _key(b)), _create)

    def offset_parts(self):
        """
        ``(left, base, right)`` of a dim made only by adding ints on its sides (``2 + T + 2`` -> ``(2, T, 2)``, as
        the original's dim math keeps the sides apart), else ``(0, self, 0)``.
        """
        kind, operands = self.get_same_base().arith_of or (None, ())
        if kind == "add" and isinstance(operands[0], Dim) and isinstance(operands[1], int):
            left, base, right = operands[0].offset_parts()
            return left, base, right + operands[1]
        if kind == "add" and isinstance(operands[0], int) and isinstance(operands[1], Dim):
            left, base, right = operands[1].offset_parts()
            return left + operands[0], base, right
        return 0, self, 0

    def with_offsets(self, left, right):
        """``left + self + right`` (self for 0, 0), one Dim per operands: ``(2 + T) + 2`` padded then cut by a valid
        conv of size 5 is T again, as in the original."""
        d = self
        if left:
            d = left + d
        if right:
            d = d + right
        return d

    def __add__(self, other):
        return self._derive("add", other)

    def __radd__(self, other):
        return self._derive("add", other, reverse=True)

    def __sub__(self, other):
        return self._derive("sub", other)

    def __rsub__(self, other):
        return self._derive("sub", other, reverse=True)

    def __mul__(self, other):
        return self._derive("mul", other)

    def __rmul__(self, other):
        return self._derive("mul", other, reverse=True)

    def __floordiv__(self, other):
        return self._derive("floordiv", other)

    def div_left(self, other):
        return self._derive("floordiv", other)

    def ceildiv_right(self, other):
        return self._derive("ceildiv", other)

    def __truediv__(self, other):
        return self._derive("ceildiv", other)

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


def with_arith_operands(dims):
    """The dims and, recursively, the Dim operands of the dim arithmetic that made them (``(T - 1) + T'`` ->
    also T and T'): their lengths are computed from the operands' lengths."""
    res, todo = [], list(dims)
    while todo:
        d = todo.pop(0)
        if isinstance(d, int) or any(d is r for r in res):
            continue
        res.append(d)
        derived = d.get_same_base().derived_from
        todo.extend(derived[1] if derived else ())
    return res


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


_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "bool", "complex64", "complex128", "string"}
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "int": "int32", "long": "int64"}


def dtype_name(dtype):
    """The dtype name ("float32", ...) of a name or a dtype object of numpy/TF/torch."""
    if isinstance(dtype, str):
        if dtype in _DTYPES:
            return dtype
        name = dtype
    else:
        name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
        if not isinstance(name, str):
            name = str(dtype)
    name = _DTYPE_ALIASES.get(name, name[len("torch."):] if name.startswith("torch.") else name)
    if name not in _DTYPES:
        raise TypeError("unknown dtype %r (known: %s)" % (dtype, ", ".join(sorted(_DTYPES))))
    return name


_IGNORED_KWARGS = {"control_flow_ctx", "same_dim_tags_as", "batch", "version", "vocab"}


class Tensor(TensorOperators):
    """
    A tensor: dims (a tuple of :class:`Dim`), dtype, sparse dim, and an optional raw tensor (``raw_tensor``, also
    called ``placeholder``) of a backend. Without raw tensor it is a template (what a layer will output).
    """

    available_for_inference = True
    vocab = None
    placeholder = None
    _time_dim_axis = NotSpecified
    _feature_dim_axis = NotSpecified

    size_dtype = "int32"
    beam = None  # the SearchBeam the data is on (batch*beam entries), None without search

    def __init__(self, name, dims=None, dtype=None, *, shape=None, placeholder=None, sparse=None, dim=NotSpecified,
                 size_placeholder=None, batch_dim_axis=NotSpecified, time_dim_axis=NotSpecified,
                 feature_dim_axis=NotSpecified, available_for_inference=True, dim_tags=None,
                 sparse_dim=NotSpecified, raw_tensor=None, feature_dim=None, **kwargs):
        # (name, dims, dtype) positional as the original's Tensor (dims=[]: a scalar); the classic Data options
        # (shape, dim, batch_dim_axis, ...) by keyword
        if dims is None and shape and all(isinstance(d, Dim) for d in shape):
            dims, shape = shape, None  # (shape=[Dim, ...]: the dims)
        if dims is not None and (shape is not None or dim_tags is not None):
            raise TypeError("%s %r: dims and shape/dim_tags given both, got dims=%r, shape=%r" % (
                type(self).__name__, name, dims, shape))
        if raw_tensor is not None:  # frontend (rf) name of the placeholder
            placeholder = raw_tensor
        if feature_dim is not None and dims is not None and feature_dim_axis is NotSpecified:
            feature_dim_axis = list(dims).index(feature_dim)
        unknown = set(kwargs) - _IGNORED_KWARGS - {"beam"}
        if unknown:
            raise TypeError("%s %r: unknown option(s) %s" % (type(self).__name__, name, sorted(unknown)))
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
                    raise TypeError("%s %r: dims must be Dim objects (a classic shape goes as shape=), got %r" % (
                        type(self).__name__, name, d))
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
        self.dtype = dtype_name(dtype or ("int32" if sparse else "float32"))
        if not sparse and dim is not NotSpecified and dim is not None and dim_tags is None:
            if self.feature_dim_axis is None or self.batch_shape[self.feature_dim_axis] not in (None, dim):
                raise ValueError("%s %r: dim=%r does not match shape %r" % (type(self).__name__, name, dim, self.shape))
        if size_placeholder:
            for axis_wo_b, size in size_placeholder.items():
                self.dims[self.get_batch_axis(axis_wo_b)].dyn_size = size
        self.placeholder = placeholder
        self.beam = kwargs.get("beam")

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
            self.feature_dim_axis = None
            return
        if dim not in self.dims:
            raise ValueError("feature_dim %s is not a dim of %r" % (dim, self))
        self.feature_dim_axis = list(self.dims).index(dim)

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
        """Size of an axis: static int or scalar raw tensor from the raw tensor's shape."""
        d = self.dims[axis].dimension
        if d is not None:
            return d
        return raw_backend(self.placeholder, "%s.get_dim" % self.name).get_dim_raw(self.placeholder, axis)

    def get_batch_dim(self):
        """The batch size (from the raw tensor's shape)."""
        return self.get_dim(self.batch_dim_axis)

    def get_sequence_lengths(self):
        return self.dims[self.time_dim_axis].dyn_size

    def get_dynamic_size(self, axis):
        return self.dims[axis].dyn_size

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
            data.dtype = dtype_name(dtype)
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
        """Copy with the axes in the order perm (axis indices, or the dims in their new order)."""
        if perm and isinstance(perm[0], Dim):  # frontend: the dims in the new order
            perm = self._perm_from_dims(perm)
        perm = list(perm)
        if perm == list(range(self.batch_ndim)):
            return self.copy()
        x = self.placeholder
        if x is not None:
            backend = self._raw_backend
            if backend.builds_net_dict:  # (a layer: through the backend's transpose op)
                return backend.transpose(self, [self.dims[p] for p in perm])
            x = backend.transpose_raw(x, perm)
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
            backend = self._raw_backend
            x = backend.expand_dims_raw(x, axis)
            if unbroadcast and dim_tag.dimension != 1:
                if size is None:
                    size = dim_tag.get_dim_value()
                multiples = [1] * len(dims)
                multiples[axis] = size
                x = backend.tile_raw(x, multiples)
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
        x = self.placeholder
        if x is not None and axes:
            x = self._raw_backend.squeeze_raw(x, axes)
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
            x = self._raw_backend.reshape_raw(self.placeholder, shape)
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
        kept = {}  # data axis -> own dim: a size-1 axis of data takes a bigger own axis (the original's broadcast match)
        for i in list(extra):
            free = [j for j, e in enumerate(data.dims) if j not in mapping.values() and e.dimension == 1]
            pick = [j for j in free if i == self.feature_dim_axis and j == data.feature_dim_axis] or free
            if len(pick) == 1:
                mapping[i], kept[pick[0]] = pick[0], self.dims[i]
                extra.remove(i)
        if extra:
            raise ValueError("%s is not compatible to %s: axes %s have no counterpart" % (
                self.short_repr(), data.short_repr(), [self.dims[i].short_repr() for i in extra]))
        src = self
        squeeze = [i for i in range(self.batch_ndim) if i not in mapping]
        if squeeze:  # size-1 axes without counterpart broadcast
            src = self.copy_squeeze_axes(squeeze)
            mapping = {i - sum(k < i for k in squeeze): j for i, j in mapping.items()}
        inv = {j: i for i, j in mapping.items()}
        order = [inv[j] for j in range(data.batch_ndim) if j in inv]
        src = src.copy_transpose(order)
        x = src.placeholder
        backend = self._raw_backend if x is not None else None
        dims = []
        for j in range(data.batch_ndim):
            if j in inv:
                dims.append(kept.get(j, data.dims[j]))
            else:
                dims.append(data.dims[j] if unbroadcast or data.dims[j].dimension == 1 else Dim(
                    1, kind=data.dims[j].kind, description="%s:broadcast" % data.dims[j].description))
                if x is not None:
                    x = backend.expand_dims_raw(x, j)
                    if unbroadcast and data.dims[j].dimension != 1:
                        multiples = [1] * (j + 1) + [1] * (x.shape.rank - j - 1)
                        multiples[j] = data.get_dim(j) if data.placeholder is not None else data.dims[j].get_dim_value()
                        x = backend.tile_raw(x, multiples)
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
        return "%s{%r, [%s]%s}" % (type(self).__name__, self.name, ",".join(parts), extra)

    get_description = short_repr

    def __repr__(self):
        return self.short_repr()

    # ---- raw tensor and backend ----
    @property
    def raw_tensor(self):
        return self.placeholder

    @raw_tensor.setter
    def raw_tensor(self, value):
        self.placeholder = value

    @classmethod
    def from_raw(cls, name, dims, dtype, raw_tensor, sparse_dim=None):
        """A Tensor around a raw tensor, for backends: no checks (dims a tuple of Dims, dtype a dtype name)."""
        t = cls.__new__(cls)
        t.name, t.dims, t.dtype, t.sparse_dim, t.placeholder = name, dims, dtype, sparse_dim, raw_tensor
        return t

    @property
    def _raw_backend(self):
        """The backend of the raw tensor (else the selected rf backend)."""
        if self.placeholder is not None:
            backend = backend_for_raw(self.placeholder)
            if backend is not None:
                return backend
        return frontend().get_selected_backend()

    @property
    def device(self):
        """The device of the raw tensor (e.g. ``"cuda:0"``), None where there is none (templates, layers)."""
        if self.placeholder is None:
            return None
        backend = backend_for_raw(self.placeholder)
        return backend.get_device(self) if backend is not None else None

    @property
    def dims_set(self):
        return set(self.dims)

    def remaining_dims(self, remove=()):
        remove = [remove] if isinstance(remove, Dim) else list(remove)
        return [d for d in self.dims if d not in remove]

    def verify_out_shape(self, out_shape, allow_missing_implicit_dims=False):
        """Raise unless the dims of this tensor are exactly out_shape (as a set)."""
        if set(self.dims) != set(out_shape) or len(self.dims) != len(out_shape):
            raise ValueError("%s: dims %s do not match the expected shape %s" % (
                self.name, [d.short_repr() for d in self.dims], [d.short_repr() for d in out_shape]))

    def _perm_from_dims(self, perm):
        perm = list(perm)
        if perm and all(isinstance(p, Dim) for p in perm):
            if len(perm) != len(self.dims) or set(perm) != set(self.dims):
                raise ValueError("copy_transpose: %s is not a permutation of the dims %s of %s" % (
                    [d.short_repr() for d in perm], [d.short_repr() for d in self.dims], self.name))
            return axes_of(self.dims, perm)
        return perm

    def copy_transpose_by_dims(self, dims):
        return self.copy_transpose(list(dims))

    # ---- losses and outputs ----
    def mark_as_loss(self, name, *, scale=1.0, as_error=False, use_normalized_loss=False, use_flatten_frames=True,
                     custom_inv_norm_factor=None):
        """Registers this tensor as loss ``name`` in the current run ctx (see :func:`rf.get_run_ctx`)."""
        frontend().get_run_ctx().mark_as_loss(
            self, name, scale=scale, as_error=as_error, use_normalized_loss=use_normalized_loss,
            use_flatten_frames=use_flatten_frames, custom_inv_norm_factor=custom_inv_norm_factor)

    def mark_as_output(self, name, *, shape=None):
        """Registers this tensor as output ``name`` (with the dims in the order of ``shape`` if given)."""
        frontend().get_run_ctx().mark_as_output(self, name, dims=shape)

    def mark_as_default_output(self, *, shape=None):
        frontend().get_run_ctx().mark_as_default_output(self, shape=shape)


__all__ = ["Dim", "DimensionTag", "Tensor", "SpatialDim", "FeatureDim", "batch_dim", "single_step_dim", "axes_of",
           "has_repeated_dim", "dtype_name"]
