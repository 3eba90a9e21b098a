"""Train: rf.LSTM over time from an rf.LstmState made of params (broadcast over batch via rf.expand_dim), the final
state in a sequence-level loss next to a framewise normalized CE; param gradients."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
hid_dim = Dim(3, name="hid")
classes_dim = Dim(4, name="classes")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.h0 = rf.Parameter([hid_dim])
        self.lstm = rf.LSTM(in_dim, hid_dim)
        self.out = rf.Linear(hid_dim, classes_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    h0 = rf.expand_dim(model.h0, batch_dim)
    state = rf.LstmState(h=h0, c=rf.zeros([batch_dim, hid_dim]))
    y, final = model.lstm(extern_data["x"], state=state, spatial_dim=time_dim)
    logits = model.out(y)
    ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=extern_data["classes"], axis=classes_dim)
    ce.mark_as_loss("ce", use_normalized_loss=True)
    rf.reduce_sum(final.c * final.c, axis=hid_dim).mark_as_loss("final", scale=0.3)
