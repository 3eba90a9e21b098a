"""
TorchBackend: the rf backend that runs every rf call eagerly on PyTorch (seed 002).

Raw tensors are ``torch.Tensor``; a dynamic :class:`~returnn_lite.data.Dim` carries its sequence lengths as a torch
tensor in ``dim.dyn_size_ext`` (dims ``[batch]``), the batch dim its size as a scalar tensor. Params
(:class:`rf.Parameter`) are ``torch.nn.Parameter`` created when the param is created; see
:func:`returnn_lite.torch.frontend.bridge.rf_module_to_pt_module` for an rf Module as ``torch.nn.Module``.

The methods work on named dims: operands are aligned (permuted / unsqueezed) to the output dims and then one torch
op runs; the output Tensor is created without going through ``Data.__init__`` (:func:`_new`) to keep the rf
dispatch overhead at a few microseconds per op.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from ...tensor import Dim, Tensor, batch_dim, single_step_dim
from ...frontend._backend import Backend
from ...frontend.device import get_default_device
from ...frontend._utils import FrontendError, axes_of, call_site, concat_out_dims, dims_str, has_repeated_dim, is_tensor
from ...util import NotSpecified

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


_COMBINE = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.true_divide,
    "floordiv": torch.floor_divide, "mod": torch.remainder, "pow": torch.pow,
    "maximum": None, "minimum": None, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "squared_difference": lambda a, b: torch.square(torch.sub(a, b)),
}
_COMPARE = {"equal": torch.eq, "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le,
            "greater": torch.gt, "greater_equal": torch.ge}
_ACT = {
    "relu": torch.relu, "gelu": F.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp": torch.exp,
    "expm1": torch.expm1, "log": torch.log, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "abs": torch.abs, "neg": torch.neg, "square": torch.square, "sin": torch.sin, "cos": torch.cos,
    "softplus": F.softplus, "log_sigmoid": F.logsigmoid, "silu": F.silu, "elu": F.elu, "selu": F.selu,
    "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "logical_not": torch.logical_not, "reciprocal": torch.reciprocal,
    "relu_square": lambda x: torch.square(torch.relu(x)),
}


def _as_raw_operand(v, like):
    """A scalar or Tensor operand as something torch ops take (tensors for maximum/minimum)."""
    if isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=like.dtype, device=like.device)


class _ScaledGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class TorchBackend(Backend):
    """rf backend: eager PyTorch."""

    name = "torch"
    RawTensorType = torch.Tensor
    is_tensorflow = False
    is_backend_raw_tensor_dim_tag_independent = True

    # ---- generic ----
    @staticmethod
    def executing_eagerly():
        return True

    @staticmethod
    def set_random_seed(seed):
        torch.manual_seed(seed)

    @staticmethod
    def get_random_state():
        return {"cpu": bytes(torch.get_rng_state().numpy().tobytes())}

    @staticmethod
    def set_random_state(state):
        import numpy

        torch.set_rng_state(torch.from_numpy(numpy.frombuffer(state["cpu"], dtype=numpy.uint8).copy()))

    @staticmethod
    def get_dtype_name_raw(raw_tensor):
        return _dtype_name(raw_tensor)

    @staticmethod
    def as_dtype_raw(dtype_name):
        return _DTYPES[dtype_name]

    @staticmethod
    def get_ndim_raw(raw_tensor):
        return raw_tensor.dim()

    @staticmethod
    def get_shape_raw(raw_tensor):
        return tuple(raw_tensor.shape)

    get_shape_tuple_raw = get_shape_raw
    get_known_shape_raw = get_shape_raw

    @staticmethod
    def get_new_dim_raw(raw_tensor, axis, *, name):
        return Dim(int(raw_tensor.shape[axis]), name=name)

    @staticmethod
    def get_device(x):
        raw = x.placeholder
        return str(raw.device) if isinstance(raw, torch.Tensor) else None

    @staticmethod
    def copy_to_device(x, device):
        if device is None:
            return x
        return x.copy(placeholder=x.placeholder.to(device))

    @staticmethod
    def expand_dims_raw(raw_tensor, axis):
        return raw_tensor.unsqueeze(axis)

    @staticmethod
    def get_dim_raw(raw_tensor, axis):
        return raw_tensor.shape[axis]

    @staticmethod
    def transpose_raw(raw_tensor, perm):
        return raw_tensor.permute(perm)

    @staticmethod
    def squeeze_raw(raw_tensor, axes):
        for a in sorted((a % raw_tensor.dim() for a in axes), reverse=True):
            raw_tensor = raw_tensor.squeeze(a)
        return raw_tensor

    @staticmethod
    def reshape_raw(raw_tensor, shape):
        return raw_tensor.reshape([int(s) for s in shape])

    @staticmethod
    def tile_raw(raw_tensor, multiples):
        return raw_tensor.repeat([int(m) for m in multiples])

    @staticmethod
    def reduce_max_raw(raw_tensor):
        return int(raw_tensor.max()) if raw_tensor.numel() else 0

    @staticmethod
    def sequence_mask_raw(lengths, max_len):
        return torch.arange(int(max_len), device=lengths.device) < lengths.unsqueeze(-1)

    @staticmethod
    def expand_raw(raw_tensor, axis, dim):
        shape = [-1] * raw_tensor.dim()
        shape[axis] = int(dim)
        return raw_tensor.expand(shape)

    @staticmethod
    def activation_raw(raw_tensor, func):
        return _ACT[func](raw_tensor)

    @staticmethod
    def cast_raw(raw_tensor, dtype):
        return raw_tensor.to(_DTYPES[dtype])

    # ---- creation ----
    @staticmethod
    def convert_to_tensor(value, *, dims, dtype, sparse_dim=None, name=None, device=None):
        raw = value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=_DTYPES[dtype], device=_device(device))
        if raw.dim() != len(dims):
            raise FrontendError("rf.convert_to_tensor at %s: value of shape %s does not match dims %s" % (
                call_site(), tuple(raw.shape), dims_str(dims)))
        return _new(name or "constant", dims, raw, sparse_dim=sparse_dim)

    @staticmethod
    def full(dims, fill_value, *, dtype, sparse_dim=None, feature_dim=None, device=None):
        shape = [_dim_len(d) for d in dims]
        if is_tensor(fill_value):
            raw = _align(fill_value, dims).expand(shape).to(_DTYPES[dtype])
        else:
            raw = torch.full(shape, fill_value, dtype=_DTYPES[dtype], device=_device(device))
        return _new("full", dims, raw, sparse_dim=sparse_dim)

    @staticmethod
    def range_over_dim(dim, *, dtype="int32", device=None):
        raw = torch.arange(_dim_len(dim), dtype=_DTYPES[dtype], device=_device(device))
        return _new("range", [dim], raw, sparse_dim=dim if dtype.startswith("int") else None)

    @staticmethod
    def dim_value_tensor(dim):
        return _new("dim_value", [], torch.tensor(_dim_len(dim), dtype=torch.int32))

    @staticmethod
    def dim_size_tensor(dim, *, device=None):
        if dim.dimension is not None or dim.is_batch_dim():
            res = TorchBackend.dim_value_tensor(dim)
            return res if device is None else _new(res.name, [], res.placeholder.to(device))
        raw, dims = _sizes(dim)
        if device is not None:
            raw = raw.to(device, non_blocking=True)
        return _new("%s:size" % dim.description, dims, raw)

    # ---- params ----
    @staticmethod
    def create_parameter_raw(param, *, name=None, device=None):
        shape = [d.dimension for d in param.dims]
        dtype = _DTYPES[param.dtype]
        raw = torch.nn.Parameter(torch.zeros(shape, dtype=dtype, device=_device(device)),
                                 requires_grad=param.trainable and dtype.is_floating_point)
        param.placeholder = raw
        TorchBackend.set_parameter_initial_value(param, param.initial)
        return raw

    @staticmethod
    def set_parameter_initial_value(param, value):
        from ...frontend.module import ParamInit

        raw = param.placeholder
        with torch.no_grad():
            if value is None:
                raw.zero_()
            elif isinstance(value, ParamInit):
                raw.copy_(_init_value(value, param))
            elif is_tensor(value):
                raw.copy_(_transposed(value, param.dims))
            else:
                raw.copy_(torch.as_tensor(value, dtype=raw.dtype))

    @staticmethod
    def set_parameter_trainable(param, trainable):
        param.placeholder.requires_grad = bool(trainable) and param.placeholder.dtype.is_floating_point

    # ---- elementwise ----
    @staticmethod
    def combine(a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
        ta = is_tensor(a)
        t = a if ta else b
        dims = _union_dims((a, b)) if (ta and is_tensor(b)) else t.dims
        if dim_order is not None:
            dims = [d for d in dim_order if d in dims] + [d for d in dims if d not in dim_order]
        x, y = _operand(a, dims), _operand(b, dims)
        fn = _COMBINE[kind]
        if fn is None:
            like = x if isinstance(x, torch.Tensor) else y
            fn = torch.maximum if kind == "maximum" else torch.minimum
            z = fn(_as_raw_operand(x, like), _as_raw_operand(y, like))
        else:
            z = fn(x, y)
        dtype = _DTYPE_NAMES[z.dtype]
        sparse = t.sparse_dim if (t.sparse_dim is not None and dtype == t.dtype) else None
        return _new(kind, dims, z, sparse_dim=sparse, dtype=dtype)

    @staticmethod
    def compare(a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
        t = a if is_tensor(a) else b
        dims = _union_dims((a, b)) if (is_tensor(a) and is_tensor(b)) else t.dims
        if dim_order is not None:
            dims = [d for d in dim_order if d in dims] + [d for d in dims if d not in dim_order]
        return _new(kind, dims, _COMPARE[kind](_operand(a, dims), _operand(b, dims)), dtype="bool")

    @staticmethod
    def activation(tensor, func):
        z = _ACT[func](tensor.placeholder)
        return _new(func, tensor.dims, z, sparse_dim=tensor.sparse_dim if func != "logical_not" else None)

    @staticmethod
    def cast(tensor, dtype):
        return _new("cast", tensor.dims, tensor.placeholder.to(_DTYPES[dtype]),
                    sparse_dim=tensor.sparse_dim if dtype.startswith("int") else None, dtype=dtype)

    @staticmethod
    def copy(tensor):
        return _new(tensor.name, tensor.dims, tensor.placeholder.clone(), sparse_dim=tensor.sparse_dim)

    @staticmethod
    def transpose(tensor, dims):
        return _new(tensor.name, dims, _transposed(tensor, dims), sparse_dim=tensor.sparse_dim)

    @staticmethod
    def stop_gradient(tensor):
        return _new(tensor.name, tensor.dims, tensor.placeholder.detach(), sparse_dim=tensor.sparse_dim)

    @staticmethod
    def scaled_gradient(tensor, scale):
        if is_tensor(scale):
            scale = scale.placeholder
        return _new(tensor.name, tensor.dims, _ScaledGradient.apply(tensor.placeholder, scale),
                    sparse_dim=tensor.sparse_dim)

    @staticmethod
    def set_requires_gradient(tensor):
        tensor.placeholder.requires_grad = True

    @staticmethod
    def gradient(y, x):
        (g,) = torch.autograd.grad(y.placeholder, x.placeholder, create_graph=True)
        return _new("gradient", x.dims, g)

    @staticmethod
    def where(cond, true_, false_, *, allow_broadcast_all_sources=False):
        dims = _union_dims((cond, true_, false_))
        t = true_ if is_tensor(true_) else false_ if is_tensor(false_) else None
        c = _align(cond, dims)
        x, y = _operand(true_, dims), _operand(false_, dims)
        if not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor):
            dtype = torch.float32 if isinstance(x, float) or isinstance(y, float) else torch.int32
            x, y = torch.tensor(x, dtype=dtype, device=c.device), torch.tensor(y, dtype=dtype, device=c.device)
        z = torch.where(c, x, y)
        return _new("where", dims, z, sparse_dim=t.sparse_dim if t is not None else None)

    @staticmethod
    def clip_by_value(x, clip_value_min, clip_value_max, *, allow_broadcast_all_sources=False):
        dims = _union_dims((x, clip_value_min, clip_value_max))
        v = _align(x, dims)
        lo, hi = _operand(clip_value_min, dims), _operand(clip_value_max, dims)
        z = torch.minimum(torch.maximum(v, _as_raw_operand(lo, v)), _as_raw_operand(hi, v))
        return _new("clip_by_value", dims, z, sparse_dim=x.sparse_dim)

    # ---- reductions, softmax, matmul ----
    @staticmethod
    def reduce(source, *, mode, axis, use_mask=True):
        axes = [axis] if isinstance(axis, Dim) else list(axis)
        dims = list(source.dims)
        if has_repeated_dim(dims):
            idx = axes_of(dims, axes)
            rest = [d for i, d in enumerate(dims) if i not in idx]
        else:
            rest = [d for d in dims if d not in axes]
            idx = [dims.index(a) for a in axes]
        x = source.placeholder
        dyn = [a for a in axes if _is_dyn(a)] if use_mask else []
        if mode in ("argmax", "argmin"):
            if dyn:
                fill = float("-inf") if mode == "argmax" else float("inf")
                if not x.dtype.is_floating_point:
                    info = torch.iinfo(x.dtype)
                    fill = info.min if mode == "argmax" else info.max
                x = _masked(x, dims, dyn, fill)
            fn = torch.argmax if mode == "argmax" else torch.argmin
            return _new("reduce_" + mode, rest, fn(x, dim=idx[0]).to(torch.int32), sparse_dim=axes[0])
        if mode in ("sum", "mean"):
            x = _masked(x, dims, dyn, 0)
            y = torch.sum(x, dim=idx, dtype=x.dtype)  # ints stay int32 (torch would promote to int64)
            if mode == "mean":
                if dyn:
                    ones = _masked(torch.ones_like(x), dims, dyn, 0)
                    y = y / torch.sum(ones, dim=idx)
                else:
                    n = 1
                    for i in idx:
                        n *= x.shape[i]
                    y = y / n
        elif mode in ("max", "min"):
            if dyn:
                fill = float("-inf") if mode == "max" else float("inf")
                if not x.dtype.is_floating_point:
                    info = torch.iinfo(x.dtype)
                    fill = info.min if mode == "max" else info.max
                x = _masked(x, dims, dyn, fill)
            y = torch.amax(x, dim=idx) if mode == "max" else torch.amin(x, dim=idx)
        elif mode == "logsumexp":
            y = torch.logsumexp(_masked(x, dims, dyn, float("-inf")), dim=idx)
        elif mode in ("any", "all"):
            x = _masked(x, dims, dyn, mode == "all").permute([i for i in range(x.dim()) if i not in idx] + idx)
            y = (torch.any if mode == "any" else torch.all)(x.flatten(len(rest)), dim=-1)
        elif mode == "prod":
            x = _masked(x, dims, dyn, 1).permute([i for i in range(x.dim()) if i not in idx] + idx)
            y = torch.prod(x.flatten(len(rest)), dim=-1)
        else:
            raise FrontendError("rf.reduce at %s: unknown mode %r" % (call_site(), mode))
        return _new("reduce_" + mode, rest, y)

    @staticmethod
    def softmax(tensor, *, axis, use_mask=True):
        dims = tensor.dims
        x = tensor.placeholder
        masked = use_mask and _is_dyn(axis)
        if masked:
            x = _masked(x, dims, [axis], float("-inf"))
        y = torch.softmax(x, dim=list(dims).index(axis))
        if masked and not _no_empty_seq(axis):  # (only an empty sequence gives 0/0 there)
            y = _masked(y, dims, [axis], 0.0)
        return _new("softmax", dims, y)

    @staticmethod
    def log_softmax(tensor, *, axis, use_mask=True):
        dims = tensor.dims
        x = tensor.placeholder
        if use_mask and _is_dyn(axis):
            x = _masked(x, dims, [axis], float("-inf"))
        return _new("log_softmax", dims, torch.log_softmax(x, dim=list(dims).index(axis)))

    @staticmethod
    def matmul(a, b, *, reduce, use_mask=True):
        reduce = [reduce] if isinstance(reduce, Dim) else list(reduce)
        ad, bd = a.dims, b.dims
        xa, xb = a.placeholder, b.placeholder
        if use_mask:
            dyn = [d for d in reduce if _is_dyn(d)]
            if dyn:
                xa = _masked(xa, ad, dyn, 0.0)
        # fast path: [..., r] x [r, o] (e.g. Linear)
        if len(reduce) == 1 and len(bd) == 2 and ad[-1] is reduce[0] and bd[0] is reduce[0] and bd[1] not in ad:
            return _new("dot", ad[:-1] + (bd[1],), torch.matmul(xa, xb))
        if has_repeated_dim(ad) or has_repeated_dim(bd):
            return _matmul_repeated_dims(ad, bd, xa, xb, reduce)
        # common dims first, then a's, then b's (as the original): the order of the batched matmul's result, so
        # that it is no strided view (a softmax over it would copy it, a matmul with it would copy it again)
        common = [d for d in ad if d not in reduce and d in bd]
        out = common + [d for d in ad if d not in reduce and d not in common] + [
            d for d in bd if d not in reduce and d not in ad]
        letters = {}
        for d in list(ad) + list(bd):
            if d not in letters:
                letters[d] = _LETTERS[len(letters)]
        eq = "%s,%s->%s" % ("".join(letters[d] for d in ad), "".join(letters[d] for d in bd),
                            "".join(letters[d] for d in out))
        return _new("dot", out, torch.einsum(eq, xa, xb))

    @classmethod
    def linear(cls, source, *, weight, bias, in_dim):
        """rf.Linear as one F.linear (addmm: the bias add is fused, and under autocast the output stays in the autocast
        dtype, as torch.nn.Linear's; a separate float32 bias add would promote it back to float32)."""
        dims = source.dims
        if has_repeated_dim(dims) or has_repeated_dim(weight.dims) or _is_dyn(in_dim) or source.sparse_dim is not None:
            y = cls.matmul(source, weight, reduce=in_dim)
            return y if bias is None else cls.combine(y, "add", bias)
        out_dim = weight.dims[1] if weight.dims[0] == in_dim else weight.dims[0]
        w = _transposed(weight, [out_dim, in_dim])  # F.linear's [out, in] layout (a view of the [in, out] param)
        rest = [d for d in dims if d != in_dim]
        x = _transposed(source, rest + [in_dim])
        b = None if bias is None else bias.placeholder
        return _new("linear", rest + [out_dim], F.linear(x, w, b))

    # ---- shapes ----
    @staticmethod
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

    @staticmethod
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

    @staticmethod
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

    @staticmethod
    def slice(source, *, axis, start=None, end=None, step=None, size=None, out_dim):
        dims = list(source.dims)
        if is_tensor(start):  # a scalar Tensor start (eager): its value
            start = int(start.placeholder)
        if isinstance(size, Dim):  # [start:start + size] with a (maybe dynamic) size Dim
            end = (start or 0) + _dim_len(size)
        sl = [slice(None)] * len(dims)
        sl[dims.index(axis)] = slice(start, end, step)
        return _new("slice", [out_dim if d == axis else d for d in dims], source.placeholder[tuple(sl)],
                    sparse_dim=source.sparse_dim)

    @staticmethod
    def split(source, *, axis, out_dims):
        dims = list(source.dims)
        i = dims.index(axis)
        parts = torch.split(source.placeholder, [d.dimension for d in out_dims], dim=i)
        return [_new("split", dims[:i] + [o] + dims[i + 1:], p, sparse_dim=source.sparse_dim)
                for p, o in zip(parts, out_dims)]

    @staticmethod
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

    @staticmethod
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

    @staticmethod
    def reshape(source, in_dims, out_dims):
        rest = [d for d in source.dims if d not in in_dims]
        x = _transposed(source, rest + list(in_dims))
        y = x.reshape(list(x.shape[:len(rest)]) + [_dim_len(d) for d in out_dims])
        return _new("reshape", rest + list(out_dims), y, sparse_dim=source.sparse_dim)

    @staticmethod
    def expand_dim(source, dim):
        x = source.placeholder.unsqueeze(-1)
        shape = list(x.shape)
        shape[-1] = _dim_len(dim)
        return _new("expand_dim", list(source.dims) + [dim], x.expand(shape), sparse_dim=source.sparse_dim)

    @staticmethod
    def squeeze(source, axis):
        dims = list(source.dims)
        return _new("squeeze", [d for d in dims if d != axis], source.placeholder.squeeze(dims.index(axis)),
                    sparse_dim=source.sparse_dim)

    @staticmethod
    def replace_dim(source, *, in_dim, out_dim):
        if _is_dyn(out_dim) and _is_dyn(in_dim) and out_dim != in_dim and out_dim.dyn_size_ext is None:
            sizes, sdims = _sizes(in_dim)  # (an out_dim with sizes of its own, e.g. Dim(size_tensor), keeps them)
            _set_sizes(out_dim, sizes, sdims)
        return _new(source.name, [out_dim if d == in_dim else d for d in source.dims], source.placeholder,
                    sparse_dim=source.sparse_dim)

    @staticmethod
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

    # ---- losses ----
    @staticmethod
    def softmax_cross_entropy_with_logits(*, logits, targets, axis):
        dims = list(logits.dims)
        rest = [d for d in dims if d != axis]
        x = _transposed(logits, rest + [axis])
        if x.dtype in (torch.float16, torch.bfloat16):  # losses in float32 under autocast
            x = x.float()
        if targets.sparse_dim is not None:
            t = _align(targets, rest).expand(x.shape[:-1]).long()
            y = F.cross_entropy(x.reshape(-1, x.shape[-1]), t.reshape(-1), reduction="none").reshape(x.shape[:-1])
        else:
            t = _align(targets, rest + [axis])
            y = -torch.sum(t * torch.log_softmax(x, dim=-1), dim=-1)
        return _new("cross_entropy", rest, y)

    @staticmethod
    def ctc_loss(*, logits, targets, input_spatial_dim, targets_spatial_dim, blank_index, max_approx=False):
        class_dims = [d for d in logits.dims if d not in (batch_dim, input_spatial_dim)]
        if len(class_dims) != 1 or set(logits.dims) != {batch_dim, input_spatial_dim, class_dims[0]}:
            raise FrontendError("rf.ctc_loss at %s: logits must have dims [batch, time, classes], got %s" % (
                call_site(), dims_str(logits.dims)))
        x = _transposed(logits, [input_spatial_dim, batch_dim, class_dims[0]])
        log_probs = torch.log_softmax(x.float(), dim=-1)  # float32 also under autocast
        labels = _transposed(targets, [batch_dim, targets_spatial_dim]).long()
        in_lens = _sizes(input_spatial_dim)[0].long()
        tgt_lens = _sizes(targets_spatial_dim)[0].long()
        loss = F.ctc_loss(log_probs, labels, in_lens, tgt_lens, blank=blank_index, reduction="none",
                          zero_infinity=False)
        return _new("ctc_loss", [batch_dim], loss if x.dtype in (torch.float16, torch.bfloat16) else loss.to(x.dtype))

    # ---- random ----
    @staticmethod
    def dropout(source, drop_prob, *, axis=None, on_forward=False):
        from ...frontend.run_ctx import get_run_ctx

        if not (on_forward or get_run_ctx().train_flag):
            return source
        x = source.placeholder
        if not axis:
            return _new("dropout", source.dims, F.dropout(x, drop_prob, training=True))
        shape = [s if (d in axis or d.is_batch_dim()) else 1 for d, s in zip(source.dims, x.shape)]
        keep = 1.0 - drop_prob
        mask = torch.bernoulli(torch.full(shape, keep, dtype=x.dtype, device=x.device)) / keep
        return _new("dropout", source.dims, x * mask)

    @staticmethod
    def random(*, dims, dtype, distribution, mean=None, stddev=None, bound=None, minval=None, maxval=None,
               seed=None, sparse_dim=None, device=None):
        shape = [_dim_len(d) for d in dims]
        target = torch.device(_device(device) or "cpu")
        device, gen = target, None
        if seed is not None:  # drawn on the CPU (the same numbers on every device), then moved
            device, gen = torch.device("cpu"), torch.Generator().manual_seed(int(seed))
        tdt = _DTYPES[dtype]
        if bound is not None:
            minval, maxval = -bound, bound
        if distribution == "normal":
            raw = torch.randn(shape, generator=gen, dtype=tdt, device=device) * (1.0 if stddev is None else stddev) + (
                mean or 0.0)
        elif distribution == "truncated_normal":
            raw = torch.empty(shape, dtype=tdt, device=device)
            mean, stddev = mean or 0.0, 1.0 if stddev is None else stddev  # cut at 2 stddev around the mean (as TF)
            torch.nn.init.trunc_normal_(raw, mean=mean, std=stddev, a=mean - 2 * stddev, b=mean + 2 * stddev,
                                        generator=gen)
        elif distribution == "uniform":
            lo, hi = minval or 0, 1 if maxval is None else maxval
            if tdt.is_floating_point:
                raw = torch.rand(shape, generator=gen, dtype=tdt, device=device) * (hi - lo) + lo
            else:
                raw = torch.randint(int(lo), int(hi), shape, generator=gen, dtype=tdt, device=device)
        else:
            raise FrontendError("rf.random at %s: unknown distribution %r" % (call_site(), distribution))
        return _new("random", dims, _on(raw, target), sparse_dim=sparse_dim)

    # ---- nn ----
    @staticmethod
    def layer_norm(x, *, in_dim, scale, bias, eps):
        """Fused rf.LayerNorm (one F.layer_norm instead of ~8 elementwise ops); in_dim moves last."""
        axes = [i for i, d in enumerate(x.dims) if d == in_dim]
        if len(axes) != 1:
            raise FrontendError("rf.LayerNorm at %s: in_dim %s must be exactly one axis of %s" % (
                call_site(), in_dim.short_repr(), dims_str(x.dims)))
        dims = [d for i, d in enumerate(x.dims) if i != axes[0]] + [x.dims[axes[0]]]
        raw = x.placeholder if axes[0] == len(x.dims) - 1 else x.placeholder.movedim(axes[0], -1)
        y = F.layer_norm(raw, (raw.shape[-1],), weight=scale.placeholder,
                         bias=None if bias is None else bias.placeholder, eps=eps)
        return _new("layer_norm", dims, y)

    @staticmethod
    def batch_norm(source, *, in_dim, running_mean, running_variance, gamma, beta, epsilon, momentum, affine,
                   use_mask):
        from ...frontend.run_ctx import get_run_ctx

        dims = list(source.dims)
        x = source.placeholder
        if get_run_ctx().train_flag:
            axes = [i for i, d in enumerate(dims) if d != in_dim]
            dyn = [d for d in dims if _is_dyn(d)] if use_mask else []
            if dyn:
                ones = _masked(torch.ones_like(x), dims, dyn, 0.0)
                n = torch.sum(ones, dim=axes, keepdim=True)
                mean = torch.sum(x * ones, dim=axes, keepdim=True) / n
                var = torch.sum(torch.square(x - mean) * ones, dim=axes, keepdim=True) / n
            else:  # all frames count: one fused op (the same biased statistics)
                var, mean = torch.var_mean(x, dim=axes, unbiased=False, keepdim=True)
            with torch.no_grad():
                rm, rv = running_mean.placeholder, running_variance.placeholder
                rm.mul_(1 - momentum).add_(mean.reshape(-1).detach() * momentum)
                rv.mul_(1 - momentum).add_(var.reshape(-1).detach() * momentum)
        else:
            mean = _align(running_mean, dims)
            var = _align(running_variance, dims)
        y = (x - mean) * torch.rsqrt(var + epsilon)
        if affine:
            y = y * _align(gamma, dims) + _align(beta, dims)
        return _new("batch_norm", dims, y)

    @staticmethod
    def conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter, filter_size,  # noqa
             padding, strides=1, dilation_rate=1, groups=None, bias=None):
        n = len(in_spatial_dims)
        strides = tuple(strides) if isinstance(strides, (list, tuple)) else (strides or 1,) * n
        dilation_rate = tuple(dilation_rate) if isinstance(dilation_rate, (list, tuple)) else (dilation_rate,) * n
        ks = [d.dimension for d in filter_size]
        x, batch_like, shape_b = _to_nc(source, in_dim, in_spatial_dims)
        x = _same_pad(x, padding, ks, strides, dilation_rate, 0.0)
        w = _conv_filter(filter, out_dim, filter_size)
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
        y = fn(x, w, None if bias is None else _transposed(bias, [out_dim]), stride=strides, dilation=dilation_rate,
               padding=tuple(padding) if isinstance(padding, (list, tuple)) else 0, groups=groups or 1)
        _set_conv_out_sizes(in_spatial_dims, out_spatial_dims, ks, padding, strides, dilation_rate)
        return _from_nc(y, shape_b, batch_like, in_dim, out_dim, in_spatial_dims, out_spatial_dims, source)

    @staticmethod
    def stft(x, *, in_spatial_dim, frame_step, frame_size, fft_length, frame_pad_left, window, out_spatial_dim,
             out_dim):
        """Frames of frame_size every frame_step, padded to fft_length, times window, rfft (see rf.stft)."""
        batch_like = [d for d in x.dims if d != in_spatial_dim]
        raw = _transposed(x, batch_like + [in_spatial_dim])
        if raw.shape[-1] < frame_size:
            raise FrontendError("rf.stft at %s: %i samples are fewer than one frame (%i)" % (
                call_site(), raw.shape[-1], frame_size))
        frames = raw.unfold(-1, frame_size, frame_step)
        if fft_length > frame_size:
            frames = F.pad(frames, (frame_pad_left, fft_length - frame_size - frame_pad_left))
        frames = frames * torch.as_tensor(window, dtype=frames.dtype, device=frames.device)
        y = torch.fft.rfft(frames, n=fft_length)
        _set_conv_out_sizes([in_spatial_dim], [out_spatial_dim], [frame_size], "valid", [frame_step], [1])
        return _new("stft", batch_like + [out_spatial_dim, out_dim], y)

    @staticmethod
    def pool(source, *, mode, pool_size, padding="valid", dilation_rate=1, strides, in_spatial_dims,
             out_spatial_dims=None):
        rest = [d for d in source.dims if d not in in_spatial_dims]
        feat = source.feature_dim if source.feature_dim in rest and not source.feature_dim.is_batch_dim() else None
        if feat is None:
            raise FrontendError("rf.pool at %s: the input %s needs a feature dim" % (
                call_site(), dims_str(source.dims)))
        n = len(in_spatial_dims)
        x, batch_like, shape_b = _to_nc(source, feat, in_spatial_dims)
        pool_size, strides, dilation_rate = tuple(pool_size), tuple(strides), tuple(dilation_rate)
        x = _int_pad(x, padding, float("-inf") if mode == "max" else 0.0)
        if mode == "max":
            x = _same_pad(x, padding, pool_size, strides, dilation_rate, float("-inf"))
            fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
            y = fn(x, pool_size, stride=strides, dilation=dilation_rate)
        else:
            if any(d != 1 for d in dilation_rate):
                raise FrontendError("rf.pool at %s: avg pooling with dilation is not supported" % call_site())
            fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
            ones = torch.ones_like(x[:1, :1])
            xs = _same_pad(x, padding, pool_size, strides, dilation_rate, 0.0)
            cnt = _same_pad(ones, padding, pool_size, strides, dilation_rate, 0.0)
            y = fn(xs, pool_size, stride=strides) / fn(cnt, pool_size, stride=strides)
        _set_conv_out_sizes(in_spatial_dims, out_spatial_dims, pool_size, padding, strides, dilation_rate)
        return _from_nc(y, shape_b, batch_like, feat, feat, in_spatial_dims, out_spatial_dims, source)

    @staticmethod
    def lstm(source, *, state_h, state_c, ff_weight, rec_weight, bias, spatial_dim, in_dim, out_dim):
        single = spatial_dim is single_step_dim
        gates_dim = [d for d in ff_weight.dims if d != in_dim][0]
        batch_like = [d for d in source.dims if d not in (in_dim, spatial_dim)]
        shape_b = [_dim_len(d) for d in batch_like]
        w_ih = _transposed(ff_weight, [gates_dim, in_dim])
        w_hh = _transposed(rec_weight, [gates_dim, out_dim])
        b = bias.placeholder
        b_hh = torch.zeros_like(b) if not b.requires_grad else b.new_zeros(b.shape)
        h0 = _state(state_h, batch_like, out_dim, shape_b)
        c0 = _state(state_c, batch_like, out_dim, shape_b)
        state_dims = batch_like + [out_dim]
        if single:
            x = _transposed(source, batch_like + [in_dim]).reshape(-1, in_dim.dimension)
            h, c = torch.lstm_cell(x, (h0, c0), w_ih, w_hh, b, b_hh)
            out = h.reshape(shape_b + [out_dim.dimension])
            return (_new("lstm", state_dims, out),
                    (_new("state_h", state_dims, out), _new("state_c", state_dims, c.reshape(out.shape))))
        x = _transposed(source, [spatial_dim] + batch_like + [in_dim])
        n_time = x.shape[0]
        x = x.reshape(n_time, -1, in_dim.dimension)
        params = _cudnn_flat_lstm_params(x, w_ih, w_hh, b, out_dim.dimension) or [w_ih, w_hh, b, b_hh]
        hx = (h0.unsqueeze(0), c0.unsqueeze(0))
        if _is_dyn(spatial_dim):
            sizes, sdims = _sizes(spatial_dim)
            lens = _align(_new("s", sdims, sizes), batch_like).expand(shape_b).reshape(-1)
            lens_cpu = lens.to("cpu", torch.int64).clamp(min=1)
            packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens_cpu, enforce_sorted=False)
            hx = (hx[0].index_select(1, packed.sorted_indices), hx[1].index_select(1, packed.sorted_indices))
            train = torch.is_grad_enabled()  # (cuDNN's inference mode has no backward)
            y, h, c = torch._VF.lstm(packed.data, packed.batch_sizes, hx, params, True, 1, 0.0, train, False)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(
                torch.nn.utils.rnn.PackedSequence(y, packed.batch_sizes, packed.sorted_indices,
                                                  packed.unsorted_indices), total_length=n_time)
            h = h.index_select(1, packed.unsorted_indices)
            c = c.index_select(1, packed.unsorted_indices)
        else:
            y, h, c = torch._VF.lstm(x, hx, params, True, 1, 0.0, torch.is_grad_enabled(), False, False)
        y = y.reshape([n_time] + shape_b + [out_dim.dimension])
        out_dims = [spatial_dim] + state_dims
        res_dims = [out_dim if d == in_dim else d for d in source.dims]
        out = _new("lstm", res_dims, _transposed(_new("y", out_dims, y), res_dims))
        return out, (_new("state_h", state_dims, h[0].reshape(shape_b + [out_dim.dimension])),
                     _new("state_c", state_dims, c[0].reshape(shape_b + [out_dim.dimension])))

    # ---- control flow ----
    @staticmethod
    def cond(pred, true_fn, false_fn):
        return true_fn() if bool(pred.placeholder) else false_fn()

    @staticmethod
    def while_loop(cond, body, initial):
        loop_vars = initial
        while True:
            c = cond(loop_vars)
            if is_tensor(c):
                c = bool(c.placeholder)
            if not c:
                return loop_vars
            loop_vars = body(loop_vars)

    @staticmethod
    def scan(*, spatial_dim, initial, xs, ys, body, cond=None, cond_dims=None, cond_before_body=True, max_seq_len=None):
        """Eager loop over the frames of spatial_dim; the state of a sequence is kept after its length."""
        from ...frontend_layers._loop import _flatten, _pack

        if cond is not None:
            return _scan_cond(spatial_dim=spatial_dim, initial=initial, ys=ys, body=body, cond=cond,
                              cond_dims=cond_dims, cond_before_body=cond_before_body, max_seq_len=max_seq_len)

        n = _dim_len(spatial_dim)
        xs_flat, state = _flatten(xs), _flatten(initial)
        lens = _sizes(spatial_dim) if _is_dyn(spatial_dim) else None
        frames = []
        y_t = None
        for t in range(n):
            x_t = [TorchBackend.gather(x, indices=t, axis=spatial_dim) for x in xs_flat]
            y_t, s_new = body(_pack(xs, x_t), _pack(initial, state))
            s_new = _flatten(s_new)
            if len(s_new) != len(state):
                raise FrontendError("rf.scan at %s: %i new state tensors, but %i initial ones" % (
                    call_site(), len(s_new), len(state)))
            new_state = []
            for new, old in zip(s_new, state):
                if set(new.dims) != set(old.dims):
                    raise FrontendError("rf.scan at %s: new state has dims %s, the initial one %s" % (
                        call_site(), dims_str(new.dims), dims_str(old.dims)))
                raw = _transposed(new, old.dims)
                if lens is not None and all(d in old.dims for d in lens[1]):
                    active = _align(_new("active", lens[1], _on(lens[0], raw.device) > t), old.dims)
                    raw = torch.where(active, raw, old.placeholder)
                new_state.append(_new(old.name, old.dims, raw, sparse_dim=old.sparse_dim))
            state = new_state
            frames.append(_flatten(y_t))
        if y_t is None:
            raise FrontendError("rf.scan at %s: the loop dim %s has no frames" % (
                call_site(), spatial_dim.short_repr()))
        stacked = []
        for i, first in enumerate(frames[0]):
            raw = torch.stack([_transposed(f[i], first.dims) for f in frames], dim=0)
            stacked.append(_new("scan_y%i" % i, [spatial_dim] + list(first.dims), raw, sparse_dim=first.sparse_dim))
        return _pack(y_t, stacked), _pack(initial, state), spatial_dim

    @staticmethod
    def loop(*, axis=None, max_seq_len=None):
        raise FrontendError("rf.Loop at %s: not supported on the torch backend: as in the original, rf.Loop is the "
                            "loop of the layers backend (a with-block recorded once into a rec layer; eager execution "
                            "cannot repeat it); use rf.scan or rf.while_loop" % call_site())

    @staticmethod
    def sequence_mask(dims):
        from ...frontend import array_

        return array_.sequence_mask(dims)

    # ---- outputs and losses ----
    @staticmethod
    def make_output_tensor(tensor, dims, *, name):
        return _new(name, dims, _transposed(tensor, dims), sparse_dim=tensor.sparse_dim, dtype=tensor.dtype)

    @staticmethod
    def mark_as_loss(loss):
        pass  # the rf Loss object computes the values eagerly


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _matmul_repeated_dims(ad, bd, xa, xb, reduce):
    """matmul where a or b has a Dim twice (e.g. the [d, d] weight of rf.Linear(d, d)): axes by match priority."""
    ra, rb = axes_of(ad, reduce), axes_of(bd, reduce)
    la, lb = [None] * len(ad), [None] * len(bd)
    letters = iter(_LETTERS)
    for i, j in zip(ra, rb):
        la[i] = lb[j] = next(letters)
    out, out_letters = [], []
    for i, d in enumerate(ad):
        if la[i] is None:
            la[i] = next(letters)
            out.append(d)
            out_letters.append(la[i])
            free = [j for j in range(len(bd)) if lb[j] is None]
            if any(bd[j] == d for j in free):  # a common (batch-like) dim: the same letter in b
                lb[axes_of(bd, [d], taken=[j for j in range(len(bd)) if j not in free])[0]] = la[i]
    for j, d in enumerate(bd):
        if lb[j] is None:
            lb[j] = next(letters)
            out.append(d)
            out_letters.append(lb[j])
    eq = "%s,%s->%s" % ("".join(la), "".join(lb), "".join(out_letters))
    return _new("dot", out, torch.einsum(eq, xa, xb))


def _cudnn_flat_lstm_params(x, w_ih, w_hh, b, hidden):
    """[w_ih, w_hh, b_ih, b_hh (zeros)] as views of one buffer, as torch.nn.LSTM.flatten_parameters() makes them
    (the params' storage moves into it once): else cuDNN copies the weights into a buffer at every call. None where
    cuDNN is not used, under autocast (it casts the weights: copies anyway) or where the params are not plain
    leaves."""
    if not (x.is_cuda and w_ih.is_cuda) or torch.is_autocast_enabled("cuda"):
        return None
    if not all(p.is_leaf and p.dtype == x.dtype and p.is_contiguous() for p in (w_ih, w_hh, b)):
        return None
    key = (w_ih.data_ptr(), w_hh.data_ptr(), b.data_ptr())
    if len(set(key)) != 3:  # (shared params: the copying path, as torch.nn.LSTM)
        return None
    state = getattr(w_ih, "_rf_cudnn_flat", None)  # (data ptrs after flattening, b_hh) or False (could not)
    if state is False:
        return None
    if state is not None and state[0] == key and state[1].device == b.device:
        return [w_ih, w_hh, b, state[1]]
    if not (torch.backends.cudnn.is_acceptable(x) and torch._use_cudnn_rnn_flatten_weight()):
        return None
    # flattened copies, then swapped in by ``.data`` (no in-place op on the params: tensors of this step's graph that
    # saved them stay valid, with the same values)
    flat = [w_ih.detach().clone(), w_hh.detach().clone(), b.detach().clone(), torch.zeros_like(b.detach())]
    try:
        from torch.backends.cudnn.rnn import get_cudnn_mode

        with torch.no_grad(), torch.cuda.device_of(w_ih):
            torch._cudnn_rnn_flatten_weight(flat, 4, w_ih.shape[1], get_cudnn_mode("LSTM"), hidden, 0, 1, False, False)
        w_ih.data, w_hh.data, b.data = flat[0], flat[1], flat[2]
    except (RuntimeError, AttributeError):  # (then the copying path, as before)
        w_ih._rf_cudnn_flat = False
        return None
    w_ih._rf_cudnn_flat = ((w_ih.data_ptr(), w_hh.data_ptr(), b.data_ptr()), flat[3])
    return [w_ih, w_hh, b, flat[3]]


def _scan_cond(*, spatial_dim, initial, ys, body, cond, cond_dims, cond_before_body, max_seq_len):
    """rf.scan with cond, eagerly: while cond(None, s) is True for some sequence (and fewer than max_seq_len steps),
    s = body(None, s) for all; per sequence, its number of steps with cond True (the new dim's lengths), its ys
    frames and its state after them (a state without cond_dims: after all steps)."""
    from ...frontend_layers._loop import _flatten, _pack

    site = call_site()
    cond_dims = list(cond_dims)
    if spatial_dim is not None and spatial_dim.dyn_size_ext is not None:
        raise FrontendError("rf.scan at %s: spatial_dim %s already has sizes; with cond it must be a new dim" % (
            site, spatial_dim.short_repr()))
    axis = spatial_dim if spatial_dim is not None else Dim(None, kind=Dim.Types.Spatial, description="scan")

    def check(c):
        if not is_tensor(c) or c.dtype != "bool" or set(c.dims) != set(cond_dims):
            raise FrontendError("rf.scan at %s: cond must return a bool Tensor with the dims %s (cond_dims), got %r" % (
                site, dims_str(cond_dims), c))
        return _transposed(c, cond_dims)

    shape = [_dim_len(d) for d in cond_dims]
    device = _device()
    active = check(cond(None, initial)) if cond_before_body else torch.ones(shape, dtype=torch.bool, device=device)
    device = active.device
    limit = None
    if is_tensor(max_seq_len):
        limit = _align(max_seq_len, cond_dims) if set(max_seq_len.dims) <= set(cond_dims) else None
        if limit is None:
            raise FrontendError("rf.scan at %s: max_seq_len %s has dims not in cond_dims %s" % (
                site, dims_str(max_seq_len.dims), dims_str(cond_dims)))
    elif max_seq_len is not None:
        limit = torch.tensor(int(max_seq_len), device=device)
    state, final = _flatten(initial), list(_flatten(initial))
    lens = torch.zeros(shape, dtype=torch.int32, device=device)
    frames, y_t, i = [], None, 0
    while True:
        if limit is not None:
            active = active & (i < _on(limit, device))
        if not bool(active.any()):
            break
        lens = lens + active.to(torch.int32)
        y_t, s_new = body(None, _pack(initial, state))
        s_new = _flatten(s_new)
        if len(s_new) != len(state) or any(set(a.dims) != set(b.dims) for a, b in zip(s_new, state)):
            raise FrontendError("rf.scan at %s: the new state %r does not match the initial one %r" % (
                site, s_new, state))
        for k, (new, old) in enumerate(zip(s_new, final)):
            raw = _transposed(new, old.dims)
            if set(cond_dims) <= set(old.dims):  # per sequence: its state after its last step
                raw = torch.where(_align(_new("active", cond_dims, active), old.dims), raw, old.placeholder)
            final[k] = _new(old.name, old.dims, raw, sparse_dim=old.sparse_dim)
        state = s_new
        frames.append(_flatten(y_t))
        active = active & check(cond(None, _pack(initial, state)))
        i += 1
    _set_sizes(axis, lens, cond_dims)
    if y_t is None:  # no step for any sequence: the ys (of a body call, as the layers backend) empty along the new dim
        y_t, _ = body(None, initial)
        stacked = [_new("scan_y%i" % k, [axis] + list(t.dims), torch.zeros(
            [0] + [_dim_len(d) for d in t.dims], dtype=t.placeholder.dtype, device=t.placeholder.device),
            sparse_dim=t.sparse_dim)
            for k, t in enumerate(_flatten(y_t))]
        return _pack(y_t, stacked), _pack(initial, final), axis
    stacked = []
    for k, first in enumerate(frames[0]):
        raw = torch.stack([_transposed(f[k], first.dims) for f in frames], dim=0)
        stacked.append(_new("scan_y%i" % k, [axis] + list(first.dims), raw, sparse_dim=first.sparse_dim))
    return _pack(y_t, stacked), _pack(initial, final), axis


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


def _state(s, batch_like, out_dim, shape_b):
    dims = batch_like + [out_dim]
    if set(s.dims) == set(dims):
        x = _transposed(s, dims)
    else:
        x = _align(s, dims).expand(shape_b + [out_dim.dimension])
    return x.reshape(-1, out_dim.dimension).contiguous()


def _to_nc(source, in_dim, in_spatial_dims):
    """source -> [N, C, *spatial] (the other dims merged into N)."""
    batch_like = [d for d in source.dims if d not in in_spatial_dims and d != in_dim]
    x = _transposed(source, batch_like + [in_dim] + list(in_spatial_dims))
    shape_b = list(x.shape[:len(batch_like)])
    x = x.reshape([-1] + list(x.shape[len(batch_like):]))
    return x, batch_like, shape_b


def _from_nc(y, shape_b, batch_like, in_dim, out_feat, in_spatial_dims, out_spatial_dims, source):
    """[N, C', *out_spatial] back to named dims, in the source's order with the dims replaced."""
    y = y.reshape(shape_b + list(y.shape[1:]))
    y_dims = batch_like + [out_feat] + list(out_spatial_dims)
    res = []
    for d in source.dims:
        if d in in_spatial_dims:
            res.append(out_spatial_dims[list(in_spatial_dims).index(d)])
        elif d == in_dim:
            res.append(out_feat)
        else:
            res.append(d)
    return _new("conv", res, _transposed(_new("y", y_dims, y), res))


def _conv_filter(filter, out_dim, filter_size):  # noqa: A002
    """The rf conv filter [out, in // groups, *filter_size] as torch's weight (its in dim may equal out_dim)."""
    dims = list(filter.dims)
    if dims[0] == out_dim and dims[2:] == list(filter_size):
        return filter.placeholder
    in_dims = [d for d in dims if d != out_dim and d not in filter_size]
    return _transposed(filter, [out_dim] + in_dims + list(filter_size))


def _int_pad(x, padding, value):
    """Explicit int padding (both sides) of the spatial axes of [N, C, *spatial]; 'same'/'valid' unchanged."""
    if not isinstance(padding, (list, tuple)) or not any(padding):
        return x
    flat = []
    for p in reversed(padding):
        flat += [p, p]
    return F.pad(x, flat, mode="constant", value=value)


def _same_pad(x, padding, ks, strides, dilation_rate, value):
    """TF "same" padding (more on the right) of the spatial axes of [N, C, *spatial]."""
    if not isinstance(padding, str) or padding.lower() != "same":
        return x
    pads = []
    for i, (k, s, d) in enumerate(zip(ks, strides, dilation_rate)):
        n = x.shape[2 + i]
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        pads.append((total // 2, total - total // 2))
    flat = []
    for left, right in reversed(pads):
        flat += [left, right]
    if not any(flat):
        return x
    return F.pad(x, flat, mode="constant", value=value)


def _set_conv_out_sizes(in_spatial_dims, out_spatial_dims, ks, padding, strides, dilation_rate):
    for d_in, d_out, k, s, dil in zip(in_spatial_dims, out_spatial_dims, ks, strides, dilation_rate):
        if not _is_dyn(d_out) or d_out == d_in:
            continue
        size, sdims = _sizes(d_in)
        if isinstance(padding, (list, tuple)):
            size = size + 2 * padding[list(in_spatial_dims).index(d_in)] - (k - 1) * dil
        elif padding.lower() == "valid":
            size = size - (k - 1) * dil
        _set_sizes(d_out, torch.clamp(torch.div(size + s - 1, s, rounding_mode="floor"), min=0), sdims)


def _init_value(init, param):
    """A ParamInit (variance scaling) as a torch tensor of the param's shape."""
    import math

    shape = [d.dimension for d in param.dims]
    if len(shape) == 0:
        fan_in = fan_out = 1
    elif len(shape) == 1:
        fan_in = fan_out = shape[0]
    elif len(shape) == 2:
        fan_in, fan_out = shape[0], shape[1]
    else:
        receptive = 1
        for s in shape[2:]:
            receptive *= s
        fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[init.mode]
    scale = init.scale / max(1.0, n)
    dtype = _DTYPES[param.dtype]
    if init.distribution == "uniform":
        limit = math.sqrt(3.0 * scale)
        return torch.empty(shape, dtype=dtype).uniform_(-limit, limit)
    if init.distribution in ("truncated_normal", "normal"):
        std = math.sqrt(scale) / (0.87962566103423978 if init.distribution == "truncated_normal" else 1.0)
        if init.distribution == "normal":
            return torch.empty(shape, dtype=dtype).normal_(0.0, std)
        return torch.nn.init.trunc_normal_(torch.empty(shape, dtype=dtype), std=std, a=-2 * std, b=2 * std)
    raise FrontendError("rf.Parameter: unsupported init distribution %r" % init.distribution)
