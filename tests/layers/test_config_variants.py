"""Layer variants real configs use (issue 11): numbers checked against numpy."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1


def _run(net_dict, extern_data, fetch=("output",), train_flag=False, seq_lens=(5, 3)):
    with tf.Graph().as_default():
        net = build_network(net_dict, extern_data, train_flag=train_flag)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            feed = random_feed(net, list(seq_lens))
            outs = session.run([net.get_layer(n).output.placeholder for n in fetch], feed_dict=feed)
            params = {p.op.name: v for p, v in zip(net.get_params_list(), session.run(net.get_params_list()))}
            return net, outs, feed, params


def test_combine_broadcasts_feature_dim_1():
    net, (a, b, out), _, _ = _run({
        "a": {"class": "linear", "n_out": 1, "from": "data"},
        "b": {"class": "linear", "n_out": 5, "from": "data"},
        "output": {"class": "combine", "kind": "add", "from": ["a", "b"]}}, {"data": {"dim": 3}},
        fetch=("a", "b", "output"))
    assert net.get_layer("output").output.batch_shape == (None, None, 5)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_eval_without_sources_as_cond_condition():
    # the original's cond test: a constant condition from the global train step, no sources
    net, (out, x), feed, _ = _run({
        "output": {"class": "cond", "from": [],
                   "condition": {"class": "eval", "from": [], "eval": "tf.equal(self.network.global_train_step % 2, 0)",
                                 "out_type": {"batch_dim_axis": None, "shape": (), "dtype": "bool"}},
                   "true_layer": {"class": "copy", "from": "data"},
                   "false_layer": {"class": "activation", "activation": "relu", "from": "data"}}},
        {"data": {"dim": 3}}, fetch=("output", "data"))
    np.testing.assert_allclose(out, x)  # step 0: true branch


def test_eval_without_sources_needs_out_type():
    with pytest.raises(Exception, match="eval layer without sources needs an out_type"):
        _run({"output": {"class": "eval", "from": [], "eval": "tf.constant(1.)"}}, {"data": {"dim": 3}})


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv_strides_and_dilation(padding):
    net, (out, x), feed, params = _run({"output": {
        "class": "conv", "from": "data", "filter_size": (3,), "strides": 2, "dilation_rate": 2, "padding": padding,
        "n_out": 2, "with_bias": False}}, {"data": {"dim": 3}}, fetch=("output", "data"), seq_lens=(9, 6))
    w = params["output/W"]  # (3, 3, 2)
    pad = 2 if padding == "same" else 0  # (k - 1) * dilation / 2 on each side
    xp = np.pad(x, [(0, 0), (pad, pad), (0, 0)])
    full = np.stack([sum(xp[:, t + 2 * k] @ w[k] for k in range(3)) for t in range(xp.shape[1] - 4)], axis=1)
    np.testing.assert_allclose(out, full[:, ::2], rtol=1e-5, atol=1e-5)


def _lstm(unit_opts, params=None, train_flag=False):
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "rec", "unit": "nativelstm2", "n_out": 4, "from": "data",
                                        "unit_opts": unit_opts}}, {"data": {"dim": 3}}, train_flag=train_flag)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            if params is not None:
                for p in net.get_params_list():
                    p.load(params[p.op.name], session)
            feed = random_feed(net, [5, 3])
            out = session.run(net.get_default_output_layer().output.placeholder, feed_dict=feed)
            return out, {p.op.name: v for p, v in zip(net.get_params_list(), session.run(net.get_params_list()))}


def test_nativelstm2_forget_bias_and_rec_weight_dropout():
    out, params = _lstm({"forget_bias": 1.0, "rec_weight_dropout": 0.3, "rec_weight_dropout_shape": (None, 1)})
    shifted = dict(params)
    shifted["output/rec/b"] = params["output/rec/b"].copy()
    shifted["output/rec/b"][8:12] += 1.0  # gates j, i, f, o: the forget part
    ref, _ = _lstm({}, params=shifted)  # not training: no recurrent weight dropout
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    train_out, _ = _lstm({"rec_weight_dropout": 0.5}, params=params, train_flag=True)
    assert np.all(np.isfinite(train_out)) and not np.allclose(train_out, _lstm({}, params=params)[0])


def test_layernormvariantslstm_variants():
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "rec", "unit": "layernormvariantslstm", "n_out": 4, "from": "data",
                                        "unit_opts": {"global_norm": False, "cell_norm": False, "hidden_norm": True,
                                                      "per_gate_norm": True, "dropout": 0.1, "dropout_h": 0.1}}},
                            {"data": {"dim": 3}}, train_flag=True)
        names = sorted(p.op.name.split("/")[-1] for p in net.get_params_list())
        assert names == ["W_ff", "W_re"] + sorted("%s_%s" % (k, g) for k in ("beta", "gamma")
                                                  for g in ("f", "i", "j", "new_h", "o"))
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            out = session.run(net.get_default_output_layer().output.placeholder, feed_dict=random_feed(net, [5, 3]))
        assert np.all(np.isfinite(out))
        # hidden_norm: each frame's output is normalized (gamma 1, beta 0)
        np.testing.assert_allclose(out[:3, 0].mean(-1), 0, atol=1e-5)


@pytest.mark.parametrize("layer_class, what", [("kenlm", "KenLM"), ("neural_transducer", "neural transducer")])
def test_unavailable_layers_fail_naming_what_is_missing(layer_class, what):
    with pytest.raises(Exception, match=r"layer 'output'.*%s.*not available in returnn_lite.*%s" % (layer_class, what)):
        _run({"output": {"class": layer_class, "from": "data"}}, {"data": {"dim": 3}})


def test_squeeze_dynamic_axis():
    net, (out, x), _, _ = _run({"output": {"class": "squeeze", "axis": "T", "from": "data"}}, {"data": {"dim": 3}},
                               fetch=("output", "data"), seq_lens=(1, 1))
    assert net.get_layer("output").output.batch_shape == (None, 3)
    np.testing.assert_allclose(out, x[:, 0])


def test_merge_dims_n_out_is_the_feature_dim():
    net, (out, x), _, _ = _run({"output": {"class": "merge_dims", "axes": "spatial", "n_out": 3, "from": "data"}},
                               {"data": {"shape": (None, 4, 3)}}, fetch=("output", "data"))
    assert net.get_layer("output").output.dim == 3
    np.testing.assert_allclose(out, x.reshape((x.shape[0], -1, 3)))
    with pytest.raises(Exception, match="n_out=5 does not match the output feature dim 3"):
        _run({"output": {"class": "merge_dims", "axes": "spatial", "n_out": 5, "from": "data"}},
             {"data": {"shape": (None, 4, 3)}})


def _rec_outputs(net_dict, extern_data, optimize, params=None, seq_lens=(5, 3)):
    net_dict = {k: dict(v, optimize_move_layers_out=optimize) if v.get("class") == "rec" else v
                for k, v in net_dict.items()}
    with tf.Graph().as_default():
        net = build_network(net_dict, extern_data)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            for p in net.get_params_list():
                if params is not None:
                    p.load(params[p.op.name], session)
            feed = random_feed(net, list(seq_lens))
            out = session.run(net.get_default_output_layer().output.copy_as_batch_major().placeholder, feed_dict=feed)
            return out, {p.op.name: v for p, v in zip(net.get_params_list(), session.run(net.get_params_list()))}


def test_masked_computation_unmask_in_rec_loop_optimized():
    unit = {
        "const1": {"class": "constant", "value": 1, "with_batch_dim": True},
        "mask": {"class": "eval", "from": [":i", "const1"], "out_type": {"dtype": "bool"},
                 "eval": "tf.equal(source(0) % 2, source(1))"},
        "masked": {"class": "masked_computation", "from": "data:source", "mask": "mask", "unit": {
            "class": "subnetwork", "from": "data", "subnetwork": {
                "input0": {"class": "cast", "from": "data", "dtype": "float32"},
                "input1": {"class": "expand_dims", "axis": "f", "from": "input0"},
                "output": {"class": "cumsum", "from": "input1"}}}},
        "unmask": {"class": "unmask", "from": "masked", "mask": "mask"},
        "output": {"class": "squeeze", "from": "unmask", "axis": "f"}}
    net_dict = {"output": {"class": "rec", "from": "data", "unit": unit}}
    extern_data = {"data": {"dim": 20, "sparse": True}}
    ref, _ = _rec_outputs(net_dict, extern_data, optimize=False)
    out, _ = _rec_outputs(net_dict, extern_data, optimize=True)
    np.testing.assert_allclose(out, ref)


def test_window_in_subnetwork_in_rec_unit_optimized():
    net_dict = {"output": {"class": "rec", "from": "data", "unit": {
        "sub": {"class": "subnetwork", "from": "data:source", "subnetwork": {
            "win": {"class": "window", "window_size": 3, "window_right": 0, "from": "data"},  # per step: past only
            # except_time, not except_batch: moved out (as the original moves it) the window has the time axis
            "output": {"class": "merge_dims", "axes": "except_time", "from": "win"}}},
        "output": {"class": "linear", "n_out": 4, "from": ["sub", "prev:output"]}}}}
    ref, params = _rec_outputs(net_dict, {"data": {"dim": 3}}, optimize=False)
    out, _ = _rec_outputs(net_dict, {"data": {"dim": 3}}, optimize=True, params=params)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
