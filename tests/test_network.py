"""TFNetwork: construction, errors naming the layer, params and checkpoint round-trips."""

import io

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import DataNotFound, ExternData
from returnn_lite.network import (
    LayerNotFound,
    NetworkConstructionDependencyLoopException,
    NetworkLayerException,
    TFNetwork,
)

tf1 = tf.compat.v1

NET = {
    "hidden": {"class": "linear", "activation": "tanh", "n_out": 6, "from": "data"},
    "output": {"class": "softmax", "from": "hidden", "loss": "ce"},
}


def _build(net_dict=NET, train_flag=False, extern=None):
    extern = extern or {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}
    net = TFNetwork(extern_data=ExternData(extern), train_flag=train_flag)
    net.construct_from_dict(net_dict)
    return net


def test_param_names_and_auto_n_out():
    with tf.Graph().as_default():
        net = _build()
        names = sorted((p.op.name, tuple(p.shape.as_list())) for p in net.get_params_list())
        assert names == [("hidden/W", (5, 6)), ("hidden/b", (6,)), ("output/W", (6, 4)), ("output/b", (4,))]
        assert net.get_num_params() == 5 * 6 + 6 + 6 * 4 + 4
        assert net.get_default_output_layer().name == "output"


def test_checkpoint_roundtrip(tmp_path):
    path = str(tmp_path / "model")
    with tf.Graph().as_default():
        net = _build()
        with tf1.Session() as session:
            net.initialize_params(session)
            values = net.get_param_values_dict(session)
            net.save_params_to_file(path, session)
    with tf.Graph().as_default():
        net = _build()
        with tf1.Session() as session:
            net.initialize_params(session)
            net.load_params_from_file(path, session)
            loaded = net.get_param_values_dict(session)
    for layer, params in values.items():
        for name, value in params.items():
            np.testing.assert_array_equal(loaded[layer][name], value)


def test_set_param_values_by_dict():
    with tf.Graph().as_default():
        net = _build()
        with tf1.Session() as session:
            net.initialize_params(session)
            net.set_param_values_by_dict({"output": {"b": np.arange(4, dtype="float32")}}, session=session)
            np.testing.assert_array_equal(session.run(net.layers["output"].params["b"]), np.arange(4))


def test_losses_and_objective_exist_only_in_training():
    with tf.Graph().as_default():
        net = _build(train_flag=True)
        assert list(net.losses_dict) == ["output"]
        assert isinstance(net.get_objective(), tf.Tensor)
    with tf.Graph().as_default():
        net = _build(train_flag=False)
        assert net.losses_dict == {} and net.get_objective() == 0


def test_unknown_layer_class_lists_close_matches():
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException, match="'bad'.*unknown layer class 'linaer'.*'linear'"):
            _build({"output": {"class": "copy", "from": "bad"}, "bad": {"class": "linaer", "n_out": 3}})


def test_missing_source_names_both_layers():
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException) as info:
            _build({"output": {"class": "copy", "from": "nope"}})
        assert "'output'" in str(info.value) and "'nope'" in str(info.value)
        assert isinstance(info.value.__cause__, LayerNotFound)


def test_dependency_loop():
    with tf.Graph().as_default():
        with pytest.raises(NetworkConstructionDependencyLoopException, match="'a' -> 'b' -> 'a'|'b' -> 'a' -> 'b'"):
            _build({"output": {"class": "copy", "from": "a"}, "a": {"class": "copy", "from": "b"},
                    "b": {"class": "copy", "from": "a"}})


def test_unknown_option_named():
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException, match="'output'.*no_such_option"):
            _build({"output": {"class": "linear", "n_out": 3, "no_such_option": 1, "from": "data"}})


def test_missing_target_key():
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException, match="'output'.*no_key") as info:
            _build({"output": {"class": "softmax", "from": "data", "loss": "ce", "target": "no_key"}},
                   train_flag=True)
        assert isinstance(info.value.__cause__, DataNotFound)


def test_get_layer_constructs_on_demand_and_resolves_data():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 5}}), train_flag=False)
        net.construct_from_dict({"a": {"class": "linear", "n_out": 2, "from": "data"},
                                 "output": {"class": "copy", "from": "data"}})
        assert "a" not in net.layers
        assert net.get_layer("a").output.dim == 2
        assert net.get_layer("data").output is net.extern_data.get_data("data")
        assert net.get_layer("data:data").output.dim == 5


def test_print_network_info():
    with tf.Graph().as_default():
        net = _build()
        buf = io.StringIO()
        net.print_network_info(file=buf)
        assert "hidden" in buf.getvalue() and "net params #" in buf.getvalue()


def test_train_flag_tensor_dropout():
    with tf.Graph().as_default():
        flag = tf1.placeholder(tf.bool, ())
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 5}}), train_flag=flag)
        net.construct_from_dict({"output": {"class": "dropout", "dropout": 0.5, "from": "data"}})
        x = np.ones((2, 3, 5), "float32")
        data = net.extern_data.get_data("data")
        with tf1.Session() as s:
            feed = {data.placeholder: x, data.size_placeholder[0]: [3, 3]}
            ev = s.run(net.get_layer("output").output.placeholder, {**feed, flag: False})
            tr = s.run(net.get_layer("output").output.placeholder, {**feed, flag: True})
        np.testing.assert_array_equal(ev, x)
        assert set(np.unique(tr)) <= {0.0, 2.0}


def test_dropout_on_train_flag_tensor_is_tf_dropout_without_cond():
    """With a train_flag tensor: no tf.cond (If op), in training the values of tf.nn.dropout (same seed), else x."""
    with tf.Graph().as_default() as graph:
        flag = tf1.placeholder(tf.bool, ())
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 5}}), train_flag=flag)
        x = tf1.placeholder(tf.float32, [None, None, 5])
        y = net.dropout_on_train(x, 0.3, seed=7)
        y_noise = net.dropout_on_train(x, 0.3, noise_shape=[None, 1, 5], seed=8)
        assert y.shape.as_list() == [None, None, 5] and y_noise.shape.as_list() == [None, None, 5]
        ref = tf.nn.dropout(x, 0.3, seed=7)
        ref_noise = tf.nn.dropout(x, 0.3, noise_shape=[tf.shape(x)[0], 1, 5], seed=8)
        grad = tf.gradients(tf.reduce_sum(y * 3.0), x)[0]
        assert not [op for op in graph.get_operations() if op.type in ("If", "StatelessIf", "Switch", "Merge")]
        xv = np.random.RandomState(1).randn(2, 7, 5).astype("float32")
        with tf1.Session() as s:
            tr, tr_noise, r, r_noise, g = s.run([y, y_noise, ref, ref_noise, grad], {x: xv, flag: True})
            ev, ev_noise = s.run([y, y_noise], {x: xv, flag: False})
    np.testing.assert_array_equal(tr, r)
    np.testing.assert_array_equal(tr_noise, r_noise)
    assert 0 < (tr == 0).sum() < tr.size and (tr_noise[:, 0] == 0).sum() == (tr_noise == 0).sum() / 7
    np.testing.assert_allclose(g, np.where(tr == 0, 0.0, 3.0 / 0.7), rtol=1e-6)
    np.testing.assert_array_equal(ev, xv)
    np.testing.assert_array_equal(ev_noise, xv)


def test_session_methods_work_outside_the_graph_context(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        net = _build()
        net.get_global_train_step_var()
    session = tf1.Session(graph=graph)
    net.initialize_params(session)
    net.set_global_train_step(7, session)
    assert net.get_global_train_step(session) == 7
    net.set_param_values_by_dict({"output": {"b": np.ones(4, "float32")}}, session=session)
    net.save_params_to_file(str(tmp_path / "m"), session)
    net.load_params_from_file(str(tmp_path / "m"), session)
    np.testing.assert_array_equal(net.get_param_values_dict(session)["output"]["b"], np.ones(4))


def test_deep_chain_builds_without_deep_recursion():
    import sys

    n = 3 * sys.getrecursionlimit()  # would overflow the stack if sources were built recursively
    net_dict = {"l%i" % i: {"class": "copy", "from": "l%i" % (i - 1) if i else "data"} for i in range(n)}
    net_dict["output"] = {"class": "copy", "from": "l%i" % (n - 1)}
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 2}}), train_flag=False)
        net.construct_from_dict(net_dict)
        assert len(net.layers) == n + 2


def test_params_as_get_variable_makes_them():
    """create_param's direct variables: get_variable (AUTO_REUSE) finds them, collections and names as get_variable's."""
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}}), train_flag=False)
        net.construct_from_dict({"a": {"class": "linear", "n_out": 4, "from": "data"},
                                 "output": {"class": "linear", "n_out": 2, "from": "a", "trainable": False}})
        w = net.get_layer("a").params["W"]
        assert w.name == "a/W:0" and w.shape.as_list() == [3, 4]
        with tf1.variable_scope("a", reuse=tf1.AUTO_REUSE):
            assert tf1.get_variable("W", shape=(3, 4)) is w
        with tf1.variable_scope("a", reuse=tf1.AUTO_REUSE), pytest.raises(ValueError):
            tf1.get_variable("W", shape=(5, 4))
        trainable = {v.name for v in tf1.trainable_variables()}
        assert trainable == {"a/W:0", "a/b:0"}
        assert {v.name for v in tf1.global_variables()} == trainable | {"output/W:0", "output/b:0"}
        init_ops = [op.name for op in w.graph.get_operations() if op.name.startswith("a/W/Initializer/")]
        assert init_ops, "initial value under <param>/Initializer/, as get_variable's"
