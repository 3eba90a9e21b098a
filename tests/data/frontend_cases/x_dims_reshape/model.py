"""Conv2d over the dynamic time and a feature dim used as spatial dim (same padding, even filter), split_dims of
the dynamic time (padded to a multiple), merge_dims of time and features (a dynamic merged dim), outputs in other
dim orders than computed (time-major, batch in the middle)."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")
one_dim = Dim(1, name="one")
win_dim = Dim(2, name="win")

extern_data = {"x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.conv = rf.Conv2d(one_dim, out_dim, (3, 2), padding="same")
        self.lin = rf.Linear(in_dim, out_dim)


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"]
    y, (t1, f1) = model.conv(rf.expand_dim(x, one_dim), in_spatial_dims=[time_dim, in_dim])
    y.mark_as_output("conv", shape=(batch_dim, t1, f1, out_dim))
    chunk_dim = Dim(None, name="chunks")
    chunks = rf.split_dims(x, axis=time_dim, dims=[chunk_dim, win_dim])
    chunks.mark_as_output("chunks", shape=(batch_dim, chunk_dim, win_dim, in_dim))
    flat, flat_dim = rf.merge_dims(x, dims=[time_dim, in_dim])
    (flat * 2.0).mark_as_output("flat", shape=(batch_dim, flat_dim))
    h = model.lin(x)
    h.mark_as_output("time_major", shape=(time_dim, out_dim, batch_dim))
    h.mark_as_output("batch_mid", shape=(out_dim, batch_dim, time_dim))
