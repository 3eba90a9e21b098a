"""mark_as_loss options: log-probs CE normalized and scaled, dense-target CE with custom_inv_norm_factor from
Dim.get_size_tensor(), a sequence-level loss (summed, scaled), a loss marked as_error; param gradients."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
classes_dim = Dim(4, name="classes")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "soft": {"dims": (batch_dim, time_dim, classes_dim), "dtype": "float32"},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(in_dim, classes_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    logits = model.lin(extern_data["x"])
    log_probs = rf.log_softmax(logits, axis=classes_dim)
    ce = rf.cross_entropy(estimated=log_probs, estimated_type="log-probs", target=extern_data["classes"],
                          axis=classes_dim)
    ce.mark_as_loss("ce", scale=0.5, use_normalized_loss=True)
    target = rf.softmax(extern_data["soft"], axis=classes_dim)
    dense = rf.cross_entropy(estimated=logits, estimated_type="logits", target=target, axis=classes_dim)
    dense.mark_as_loss("dense", custom_inv_norm_factor=time_dim.get_size_tensor(), use_normalized_loss=True)
    seq = rf.reduce_sum(ce, axis=time_dim)
    seq.mark_as_loss("seq", scale=0.1)
    err = rf.cast(rf.compare(rf.reduce_argmax(logits, axis=classes_dim), "!=", extern_data["classes"]), "float32")
    err.mark_as_loss("fer", as_error=True)
