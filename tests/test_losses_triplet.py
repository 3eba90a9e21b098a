"""triplet_loss: the value against a numpy reference of the documented definition, and the layouts the original
cannot compute (its targets[:, 0..2] and the flat output must line up) refused at construction naming the layer."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import NetworkLayerException, TFNetwork

tf1 = tf.compat.v1
TRI = {"shape": (3,), "dim": 4, "sparse": True, "dtype": "int32", "time_dim_axis": None}


def _net(extern, n_out=6, **loss_opts):
    net = TFNetwork(extern_data=ExternData(extern), train_flag=True)
    net.construct_from_dict({"output": {"class": "linear", "activation": None, "n_out": n_out, "from": "data",
                                        "loss": "triplet_loss", "loss_opts": dict(margin=0.5, **loss_opts),
                                        "target": "tri"}})
    return net


def _np_triplet(embeds, labels, margin):
    e = embeds / np.maximum(np.linalg.norm(embeds, axis=1, keepdims=True), 1e-15 ** 0.5)
    dist = 1.0 - e @ e.T
    # the original's "same" mask: label_j ** 2 == label_i * label_j (so a label 0 in column j counts as same)
    same = labels[None, :] ** 2 == labels[:, None] * labels[None, :]
    return 0.5 * dist[same].sum() + 0.5 * np.maximum(margin - dist[~same], 0.0).sum()


def test_triplet_loss_value_and_norm():
    with tf.Graph().as_default():
        net = _net({"data": {"shape": (5,)}, "tri": TRI})
        layer = net.get_layer("output")
        loss = net.losses_dict["output"]
        data, tri = net.extern_data.get_data("data"), net.extern_data.get_data("tri")
        rnd = np.random.RandomState(2)
        x = rnd.normal(size=(4, 5)).astype("float32")
        t = rnd.randint(0, 4, size=(4, 3)).astype("int32")
        with tf1.Session() as session:
            net.initialize_params(session)
            out, value, norm = session.run([layer.output.placeholder, loss.get_loss_value(), loss.get_norm_factor()],
                                           {data.placeholder: x, tri.placeholder: t})
    embeds = np.concatenate(np.split(out, 3, axis=1), axis=0)
    labels = np.concatenate([t[:, 0], t[:, 1], t[:, 2]])
    np.testing.assert_allclose(value, _np_triplet(embeds, labels, 0.5), rtol=1e-4)
    np.testing.assert_allclose(norm, 1.0 / (9 * 4), rtol=1e-6)


@pytest.mark.parametrize("extern, n_out, opts, match", [
    ({"data": {"shape": (5,)}, "tri": TRI}, 4, {}, "multiple of 3"),
    ({"data": {"shape": (5,)}, "tri": TRI}, 9, {"multi_view_training": True}, "multiple of 6"),
    # n_out a multiple of 3, but labels that are not (anchor, same, different) per sequence
    ({"data": {"shape": (5,)}, "tri": dict(TRI, shape=(2,))}, 6, {}, "size >= 3"),
    ({"data": {"shape": (5,)}, "tri": dict(TRI, shape=())}, 6, {}, "size >= 3"),
    ({"data": {"dim": 5}, "tri": {"dim": 4, "sparse": True}}, 6, {}, "size >= 3"),
    ({"data": {"dim": 5}, "tri": TRI}, 6, {}, "both have a time axis"),
    ({"data": {"shape": (5,)}, "tri": {"shape": (3,), "dtype": "float32", "time_dim_axis": None}}, 6, {}, "sparse"),
])
def test_triplet_loss_refuses_layouts_it_cannot_compute(extern, n_out, opts, match):
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException, match="output") as info:
            _net(extern, n_out=n_out, **opts).get_objective()
    assert match in str(info.value)


def test_any_loss_refuses_a_time_output_against_a_target_without_time():
    # the original flattens output and target over (batch, time) together and asserts the target's time axis
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 5}, "cls": {"shape": (), "dim": 4, "sparse": True,
                                                                           "time_dim_axis": None}}), train_flag=True)
        with pytest.raises(NetworkLayerException, match="has a time axis, the target 'cls'"):
            net.construct_from_dict({"output": {"class": "softmax", "from": "data", "loss": "ce", "target": "cls"}})
