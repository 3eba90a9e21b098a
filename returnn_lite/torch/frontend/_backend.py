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

import torch
import torch.nn.functional as F

from ...tensor import Dim
from ...frontend._backend import Backend
from ...frontend._utils import FrontendError, axes_of, call_site, dims_str, has_repeated_dim, is_tensor
from . import _conv, _recurrent, _shape
from ._common import (  # noqa: F401 (_new: also used by benchmarks)
    _DTYPE_NAMES, _DTYPES, _align, _as_raw_operand, _device, _dim_len, _dtype_name, _is_dyn, _masked,
    _new, _no_empty_seq, _on, _operand, _sizes, _transposed, _union_dims)

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



class _ScaledGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class _ScaledGradientExt(torch.autograd.Function):
    """Identity forward; backward grad * scale + shift (times sum_axis |grad| where axis is given)."""

    @staticmethod
    def forward(ctx, x, scale, shift, axis):
        ctx.scale, ctx.shift, ctx.axis = scale, shift, axis
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        res = grad * ctx.scale
        if ctx.shift is not None:
            res = res + ctx.shift * (torch.sum(torch.abs(grad), dim=ctx.axis, keepdim=True) if ctx.axis is not None
                                     else 1.0)
        return res, None, None, None


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
            scale = _align(scale, tensor.dims)
        return _new(tensor.name, tensor.dims, _ScaledGradient.apply(tensor.placeholder, scale),
                    sparse_dim=tensor.sparse_dim)

    @staticmethod
    def scaled_gradient_ext(tensor, *, scale=1.0, shift=None, scale_shift_by_sum_over_axis=None):
        dims = tensor.dims
        scale = _align(scale, dims) if is_tensor(scale) else scale
        shift = _align(shift, dims) if is_tensor(shift) else shift
        axis = None if scale_shift_by_sum_over_axis is None else list(dims).index(scale_shift_by_sum_over_axis)
        return _new(tensor.name, dims, _ScaledGradientExt.apply(tensor.placeholder, scale, shift, axis),
                    sparse_dim=tensor.sparse_dim)

    @staticmethod
    def stop_gradient_scope():
        return torch.no_grad()

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

    @staticmethod
    def top_k(source, *, axis, k, k_dim, sorted=True):
        dims = list(source.dims)
        rest = [d for d in dims if d not in axis]
        x = _masked(_transposed(source, rest + list(axis)), rest + list(axis), axis, float("-inf"))
        x = x.reshape(list(x.shape[:len(rest)]) + [-1])
        values, flat = torch.topk(x, k, dim=-1, sorted=sorted)
        indices = []
        for d in reversed(axis):  # unravel the flat index, last axis first
            n = _dim_len(d)
            indices.insert(0, _new("top_k_indices", rest + [k_dim], (flat % n).to(torch.int32), sparse_dim=d))
            flat = torch.div(flat, n, rounding_mode="floor")
        return _new("top_k", rest + [k_dim], values), indices

    # ---- shapes (:mod:`._shape`) ----
    concat = staticmethod(_shape.concat)
    pad = staticmethod(_shape.pad)
    gather = staticmethod(_shape.gather)
    slice = staticmethod(_shape.slice_)
    split = staticmethod(_shape.split)
    split_dims = staticmethod(_shape.split_dims)
    merge_dims = staticmethod(_shape.merge_dims)
    reshape = staticmethod(_shape.reshape)
    expand_dim = staticmethod(_shape.expand_dim)
    squeeze = staticmethod(_shape.squeeze)
    replace_dim = staticmethod(_shape.replace_dim)
    cum_concat_step = staticmethod(_shape.cum_concat_step)

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
        """F.ctc_loss over the batch dims (those of targets besides its time dim, merged into one)."""
        if max_approx:
            raise FrontendError("rf.ctc_loss at %s: max_approx=True is not supported on the torch backend (as the "
                                "original; the layers backend has it)" % call_site())
        batch_dims = [d for d in targets.dims if d != targets_spatial_dim]
        class_dims = [d for d in logits.dims if d not in batch_dims and d != input_spatial_dim]
        if len(class_dims) != 1 or set(logits.dims) != set(batch_dims + [input_spatial_dim] + class_dims):
            raise FrontendError("rf.ctc_loss at %s: logits must have the targets' batch dims %s, the time dim and one "
                                "class dim, got %s" % (call_site(), dims_str(batch_dims), dims_str(logits.dims)))
        shape_b = [_dim_len(d) for d in batch_dims]
        x = _transposed(logits, [input_spatial_dim] + batch_dims + class_dims)
        x = x.reshape([x.shape[0], -1, x.shape[-1]])
        log_probs = torch.log_softmax(x.float(), dim=-1)  # float32 also under autocast
        labels = _transposed(targets, batch_dims + [targets_spatial_dim]).reshape(-1, _dim_len(targets_spatial_dim))

        def lens(d):
            size, sdims = _sizes(d)
            return _align(_new("s", sdims, size), batch_dims).expand(shape_b).reshape(-1).long()

        loss = F.ctc_loss(log_probs, labels.long(), lens(input_spatial_dim), lens(targets_spatial_dim),
                          blank=blank_index, reduction="none", zero_infinity=False).reshape(shape_b)
        return _new("ctc_loss", batch_dims, loss if x.dtype in (torch.float16, torch.bfloat16) else loss.to(x.dtype))

    @staticmethod
    def edit_distance(a, a_spatial_dim, b, b_spatial_dim, *, batch_dims, dtype):
        """Per sequence on the host (an int metric, no gradient)."""
        from ...frontend.edit_distance import levenshtein

        shape = [_dim_len(d) for d in batch_dims]
        xa = _transposed(a, list(batch_dims) + [a_spatial_dim]).reshape(-1, _dim_len(a_spatial_dim)).tolist()
        xb = _transposed(b, list(batch_dims) + [b_spatial_dim]).reshape(-1, _dim_len(b_spatial_dim)).tolist()

        def lens(d):
            if not _is_dyn(d):
                return [_dim_len(d)] * len(xa)
            size, sdims = _sizes(d)
            return _align(_new("s", sdims, size), batch_dims).expand(shape).reshape(-1).tolist()

        la, lb = lens(a_spatial_dim), lens(b_spatial_dim)
        res = [levenshtein(x[:n], y[:m]) for x, y, n, m in zip(xa, xb, la, lb)]
        return _new("edit_distance", batch_dims, torch.tensor(res, dtype=_DTYPES[dtype],
                                                              device=a.placeholder.device).reshape(shape))

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

    @staticmethod
    def random_choice_with_replacement(dims, *, probs, axis, common):
        new = [d for d in dims if d not in common]
        p = _transposed(probs, common + [axis]).reshape(-1, _dim_len(axis))
        n_new = 1
        for d in new:
            n_new *= _dim_len(d)
        idx = torch.multinomial(p.float(), n_new, replacement=True).to(torch.int32)
        raw = idx.reshape([_dim_len(d) for d in common + new])
        return _new("random_choice", dims, _transposed(_new("c", common + new, raw), dims), sparse_dim=axis)

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

    # ---- conv, pooling, STFT (:mod:`._conv`) ----
    conv = staticmethod(_conv.conv)
    transposed_conv = staticmethod(_conv.transposed_conv)
    stft = staticmethod(_conv.stft)
    pool = staticmethod(_conv.pool)

    # ---- LSTM and control flow (:mod:`._recurrent`) ----
    lstm = staticmethod(_recurrent.lstm)
    cond = staticmethod(_recurrent.cond)
    while_loop = staticmethod(_recurrent.while_loop)
    scan = staticmethod(_recurrent.scan)

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
    if init.distribution in ("truncated_normal", "normal", "untruncated_normal"):
        # (as the original: "normal" draws untruncated with the truncated normal's stddev correction)
        std = math.sqrt(scale) / (1.0 if init.distribution == "untruncated_normal" else 0.87962566103423978)
        if init.distribution != "truncated_normal":
            return torch.empty(shape, dtype=dtype).normal_(0.0, std)
        return torch.nn.init.trunc_normal_(torch.empty(shape, dtype=dtype), std=std, a=-2 * std, b=2 * std)
    raise FrontendError("rf.Parameter: unsupported init distribution %r" % init.distribution)