"""
rf loops, as the original's ``rf.while_loop`` / ``rf.scan`` / ``rf.Loop`` and ``rf.TensorArray``: checked here,
run by the backend (torch: an eager Python loop; layers backend: a ``rec`` layer, see
:mod:`returnn_lite.frontend_layers._loop`).
"""

from __future__ import annotations

from ..tensor import Dim, Tensor
from . import array_
from ._backend import get_selected_backend
from ._utils import error, is_tensor

__all__ = ["while_loop", "scan", "Loop", "TensorArray"]


def while_loop(cond, body, initial):  # noqa: A002
    """``while cond(s): s = body(s)``; returns the final s (any nested structure of Tensors, Dims, None)."""
    return get_selected_backend().while_loop(cond, body, initial)


def scan(*, spatial_dim=None, cond_dims=None, cond_before_body=True, initial=None, xs=None, ys=None, cond=None,
         body, max_seq_len=None, return_tensor_arrays=False):
    """
    Loop over ``spatial_dim``: ``body(xs_t, state) -> (ys_t, new_state)`` per frame (xs: tensors with spatial_dim,
    unstacked; ys: per-frame templates or None). Returns ``(ys, final_state, spatial_dim)``; the state of a sequence
    stays as it is after its length.

    Without spatial_dim (or with a new dynamic one): ``cond(None, state)`` (a bool Tensor with ``cond_dims``, e.g.
    [batch]) and ``body(None, state)``; a sequence runs while its cond is True (checked before each body call with
    cond_before_body, else after it: at least one call), at most ``max_seq_len`` (int or int Tensor) calls. Returns
    ys over a new dim whose lengths are the number of body calls per sequence, and per sequence its state after them.

    With ``return_tensor_arrays``, the ys are :class:`TensorArray` s over the frames (``ta.stack(axis=dim)``).
    """
    backend = get_selected_backend()
    if cond is None:
        if spatial_dim is None:
            raise error("scan", "needs spatial_dim (a loop over it) or cond and cond_dims (a loop while cond)")
        if max_seq_len is not None or cond_dims is not None:
            raise error("scan", "max_seq_len / cond_dims are only for a loop with cond (spatial_dim %s is given)" %
                        spatial_dim.short_repr())
        res = backend.scan(spatial_dim=spatial_dim, initial=initial, xs=xs, ys=ys, body=body)
    else:
        if cond_dims is None:
            raise error("scan", "with cond, cond_dims (the dims of cond's result, e.g. [batch_dim]) must be given")
        if xs is not None:
            raise error("scan", "with cond there is no spatial_dim to unstack xs over (xs must be None)")
        if max_seq_len is not None and not is_tensor(max_seq_len) and (
                not isinstance(max_seq_len, int) or isinstance(max_seq_len, bool) or max_seq_len < 0):
            raise error("scan", "max_seq_len must be an int >= 0 or an int Tensor, got %r" % (max_seq_len,))
        if spatial_dim is not None and spatial_dim.dimension is not None:
            raise error("scan", "with cond, spatial_dim must be a new dynamic dim (the loop sets its lengths), got "
                                "%s" % spatial_dim.short_repr())
        res = backend.scan(spatial_dim=spatial_dim, initial=initial, xs=None, ys=ys, body=body, cond=cond,
                           cond_dims=list(cond_dims), cond_before_body=bool(cond_before_body),
                           max_seq_len=max_seq_len)
    if not return_tensor_arrays:
        return res
    stacked, final_state, out_dim = res
    return _map_tensors(lambda y: TensorArray.unstack(y, axis=out_dim), stacked), final_state, out_dim


def _map_tensors(func, struct):
    if is_tensor(struct):
        return func(struct)
    if isinstance(struct, dict):
        return type(struct)({k: _map_tensors(func, v) for k, v in struct.items()})
    if isinstance(struct, (list, tuple)):
        return type(struct)(_map_tensors(func, v) for v in struct)
    return struct


def Loop(*, axis=None, max_seq_len=None):  # noqa: N802 (original's class name)
    """``loop = rf.Loop(axis=time_dim)``; ``loop.state.h = ...``; ``with loop: x_t = loop.unstack(x); ...;
    loop.state.h = new_h; y = loop.stack(y_t)`` (see the backend's loop)."""
    return get_selected_backend().loop(axis=axis, max_seq_len=max_seq_len)


class TensorArray:
    """
    The frames of one Tensor (dims of ``tensor_template``): pushed one by one (``ta = ta.push_back(frame)``), or the
    frames of a Tensor along an axis (``TensorArray.unstack(x, axis=time_dim)``). ``ta[i]`` is frame i (int or
    scalar int Tensor), ``ta.stack(axis=dim)`` all frames along dim.
    """

    def __init__(self, tensor_template):
        if not is_tensor(tensor_template):
            raise error("TensorArray", "expects a Tensor template, got %r" % (tensor_template,))
        self.tensor_template = tensor_template.copy_template()
        self._frames = []
        self._stacked = None  # (tensor, axis) of an unstacked tensor

    @classmethod
    def unstack(cls, tensor, *, axis):
        if axis not in tensor.dims:
            raise error("TensorArray.unstack", "axis %s not in %r" % (axis.short_repr(), tensor))
        ta = cls(Tensor(tensor.name, dims=[d for d in tensor.dims if d != axis], dtype=tensor.dtype,
                        sparse_dim=tensor.sparse_dim))
        ta._stacked = (tensor, axis)
        return ta

    def __len__(self):
        if self._stacked is not None:
            raise error("TensorArray", "the number of frames of an unstacked tensor is its axis %s, not a Python int"
                        % self._stacked[1].short_repr())
        return len(self._frames)

    def push_back(self, tensor):
        """-> a TensorArray with tensor appended (the frames of an unstacked tensor cannot be extended)."""
        if self._stacked is not None:
            raise error("TensorArray.push_back", "not supported on the frames of an unstacked tensor")
        if not is_tensor(tensor) or set(tensor.dims) != set(self.tensor_template.dims):
            raise error("TensorArray.push_back", "expects a Tensor with the dims of %r, got %r" % (
                self.tensor_template, tensor))
        res = TensorArray(self.tensor_template)
        res._frames = self._frames + [tensor]
        return res

    def __getitem__(self, index):
        if self._stacked is not None:
            tensor, axis = self._stacked
            return array_.gather(tensor, indices=index, axis=axis)
        if is_tensor(index):
            return array_.gather(self.stack(axis=Dim(len(self._frames), name="tensor_array")), indices=index)
        return self._frames[index]

    def stack(self, *, axis):
        """All frames along axis (a new dim, or the axis of an unstacked tensor)."""
        if self._stacked is not None:
            tensor, in_axis = self._stacked
            if axis == in_axis:
                return tensor
            out, _ = array_.replace_dim(tensor, in_dim=in_axis, out_dim=axis)
            return out
        if not self._frames:
            raise error("TensorArray.stack", "no frames (push_back some first)")
        if axis.dimension is not None:
            out, _ = array_.stack(self._frames, out_dim=axis)
            return out
        out, static = array_.stack(self._frames)
        out, _ = array_.replace_dim(out, in_dim=static, out_dim=axis)
        return out
