"""rf.gather with an int index, with per-sequence indices from Dim.get_size_tensor(), with [B,T] indices (reversal)
and clip_to_valid (negative and too large indices); rf.range_over_dim; rf.Embedding next to a gather from a param."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")
vocab_dim = Dim(6, name="vocab")
emb_dim = Dim(2, name="emb")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"},
    "tokens": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": vocab_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.emb = rf.Embedding(vocab_dim, emb_dim)
        self.table = rf.Parameter([vocab_dim, feat_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x, tokens = extern_data["x"], extern_data["tokens"]
    rf.gather(x, axis=time_dim, indices=2).mark_as_output("third", shape=(batch_dim, feat_dim))
    last = rf.gather(x, axis=time_dim, indices=time_dim.get_size_tensor() - 1)
    last.mark_as_output("last", shape=(batch_dim, feat_dim))
    pos = rf.range_over_dim(time_dim)
    rev_idx = rf.combine(time_dim.get_size_tensor() - 1, "-", pos, allow_broadcast_all_sources=True)
    rev = rf.gather(x, axis=time_dim, indices=rev_idx, clip_to_valid=True)
    rev.mark_as_output("rev", shape=(batch_dim, time_dim, feat_dim))
    shift_idx = rf.combine(pos * 2 - 3, "+", rf.zeros([batch_dim], dtype="int32"), allow_broadcast_all_sources=True)
    shifted = rf.gather(x, axis=time_dim, indices=shift_idx, clip_to_valid=True)
    shifted.mark_as_output("shifted", shape=(batch_dim, time_dim, feat_dim))
    rel = rf.combine(rf.cast(pos, "float32"), "/", rf.cast(time_dim.get_size_tensor(), "float32"),
                     allow_broadcast_all_sources=True)
    rel.mark_as_output("rel", shape=(batch_dim, time_dim))
    rf.cast(pos, "float32").mark_as_output("pos", shape=(time_dim,))
    e = model.emb(tokens)
    e.mark_as_output("emb", shape=(batch_dim, time_dim, emb_dim))
    rows = rf.gather(model.table, indices=tokens)
    (rows + x).mark_as_output("rows", shape=(batch_dim, time_dim, feat_dim))
