"""subnetwork, cond, hdf_dump, image_summary, framewise_statistics."""

import h5py
import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.network import NetworkLayerException
from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1
LENS = np.array([7, 5, 4], "int32")
EXTERN = {"data": {"dim": 5}, "classes": {"dim": 3, "sparse": True}}


def _build(net_dict, train_flag=False, extern=None):
    return build_network(net_dict, extern or EXTERN, train_flag)


def _feed(net, seed=0):
    return random_feed(net, LENS, seed)


def _params(net):
    return sorted((p.op.name, tuple(p.shape.as_list())) for p in net.get_params_list())


def test_subnetwork_namespace_params_and_base_access():
    with tf.Graph().as_default():
        net = _build({
            "a": {"class": "linear", "n_out": 2, "from": "data"},
            "sub": {"class": "subnetwork", "from": ["a", "data"], "subnetwork": {
                "h": {"class": "linear", "n_out": 4, "from": "data"},
                "unused": {"class": "linear", "n_out": 4, "from": "data"},
                "output": {"class": "combine", "kind": "add", "from": ["h", "base:b"]}}},
            "b": {"class": "linear", "n_out": 4, "from": "data"},
            "output": {"class": "copy", "from": "sub"}})
        assert _params(net) == [("a/W", (5, 2)), ("a/b", (2,)), ("b/W", (5, 4)), ("b/b", (4,)),
                                ("sub/h/W", (7, 4)), ("sub/h/b", (4,))]
        sub = net.get_layer("sub")
        assert net.get_layer("sub/output") is sub.output_layer
        assert net.get_layer("sub/data:data").output.dim == 7
        assert sub.output.dims[1] is net.extern_data.get_data("data").dims[1]
        assert net.get_layer("sub/h").get_absolute_name() == "sub/h"
        assert sub.get_sub_networks()[0].get_absolute_name_prefix() == "sub/"
        with tf1.Session() as session:
            net.initialize_params(session)
            y, h, b = session.run([sub.output.placeholder, net.get_layer("sub/h").output.placeholder,
                                   net.get_layer("b").output.placeholder], _feed(net))
        np.testing.assert_allclose(y, h + b, rtol=1e-6)


def test_subnetwork_concat_sources_false():
    with tf.Graph().as_default():
        net = _build({
            "a": {"class": "linear", "n_out": 2, "from": "data"},
            "sub": {"class": "subnetwork", "from": ["a", "data"], "concat_sources": False, "subnetwork": {
                "output": {"class": "copy", "from": ["data:1", "data:a", "data"]}}},
            "output": {"class": "copy", "from": "sub"}})
        assert net.get_layer("output").output.dim == 5 + 2 + 2


def test_subnetwork_without_output_names_layer():
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException) as exc:
            _build({"bad_subnet": {"class": "subnetwork", "from": "data", "subnetwork": {
                "lin": {"class": "linear", "n_out": 3, "from": "data"}}},
                "output": {"class": "copy", "from": "bad_subnet"}})
    assert "bad_subnet" in str(exc.value) and "output" in str(exc.value)


def test_subnetwork_sub_layer_loss_registered_with_prefix():
    with tf.Graph().as_default():
        net = _build({
            "sub": {"class": "subnetwork", "from": "data", "subnetwork": {
                "loss": {"class": "softmax", "from": "data", "loss": "ce", "target": "classes"},
                "output": {"class": "copy", "from": "data"}}},
            "output": {"class": "copy", "from": "sub"}}, train_flag=True)
        assert sorted(net.losses_dict) == ["sub/loss"]
        assert ("sub/loss/W", (5, 3)) in _params(net)
        with tf1.Session() as session:
            net.initialize_params(session)
            assert np.isfinite(session.run(net.get_objective(), _feed(net)))


def test_subnetwork_load_on_init(tmp_path):
    path = str(tmp_path / "model")
    with tf.Graph().as_default():
        net = _build({"output": {"class": "linear", "n_out": 3, "from": "data"}})
        with tf1.Session() as session:
            net.initialize_params(session)
            w = session.run(net.get_layer("output").params["W"])
            net.save_params_to_file(path, session)
    with tf.Graph().as_default():
        net = _build({"sub": {"class": "subnetwork", "from": "data", "load_on_init": path, "subnetwork": {
            "output": {"class": "linear", "n_out": 3, "from": "data"}}}, "output": {"class": "copy", "from": "sub"}})
        with tf1.Session() as session:
            net.initialize_params(session)
            np.testing.assert_array_equal(session.run(net.get_layer("sub/output").params["W"]), w)


def test_cond_selects_branch():
    for flag in (True, False):
        with tf.Graph().as_default():
            net = _build({
                "c": {"class": "constant", "value": flag, "dtype": "bool", "from": []},
                "output": {"class": "cond", "from": [], "condition": "c",
                           "true_layer": {"class": "eval", "from": "data", "eval": "source(0) + 1.0"},
                           "false_layer": {"class": "copy", "from": "data"}}})
            out = net.get_layer("output").output
            assert out.dims[1] is net.extern_data.get_data("data").dims[1]
            feed = _feed(net)
            with tf1.Session() as session:
                y = session.run(out.placeholder, feed)
            x = feed[net.extern_data.get_data("data").placeholder]
            np.testing.assert_allclose(y, x + 1.0 if flag else x)



@pytest.mark.parametrize("branch,names", [
    ({"class": "linear", "from": "data", "n_out": 5}, ["cond/W", "cond/b"]),
    ({"class": "subnetwork", "from": [], "subnetwork": {
        "lin": {"class": "linear", "from": "base:data:data", "n_out": 5},
        "output": {"class": "copy", "from": "lin"}}}, ["cond/lin/W", "cond/lin/b"]),
])
def test_cond_branch_params_in_the_cond_scope(branch, names):
    # the original builds each branch under the cond layer's own name: cond/W, cond/lin/W (not cond/true_layer/...)
    with tf.Graph().as_default():
        net = _build({
            "c": {"class": "constant", "value": True, "dtype": "bool", "from": []},
            "cond": {"class": "cond", "from": [], "condition": "c", "true_layer": branch,
                     "false_layer": {"class": "copy", "from": "data"}},
            "output": {"class": "copy", "from": "cond"}})
        assert [n for n, _ in _params(net)] == names
        feed = _feed(net)
        with tf1.Session() as session:
            net.initialize_params(session)
            y, (w, b) = session.run([net.get_layer("output").output.placeholder,
                                     [p for p in sorted(net.get_params_list(), key=lambda p: p.op.name)]], feed)
        x = feed[net.extern_data.get_data("data").placeholder]
        np.testing.assert_allclose(y, x @ w + b, rtol=1e-5, atol=1e-6)

def test_hdf_dump_read_back(tmp_path):
    filename = str(tmp_path / "dump.hdf")
    with tf.Graph().as_default():
        net = _build({"output": {"class": "hdf_dump", "filename": filename, "from": "data",
                                 "extra": {"classes": "data:classes"}}})
        out = net.get_layer("output").output
        with tf1.Session() as session:
            feeds = [_feed(net, seed) for seed in (0, 1)]
            for feed in feeds:
                y = session.run(out.placeholder, feed)
                np.testing.assert_array_equal(y, feed[net.extern_data.get_data("data").placeholder])
    data_ph = net.extern_data.get_data("data").placeholder
    classes_ph = net.extern_data.get_data("classes").placeholder
    with h5py.File(filename, "r") as f:
        assert f.attrs["numSeqs"] == 6
        assert f.attrs["inputPattSize"] == 5
        lens = f["seqLengths"][...]
        np.testing.assert_array_equal(lens[:, 0], np.concatenate([LENS, LENS]))
        np.testing.assert_array_equal(lens[:, 1], np.concatenate([LENS, LENS]))
        inputs = f["inputs"][...]
        expected = np.concatenate([feed[data_ph][b, :LENS[b]] for feed in feeds for b in range(3)])
        np.testing.assert_allclose(inputs, expected)
        classes = f["targets/data/classes"][...]
        np.testing.assert_array_equal(
            classes, np.concatenate([feed[classes_ph][b, :LENS[b]] for feed in feeds for b in range(3)]))
        assert len(f["seqTags"]) == 6


def test_passthrough_summaries_and_stats():
    with tf.Graph().as_default():
        net = _build({
            "img": {"class": "image_summary", "from": "data", "is_output_layer": True},
            "sm": {"class": "softmax", "n_out": 3, "from": "data"},
            "output": {"class": "framewise_statistics", "sil_label_idx": 0, "from": "sm", "target": "classes"}})
        with tf1.Session() as session:
            net.initialize_params(session)
            feed = _feed(net)
            img, stats = session.run([net.get_layer("img").output.placeholder, net.get_layer("output").stats], feed)
        np.testing.assert_array_equal(img, feed[net.extern_data.get_data("data").placeholder])
        assert 0.0 <= stats["fer"] <= 1.0


def test_flatten_subnetworks_in_unit():
    from returnn_lite.layers.structure import flatten_subnetworks_in_unit

    unit = {"s": {"class": "subnetwork", "from": "data:source", "subnetwork": {
        "acc": {"class": "combine", "kind": "add", "from": ["prev:acc", "data", "base:x"]},
        "output": {"class": "copy", "from": "acc"}}},
        "x": {"class": "copy", "from": "data:source"},
        "output": {"class": "copy", "from": "s"}}
    flat = flatten_subnetworks_in_unit(unit)
    assert flat["s/acc"]["from"] == ["prev:s/acc", "s/data", "x"]
    assert flat["s/output"]["from"] == "s/acc"
    assert flat["s/data"] == {"class": "copy", "from": "data:source"}
    assert flat["s"] == {"class": "copy", "from": "s/output"}
    assert flat["output"] is unit["output"]
    plain = {"output": {"class": "copy", "from": "data:source"}}
    assert flatten_subnetworks_in_unit(plain) is plain
