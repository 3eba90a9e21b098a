"""concat layer: sequence lengths of the concatenated axis are the sums of the sources' lengths."""

import numpy as np
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1


def test_concat_time_sums_lengths():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 2}, "other": {"dim": 2}}), train_flag=False)
        net.construct_from_dict({"output": {"class": "concat", "from": [("data", "T"), ("data:other", "T")]}})
        out = net.get_layer("output").output
        assert out.dims[1] != net.extern_data.get_data("data").dims[1]
        data, other = net.extern_data.get_data("data"), net.extern_data.get_data("other")
        with tf1.Session() as s:
            x, lens = s.run((out.placeholder, out.dims[1].dyn_size), {
                data.placeholder: np.ones((2, 3, 2)), data.size_placeholder[0]: [3, 1],
                other.placeholder: np.zeros((2, 4, 2)), other.size_placeholder[0]: [4, 2]})
        assert x.shape == (2, 7, 2)
        assert lens.tolist() == [7, 3]


def test_concat_feature_static():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 2}}), train_flag=False)
        net.construct_from_dict({"output": {"class": "concat", "from": [("data", "F"), ("data", "F")]}})
        assert net.get_layer("output").output.dim == 4
