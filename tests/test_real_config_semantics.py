"""
Semantics that published configs rely on, each shown on a tiny self-written net: the eval's source(i, as_data=True)
against a size-1 output axis, an out_type given by shape keeping the sources' time axis, padding undone by a 'valid'
conv giving back the unpadded axis (location-aware attention), sampling_loss on a softmax moved out of a rec loop.
"""

import numpy as np
import tensorflow as tf

from returnn_lite.config import Config
from returnn_lite.network import TFNetwork
from returnn_lite.testing import random_feed

tf1 = tf.compat.v1


def _build(net_dict, extern_data=None, train_flag=True):
    graph = tf.Graph()
    with graph.as_default():
        net = TFNetwork(config=Config({"extern_data": extern_data or {"data": {"dim": 3}, "classes": {"dim": 5}}}),
                        train_flag=train_flag, eval_flag=True)
        net.construct_from_dict(net_dict)
    return graph, net


def _run(graph, net, fetches, seq_lens=(5, 3)):
    with graph.as_default(), tf1.Session(graph=graph) as session:
        session.run(tf1.global_variables_initializer())
        feed = random_feed(net, list(seq_lens))
        return session.run(fetches, feed_dict=feed), feed


def test_eval_source_as_data_against_a_size_one_output_feature():
    # the original maps the source's feature axis (5) to the output's size-1 feature axis (a broadcast match)
    graph, net = _build({
        "lin": {"class": "linear", "activation": None, "from": "data", "n_out": 5},
        "summed": {"class": "eval", "from": "lin", "out_type": {"dim": 1, "shape": (None, 1)},
                   "eval": "tf.reduce_sum(source(0, as_data=True).placeholder, axis=-1, keepdims=True)",
                   "is_output_layer": True}})
    out = net.layers["summed"].output
    assert out.dim == 1 and out.get_time_dim_tag() == net.layers["lin"].output.get_time_dim_tag()
    (summed, lin), _ = _run(graph, net, [out.placeholder, net.layers["lin"].output.placeholder])
    np.testing.assert_allclose(summed, lin.sum(axis=-1, keepdims=True), rtol=1e-5)


def test_out_type_by_shape_keeps_the_sources_time_axis():
    graph, net = _build({
        "lin": {"class": "linear", "activation": None, "from": "data", "n_out": 6},
        "pos": {"class": "positional_encoding", "from": "lin", "n_out": 4, "out_type": {"dim": 4, "shape": (None, 4)}},
        "both": {"class": "copy", "from": ["lin", "pos"], "is_output_layer": True}})
    assert net.layers["pos"].output.get_time_dim_tag() == net.layers["lin"].output.get_time_dim_tag()
    both, _ = _run(graph, net, net.layers["both"].output.placeholder)
    assert both.shape == (2, 5, 10)


def test_padding_undone_by_a_valid_conv_gives_back_the_axis():
    # as the original's dim arithmetic: (2 + T + 2) - (5 - 1) is T again, so it combines with T
    graph, net = _build({
        "lin": {"class": "linear", "activation": None, "from": "data", "n_out": 1},
        "pad_l": {"class": "pad", "axes": "s:0", "from": "lin", "padding": ((2, 0),), "value": 1.},
        "pad_r": {"class": "pad", "axes": "s:0", "from": "pad_l", "padding": ((0, 2),), "value": 0.},
        "conv": {"class": "conv", "filter_size": (5,), "padding": "valid", "n_out": 1, "from": "pad_r",
                 "with_bias": False},
        "conv_short": {"class": "conv", "filter_size": (4,), "padding": "valid", "n_out": 1, "from": "pad_r"},
        "sum": {"class": "combine", "kind": "add", "from": ["lin", "conv"], "is_output_layer": True},
        "short": {"class": "copy", "from": "conv_short", "is_output_layer": True}})
    time = net.layers["lin"].output.get_time_dim_tag()
    assert net.layers["conv"].output.get_time_dim_tag() == time
    assert net.layers["conv_short"].output.get_time_dim_tag() != time  # T + 1: a new axis
    (lin, conv, filt, short), feed = _run(graph, net, [
        net.layers["lin"].output.placeholder, net.layers["conv"].output.placeholder,
        net.layers["conv"].params["W"], net.layers["short"].output.placeholder])
    assert short.shape[1] == 6
    padded = np.concatenate([np.ones((2, 2, 1)), lin, np.zeros((2, 2, 1))], axis=1)
    expected = np.stack([(padded[:, t:t + 5, 0] * filt[:, 0, 0]).sum(axis=1) for t in range(5)], axis=1)
    # frames of the shorter sequence beyond its length see the padding at the max length, compare the valid ones
    np.testing.assert_allclose(conv[0, :, 0], expected[0], rtol=1e-4, atol=1e-5)


def test_location_aware_attention_in_a_rec_loop():
    graph, net = _build({
        "enc": {"class": "linear", "activation": None, "from": "data", "n_out": 6},
        "output": {"class": "rec", "from": [], "target": "classes", "max_seq_len": 10, "unit": {
            "accum": {"class": "combine", "kind": "add", "from": ["prev:accum", "att_w"]},
            "pad_l": {"class": "pad", "axes": "s:0", "from": "prev:accum", "padding": ((3, 0),), "value": 1},
            "pad_r": {"class": "pad", "axes": "s:0", "from": "pad_l", "padding": ((0, 3),), "value": 0},
            "conv": {"class": "conv", "filter_size": (7,), "from": "pad_r", "n_out": 4, "padding": "valid"},
            "loc": {"class": "linear", "from": "conv", "n_out": 6, "with_bias": False},
            "e_in": {"class": "combine", "kind": "add", "from": ["base:enc", "loc"]},
            "energy": {"class": "linear", "from": "e_in", "n_out": 1, "activation": None},
            "att_w": {"class": "softmax_over_spatial", "from": "energy"},
            "att": {"class": "generic_attention", "base": "base:enc", "weights": "att_w"},
            "output": {"class": "linear", "from": "att", "n_out": 5, "loss": "mse", "target": "classes"}}}},
        extern_data={"data": {"dim": 3}, "classes": {"dim": 5}})
    with graph.as_default():
        loss = net.get_objective()
    value, _ = _run(graph, net, loss)
    assert np.isfinite(value)
    assert "output/rec/conv/W" in {p.op.name for p in net.get_params_list()}


def test_sampling_loss_on_a_softmax_moved_out_of_a_rec_loop():
    extern_data = {"data": {"dim": 20, "sparse": True}, "delayed": {"dim": 20, "sparse": True}}
    unit = {"emb": {"class": "linear", "activation": None, "from": "data:source", "n_out": 4},
            "output": {"class": "softmax", "from": "emb", "use_transposed_weights": True, "target": "data",
                       "loss": "sampling_loss", "loss_opts": {"num_sampled": 5, "use_full_softmax": True}}}
    graph, net = _build({"output": {"class": "rec", "from": "data:delayed", "target": "data", "unit": unit}},
                        extern_data=extern_data, train_flag=False)
    with graph.as_default():
        loss = net.get_objective()
        params = {p.op.name: p for p in net.get_params_list()}
        assert params["output/rec/output/W"].shape.as_list() == [20, 4]  # [classes, dim]
        emb = net.get_layer("output/emb").output.copy_as_batch_major()
    (value, w, b, x), feed = _run(graph, net, [loss, params["output/rec/output/W"], params["output/rec/output/b"],
                                               emb.placeholder])
    target = [v for k, v in feed.items() if k.name.startswith("extern_data/placeholders/data/data:")][0]
    logits = x @ w.T + b
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, target[..., None], -1)[..., 0]
    mask = np.arange(5)[None, :] < np.array([5, 3])[:, None]
    np.testing.assert_allclose(value, nll[mask].sum(), rtol=1e-4)  # the full softmax outside training


def _ctc_brute_force(scores, target, blank):
    """-log sum over all alignments of prod_t exp(scores[t, label_t]) (scores taken as they are)."""
    import itertools

    total = 0.
    for path in itertools.product(range(scores.shape[1]), repeat=scores.shape[0]):
        labels = [k for i, k in enumerate(path) if k != blank and (i == 0 or path[i - 1] != k)]
        if labels == list(target):
            total += np.exp(sum(scores[t, k] for t, k in enumerate(path)))
    return -np.log(total)


def test_native_ctc_opts_unnormalized_scores():
    # the original's native CTC op with ctc_opts logits_normalize=False takes the scores as they are (no softmax)
    graph, net = _build({
        "scores": {"class": "linear", "activation": None, "from": "data", "n_out": 4},
        "ctc": {"class": "copy", "from": "scores", "loss": "ctc", "target": "classes",
                "loss_opts": {"use_native": True, "output_in_log_space": True, "beam_width": 1,
                              "ctc_opts": {"logits_normalize": False, "grad_wrt_softmax_in": False}}}},
        extern_data={"data": {"dim": 2}, "classes": {"dim": 3, "sparse": True}})
    with graph.as_default():
        loss = net.get_objective()
        grads = tf.gradients(loss, net.layers["scores"].params["W"])
        data, classes = net.extern_data.data["data"], net.extern_data.data["classes"]
        feed = {data.placeholder: np.random.RandomState(1).randn(2, 3, 2).astype("float32"),
                data.size_placeholder[0]: [3, 2], classes.placeholder: [[2, 0], [1, 1]],
                classes.size_placeholder[0]: [1, 2]}
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            value, scores, grad = session.run([loss, net.layers["scores"].output.placeholder, grads[0]], feed)
    scores = np.transpose(scores, (1, 0, 2)) if scores.shape[0] == 3 and scores.shape[1] == 2 else scores
    expected = _ctc_brute_force(scores[0, :3], [2], blank=3) + _ctc_brute_force(scores[1, :2], [1, 1], blank=3)
    np.testing.assert_allclose(value, expected, rtol=1e-4)
    assert np.all(np.isfinite(grad))


def test_custom_score_combine_explicit_search_sources_and_a_string_state_in_search():
    # RNA/transducer recognition configs: the choice's scores come from custom_score_combine (called with the layer,
    # scores_in/scores_base [batch, beam_in, dim|1], end_flags, ...), which reads layer.explicit_search_sources;
    # a string-valued loop layer starts from "" (initial_output None), and back_prop=False is fine without training
    calls = []

    def combine(layer, scores_in, scores_base, base_beam_in, end_flags, batch_dim, **kwargs):
        calls.append((layer.name, sorted(kwargs), [src.name for src in layer.explicit_search_sources]))
        assert scores_base.shape.rank == 3 and scores_in.shape.rank == 3
        bonus = tf.one_hot(2, 5, on_value=100., off_value=0.)  # always prefer label 2
        return scores_in + scores_base + bonus[None, None, :]

    def out_str(source, **kwargs):
        return source(0) + tf.strings.as_string(source(1))

    extern_data = {"data": {"dim": 3}, "classes": {"dim": 5, "sparse": True}}
    graph = tf.Graph()
    with graph.as_default():
        config = Config({"extern_data": extern_data})
        net = TFNetwork(config=config, train_flag=False, search_flag=True, eval_flag=False)
        net.construct_from_dict({
            "output": {"class": "rec", "from": "data", "back_prop": False, "unit": {
                "prob": {"class": "linear", "from": "data:source", "activation": "log_softmax", "n_out": 5},
                "output": {"class": "choice", "from": "prob", "input_type": "log_prob", "target": "classes",
                           "beam_size": 3, "explicit_search_sources": ["prev:out_str"],
                           "custom_score_combine": combine},
                "out_str": {"class": "eval", "from": ["prev:out_str", "output"], "initial_output": None,
                            "out_type": {"shape": (), "dtype": "string"}, "eval": out_str},
            }},
            "decision": {"class": "decide", "from": "output", "is_output_layer": True}})
        assert calls and calls[0][0] == "output" and calls[0][2] == ["prev:out_str"]
        assert {"t", "scores_beam_in"} <= set(calls[0][1])
        out = net.get_layer("decision").output.copy_as_batch_major()
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            labels = session.run(out.placeholder, feed_dict=random_feed(net, [4, 2]))
    assert (labels[0] == 2).all() and (labels[1, :2] == 2).all()


def test_masked_computation_masked_from_and_an_eval_out_type_function():
    # RNA training configs: masked_computation with masked_from (moved out of the loop, as the original needs it):
    # its unit runs over the whole masked_from sequence (its own time axis; the mask is not used), params named as
    # the layer; an eval's out_type given as a function makes the template (the sources need not be combinable)
    def loss_out(sources, name, **kwargs):
        from returnn_lite.tf_util import Data
        return Data(name="my_loss", shape=())

    graph, net = _build({
        "lm_in": {"class": "linear", "from": "data:classes", "n_out": 2, "activation": None},
        "output": {"class": "rec", "from": "data", "unit": {
            "am": {"class": "linear", "from": "data:source", "n_out": 5, "activation": None},
            "emit": {"class": "compare", "from": "am", "value": 0., "kind": "greater", "initial_output": True},
            "lm": {"class": "masked_computation", "mask": "prev:emit", "from": "prev:am", "masked_from": "base:lm_in",
                   "unit": {"class": "linear", "from": "data", "n_out": 4, "activation": None},
                   "is_output_layer": True},
            "output": {"class": "copy", "from": "am"}}},
        "loss": {"class": "eval", "from": ["output", "lm_in"], "out_type": loss_out, "is_output_layer": True,
                 "eval": "tf.reduce_sum(source(0, as_data=True, auto_convert=False).get_placeholder_as_batch_major(), "
                         "axis=[1, 2]) * 0. + tf.reduce_sum(source(1, as_data=True, auto_convert=False)"
                         ".get_placeholder_as_batch_major(), axis=[1, 2]) * 0. + 1."},
    }, extern_data={"data": {"dim": 3}, "classes": {"dim": 6, "sparse": True}})
    params = {p.op.name: tuple(p.shape.as_list()) for p in net.get_params_list()}
    assert params["output/rec/lm/W"] == (2, 4)
    lm_layer = next(n.layers["lm"] for n in net.get_layer("output").get_sub_networks() if "lm" in n.layers)
    with graph.as_default():  # (over its own time axis, not the loop's: only used inside the unit)
        lm = lm_layer.output.copy_as_batch_major()
        lm_in = net.get_layer("lm_in").output.copy_as_batch_major()
    assert lm.batch_shape == (None, None, 4) and lm.get_time_dim_tag() == lm_in.get_time_dim_tag()
    loss = net.get_layer("loss").output
    assert loss.name == "my_loss" and loss.batch_shape == (None,)
    (lm_v, lm_in_v, w, b, loss_v), _ = _run(graph, net, [
        lm.placeholder, lm_in.placeholder, lm_layer.params["W"], lm_layer.params["b"], loss.placeholder])
    np.testing.assert_allclose(lm_v, lm_in_v @ w + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss_v, 1.)


def test_target_without_a_loss_is_not_looked_up_in_search():
    # LM shallow fusion configs: the LM's softmax names its own target ("bpe", no such data key) without a loss;
    # the original does not resolve it in search; elsewhere an unknown key stays an error naming the option
    import pytest
    from returnn_lite.errors import NetworkLayerException

    net_dict = {"lm_prob": {"class": "activation", "activation": "softmax", "from": "data", "target": "bpe"},
                "output": {"class": "copy", "from": "lm_prob"}}
    for search in (True, False):
        with tf.Graph().as_default():
            net = TFNetwork(config=Config({"extern_data": {"data": {"dim": 3}}}), train_flag=False,
                            search_flag=search, eval_flag=False)
            if search:
                net.construct_from_dict(net_dict)
                assert net.get_layer("lm_prob").output.dim == 3
            else:
                with pytest.raises(NetworkLayerException, match="option 'target'.*unknown key 'bpe'"):
                    net.construct_from_dict(net_dict)
