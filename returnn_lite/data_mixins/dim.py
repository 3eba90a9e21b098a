"""
Frontend methods of :class:`returnn_lite.data.Dim` (which inherits :class:`DimFrontendMixin`):
``dyn_size_ext``, ``reset_eager``, ``get_dim_value_tensor``, ``get_size_tensor`` and dim arithmetic
(``a + b``, ``1 + d + 2``, ``d * 2``, ``d // 2``, ``d.ceildiv_right(2)``).

A derived dim (``time + 2``) is one tag per operation and operands (cached on the base tag, as the original's dim
math), static when all operands are static; its sequence lengths are computed from the operands' lengths when
first needed (:meth:`DimFrontendMixin.complete_dyn_size`).
"""

from __future__ import annotations

import sys

_ARITH_KINDS = ("add", "sub", "mul", "floordiv", "ceildiv")
_frontend = [None]  # returnn_lite.frontend registers itself here (the compiler's data module does not import it)


def _rf():
    if _frontend[0] is None:
        raise RuntimeError("Dim: this needs the RETURNN frontend: import returnn_lite.frontend first")
    return _frontend[0]


def _data_mod(obj):
    """The module that defines the Dim/Data classes (returnn_lite.data), without importing it."""
    return sys.modules[type(obj).__module__]


def _static_value(x):
    if isinstance(x, int):
        return x
    return x.dimension


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


def _is_stale_graph(graph):
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover
        return False
    if tf.executing_eagerly() and not tf.compat.v1.get_default_graph().get_operations():
        return False
    current = tf.compat.v1.get_default_graph()
    while current is not None:  # a loop body / cond branch (function graph) sees the tensors of its outer graphs
        if graph is current:
            return False
        current = getattr(current, "outer_graph", None)
    return True


class DimFrontendMixin:
    """Mixed into :class:`returnn_lite.data.Dim`."""

    # ---- sequence lengths as a frontend Tensor ----
    @property
    def dyn_size_ext(self):
        """The sequence lengths as a Tensor (dims [batch] or []), or None (static dim / lengths not known yet)."""
        mod = _data_mod(self)
        base = self.get_same_base()
        ext = base.__dict__.get("_dyn_size_ext")
        if ext is not None:
            return ext
        if base.dimension is not None and not base.is_batch_dim():
            return None
        size = base.complete_dyn_size() if not base.is_batch_dim() else None
        if size is None:
            return None
        rank = getattr(getattr(size, "shape", None), "rank", None)
        dims = [] if rank == 0 else [mod.batch_dim]
        return mod.Data("%s:size" % base.description, dims=dims, dtype="int32", placeholder=size)

    @dyn_size_ext.setter
    def dyn_size_ext(self, value):
        base = self.get_same_base()
        base.__dict__["_dyn_size_ext"] = value
        if not base.is_batch_dim():
            raw = None if value is None else value.placeholder
            # (a layer of the layers backend: the compiler gets the lengths when it builds that layer)
            base._dyn_size = None if hasattr(raw, "get_abs_name") else raw

    def reset_eager(self):
        """
        Forget the sequence lengths of this dim, e.g. before a new step or graph (masks are cached per lengths), and
        of the dims derived from it (``T - 1 + T'``, a conv's output dim, ...: their lengths follow this one's).
        """
        todo, seen = [self.get_same_base()], set()
        while todo:
            base = todo.pop().get_same_base()
            if id(base) in seen:
                continue
            seen.add(id(base))
            base.__dict__.pop("_dyn_size_ext", None)
            if base.dimension is None and not base.is_batch_dim():
                base._dyn_size = None
            todo.extend(base.__dict__.get("_derived_cache", {}).values())

    reset_raw = reset_eager

    def complete_dyn_size(self):
        """The lengths tensor; for a derived dim (``T + 2``) computed from the operands' lengths."""
        base = self.get_same_base()
        if base.dimension is not None:
            return base._dyn_size
        if base._dyn_size is not None:
            graph = getattr(base._dyn_size, "graph", None)
            if graph is None or not _is_stale_graph(graph):
                return base._dyn_size
            base._dyn_size = None  # lengths of a previous graph (e.g. the net was rebuilt)
        derived = base.__dict__.get("_derived_from")
        if derived is None:
            return None
        kind, operands = derived
        values = []
        for x in operands:
            if isinstance(x, int):
                values.append(x)
            elif x.dimension is not None:
                values.append(x.dimension)
            else:
                v = x.complete_dyn_size()
                if v is None:
                    return None
                values.append(v)
        base._dyn_size = _apply_arith(kind, values[0], values[1])
        return base._dyn_size

    # ---- size tensors ----
    def get_dim_value_tensor(self):
        """Scalar Tensor: the static size, or the max over the sequence lengths (the padded length)."""
        return _rf().get_backend_for_dims().dim_value_tensor(self)

    def get_size_tensor(self, *, device=None):
        """Tensor of the sizes: [batch] lengths for a dynamic dim, a scalar for a static one (on ``device``)."""
        return _rf().get_backend_for_dims().dim_size_tensor(self, device=device)

    @property
    def capacity(self):
        return self.dimension

    # ---- dim arithmetic ----
    def _derive(self, kind, other, reverse=False):  # noqa: C901
        Dim = _data_mod(self).Dim  # noqa: N806

        if not isinstance(other, (int, Dim)):
            return NotImplemented
        a, b = (other, self) if reverse else (self, other)
        if isinstance(a, int) and isinstance(b, int):
            return _apply_arith(kind, a, b)
        anchor = a if isinstance(a, Dim) else b

        def _key(x):
            return ("int", x) if isinstance(x, int) else ("dim", id(x.get_same_base()))

        simplified = _undo_mul(kind, a, b)
        if simplified is not None:
            return simplified
        key = ("arith", kind, _key(a), _key(b))

        def _create():
            va, vb = _static_value(a), _static_value(b)
            static = None if va is None or vb is None else _apply_arith(kind, va, vb)
            sym = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "ceildiv": "/^"}[kind]

            def _n(x):
                return str(x) if isinstance(x, int) else x.description

            d = Dim(static, kind=anchor.kind if not anchor.is_batch_dim() else Dim.Types.Spatial,
                    description="%s%s%s" % (_n(a), sym, _n(b)), auto_generated=True)
            if static is None:
                d.__dict__["_derived_from"] = (kind, (a, b))
            d.__dict__["_arith_of"] = (kind, (a, b))  # for _undo_mul: (2 * d) // 2 is d, as the original
            return d

        return anchor.get_derived(key, _create)

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


def _undo_mul(kind, a, b):
    """``(n * d).div_left(n)`` / ``(d * n) // n`` -> d (e.g. rf.gating of a ``2 * d`` feature dim gives back d)."""
    if kind != "floordiv" or not isinstance(b, int) or isinstance(a, int):
        return None
    kind_a, operands = a.__dict__.get("_arith_of") or (None, ())
    if kind_a != "mul":
        return None
    x, y = operands
    if isinstance(x, int) and x == b and not isinstance(y, int):
        return y
    if isinstance(y, int) and y == b and not isinstance(x, int):
        return x
    return None
