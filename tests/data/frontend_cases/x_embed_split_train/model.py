"""Train: Embedding, rf.split + expand_dim + rf.concat of static dims, elementwise math (gelu, exp, sqrt, abs),
a param with .initial kept (keep_initial), LayerNorm, framewise CE on logits; param gradients."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
vocab_dim = Dim(7, name="vocab")
emb_dim = Dim(4, name="emb")
half1_dim = Dim(2, name="half1")
half2_dim = Dim(2, name="half2")
rep_dim = Dim(2, name="rep")
classes_dim = Dim(5, name="classes")

extern_data = {
    "tokens": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": vocab_dim},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}
keep_initial = ["gain"]


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.emb = rf.Embedding(vocab_dim, emb_dim)
        self.gain = rf.Parameter([half2_dim])
        self.gain.initial = 0.75
        self.norm = rf.LayerNorm(emb_dim)
        self.out = rf.Linear(emb_dim, classes_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    e = model.emb(extern_data["tokens"])
    a, b = rf.split(e, axis=emb_dim, out_dims=[half1_dim, half2_dim])
    a = rf.gelu(a) + rf.sqrt(rf.abs(a) + 1.0)
    b = rf.exp(-rf.abs(b)) * model.gain
    h, _ = rf.concat((a, half1_dim), (b, half2_dim), out_dim=emb_dim)
    h = model.norm(h)
    h2 = rf.reduce_sum(rf.expand_dim(h, rep_dim), axis=rep_dim) * 0.5
    logits = model.out(h2)
    loss = rf.cross_entropy(estimated=logits, estimated_type="logits", target=extern_data["classes"],
                            axis=classes_dim)
    loss.mark_as_loss("ce")
