"""
Frontend methods of :class:`returnn_lite.data.Data` (= ``Tensor``, which inherits :class:`TensorFrontendMixin`):
``raw_tensor``, operator overloads (dispatching to ``rf``), ``mark_as_loss`` / ``mark_as_output``,
``copy_transpose`` by dims, ``dims_set``, ``remaining_dims``, ``verify_out_shape``.
"""

from __future__ import annotations


from .dim import _data_mod, _rf


class TensorFrontendMixin:
    """Mixed into :class:`returnn_lite.data.Data`."""

    # ---- raw tensor (a tf.Tensor, a layer of the layers backend, a torch.Tensor, ...) ----
    @property
    def raw_tensor(self):
        return self.placeholder

    @raw_tensor.setter
    def raw_tensor(self, value):
        self.placeholder = value

    @property
    def _raw_backend(self):
        return _rf().get_backend_for_tensor(self)

    @property
    def dims_set(self):
        return set(self.dims)

    @property
    def device(self):
        return None

    def remaining_dims(self, remove=()):
        Dim = _data_mod(self).Dim  # noqa: N806
        remove = [remove] if isinstance(remove, Dim) else list(remove)
        return [d for d in self.dims if d not in remove]

    def verify_out_shape(self, out_shape, allow_missing_implicit_dims=False):
        """Raise unless the dims of this tensor are exactly out_shape (as a set)."""
        if set(self.dims) != set(out_shape) or len(self.dims) != len(out_shape):
            raise ValueError("%s: dims %s do not match the expected shape %s" % (
                self.name, [d.short_repr() for d in self.dims], [d.short_repr() for d in out_shape]))

    def _perm_from_dims(self, perm):
        Dim = _data_mod(self).Dim  # noqa: N806
        perm = list(perm)
        if perm and all(isinstance(p, Dim) for p in perm):
            if len(perm) != len(self.dims) or set(perm) != set(self.dims):
                raise ValueError("copy_transpose: %s is not a permutation of the dims %s of %s" % (
                    [d.short_repr() for d in perm], [d.short_repr() for d in self.dims], self.name))
            return _data_mod(self).axes_of(self.dims, perm)
        return perm

    def copy_transpose_by_dims(self, dims):
        """Copy with the dims in this order (through the backend for non-TF raw tensors)."""
        rf = _rf()
        dims = list(dims)
        if list(self.dims) == dims:
            return self.copy()
        return rf.get_backend_for_tensor(self).transpose(self, dims)

    # ---- losses and outputs ----
    def mark_as_loss(self, name, *, scale=1.0, as_error=False, use_normalized_loss=False, use_flatten_frames=True,
                     custom_inv_norm_factor=None):
        """Registers this tensor as loss ``name`` in the current run ctx (see :func:`rf.get_run_ctx`)."""
        _rf().get_run_ctx().mark_as_loss(
            self, name, scale=scale, as_error=as_error, use_normalized_loss=use_normalized_loss,
            use_flatten_frames=use_flatten_frames, custom_inv_norm_factor=custom_inv_norm_factor)

    def mark_as_output(self, name, *, shape=None):
        """Registers this tensor as output ``name`` (with the dims in the order of ``shape`` if given)."""
        _rf().get_run_ctx().mark_as_output(self, name, dims=shape)

    def mark_as_default_output(self, *, shape=None):
        _rf().get_run_ctx().mark_as_default_output(self, shape=shape)

    # ---- operators ----
    def __add__(self, other):
        return _rf().combine(self, "add", other)

    def __radd__(self, other):
        return _rf().combine(other, "add", self)

    def __sub__(self, other):
        return _rf().combine(self, "sub", other)

    def __rsub__(self, other):
        return _rf().combine(other, "sub", self)

    def __mul__(self, other):
        return _rf().combine(self, "mul", other)

    def __rmul__(self, other):
        return _rf().combine(other, "mul", self)

    def __truediv__(self, other):
        return _rf().combine(self, "truediv", other)

    def __rtruediv__(self, other):
        return _rf().combine(other, "truediv", self)

    def __floordiv__(self, other):
        return _rf().combine(self, "floordiv", other)

    def __rfloordiv__(self, other):
        return _rf().combine(other, "floordiv", self)

    def __mod__(self, other):
        return _rf().combine(self, "mod", other)

    def __rmod__(self, other):
        return _rf().combine(other, "mod", self)

    def __pow__(self, other):
        return _rf().combine(self, "pow", other)

    def __rpow__(self, other):
        return _rf().combine(other, "pow", self)

    def __and__(self, other):
        return _rf().combine(self, "logical_and", other)

    def __rand__(self, other):
        return _rf().combine(other, "logical_and", self)

    def __or__(self, other):
        return _rf().combine(self, "logical_or", other)

    def __ror__(self, other):
        return _rf().combine(other, "logical_or", self)

    def __neg__(self):
        return _rf().neg(self)

    def __invert__(self):
        return _rf().logical_not(self)

    def __abs__(self):
        return _rf().abs(self)

    def __eq__(self, other):
        # ``x == 0`` compares elementwise (as the original); Tensor vs Tensor stays identity (Tensors sit in lists
        # and dicts of the compiler): use rf.compare(a, "==", b) there
        if isinstance(other, (bool, int, float)) and self.placeholder is not None:
            return _rf().compare(self, "equal", other)
        return self is other

    def __ne__(self, other):
        if isinstance(other, (bool, int, float)) and self.placeholder is not None:
            return _rf().compare(self, "not_equal", other)
        return self is not other

    __hash__ = object.__hash__

    def __lt__(self, other):
        return _rf().compare(self, "less", other)

    def __le__(self, other):
        return _rf().compare(self, "less_equal", other)

    def __gt__(self, other):
        return _rf().compare(self, "greater", other)

    def __ge__(self, other):
        return _rf().compare(self, "greater_equal", other)
