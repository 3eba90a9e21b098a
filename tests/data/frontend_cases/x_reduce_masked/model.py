"""Reductions over the dynamic time dim must ignore the padded frames: logsumexp, argmax, min, mean over two dims,
log_softmax over time and over features, a sum over all dims to a scalar, argmax over features."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
feat_dim = Dim(4, name="feat")

extern_data = {"x": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.offset = rf.Parameter([feat_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"] + model.offset
    rf.reduce_logsumexp(x, axis=time_dim).mark_as_output("lse", shape=(batch_dim, feat_dim))
    rf.reduce_argmax(x, axis=time_dim).mark_as_output("argmax_t", shape=(batch_dim, feat_dim))
    rf.reduce_min(x, axis=time_dim).mark_as_output("min_t", shape=(batch_dim, feat_dim))
    rf.reduce_mean(x, axis=(time_dim, feat_dim)).mark_as_output("mean_tf", shape=(batch_dim,))
    rf.log_softmax(x, axis=time_dim).mark_as_output("lsm_t", shape=(batch_dim, time_dim, feat_dim))
    rf.log_softmax(x, axis=feat_dim).mark_as_output("lsm_f", shape=(batch_dim, time_dim, feat_dim))
    rf.reduce_sum(x, axis=(batch_dim, time_dim, feat_dim)).mark_as_output("total", shape=())
    rf.reduce_argmax(x, axis=feat_dim).mark_as_output("argmax_f", shape=(batch_dim, time_dim))
    rf.reduce_max(rf.reduce_min(x, axis=feat_dim), axis=time_dim).mark_as_output("maxmin", shape=(batch_dim,))
