"""rf LSTM and eager control flow (cond, while_loop, scan) of the torch backend."""

from __future__ import annotations

import torch

from ...tensor import Dim, single_step_dim
from ...frontend._utils import FrontendError, call_site, dims_str, is_tensor
from ._common import _align, _device, _dim_len, _is_dyn, _new, _on, _set_sizes, _sizes, _transposed
from ._shape import gather


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

def cond(pred, true_fn, false_fn):
    return true_fn() if bool(pred.placeholder) else false_fn()

def while_loop(cond, body, initial):
    loop_vars = initial
    while True:
        c = cond(loop_vars)
        if is_tensor(c):
            c = bool(c.placeholder)
        if not c:
            return loop_vars
        loop_vars = body(loop_vars)

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
        x_t = [gather(x, indices=t, axis=spatial_dim) for x in xs_flat]
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



def _state(s, batch_like, out_dim, shape_b):
    dims = batch_like + [out_dim]
    if set(s.dims) == set(dims):
        x = _transposed(s, dims)
    else:
        x = _align(s, dims).expand(shape_b + [out_dim.dimension])
    return x.reshape(-1, out_dim.dimension).contiguous()

