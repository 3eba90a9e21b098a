"""rf modules and functions built from the rf primitives: Linear, Embedding, Conv1d/2d, pooling, LayerNorm,
BatchNorm, LSTM, losses, dropout, random, State, cond."""

from __future__ import annotations

from ..tensor import Dim
from . import array_, math_
from ._backend import get_backend_for_tensor, get_selected_backend
from ._utils import check_dims_in, dims_str, error, is_tensor
from .conv import (  # noqa: F401 (conv and pooling live in conv.py; re-exported for the old import path)
    Conv1d, Conv2d, Conv3d, conv, make_conv_out_spatial_dims, max_pool, max_pool1d, pool, pool1d, pool2d, pool3d,
    use_mask_default)
from .dims import dim_match_priority_when_needed
from .loop import Loop, scan, while_loop  # noqa: F401 (the loops live in loop.py; re-exported)
from .module import Glorot, Module, Parameter


# ---- linear ----
class Linear(Module):
    """y = x . weight + bias over in_dim; params ``weight`` [in_dim, out_dim], ``bias`` [out_dim]."""

    def __init__(self, in_dim, out_dim, *, with_bias=True):
        super().__init__()
        if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
            raise error("Linear", "in_dim and out_dim must be Dims, got %r, %r" % (in_dim, out_dim))
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.weight = Parameter([dim_match_priority_when_needed(in_dim, out_dim), out_dim])
        self.weight.initial = Glorot()
        self.with_bias = with_bias
        if with_bias:
            self.bias = Parameter([out_dim])
            self.bias.initial = 0.0

    def __call__(self, source):
        if not is_tensor(source):
            raise error("Linear", "expects a Tensor, got %r" % (source,))
        if self.in_dim not in source.dims:
            raise error("Linear", "in_dim %s is not a dim of the input %s" % (
                self.in_dim.short_repr(), dims_str(source.dims)))
        bias = self.bias if self.with_bias else None
        fused = get_backend_for_tensor(source).linear
        if fused is not None:
            return fused(source, weight=self.weight, bias=bias, in_dim=self.in_dim)
        out = math_.matmul(source, self.weight, reduce=self.in_dim)
        return out + bias if bias is not None else out


class Embedding(Module):
    """Lookup of sparse indices (sparse_dim in_dim) in ``weight`` [in_dim, out_dim]."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.weight = Parameter([in_dim, out_dim])
        self.weight.initial = Glorot()

    def __call__(self, source):
        if not is_tensor(source) or source.sparse_dim != self.in_dim:
            raise error("Embedding", "expects sparse indices with sparse_dim %s, got %r" % (
                self.in_dim.short_repr(), source))
        return array_.gather(self.weight, indices=source, axis=self.in_dim)


# ---- normalization ----
class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * scale + bias over in_dim; params ``scale`` (1), ``bias`` (0)."""

    def __init__(self, in_dim, *, eps=1e-6, with_bias=True):
        super().__init__()
        self.in_dim = in_dim
        self.eps = eps
        self.scale = Parameter([in_dim])
        self.scale.initial = 1.0
        self.with_bias = with_bias
        if with_bias:
            self.bias = Parameter([in_dim])
            self.bias.initial = 0.0

    def __call__(self, x):
        check_dims_in("LayerNorm", x, [self.in_dim], what="in_dim")
        bias = self.bias if self.with_bias else None
        fused = get_backend_for_tensor(x).layer_norm
        if fused is not None:
            return fused(x, in_dim=self.in_dim, scale=self.scale, bias=bias, eps=self.eps)
        mean = math_.reduce_mean(x, axis=self.in_dim)
        variance = math_.reduce_mean(math_.squared_difference(x, mean), axis=self.in_dim)
        out = (x - mean) * math_.rsqrt(variance + self.eps) * self.scale
        return out + bias if bias is not None else out


class BatchNorm(Module):
    """
    Batch norm over in_dim: params ``running_mean``, ``running_variance`` (auxiliary), ``gamma``, ``beta``.
    Training: normalized by the (masked) batch statistics, running stats updated with momentum; else the running ones.
    """

    def __init__(self, in_dim, *, affine=True, momentum=0.1, eps=1e-3, use_mask=None, **_unused):
        super().__init__()
        if _unused:
            raise error("BatchNorm", "unsupported option(s) %s" % sorted(_unused))
        self.in_dim = in_dim
        self.affine = affine
        self.momentum = momentum
        self.eps = eps
        self.use_mask = use_mask
        self.running_mean = Parameter([in_dim], auxiliary=True)
        self.running_mean.initial = 0.0
        self.running_variance = Parameter([in_dim], auxiliary=True)
        self.running_variance.initial = 1.0
        if affine:
            self.gamma = Parameter([in_dim])
            self.gamma.initial = 1.0
            self.beta = Parameter([in_dim])
            self.beta.initial = 0.0

    def __call__(self, source):
        check_dims_in("BatchNorm", source, [self.in_dim], what="in_dim")
        return get_backend_for_tensor(source).batch_norm(
            source, in_dim=self.in_dim, running_mean=self.running_mean, running_variance=self.running_variance,
            gamma=self.gamma if self.affine else None, beta=self.beta if self.affine else None, epsilon=self.eps,
            momentum=self.momentum, affine=self.affine, use_mask=True if self.use_mask is None else self.use_mask)


# ---- recurrent ----
class State(dict):
    """
    Nested state (attribute access to the dict entries), as rf.State: ``State(h=..., c=...)``, ``State({"h": ...})``,
    or ``State(x)`` for one non-dict value (``State(state=x)``).
    """

    def __init__(self, *args, **kwargs):
        if args and kwargs or len(args) > 1:
            raise TypeError("State(...): either keyword arguments or one positional argument, got %i and %s" % (
                len(args), sorted(kwargs)))
        if args:
            super().__init__(**args[0]) if isinstance(args[0], dict) else super().__init__(state=args[0])
        else:
            super().__init__(**kwargs)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % (k, v) for k, v in self.items()))

    def __getattr__(self, item):
        try:
            return self[item]
        except KeyError:
            raise AttributeError("%r has no %r" % (self, item)) from None

    def __setattr__(self, key, value):
        self[key] = value

    def deep_tensors(self):
        """All Tensors in this state and its nested dicts / lists / tuples (each once)."""
        return self.cls_deep_tensors(self)

    @classmethod
    def cls_deep_tensors(cls, obj):
        """All Tensors in obj and its nested dicts / lists / tuples (each once, in order)."""
        res, seen, queue = [], set(), [obj]
        while queue:
            x = queue.pop(0)
            if is_tensor(x):
                if id(x) not in seen:
                    seen.add(id(x))
                    res.append(x)
            elif isinstance(x, dict) or hasattr(x, "keys") and hasattr(x, "values"):
                queue[:0] = list(x.values())
            elif isinstance(x, (list, tuple)):
                queue[:0] = list(x)
            elif x is not None and not isinstance(x, (Dim, int, float, bool, str)):
                raise TypeError("State.cls_deep_tensors: unexpected %r" % (x,))
        return res


class LstmState(State):
    def __init__(self, *_args, h=None, c=None, **kwargs):
        super().__init__(**kwargs)
        if _args:
            if len(_args) == 1 and isinstance(_args[0], dict):
                self.update(_args[0])
            else:
                raise TypeError("LstmState(h=, c=)")
        if h is not None:
            self["h"] = h
        if c is not None:
            self["c"] = c


class LSTM(Module):
    """
    LSTM (gate order i, f, g, o as PyTorch) over a spatial dim (or one step with ``single_step_dim``):
    params ``ff_weight`` [4*out, in], ``rec_weight`` [4*out, out], ``bias`` [4*out].
    ``(out, new_state) = lstm(x, state=, spatial_dim=)``.
    """

    def __init__(self, in_dim, out_dim, *, with_bias=True):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.gates_dim = 4 * out_dim
        self.ff_weight = Parameter([self.gates_dim, in_dim])
        self.ff_weight.initial = Glorot()
        self.rec_weight = Parameter([self.gates_dim, out_dim])
        self.rec_weight.initial = Glorot()
        self.with_bias = with_bias
        if with_bias:
            self.bias = Parameter([self.gates_dim])
            self.bias.initial = 0.0

    def default_initial_state(self, *, batch_dims):
        return LstmState(h=array_.zeros(list(batch_dims) + [self.out_dim]),
                         c=array_.zeros(list(batch_dims) + [self.out_dim]))

    def __call__(self, source, *, state, spatial_dim):
        check_dims_in("LSTM", source, [self.in_dim], what="in_dim")
        if spatial_dim is not single_step_dim():
            check_dims_in("LSTM", source, [spatial_dim], what="spatial_dim")
        if not self.with_bias:
            raise error("LSTM", "with_bias=False is not supported")
        out, (h, c) = get_backend_for_tensor(source).lstm(
            source, state_h=state.h, state_c=state.c, ff_weight=self.ff_weight, rec_weight=self.rec_weight,
            bias=self.bias, spatial_dim=spatial_dim, in_dim=self.in_dim, out_dim=self.out_dim)
        return out, LstmState(h=h, c=c)


def single_step_dim():
    from ..tensor import single_step_dim as d

    return d


# ---- losses ----
def cross_entropy(*, estimated, target, axis, estimated_type):
    """-sum_axis target * log(estimated); target sparse (indices) or dense (probs); estimated probs/log-probs/logits."""
    check_dims_in("cross_entropy", estimated, [axis])
    if target.sparse_dim is not None and target.sparse_dim != axis:
        raise error("cross_entropy", "target sparse_dim %s differs from axis %s" % (
            target.sparse_dim.short_repr(), axis.short_repr()))
    if estimated_type == "logits":
        return get_backend_for_tensor(estimated).softmax_cross_entropy_with_logits(
            logits=estimated, targets=target, axis=axis)
    if estimated_type == "probs":
        log_prob = math_.safe_log(estimated)
    elif estimated_type == "log-probs":
        log_prob = estimated
    else:
        raise error("cross_entropy", "estimated_type must be 'probs', 'log-probs' or 'logits', got %r" % (
            estimated_type,))
    if target.sparse_dim is not None:
        return -array_.gather(log_prob, indices=target, axis=axis)
    return -math_.matmul(target, log_prob, reduce=axis)


def ctc_loss(*, logits, targets, input_spatial_dim, targets_spatial_dim, blank_index, max_approx=False,
             logits_normalized=False):
    """CTC: -log p(targets | logits) per sequence (dims of logits without the time and class dims)."""
    check_dims_in("ctc_loss", logits, [input_spatial_dim])
    check_dims_in("ctc_loss", targets, [targets_spatial_dim])
    if max_approx:
        raise error("ctc_loss", "max_approx=True is not supported")
    return get_backend_for_tensor(logits).ctc_loss(
        logits=logits, targets=targets, input_spatial_dim=input_spatial_dim,
        targets_spatial_dim=targets_spatial_dim, blank_index=blank_index, max_approx=max_approx)


# ---- dropout and random ----
def dropout(source, drop_prob, *, axis=None, on_forward=False):
    """Dropout in training (identity otherwise); axis: the mask varies only along these dims (and batch)."""
    if not drop_prob:
        return source
    if axis is True:
        axis = source.feature_dim
    axes = None if axis is None or axis is False else ([axis] if isinstance(axis, Dim) else list(axis))
    if axes:
        check_dims_in("dropout", source, axes)
    return get_backend_for_tensor(source).dropout(source, drop_prob, axis=axes, on_forward=on_forward)


def random(*, dims, dtype="float32", distribution, mean=None, stddev=None, bound=None, minval=None, maxval=None,
           seed=None, sparse_dim=None, device=None, **kwargs):
    if kwargs:
        raise error("random", "unsupported option(s) %s" % sorted(kwargs))
    return get_selected_backend().random(
        dims=list(dims), dtype=dtype, distribution=distribution, mean=mean, stddev=stddev, bound=bound,
        minval=minval, maxval=maxval, seed=seed, sparse_dim=sparse_dim, device=device)


def random_normal(dims, *, mean=0.0, stddev=1.0, dtype="float32", seed=None):
    return random(dims=dims, dtype=dtype, distribution="normal", mean=mean, stddev=stddev, seed=seed)


def random_uniform(dims, *, minval=0.0, maxval=1.0, dtype="float32", seed=None, sparse_dim=None):
    return random(dims=dims, dtype=dtype, distribution="uniform", minval=minval, maxval=maxval, seed=seed,
                  sparse_dim=sparse_dim)


def set_random_seed(seed):
    from ._backend import _global_backend

    if _global_backend[0] is not None:
        _global_backend[0].set_random_seed(seed)


# ---- control flow ----
def cond(pred, true_fn, false_fn):
    """true_fn() if pred else false_fn(); a Tensor pred goes to the backend (layers: both branches + where)."""
    if isinstance(pred, bool) or not is_tensor(pred):
        return true_fn() if pred else false_fn()
    if pred.dims:
        raise error("cond", "pred must be a scalar, got dims %s" % dims_str(pred.dims))
    return get_backend_for_tensor(pred).cond(pred, true_fn, false_fn)


