"""
The original's ``rhn`` rec unit (recurrent highway network), ``initial_state: "keep_over_epoch"`` and the
original's param names of ``initial_state: "var"`` (rnn_cell inside a rec unit, moved out of the loop or not).
"""

import numpy
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1


def _net(net_dict, train_flag=False, data=None):
    net = TFNetwork(extern_data=ExternData(data or {"data": {"shape": (None, 4)}}), train_flag=train_flag)
    net.construct_from_dict(net_dict)
    return net


def _params(net):
    return sorted((v.op.name, tuple(v.shape.as_list())) for v in net.get_params_list())


def test_rhn_params_and_one_frame_numbers():
    with tf.Graph().as_default():
        net = _net({"output": {"class": "rec", "unit": "rhn", "unit_opts": {"depth": 2, "transform_bias": -2.0},
                               "n_out": 3, "from": "data"}})
        assert _params(net) == [("output/rec/W", (4, 6)), ("output/rec/b", (6,)),
                                ("output/rec/rhn_cell/depth_0/W", (3, 6)), ("output/rec/rhn_cell/depth_1/W", (3, 6))]
        data = net.extern_data.data["data"]
        out = net.get_default_output_layer().output.copy_as_batch_major().placeholder
        x = numpy.random.RandomState(3).uniform(-1, 1, (2, 1, 4)).astype("float32")
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            params = {v.op.name: session.run(v) for v in net.get_params_list()}
            y = session.run(out, {data.placeholder: x, data.get_sequence_lengths(): [1, 1]})
    b = params["output/rec/b"]
    assert numpy.allclose(b, [0, 0, 0, -2, -2, -2])  # the transform gate part starts at transform_bias
    s = numpy.zeros((2, 3))
    for i in range(2):  # carry gate coupled to the transform gate: s += t * (h - s)
        z = s.dot(params["output/rec/rhn_cell/depth_%i/W" % i])
        if i == 0:
            z += x[:, 0].dot(params["output/rec/W"]) + b
        h, t = numpy.tanh(z[:, :3]), 1 / (1 + numpy.exp(-z[:, 3:]))
        s = s + t * (h - s)
    assert numpy.allclose(y[:, 0], s, atol=1e-5)


@pytest.mark.parametrize("unit_opts", [{}, {"dropout": 0.3, "depth": 2}])
def test_keep_over_epoch_continues_the_state(unit_opts):
    # as the original's test: running the sequences in parts of 2 frames (epoch steps 0, 1, ...) gives the same as
    # running them at once; the kept state is reset at epoch step 0
    x = numpy.random.RandomState(1).uniform(-1, 1, (5, 10, 4)).astype("float32")
    with tf.Graph().as_default():
        net = _net({"output": {"class": "rec", "unit": "rhn", "unit_opts": unit_opts, "n_out": 3, "from": "data",
                               "initial_state": "keep_over_epoch"}})
        # a param as in the original (shape [None, n]), but never saved (see test_keep_over_epoch_state_params)
        assert [(v.op.name, v.shape.as_list()) for v in net.get_params_list()].count(
            ("output/rec/keep_state_var", [None, 3])) == 1
        data = net.extern_data.data["data"]
        out = net.get_default_output_layer().output.copy_as_batch_major().placeholder
        post = net.get_post_control_dependencies()
        assert post

        def run(step, frames):
            return tf1.get_default_session().run([out, post], {
                net.get_epoch_step(): step, data.placeholder: frames, data.get_sequence_lengths(): [frames.shape[1]] * 5})[0]

        with tf1.Session().as_default() as session:
            session.run(tf1.global_variables_initializer())
            parts = numpy.concatenate([run(step, x[:, t:t + 2]) for step, t in enumerate(range(0, 10, 2))], axis=1)
            full = run(0, x)
            again = run(0, x[:, :2])  # epoch step 0: starts from zeros again
    assert numpy.allclose(parts, full, atol=1e-5)
    assert numpy.allclose(again, full[:, :2], atol=1e-5)
    assert not numpy.allclose(parts[:, 2:4], again, atol=1e-3)


def test_keep_over_epoch_inside_a_rec_loop_fails_clearly():
    with tf.Graph().as_default(), pytest.raises(Exception, match="initial_state 'keep_over_epoch' is not supported"):
        _net({"output": {"class": "rec", "from": "data", "unit": {
            "s": {"class": "rnn_cell", "unit": "gru", "n_out": 3, "from": ["data:source", "prev:output"],
                  "initial_state": "keep_over_epoch"},
            "output": {"class": "copy", "from": "s"}}}})


@pytest.mark.parametrize("per_step", [False, True])
def test_rnn_cell_initial_state_var_param_names(per_step):
    # the original: inside the loop the state params are "<layer>/initial_<key>" (created by the rec loop), moved
    # out of the loop (runs over time) they are in the cell's "rec" scope; the key is "var" for one-tensor states
    src = ["data:source", "prev:output"] if per_step else ["data:source"]
    prefix = "output/rec/s/" if per_step else "output/rec/s/rec/"
    for unit, keys in (("standardlstm", ["c", "h"]), ("gru", ["var"])):
        with tf.Graph().as_default():
            net = _net({"output": {"class": "rec", "from": "data", "unit": {
                "s": {"class": "rnn_cell", "unit": unit, "initial_state": "var", "from": src, "n_out": 3},
                "output": {"class": "copy", "from": "s"}}}})
            names = [n for n, _ in _params(net) if "initial" in n]
            assert names == [prefix + "initial_" + k for k in keys], (unit, names)


@pytest.mark.parametrize("unit", ["nativelstm2", "standardlstm", "rhn"])
def test_keep_over_epoch_trains(unit):
    # gradient steps with the kept state (train op runs the state update as post control dependency)
    with tf.Graph().as_default():
        net = _net({"rec": {"class": "rec", "unit": unit, "n_out": 5, "from": "data", "initial_state": "keep_over_epoch"},
                    "output": {"class": "softmax", "from": "rec", "loss": "ce"}}, train_flag=True,
                   data={"data": {"dim": 4}, "classes": {"dim": 3, "sparse": True}})
        opt = tf1.train.AdamOptimizer(0.1).minimize(net.get_objective())
        with tf.control_dependencies([opt] + net.get_post_control_dependencies()):
            train = tf.no_op()
        d = net.extern_data.data
        rnd = numpy.random.RandomState(0)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            for step in range(3):
                session.run(train, {net.get_epoch_step(): step, d["data"].placeholder: rnd.randn(2, 6, 4),
                                    d["data"].get_sequence_lengths(): [6, 5], d["classes"].get_sequence_lengths(): [6, 5],
                                    d["classes"].placeholder: rnd.randint(0, 3, (2, 6))})
            keep = [v for v in tf1.global_variables() if "keep_state" in v.op.name]
            assert keep and all(session.run(v).shape == (2, 5) for v in keep)


def test_initial_state_with_subnetwork_unit_fails_clearly():
    with tf.Graph().as_default(), pytest.raises(Exception, match="'output'.*initial_state='zeros' only applies to a cell"):
        _net({"output": {"class": "rec", "from": "data", "initial_state": "zeros", "unit": {
            "output": {"class": "linear", "from": ["data:source", "prev:output"], "n_out": 4}}}})


def test_keep_over_epoch_other_batch_size_starts_from_zeros():
    x = numpy.random.RandomState(2).uniform(-1, 1, (3, 4, 4)).astype("float32")
    with tf.Graph().as_default():
        net = _net({"output": {"class": "rec", "unit": "gru", "n_out": 3, "from": "data",
                               "initial_state": "keep_over_epoch"}})
        data = net.extern_data.data["data"]
        out = net.get_default_output_layer().output.copy_as_batch_major().placeholder
        post = net.get_post_control_dependencies()
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())

            def run(step, frames):
                return session.run([out, post], {net.get_epoch_step(): step, data.placeholder: frames,
                                                 data.get_sequence_lengths(): [4] * len(frames)})[0]

            run(0, x)
            small = run(1, x[:2])  # a smaller batch: no kept state of that size
            fresh = run(0, x[:2])
    assert numpy.allclose(small, fresh, atol=1e-6)


def test_keep_over_epoch_state_params_are_listed_but_not_saved(tmp_path):
    # LSTM: rec/keep_state_c and rec/keep_state_h (the original's state variables); save and load skip them
    with tf.Graph().as_default():
        net = _net({"output": {"class": "rec", "unit": "lstm", "n_out": 3, "from": "data",
                               "initial_state": "keep_over_epoch"}})
        params = {v.op.name: v.shape.as_list() for v in net.get_params_list()}
        assert params["output/rec/keep_state_c"] == [None, 3] and params["output/rec/keep_state_h"] == [None, 3]
        assert {v.op.name for v in net.get_trainable_params()} == {"output/rec/W", "output/rec/W_re", "output/rec/b"}
        with tf1.Session() as session:
            net.initialize_params(session)
            net.save_params_to_file(str(tmp_path / "model"), session)
            net.load_params_from_file(str(tmp_path / "model"), session)
    names = {n for n, _ in tf.train.list_variables(str(tmp_path / "model"))}
    assert "output/rec/keep_state_c" not in names and "output/rec/W" in names
