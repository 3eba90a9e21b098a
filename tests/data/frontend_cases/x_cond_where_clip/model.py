"""rf.cond on scalar tensor predicates (from Dim.get_dim_value_tensor) and on a Python bool; rf.where with tensor
and scalar branches; rf.clip_by_value; a param broadcast in both."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")

extern_data = {"x": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.scale = rf.Parameter([feat_dim])
        self.use_relu = False


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"]
    long_seqs = time_dim.get_dim_value_tensor() > 5
    y = rf.cond(long_seqs, lambda: x * model.scale, lambda: x - model.scale)
    short_seqs = time_dim.get_dim_value_tensor() < 3
    z = rf.cond(short_seqs, lambda: rf.relu(x), lambda: rf.tanh(x) * 2.0)
    w = rf.cond(model.use_relu, lambda: rf.relu(x), lambda: rf.abs(x))
    v = rf.where(x > 0.0, x, x * 0.1)
    u = rf.where(x > 0.5, 1.0, model.scale)
    c = rf.clip_by_value(x * model.scale, -0.3, 0.4)
    for name, t in [("y", y), ("z", z), ("w", w), ("v", v), ("u", u), ("c", c)]:
        t.mark_as_output(name, shape=(batch_dim, time_dim, feat_dim))
