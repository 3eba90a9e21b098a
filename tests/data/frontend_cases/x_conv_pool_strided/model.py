"""Conv1d over the dynamic time dim with padding valid and stride 2, rf.max_pool (valid, stride 2),
rf.max_pool1d (default stride = pool size), matmul reducing over time (masked), softmax over time, a CE on probs,
LayerNorm with its own eps and Linear without bias, the LSTM run step by step in a Python loop."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim

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
        self.conv = rf.Conv1d(in_dim, out_dim, 3, padding="valid", strides=2)
        self.norm = rf.LayerNorm(in_dim, eps=1e-3)
        self.proj = rf.Linear(in_dim, out_dim, with_bias=False)
        self.lstm = rf.LSTM(in_dim, out_dim)


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x, t = extern_data["x"], extern_data["t"]
    c, c_time = model.conv(x, in_spatial_dim=time_dim)
    c.mark_as_output("conv", shape=(batch_dim, c_time, out_dim))
    p, (p_time,) = rf.max_pool(x, pool_size=3, strides=2, padding="valid", in_spatial_dims=[time_dim])
    p.mark_as_output("pool", shape=(batch_dim, p_time, in_dim))
    p1, p1_time = rf.max_pool1d(x, pool_size=2, in_spatial_dim=time_dim)
    p1.mark_as_output("pool1d", shape=(batch_dim, p1_time, in_dim))
    h = model.proj(model.norm(x))
    h.mark_as_output("proj", shape=(batch_dim, time_dim, out_dim))
    rf.matmul(x, h, reduce=time_dim).mark_as_output("xtx", shape=(batch_dim, in_dim, out_dim))
    rf.softmax(x, axis=time_dim).mark_as_output("sm_t", shape=(batch_dim, time_dim, in_dim))
    ce = rf.cross_entropy(estimated=rf.softmax(x, axis=in_dim), estimated_type="probs", target=t, axis=in_dim)
    ce.mark_as_output("ce_probs", shape=(batch_dim, time_dim))
    state = model.lstm.default_initial_state(batch_dims=[batch_dim])
    for step_i in range(3):
        y, state = model.lstm(rf.gather(x, axis=time_dim, indices=step_i), state=state, spatial_dim=single_step_dim)
    y.mark_as_output("lstm3", shape=(batch_dim, out_dim))
