"""Losses of other shapes: [B,F] (normalized by B*F, scaled), [B,T,F] (by the frames times F), a param-only loss
[in,out], a scalar, a custom scalar inverse norm from Dim.get_dim_value_tensor(), a normalized error and a loss with
scale 0; gradients through cond, where, clip_by_value, gather (clip_to_valid) and a dynamic concat."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")

extern_data = {"x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(in_dim, out_dim)
        self.gate = rf.Parameter([in_dim])


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    x = extern_data["x"]
    h = rf.cond(time_dim.get_dim_value_tensor() > 4, lambda: x * model.gate, lambda: x + model.gate)
    h = rf.where(h > 0.0, h, rf.clip_by_value(h * model.gate, -0.2, 0.2))
    y = model.lin(h)
    pos = rf.range_over_dim(time_dim)
    prev_idx = rf.combine(pos - 1, "+", rf.zeros([batch_dim], dtype="int32"), allow_broadcast_all_sources=True)
    prev = rf.gather(y, axis=time_dim, indices=prev_idx, clip_to_valid=True)
    both, both_time = rf.concat((y, time_dim), (prev * 0.5, time_dim))
    rf.reduce_sum(y * y, axis=time_dim).mark_as_loss("bf", use_normalized_loss=True, scale=2.0)
    (prev * y).mark_as_loss("btf", use_normalized_loss=True)
    (model.lin.weight * model.lin.weight).mark_as_loss("l2", use_normalized_loss=True, scale=0.5)
    rf.reduce_sum(rf.tanh(both), axis=(batch_dim, both_time, out_dim)).mark_as_loss("scalar", scale=0.01)
    rf.reduce_sum(y, axis=out_dim).mark_as_loss(
        "custom", custom_inv_norm_factor=time_dim.get_dim_value_tensor(), use_normalized_loss=True)
    rf.reduce_sum(h, axis=in_dim).mark_as_loss("err", as_error=True, use_normalized_loss=True)
    rf.reduce_sum(x, axis=in_dim).mark_as_loss("zero", scale=0.0)
