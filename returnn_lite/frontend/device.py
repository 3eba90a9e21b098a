"""
The default device of rf ops that create tensors with no input tensor to take the device from (``rf.zeros``,
``rf.full``, ``rf.range_over_dim``, ``rf.random``, initial states, params): ``None`` is the backend's default (the
CPU for torch). Ops on input tensors put their results (masks, ranges, constants) on the device of the inputs; the
sequence lengths may stay on the CPU (as the original's torch engine keeps them). The torch engine sets the default
device of a step with :func:`set_default_device_ctx`. The layers backend has no devices (the device is ignored).
"""

from __future__ import annotations

import contextlib

_default_device = [None]


def get_default_device():
    """The default device (a string like ``"cuda:0"``), or None (the backend's default)."""
    return _default_device[0]


def set_default_device(device):
    """Set the default device (a string, a ``torch.device`` or None)."""
    _default_device[0] = None if device is None else str(device)


@contextlib.contextmanager
def set_default_device_ctx(device):
    """Context manager: the default device is ``device`` inside (the previous one again after)."""
    prev = _default_device[0]
    set_default_device(device)
    try:
        yield
    finally:
        _default_device[0] = prev


def copy_to_device(x, device=None):
    """x on ``device`` (default: the default device; None there too: x as it is); non-Tensors as they are."""
    from ._backend import get_backend_for_tensor
    from ._utils import is_tensor

    if not is_tensor(x) or x.raw_tensor is None:
        return x
    if device is None:
        device = get_default_device()
    if device is None:
        return x
    copy = getattr(get_backend_for_tensor(x), "copy_to_device", None)  # (the layers backend has no devices)
    return x if copy is None else copy(x, device)
