"""rf.Conv2d over two static spatial dims (same, then valid with strides), rf.LayerNorm, gelu, rf.split of the
channels, rf.merge_dims of the spatial dims; outputs with static dims only."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

h_dim = Dim(5, name="h")
w_dim = Dim(4, name="w")
in_dim = Dim(2, name="in")
mid_dim = Dim(4, name="mid")
out_dim = Dim(3, name="out")
part1_dim = Dim(1, name="part1")
part2_dim = Dim(3, name="part2")

extern_data = {"img": {"dims": (batch_dim, h_dim, w_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = rf.Conv2d(in_dim, mid_dim, (3, 3), padding="same")
        self.norm = rf.LayerNorm(mid_dim)
        self.conv2 = rf.Conv2d(mid_dim, out_dim, (2, 2), padding="valid", strides=(2, 1))


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["img"]
    y, (h1, w1) = model.conv1(x, in_spatial_dims=[h_dim, w_dim])
    y = rf.gelu(model.norm(y))
    a, b = rf.split(y, axis=mid_dim, out_dims=[part1_dim, part2_dim])
    a.mark_as_output("part1", shape=(batch_dim, h1, w1, part1_dim))
    b.mark_as_output("part2", shape=(batch_dim, h1, w1, part2_dim))
    z, (h2, w2) = model.conv2(y, in_spatial_dims=[h1, w1])
    flat, flat_dim = rf.merge_dims(z, dims=[h2, w2])
    flat.mark_as_output("flat", shape=(batch_dim, flat_dim, out_dim))
