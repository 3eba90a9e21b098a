"""Operators (unary minus, **, //, %, reversed operands, == / != with scalars, >=, <, logical ops), int math on
sparse indices and their reduction, a reduction over the batch dim (no masking), Dim values in computations,
expand_dim of a dynamic dim, float -> int cast, range_over_dim of a static dim, rf.maximum/minimum broadcasting all
sources, rf.ones/rf.full, a param as output, cond with a tuple and with module calls in the branches."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "t": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": in_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(in_dim, out_dim)
        self.lin_nb = rf.Linear(in_dim, out_dim, with_bias=False)
        self.bias = rf.Parameter([out_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x, t = extern_data["x"], extern_data["t"]
    shape = (batch_dim, time_dim, in_dim)
    ((-x) ** 2 + 1.0 - x * 0.5 + 2.0 / (rf.abs(x) + 1.0) - x // 0.5 + x % 0.7).mark_as_output("arith", shape=shape)
    cmp = rf.cast(x >= 0.0, "float32") + rf.cast(x < -0.5, "float32") * 2.0 + rf.cast(t != 1, "float32") * 4.0
    (cmp + rf.cast(t == 2, "float32") * 8.0).mark_as_output("cmp", shape=shape)
    rf.cast(rf.logical_not(rf.logical_and(x > 0.0, x < 1.0)), "int32").mark_as_output("logic", shape=shape)
    (t * 2 + 1 - t // 2).mark_as_output("int_ops", shape=(batch_dim, time_dim))
    rf.reduce_sum(t, axis=time_dim).mark_as_output("t_sum", shape=(batch_dim,))
    rf.reduce_max(t, axis=time_dim).mark_as_output("t_max", shape=(batch_dim,))
    rf.reduce_mean(x, axis=batch_dim).mark_as_output("batch_mean", shape=(time_dim, in_dim))
    scale = rf.cast(time_dim.get_dim_value_tensor(), "float32") + rf.cast(batch_dim.get_dim_value_tensor(), "float32")
    (x / scale).mark_as_output("dimval", shape=shape)
    (time_dim.get_size_tensor() * 2).mark_as_output("sizes2", shape=(batch_dim,))
    rf.cast(time_dim.get_dim_value_tensor(), "float32").mark_as_output("max_len", shape=())
    rf.expand_dim(rf.reduce_sum(x, axis=time_dim), time_dim).mark_as_output("expanded", shape=shape)
    rf.cast(x * 3.0, "int32").mark_as_output("trunc", shape=shape)
    (x + rf.range_over_dim(in_dim, dtype="float32")).mark_as_output("ranged", shape=shape)
    mn = rf.minimum(x, model.bias, allow_broadcast_all_sources=True)
    mn.mark_as_output("min_bc", shape=(batch_dim, time_dim, in_dim, out_dim))
    rf.maximum(x, 0.25).mark_as_output("max_s", shape=shape)
    (rf.ones([batch_dim, in_dim]) + rf.full(dims=[in_dim], fill_value=2.5)).mark_as_output("ones", shape=(batch_dim, in_dim))
    (model.lin.weight * 2.0).mark_as_output("weight2", shape=(in_dim, out_dim))
    a, b = rf.cond(time_dim.get_dim_value_tensor() > 3, lambda: (x, x * 2.0), lambda: (x * 3.0, x))
    (a + b).mark_as_output("cond_tuple", shape=shape)
    y = rf.cond(time_dim.get_dim_value_tensor() > 9, lambda: model.lin(x), lambda: model.lin_nb(x))
    y.mark_as_output("cond_module", shape=(batch_dim, time_dim, out_dim))
    act = rf.sigmoid(x) + rf.log(rf.abs(x) + 1.0) + rf.silu(x) + rf.softplus(x) + rf.log_sigmoid(x)
    (act + rf.rsqrt(rf.abs(x) + 1.0) + rf.square(x) + rf.tanh(x) + rf.relu(x)).mark_as_output("acts", shape=shape)
