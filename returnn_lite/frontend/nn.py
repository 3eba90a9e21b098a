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
from .module import Glorot, Module, Parameter, State  # noqa: F401 (State: also rf.State from here)
from .rand import random, random_normal, random_uniform, set_random_seed  # noqa: F401 (the old import path)
from .loop import Loop, scan, while_loop  # noqa: F401 (the loops live in loop.py; re-exported)


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
    """(x - mean) / sqrt(var + eps) * scale + bias over in_dim (a Dim or Dims); params ``scale`` (1), ``bias`` (0)."""

    def __init__(self, in_dim, *, eps=1e-6, with_bias=True):
        super().__init__()
        self.in_dim = in_dim
        self.eps = eps
        self.scale = Parameter([in_dim] if isinstance(in_dim, Dim) else list(in_dim))
        self.scale.initial = 1.0
        self.with_bias = with_bias
        self.bias = None
        if with_bias:
            self.bias = Parameter(self.scale.dims)
            self.bias.initial = 0.0

    def __call__(self, x):
        in_dims = [self.in_dim] if isinstance(self.in_dim, Dim) else list(self.in_dim)
        check_dims_in("LayerNorm", x, in_dims, what="in_dim")
        bias = self.bias if self.with_bias else None
        fused = get_backend_for_tensor(x).layer_norm
        if fused is not None and len(in_dims) == 1:
            return fused(x, in_dim=self.in_dim, scale=self.scale, bias=bias, eps=self.eps)
        mean = math_.reduce_mean(x, axis=in_dims)
        variance = math_.reduce_mean(math_.squared_difference(x, mean), axis=in_dims)
        out = (x - mean) * math_.rsqrt(variance + self.eps) * self.scale
        return out + bias if bias is not None else out


class BatchNorm(Module):
    """
    Batch norm over in_dim: params ``running_mean``, ``running_variance`` (auxiliary; not with
    ``track_running_stats=False``), ``gamma``, ``beta``. Training (or without running stats): normalized by the
    (masked) batch statistics, running stats updated with momentum; else the running ones.
    """

    def __init__(self, in_dim, *, affine=True, momentum=0.1, eps=1e-3, track_running_stats=True, use_mask=None,
                 **_unused):
        super().__init__()
        if _unused:
            raise error("BatchNorm", "unsupported option(s) %s" % sorted(_unused))
        self.in_dim = in_dim
        self.affine = affine
        self.momentum = momentum
        self.eps = eps
        self.use_mask = use_mask
        self.running_mean = self.running_variance = None
        if track_running_stats:
            self.running_mean = Parameter([in_dim], auxiliary=True)
            self.running_mean.initial = 0.0
            self.running_variance = Parameter([in_dim], auxiliary=True)
            self.running_variance.initial = 1.0
        self.gamma = self.beta = None
        if affine:
            self.gamma = Parameter([in_dim])
            self.gamma.initial = 1.0
            self.beta = Parameter([in_dim])
            self.beta.initial = 0.0

    def __call__(self, source):
        check_dims_in("BatchNorm", source, [self.in_dim], what="in_dim")
        use_mask = True if self.use_mask is None else self.use_mask
        if self.running_mean is None:  # always the statistics of this batch
            from .normalization import moments

            mean, variance = moments(source, axis=[d for d in source.dims if d != self.in_dim], use_mask=use_mask)
            out = (source - mean) * math_.rsqrt(variance + self.eps)
            return out * self.gamma + self.beta if self.affine else out
        return get_backend_for_tensor(source).batch_norm(
            source, in_dim=self.in_dim, running_mean=self.running_mean, running_variance=self.running_variance,
            gamma=self.gamma, beta=self.beta, epsilon=self.eps, momentum=self.momentum, affine=self.affine,
            use_mask=use_mask)


# ---- recurrent ----
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


class ZoneoutLSTM(LSTM):
    """
    LSTM with zoneout (https://arxiv.org/abs/1606.01305), the params of :class:`LSTM`, as rf code per frame
    (rf.scan): gates split in ``parts_order`` (i input gate, f forget, o output, j/c/g cell input; "ifco" is the
    torch order of rf.LSTM), ``forget_bias`` added to f; in training the new c / h keep the previous value with
    probability zoneout_factor_cell / _output, else (1 - p) * new + p * prev.
    """

    def __init__(self, in_dim, out_dim, *, with_bias=True, zoneout_factor_cell=0.0, zoneout_factor_output=0.0,
                 use_zoneout_output=True, forget_bias=0.0, parts_order="ifco"):
        super().__init__(in_dim, out_dim, with_bias=with_bias)
        self.zoneout_factor_cell = zoneout_factor_cell
        self.zoneout_factor_output = zoneout_factor_output
        self.use_zoneout_output = use_zoneout_output
        self.forget_bias = forget_bias
        self.parts_order = parts_order.replace("c", "j").replace("g", "j")
        if len(self.parts_order) != 4 or set(self.parts_order) != set("ijfo"):
            raise error("ZoneoutLSTM", "parts_order=%r must order i, f, o and one of j/c/g" % (parts_order,))
        from .defaults import dropout_broadcast_default

        self.dropout_broadcast = dropout_broadcast_default()

    def _zoneout(self, prev, cur, factor):
        if factor == 0.0:
            return cur
        from .run_ctx import get_run_ctx

        axis = self.out_dim if self.dropout_broadcast else None
        return cond(get_run_ctx().train_flag,
                    lambda: (1 - factor) * dropout(cur - prev, factor, axis=axis) + prev,
                    lambda: (1 - factor) * cur + factor * prev)

    def _inner_step(self, x, *, state):
        x = x + math_.matmul(state.h, self.rec_weight, reduce=self.out_dim)
        parts = dict(zip(self.parts_order, array_.split(x, axis=self.gates_dim, out_dims=[self.out_dim] * 4)))
        new_c = math_.sigmoid(parts["f"] + self.forget_bias) * state.c + math_.sigmoid(parts["i"]) * math_.tanh(
            parts["j"])
        new_h = math_.sigmoid(parts["o"]) * math_.tanh(new_c)
        c = self._zoneout(state.c, new_c, self.zoneout_factor_cell)
        h = self._zoneout(state.h, new_h, self.zoneout_factor_output)
        return (h if self.use_zoneout_output else new_h), LstmState(h=h, c=c)

    def __call__(self, source, *, state, spatial_dim):
        check_dims_in("ZoneoutLSTM", source, [self.in_dim], what="in_dim")
        x = math_.matmul(source, self.ff_weight, reduce=self.in_dim)
        if self.with_bias:
            x = x + self.bias
        if spatial_dim is single_step_dim():
            return self._inner_step(x, state=state)
        from ..tensor import Tensor

        batch_dims = [d for d in source.dims if d not in (spatial_dim, self.in_dim)]
        template = Tensor("lstm-out", dims=batch_dims + [self.out_dim], dtype=source.dtype)
        out, new_state, _ = scan(spatial_dim=spatial_dim, initial=state, xs=x, ys=template,
                                 body=lambda x_t, s: self._inner_step(x_t, state=s))
        return out, new_state


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
        log_prob = math_.log(estimated)  # (as the original: no eps)
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
    """CTC: -log p(targets | logits) per sequence (dims of logits without the time and class dims). The backends
    take log_softmax of the logits, which leaves normalized ones (logits_normalized=True) as they are; max_approx
    (Viterbi): layers backend only (as the original)."""
    check_dims_in("ctc_loss", logits, [input_spatial_dim])
    check_dims_in("ctc_loss", targets, [targets_spatial_dim])
    return get_backend_for_tensor(logits).ctc_loss(
        logits=logits, targets=targets, input_spatial_dim=input_spatial_dim,
        targets_spatial_dim=targets_spatial_dim, blank_index=blank_index, max_approx=max_approx)


# ---- dropout ----
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


# ---- control flow ----
def cond(pred, true_fn, false_fn):
    """true_fn() if pred else false_fn(); a Tensor pred goes to the backend (layers: both branches + where)."""
    if isinstance(pred, bool) or not is_tensor(pred):
        return true_fn() if pred else false_fn()
    if pred.dims:
        raise error("cond", "pred must be a scalar, got dims %s" % dims_str(pred.dims))
    return get_backend_for_tensor(pred).cond(pred, true_fn, false_fn)


