"""The operators of a :class:`returnn_lite.tensor.Tensor`: rf functions of the selected frontend (``x + y`` is
``rf.combine(x, "add", y)``, ``x < 0`` ``rf.compare``); Tensor vs Tensor ``==`` stays identity."""

from __future__ import annotations

from .backend import frontend


class TensorOperators:
    """Mixin of Tensor (placeholder: its raw tensor; None for a template)."""

    placeholder = None

    def __add__(self, other):
        return frontend().combine(self, "add", other)

    def __radd__(self, other):
        return frontend().combine(other, "add", self)

    def __sub__(self, other):
        return frontend().combine(self, "sub", other)

    def __rsub__(self, other):
        return frontend().combine(other, "sub", self)

    def __mul__(self, other):
        return frontend().combine(self, "mul", other)

    def __rmul__(self, other):
        return frontend().combine(other, "mul", self)

    def __truediv__(self, other):
        return frontend().combine(self, "truediv", other)

    def __rtruediv__(self, other):
        return frontend().combine(other, "truediv", self)

    def __floordiv__(self, other):
        return frontend().combine(self, "floordiv", other)

    def __rfloordiv__(self, other):
        return frontend().combine(other, "floordiv", self)

    def __mod__(self, other):
        return frontend().combine(self, "mod", other)

    def __rmod__(self, other):
        return frontend().combine(other, "mod", self)

    def __pow__(self, other):
        return frontend().combine(self, "pow", other)

    def __rpow__(self, other):
        return frontend().combine(other, "pow", self)

    def __and__(self, other):
        return frontend().combine(self, "logical_and", other)

    def __rand__(self, other):
        return frontend().combine(other, "logical_and", self)

    def __or__(self, other):
        return frontend().combine(self, "logical_or", other)

    def __ror__(self, other):
        return frontend().combine(other, "logical_or", self)

    def __neg__(self):
        return frontend().neg(self)

    def __invert__(self):
        return frontend().logical_not(self)

    def __abs__(self):
        return frontend().abs(self)

    def __eq__(self, other):
        # ``x == 0`` compares elementwise (as the original); Tensor vs Tensor stays identity (Tensors sit in lists
        # and dicts of the compiler): use rf.compare(a, "==", b) there
        if isinstance(other, (bool, int, float)) and self.placeholder is not None:
            return frontend().compare(self, "equal", other)
        return self is other

    def __ne__(self, other):
        if isinstance(other, (bool, int, float)) and self.placeholder is not None:
            return frontend().compare(self, "not_equal", other)
        return self is not other

    __hash__ = object.__hash__

    def __lt__(self, other):
        return frontend().compare(self, "less", other)

    def __le__(self, other):
        return frontend().compare(self, "less_equal", other)

    def __gt__(self, other):
        return frontend().compare(self, "greater", other)

    def __ge__(self, other):
        return frontend().compare(self, "greater_equal", other)

