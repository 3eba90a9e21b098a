"""
Shared mechanics of the torch rf backend: dtypes, the rf Tensor around a torch tensor (:func:`_new`), aligning
operands by dim (:func:`_align`), padded lengths and sequence masks of dynamic dims (read to the host once per
lengths tensor). The op modules (:mod:`._backend`, :mod:`._shape`, :mod:`._conv`, :mod:`._recurrent`) use them.
"""

from __future__ import annotations

import weakref

import torch

from ...tensor import Tensor, batch_dim
from ...frontend.device import get_default_device
from ...frontend._utils import FrontendError, axes_of, call_site, dims_str, has_repeated_dim, is_tensor

_DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int32": torch.int32, "int64": torch.int64, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "complex64": torch.complex64,
}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}


def _dtype_name(raw):
    return _DTYPE_NAMES[raw.dtype]


_from_raw = Tensor.from_raw


def _new(name, dims, raw, sparse_dim=None, dtype=None):
    """An rf Tensor around a torch tensor (:meth:`Tensor.from_raw`: no checks, a few microseconds per rf op)."""
    return _from_raw(name, tuple(dims), dtype or _DTYPE_NAMES[raw.dtype], raw, sparse_dim)


def _align(t, out_dims):
    """t's raw tensor permuted/unsqueezed to broadcast against out_dims (which contain all of t's dims)."""
    dims = t.dims
    x = t.placeholder
    if dims is out_dims or (len(dims) == len(out_dims) and dims == tuple(out_dims)):
        return x
    own = list(dims)
    perm = []
    shape = []
    if has_repeated_dim(own):  # e.g. a [d, d] weight: its axes by match priority
        present = [d for d in out_dims if d in own]
        order = dict(zip([id(d) for d in present], axes_of(own, present)))
    else:
        order = None
    for d in out_dims:
        if d in own:
            i = own.index(d) if order is None else order[id(d)]
            perm.append(i)
            shape.append(x.shape[i])
        else:
            shape.append(1)
    if len(perm) != len(own):
        raise FrontendError("rf at %s: dims %s of %r are not all in %s" % (
            call_site(), dims_str(own), t.name, dims_str(out_dims)))
    if perm != list(range(len(perm))):
        x = x.permute(perm)
    if len(shape) != len(perm):
        x = x.reshape(shape)
    return x


def _operand(v, out_dims):
    if is_tensor(v):
        return _align(v, out_dims)
    return v


def _union_dims(values):
    """Output dims of a broadcasting op: the dims of the operand with most dims, then the others (as rf)."""
    tensors = [v for v in values if is_tensor(v)]
    if len(tensors) == 1 or (len(tensors) == 2 and tensors[0].dims == tensors[1].dims):
        return tensors[0].dims
    big = max(tensors, key=lambda t: len(t.dims))
    out = list(big.dims)
    for t in tensors:
        if t is big or t.dims == big.dims:
            continue
        for d in t.dims:
            if d not in out:
                out.append(d)
    return out


_LEN_STATS_CACHE = {}  # id(lengths tensor) -> (weakref to it, its version, (max, min)): one host read per lengths


def _len_stats(raw):
    """(max, min) of a lengths tensor, read to the host once per tensor (and in-place version): on a GPU each read
    is a device sync."""
    entry = _LEN_STATS_CACHE.get(id(raw))
    if entry is not None and entry[0]() is raw and entry[1] == raw._version:
        return entry[2]
    if raw.dim() == 0:
        stats = (int(raw),) * 2
    elif raw.numel():
        stats = tuple(torch.stack([raw.max(), raw.min()]).tolist())
    else:
        stats = (0, 0)
    if len(_LEN_STATS_CACHE) > 256:  # (drop the entries of freed tensors)
        for key in [k for k, (ref, _, _) in _LEN_STATS_CACHE.items() if ref() is None]:
            del _LEN_STATS_CACHE[key]
    _LEN_STATS_CACHE[id(raw)] = (weakref.ref(raw), raw._version, stats)
    return stats


def _dim_len(d):
    """Padded length of a dim (int): static size, batch size, or max over the sequence lengths (read once per
    lengths tensor: on a GPU, each read is a device sync)."""
    if d.dimension is not None:
        return d.dimension
    ext = d.dyn_size_ext
    if ext is None or ext.placeholder is None:
        raise FrontendError("rf at %s: dim %s has no size (torch backend: set dim.dyn_size_ext)" % (
            call_site(), d.short_repr()))
    raw = ext.placeholder
    if not isinstance(raw, torch.Tensor):
        return int(raw) if not hasattr(raw, "max") else int(raw.max())
    return _len_stats(raw)[0]


def _no_empty_seq(d):
    """Whether all sequence lengths of dynamic dim d are > 0 (then a softmax over d, masked with -inf, gives the
    padded frames exactly 0 and needs no mask on its output)."""
    raw = d.dyn_size_ext.placeholder if d.dyn_size_ext is not None else None
    if not isinstance(raw, torch.Tensor):
        return False
    if raw.device.type != "cpu":  # no host sync for this: only if the lengths were read already (padded length)
        entry = _LEN_STATS_CACHE.get(id(raw))
        return entry is not None and entry[0]() is raw and entry[1] == raw._version and entry[2][1] > 0
    return _len_stats(raw)[1] > 0


def _device(device=None):
    """The device for a tensor an rf op creates without inputs: the given one, else rf's default device."""
    return device if device is not None else get_default_device()


def _on(raw, device):
    """raw (e.g. sequence lengths, kept on the CPU) on device, without a host sync."""
    return raw if raw.device == device else raw.to(device, non_blocking=True)


def _sizes(d):
    """(raw lengths, their dims) of a dynamic dim."""
    ext = d.dyn_size_ext
    if ext is None or ext.placeholder is None:
        raise FrontendError("rf at %s: dynamic dim %s has no sequence lengths" % (call_site(), d.short_repr()))
    raw = ext.placeholder
    if not isinstance(raw, torch.Tensor):
        raw = torch.as_tensor(raw)
    dims = list(ext.dims) if raw.dim() == len(ext.dims) else ([batch_dim] if raw.dim() == 1 else [])
    return raw, dims


def _set_sizes(d, raw, dims=None):
    """Set the sequence lengths of a (new) dynamic dim."""
    if d.dimension is not None or d.is_batch_dim():
        return
    if dims is None:
        dims = [batch_dim] if raw.dim() == 1 else []
    d.dyn_size_ext = _new("%s:size" % d.description, dims, raw.to(torch.int32))


_MASK_CACHE = {}  # (id(lengths), version, padded length, device) -> (weakref to lengths, bool mask)


def _seq_mask(d, dims, x):
    """Bool mask (True within the lengths) of dynamic dim d, aligned to broadcast against x with ``dims``; built
    once per lengths tensor, padded length and device (the layers of a model share it)."""
    sizes, sdims = _sizes(d)
    n = x.shape[list(dims).index(d)]
    key = (id(sizes), sizes._version, n, x.device, torch.is_inference_mode_enabled())
    entry = _MASK_CACHE.get(key)
    if entry is not None and entry[0]() is sizes:
        mask = entry[1]
    else:
        mask = torch.arange(n, device=x.device) < _on(sizes, x.device).unsqueeze(-1)  # sdims + [d] (on x's device)
        if len(_MASK_CACHE) > 64:  # (drop the entries of freed lengths)
            for k in [k for k, (ref, _) in _MASK_CACHE.items() if ref() is None]:
                del _MASK_CACHE[k]
        _MASK_CACHE[key] = (weakref.ref(sizes), mask)
    m = _new("mask", [s for s in sdims] + [d], mask)
    if any(s not in dims for s in sdims):
        raise FrontendError("rf at %s: the lengths of %s depend on %s, which %s does not have" % (
            call_site(), d.short_repr(), dims_str(sdims), dims_str(dims)))
    return _align(m, dims)


def _is_dyn(d):
    return d.dimension is None and not d.is_batch_dim()


def _clip_gather_indices(indices, axis, padded_len):
    """Raw indices clipped into [0, size - 1]: per sequence where the axis is dynamic and the indices have the dims
    of its lengths (as the original), else into the padded length."""
    idx = indices.placeholder
    if _is_dyn(axis):
        sizes, sdims = _sizes(axis)
        if all(s in indices.dims for s in sdims):
            upper = _align(_new("size", sdims, _on(sizes, idx.device).to(idx.dtype)), indices.dims) - 1
            return torch.maximum(torch.minimum(idx, upper.clamp(min=0)), torch.zeros((), dtype=idx.dtype, device=idx.device))
    return idx.clamp(0, max(padded_len - 1, 0))


def _masked(x, dims, axes, value):
    for d in axes:
        if _is_dyn(d):
            x = torch.where(_seq_mask(d, dims, x), x, torch.tensor(value, dtype=x.dtype, device=x.device))
    return x


def _transposed(t, dims):
    """t's raw tensor with exactly these dims (same set) in this order."""
    if tuple(dims) == tuple(t.dims):
        return t.placeholder
    own = list(t.dims)
    if has_repeated_dim(own):
        return t.placeholder.permute(axes_of(own, dims))
    return t.placeholder.permute([own.index(d) for d in dims])



def _as_raw_operand(v, like):
    """A scalar or Tensor operand as something torch ops take (tensors for maximum/minimum)."""
    if isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=like.dtype, device=like.device)
