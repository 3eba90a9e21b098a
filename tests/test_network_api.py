"""The TFNetwork API of seed 003 that config code calls (returnn_lite/network_api.py)."""

import numpy as np
import tensorflow as tf

from returnn_lite.config import Config, global_config_ctx
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1


def _net(config=None, **kwargs):
    extern_data = ExternData({"data": {"dim": 3}, "classes": {"dim": 2, "sparse": True}})
    return TFNetwork(config=config, extern_data=extern_data, **kwargs)


def test_get_config_root_global_dummy():
    with tf.Graph().as_default():
        config = Config({"x": 1})
        net = _net(config=config)
        net.construct_from_dict({"output": {"class": "rec", "from": "data", "unit": {
            "output": {"class": "eval", "from": "data:source",
                       "eval": "source(0) * float(self.network.get_config().int('x', 0))"}}}})
        assert net.get_config() is config
        other = _net()
        with global_config_ctx(config):
            assert other.get_config() is config
        assert isinstance(other.get_config(consider_global_config=False), Config)
        assert other.get_config(consider_global_config=False, fallback_dummy_config=False) is None


def test_global_train_step_during_construction_and_epoch_step():
    with tf.Graph().as_default() as graph:
        net = _net(train_flag=True)
        assert net.global_train_step is None  # not during construction: nothing created
        net.construct_from_dict({"output": {"class": "eval", "from": "data",
                                            "eval": "source(0) * tf.cast(self.network.global_train_step + 1, tf.float32)"
                                                    " * tf.cast(self.network.get_epoch_step() + 1, tf.float32)"}})
        step = net.global_train_step
        assert step is not None and step is net.get_global_train_step_var()
        assert net.get_saveable_params_list()[-1] is step
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            net.set_global_train_step(2, session)
            x = np.ones((1, 2, 3), "float32")
            out = session.run(net.layers["output"].output.placeholder, feed_dict={
                net.extern_data.data["data"].placeholder: x,
                net.extern_data.data["data"].size_placeholder[0]: [2], net.get_epoch_step(): 4})
        np.testing.assert_allclose(out, x * 3 * 5)


def test_seq_tags_batch_info_subnet():
    with tf.Graph().as_default() as graph:
        net = _net()
        net.construct_from_dict({"output": {"class": "copy", "from": "data"}})
        tags = net.get_seq_tags()
        assert tags.dtype == tf.string and net.extern_data.has_data("seq_tag")
        sub = net.make_subnet("sub", {"subnetwork": {"output": {"class": "linear", "n_out": 4, "from": "base:data"},
                                                     "#meta": "skipped"}})
        assert not sub.have_layer("#meta")
        layer = sub.construct_layer("output")
        assert layer.output.dim == 4 and layer.params["W"].op.name == "sub/output/W"
        with tf1.Session(graph=graph) as session:
            dim = session.run(net.get_global_batch_info().dim, feed_dict={
                net.extern_data.data["data"].placeholder: np.zeros((5, 2, 3), "float32")})
        assert dim == 5


def test_static_post_control_dependencies_and_callbacks():
    with tf.Graph().as_default():
        op = tf.no_op()
        TFNetwork.register_post_control_dependencies([op])
        assert TFNetwork.get_post_control_dependencies() == [op]
        net = _net()
        assert net.get_post_control_dependencies() == [op]
        calls = []
        net.register_graph_reset_callback(lambda: calls.append("reset"))
        net.call_graph_reset_callbacks()
        net.set_run_opts(epoch=3, dataset_name="dev")
        assert net.get_run_opts() == {"epoch": 3, "dataset_name": "dev"}
        net.register_run_finished_callback(lambda: calls.append("finished"))
        net.set_run_finished()
        assert calls == ["reset", "finished"]
        with net.register_network_scope():
            assert TFNetwork.get_current_network() is net
        assert TFNetwork.get_current_network(must_exist=False) is None


def test_network_stack_is_per_graph_and_state_is_the_roots():
    graph_a, graph_b = tf.Graph(), tf.Graph()
    with graph_a.as_default():
        net = _net()
        with net.register_network_scope():
            assert TFNetwork.get_network_stack() == [net]
            with graph_b.as_default():  # another graph sees no network
                assert TFNetwork.get_current_network(must_exist=False) is None
            sub = net.make_subnet("sub", {"output": {"class": "copy", "from": "data"}}).net
            with sub.register_network_scope():
                assert TFNetwork.get_network_stack() == [net, sub]
            assert TFNetwork.get_current_network() is net
        assert TFNetwork.get_network_stack() == []
        # run opts and callbacks of a subnetwork are its root's
        sub.set_run_opts(epoch=1, dataset_name="train")
        assert net.get_run_opts() == {"epoch": 1, "dataset_name": "train"}
        net.set_run_finished()
        assert sub.run_state.run_opts is None and net.run_state.run_opts is None


def test_global_train_step_in_a_rec_loop_is_created_outside_of_it():
    with tf.Graph().as_default():
        net = _net(train_flag=True)
        net.construct_from_dict({"output": {"class": "rec", "from": "data", "unit": {
            "output": {"class": "eval", "from": ["data:source", "prev:output"],
                       "eval": "source(0) + source(1) * tf.cast(self.network.global_train_step, tf.float32)"}}}})
        step = net.get_global_train_step_var()
        assert step is net.global_train_step is net.run_state.global_train_step_var
        assert step.op.name == "global_step" and step.op._control_flow_context is None  # noqa: SLF001
        assert net.get_auxiliary_params() == [step]
        try:
            net.global_train_step = step
        except AttributeError:
            pass
        else:
            raise AssertionError("global_train_step must not be settable (one route: get_global_train_step_var)")
