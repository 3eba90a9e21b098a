"""Dim arithmetic over dynamic dims: rf.concat of two sequences (a + b, packed), rf.pad of a dynamic dim (left only,
with handle_dynamic_dims=True, and by default with given out_dims: the padding after the padded end), a static
prefix concatenated before a dynamic dim, lengths used in computations via get_size_tensor / get_dim_value_tensor."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

a_time = Dim(None, name="a_time")
b_time = Dim(None, name="b_time")
feat_dim = Dim(2, name="feat")
one_dim = Dim(1, name="one")

extern_data = {
    "a": {"dims": (batch_dim, a_time, feat_dim), "dtype": "float32"},
    "b": {"dims": (batch_dim, b_time, feat_dim), "dtype": "float32"},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.w = rf.Parameter([feat_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    a, b = extern_data["a"], extern_data["b"]
    ab, ab_time = rf.concat((a, a_time), (b * model.w, b_time))
    ab.mark_as_output("ab", shape=(batch_dim, ab_time, feat_dim))
    left, (left_time,) = rf.pad(a, axes=[a_time], padding=[(2, 0)], value=-1.0)
    left.mark_as_output("left", shape=(batch_dim, left_time, feat_dim))
    both, (both_time,) = rf.pad(b, axes=[b_time], padding=[(1, 2)], value=0.5, handle_dynamic_dims=True)
    both.mark_as_output("both", shape=(batch_dim, both_time, feat_dim))
    n = rf.cast(a_time.get_size_tensor() + b_time.get_size_tensor(), "float32")
    mean = rf.reduce_sum(ab, axis=ab_time) / n
    mean.mark_as_output("mean", shape=(batch_dim, feat_dim))
    raw, (raw_time,) = rf.pad(a, axes=[a_time], padding=[(1, 1)], out_dims=[1 + a_time + 1], value=2.0)
    raw.mark_as_output("raw", shape=(batch_dim, raw_time, feat_dim))
    bos = rf.zeros([batch_dim, one_dim, feat_dim])
    with_bos, bos_time = rf.concat((bos, one_dim), (a, a_time))
    with_bos.mark_as_output("with_bos", shape=(batch_dim, bos_time, feat_dim))
    frac = rf.cast(b_time.get_size_tensor(), "float32") / rf.cast(b_time.get_dim_value_tensor(), "float32")
    frac.mark_as_output("frac", shape=(batch_dim,))
    rf.reduce_max(both, axis=both_time).mark_as_output("both_max", shape=(batch_dim, feat_dim))
