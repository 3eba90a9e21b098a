"""rf gradient utilities: :func:`scaled_gradient` (gradient reversal with a negative scale),
:func:`scaled_gradient_ext` (scale and shift the gradient, e.g. label smoothing of log-prob gradients),
:func:`gradient`, :func:`set_requires_gradient` and :func:`gradient_checkpoint_scope`."""

from __future__ import annotations

import contextlib

from ._backend import get_backend_for_tensor
from ._utils import check_dims_in, error, is_tensor

__all__ = ["set_requires_gradient", "gradient", "stop_gradient_scope", "scaled_gradient", "scaled_gradient_ext",
           "gradient_checkpoint_scope"]


def _method(tensor, name):
    backend = get_backend_for_tensor(tensor)
    method = getattr(backend, name, None)
    if method is None:
        raise error(name, "not implemented by the %s backend" % backend.name)
    return method


def set_requires_gradient(source):
    """Makes source (a leaf) require gradients (in place)."""
    return _method(source, "set_requires_gradient")(source)


def gradient(y, x):
    """The gradient of the scalar y with respect to x (same dims as x)."""
    if y.dims:
        raise error("gradient", "y must be a scalar, got dims %s" % (y.dims,))
    return _method(y, "gradient")(y, x)


def stop_gradient_scope():
    """Context manager: tensors computed inside have no gradient to their inputs (torch: no_grad)."""
    from ._backend import get_selected_backend

    backend = get_selected_backend()
    method = getattr(backend, "stop_gradient_scope", None)
    if method is None:
        raise error("stop_gradient_scope", "not supported by the %s backend (use rf.stop_gradient on the values)" %
                    backend.name)
    return method()


def scaled_gradient(source, scale):
    """Identity forward; the gradient times scale in backprop (a constant 0 stops it, -1 reverses it)."""
    if not is_tensor(scale) and scale == 0.0:
        return get_backend_for_tensor(source).stop_gradient(source)
    if is_tensor(scale):
        check_dims_in("scaled_gradient", source, scale.dims, what="scale dims")
    return _method(source, "scaled_gradient")(source, scale)


def scaled_gradient_ext(source, *, scale=1.0, shift=None, scale_shift_by_sum_over_axis=None):
    """Identity forward; in backprop ``grad * scale + shift`` where with ``scale_shift_by_sum_over_axis`` the shift is
    multiplied by the sum of ``|grad|`` over that axis."""
    if scale_shift_by_sum_over_axis is not None:
        check_dims_in("scaled_gradient_ext", source, [scale_shift_by_sum_over_axis])
    if shift is None and not is_tensor(scale) and scale == 0.0:
        return get_backend_for_tensor(source).stop_gradient(source)
    return _method(source, "scaled_gradient_ext")(
        source, scale=scale, shift=shift, scale_shift_by_sum_over_axis=scale_shift_by_sum_over_axis)


@contextlib.contextmanager
def gradient_checkpoint_scope():
    """The original recomputes the tensors created in this scope in backprop instead of storing them (memory only):
    here they are stored as usual; values and gradients are the same."""
    yield
