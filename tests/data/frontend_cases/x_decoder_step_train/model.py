"""Train: a two-step attention decoder written with single steps: Embedding of target tokens (gather at int
positions of the target time), rf.LSTM with single_step_dim, rf.dot_attention over the encoder time, concat of the
static state and context dims, per-step CE losses; param gradients."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim

time_dim = Dim(None, name="time")
out_time_dim = Dim(None, name="out_time")
in_dim = Dim(3, name="in")
key_dim = Dim(2, name="key")
vocab_dim = Dim(5, name="vocab")
emb_dim = Dim(2, name="emb")
hid_dim = Dim(2, name="hid")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "y": {"dims": (batch_dim, out_time_dim), "dtype": "int32", "sparse_dim": vocab_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.keys = rf.Linear(in_dim, key_dim)
        self.query = rf.Linear(hid_dim, key_dim, with_bias=False)
        self.emb = rf.Embedding(vocab_dim, emb_dim)
        self.lstm = rf.LSTM(emb_dim, hid_dim)
        self.out = rf.Linear(hid_dim + in_dim, vocab_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    x, y = extern_data["x"], extern_data["y"]
    keys = model.keys(x)
    state = model.lstm.default_initial_state(batch_dims=[batch_dim])
    for i in range(2):
        prev = rf.gather(y, axis=out_time_dim, indices=i)
        h, state = model.lstm(model.emb(prev), state=state, spatial_dim=single_step_dim)
        att = rf.dot_attention(model.query(h), keys, x, key_dim=key_dim, axis=time_dim)
        both, _ = rf.concat((h, hid_dim), (att, in_dim), out_dim=model.out.in_dim)
        logits = model.out(both)
        target = rf.gather(y, axis=out_time_dim, indices=i + 1)
        ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=target, axis=vocab_dim)
        ce.mark_as_loss("ce%i" % i, use_normalized_loss=True)
