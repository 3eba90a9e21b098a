"""rf.LSTM one step at a time (single_step_dim, rf.LstmState from a Linear), and over time from the same state;
rf.gather with int indices takes the first frames."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
hid_dim = Dim(4, name="hid")

extern_data = {"x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.init = rf.Linear(in_dim, hid_dim)
        self.lstm = rf.LSTM(in_dim, hid_dim)


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"]
    x0 = rf.gather(x, axis=time_dim, indices=0)
    x1 = rf.gather(x, axis=time_dim, indices=1)
    state = rf.LstmState(h=rf.tanh(model.init(x0)), c=rf.zeros([batch_dim, hid_dim]))
    y1, s1 = model.lstm(x0, state=state, spatial_dim=single_step_dim)
    y2, s2 = model.lstm(x1, state=s1, spatial_dim=single_step_dim)
    ys, s_last = model.lstm(x, state=state, spatial_dim=time_dim)
    y2.mark_as_output("y2", shape=(batch_dim, hid_dim))
    s2.c.mark_as_output("c2", shape=(batch_dim, hid_dim))
    ys.mark_as_output("ys", shape=(batch_dim, time_dim, hid_dim))
    s_last.h.mark_as_output("h_last", shape=(batch_dim, hid_dim))
    s_last.c.mark_as_output("c_last", shape=(batch_dim, hid_dim))
