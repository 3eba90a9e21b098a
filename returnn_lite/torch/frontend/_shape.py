"""rf array ops of the torch backend: concat, pad, gather, slice, split, merge/split dims, reshape, cum_concat."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...tensor import Dim
from ...frontend._utils import concat_out_dims, is_tensor
from ._common import _align, _clip_gather_indices, _dim_len, _is_dyn, _new, _on, _set_sizes, _sizes, _transposed


def concat(*sources, allow_broadcast=False, out_dim):
    dims = concat_out_dims(sources, out_dim)
    if any(_is_dyn(a) for _, a in sources) and all(
            d in dims for _, a in sources if _is_dyn(a) for d in _sizes(a)[1]):
        return _concat_dynamic(sources, dims, out_dim, allow_broadcast)
    oidx = dims.index(out_dim)
    shape = [_dim_len(d) if d != out_dim else -1 for d in dims]
    parts = []
    for x, a in sources:
        part_dims = [a if d == out_dim else d for d in dims]
        p = _align(x, part_dims)
        if allow_broadcast and len(x.dims) < len(dims):
            s = list(shape)
            s[oidx] = a.dimension
            p = p.expand(s)
        parts.append(p)
    return _new("concat", dims, torch.cat(parts, dim=oidx), sparse_dim=sources[0][0].sparse_dim)

def pad(source, *, axes, padding, out_dims, handle_dynamic_dims, mode="constant", value=None):
    if is_tensor(value):
        value = value.placeholder.item()
    value = 0 if value is None else value
    dims = list(source.dims)
    x = source.placeholder
    pads = [0, 0] * len(dims)
    for a, (left, right) in zip(axes, padding):
        i = dims.index(a)
        j = len(dims) - 1 - i
        pads[2 * j], pads[2 * j + 1] = left, right
    new_dims = list(dims)
    for a, o in zip(axes, out_dims):
        new_dims[dims.index(a)] = o
    if mode == "constant":
        y = F.pad(x, pads, mode="constant", value=value)
    else:
        y = _pad_nonconst(x, dims, axes, padding, mode)
    for a, (left, right), o in zip(axes, padding, out_dims):
        if not _is_dyn(a):
            continue
        sizes, sdims = _sizes(a)
        if o is not a and o != a:
            _set_sizes(o, sizes + (left + right), sdims)
        if handle_dynamic_dims and right and mode == "constant":
            i = dims.index(a)
            pos = torch.arange(y.shape[i], device=y.device)
            after = pos >= (_on(sizes, y.device) + left).unsqueeze(-1)  # sdims + [o]
            m = _align(_new("m", list(sdims) + [new_dims[i]], after), new_dims)
            y = torch.where(m, torch.tensor(value, dtype=y.dtype, device=y.device), y)
    return _new("pad", new_dims, y, sparse_dim=source.sparse_dim)

def gather(source, *, indices, axis, clip_to_valid=False):
    dims = list(source.dims)
    x = source.placeholder
    ai = dims.index(axis)
    if isinstance(indices, int):
        if clip_to_valid:  # static axis (rf.gather refuses a dynamic one): no wrap-around of negative indices
            indices = min(max(indices, 0), x.shape[ai] - 1)
        return _new("gather", [d for d in dims if d != axis], x.select(ai, indices), sparse_dim=source.sparse_dim)
    idx = indices.placeholder
    if clip_to_valid:
        idx = _clip_gather_indices(indices, axis, x.shape[ai])
    if idx.dtype not in (torch.int64, torch.int32):
        idx = idx.long()
    if idx is not indices.placeholder:
        indices = _new(indices.name, indices.dims, idx, sparse_dim=indices.sparse_dim)
    common = [d for d in indices.dims if d in dims and d != axis]
    if not common:
        # out dims: source dims with axis replaced by the index dims
        out = dims[:ai] + list(indices.dims) + dims[ai + 1:]
        if ai == 0:
            y = x[idx]
        else:
            y = x.movedim(ai, 0)[idx]  # idx dims + other source dims
            rest = dims[:ai] + dims[ai + 1:]
            return _new("gather", out, _transposed(_new("g", list(indices.dims) + rest, y), out),
                        sparse_dim=source.sparse_dim)
        return _new("gather", out, y, sparse_dim=source.sparse_dim)
    src_rest = [d for d in dims if d not in common and d != axis]
    idx_rest = [d for d in indices.dims if d not in common]
    p = _transposed(source, common + [axis] + src_rest)  # [C..., A, R...]
    i = _transposed(indices, common + idx_rest)  # [C..., I...]
    cs = list(p.shape[:len(common)])
    nc = 1
    for s in cs:
        nc *= s
    p = p.reshape([nc, p.shape[len(common)], -1])  # [C, A, R]
    i_flat = i.reshape([nc, -1])  # [C, I]
    y = p[torch.arange(nc, device=p.device).unsqueeze(-1), i_flat]  # [C, I, R]
    y = y.reshape(cs + list(i.shape[len(common):]) + list(x.shape[d] for d in [dims.index(r) for r in src_rest]))
    out = []
    for d in dims:
        out.extend(idx_rest if d == axis else [d])
    return _new("gather", out, _transposed(_new("g", common + idx_rest + src_rest, y), out),
                sparse_dim=source.sparse_dim)

def slice_(source, *, axis, start=None, end=None, step=None, size=None, out_dim):
    dims = list(source.dims)
    if is_tensor(start):  # a scalar Tensor start (eager): its value
        start = int(start.placeholder)
    if isinstance(size, Dim):  # [start:start + size] with a (maybe dynamic) size Dim
        end = (start or 0) + _dim_len(size)
    sl = [slice(None)] * len(dims)
    sl[dims.index(axis)] = slice(start, end, step)
    return _new("slice", [out_dim if d == axis else d for d in dims], source.placeholder[tuple(sl)],
                sparse_dim=source.sparse_dim)

def split(source, *, axis, out_dims):
    dims = list(source.dims)
    i = dims.index(axis)
    parts = torch.split(source.placeholder, [d.dimension for d in out_dims], dim=i)
    return [_new("split", dims[:i] + [o] + dims[i + 1:], p, sparse_dim=source.sparse_dim)
            for p, o in zip(parts, out_dims)]

def split_dims(source, *, axis, dims, pad_to_multiples=None, pad_value=None):
    sdims = list(source.dims)
    i = sdims.index(axis)
    x = source.placeholder
    new_shape = list(x.shape[:i]) + [(-1 if d.dimension is None else d.dimension) for d in dims] + \
        list(x.shape[i + 1:])
    others = 1
    for d in dims:
        if d.dimension is not None:
            others *= d.dimension
    for d in dims:
        if _is_dyn(d) and _is_dyn(axis):
            sizes, szd = _sizes(axis)
            _set_sizes(d, torch.div(sizes + (others - 1), others, rounding_mode="floor"), szd)
    if pad_to_multiples is None:
        pad_to_multiples = _is_dyn(axis)  # as the original: by default for a dynamic axis
    rem = x.shape[i] % others
    if pad_to_multiples and rem:  # pad the padded end up to a multiple of the static dims
        pads = [0, 0] * (x.dim() - 1 - i) + [0, others - rem]
        x = F.pad(x, pads, value=0 if pad_value is None else pad_value)
    return _new("split_dims", sdims[:i] + list(dims) + sdims[i + 1:], x.reshape(new_shape),
                sparse_dim=source.sparse_dim)

def merge_dims(source, *, dims, out_dim=None):
    sdims = list(source.dims)
    rest = [d for d in sdims if d not in dims]
    first = sdims.index(dims[0])
    # keep the merged dim at the position of the first merged dim if the merged dims are consecutive
    pos = [sdims.index(d) for d in dims]
    if pos == list(range(first, first + len(dims))):
        x = source.placeholder
        y = x.reshape(list(x.shape[:first]) + [-1] + list(x.shape[first + len(dims):]))
        out = sdims[:first] + [out_dim] + sdims[first + len(dims):]
    else:
        x = _transposed(source, rest + list(dims))
        y = x.reshape(list(x.shape[:len(rest)]) + [-1])
        out = rest + [out_dim]
    if _is_dyn(out_dim) and any(_is_dyn(d) for d in dims) and out_dim.dyn_size_ext is None:
        size = None
        for d in dims:
            s = _sizes(d)[0] if _is_dyn(d) else _dim_len(d)
            size = s if size is None else size * s
        _set_sizes(out_dim, torch.as_tensor(size))
    return _new("merge_dims", out, y, sparse_dim=source.sparse_dim)

def reshape(source, in_dims, out_dims):
    rest = [d for d in source.dims if d not in in_dims]
    x = _transposed(source, rest + list(in_dims))
    y = x.reshape(list(x.shape[:len(rest)]) + [_dim_len(d) for d in out_dims])
    return _new("reshape", rest + list(out_dims), y, sparse_dim=source.sparse_dim)

def expand_dim(source, dim):
    x = source.placeholder.unsqueeze(-1)
    shape = list(x.shape)
    shape[-1] = _dim_len(dim)
    return _new("expand_dim", list(source.dims) + [dim], x.expand(shape), sparse_dim=source.sparse_dim)

def squeeze(source, axis):
    dims = list(source.dims)
    return _new("squeeze", [d for d in dims if d != axis], source.placeholder.squeeze(dims.index(axis)),
                sparse_dim=source.sparse_dim)

def replace_dim(source, *, in_dim, out_dim):
    if _is_dyn(out_dim) and _is_dyn(in_dim) and out_dim != in_dim and out_dim.dyn_size_ext is None:
        sizes, sdims = _sizes(in_dim)  # (an out_dim with sizes of its own, e.g. Dim(size_tensor), keeps them)
        _set_sizes(out_dim, sizes, sdims)
    return _new(source.name, [out_dim if d == in_dim else d for d in source.dims], source.placeholder,
                sparse_dim=source.sparse_dim)

def cum_concat_step(source, *, prev_accum, axis, out_spatial_dim):
    x = _align(source, [d for d in prev_accum.dims if d != axis])
    dims = list(prev_accum.dims)
    i = dims.index(axis)
    y = torch.cat([prev_accum.placeholder, x.unsqueeze(i)], dim=i)
    if out_spatial_dim.dimension is None and out_spatial_dim.dyn_size_ext is None:
        # a fresh out dim given by the caller (e.g. Dim(None, name="kv-history")): its lengths are axis + 1
        if axis.dimension is not None:
            _set_sizes(out_spatial_dim, torch.tensor(axis.dimension + 1, dtype=torch.int32))
        else:
            raw, size_dims = _sizes(axis)
            _set_sizes(out_spatial_dim, raw + 1, size_dims)
    return _new("cum_concat", [out_spatial_dim if d == axis else d for d in dims], y)



def _concat_dynamic(sources, dims, out_dim, allow_broadcast):
    """Concat of dynamic dims: per sequence the frames within the lengths, one source after the other."""
    sizes = []
    for _, a in sources:
        sizes.append(_sizes(a) if _is_dyn(a) else (torch.tensor(a.dimension, dtype=torch.int32), []))
    total = None
    for raw, _ in sizes:
        total = raw if total is None else total + raw
    size_dims = max((sd for _, sd in sizes), key=len)
    _set_sizes(out_dim, total, size_dims)
    oidx = dims.index(out_dim)
    shape = [_dim_len(d) for d in dims]
    device = sources[0][0].placeholder.device
    pos = _align(_new("pos", [out_dim], torch.arange(shape[oidx], device=device)), dims)
    out = None
    offset = torch.zeros_like(_on(total, device))  # dims size_dims
    for (x, a), (size, sdims) in zip(sources, sizes):
        size = _on(size, device)
        part_dims = [a if d == out_dim else d for d in dims]
        xr = _align(x, part_dims)
        s = list(shape)
        s[oidx] = _dim_len(a)
        xr = xr.expand(s)
        off = _align(_new("off", size_dims, offset), dims) if size_dims else offset
        local = pos - off
        valid = (local >= 0) & (local < (_align(_new("s", sdims, size), dims) if sdims else size))
        idx = local.clamp(0, max(s[oidx] - 1, 0)).expand([shape[i] if i == oidx else s[i] for i in range(len(s))])
        gathered = torch.gather(xr, oidx, idx.long()) if s[oidx] > 0 else torch.zeros(
            idx.shape, dtype=xr.dtype, device=device)
        out = torch.where(valid, gathered, out if out is not None else torch.zeros((), dtype=xr.dtype, device=device))
        offset = offset + size
    return _new("concat", dims, out.expand(shape), sparse_dim=sources[0][0].sparse_dim)


def _pad_nonconst(x, dims, axes, padding, mode):
    for a, (left, right) in zip(axes, padding):
        i = dims.index(a)
        xm = x.movedim(i, -1)
        shape = xm.shape
        xm = xm.reshape(-1, 1, shape[-1])
        xm = F.pad(xm, [left, right], mode="reflect" if mode == "reflect" else "replicate")
        x = xm.reshape(list(shape[:-1]) + [xm.shape[-1]]).movedim(-1, i)
    return x

