"""
RASR-trained hybrid networks (loss 'sprint', fast_bw with align_target 'sprint', forced_align): they construct with
the original's params and templates, their other layers compute, and what needs RASR or a missing kernel fails
only when it is computed, with one line naming it.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.engine.checks import tf_error_text
from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1
LENS = np.array([6, 4], "int32")
EXTERN = {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}
SPRINT_OPTS = {"sprintExecPath": "/opt/rasr/nn-trainer.linux-x86_64-standard", "sprintConfigStr": "--config=x",
               "numInstances": 1, "usePythonSegmentOrder": False}


def _params(net):
    return sorted((p.op.name, tuple(p.shape.as_list())) for p in net.get_params_list())


def _run(net, fetch, seed=0):
    with tf1.Session() as session:
        net.initialize_params(session)
        return session.run(fetch, feed_dict=random_feed(net, LENS, seed))


def _run_error(net, fetch):
    """The one line the engine reports for the run-time error of computing fetch."""
    with pytest.raises(tf.errors.InvalidArgumentError) as exc:
        _run(net, fetch)
    return tf_error_text(exc.value.message)


def test_sprint_loss_constructs_forward_runs_loss_fails_naming_rasr():
    with tf.Graph().as_default():
        net = build_network({
            "lstm": {"class": "rec", "unit": "lstm", "n_out": 3, "from": "data"},
            "output": {"class": "softmax", "n_out": 7, "from": "lstm", "loss": "sprint",
                       "loss_opts": {"sprint_opts": SPRINT_OPTS}}}, EXTERN, train_flag=True)
        assert _params(net) == [("lstm/rec/W", (5, 12)), ("lstm/rec/W_re", (3, 12)), ("lstm/rec/b", (12,)),
                                ("output/W", (3, 7)), ("output/b", (7,))]
        out = _run(net, net.get_layer("output").output.placeholder)  # recognition / forward: no RASR needed
        assert out.shape == (6, 2, 7) and np.allclose(out.sum(-1), 1.0, atol=1e-5)  # time-major after the rec
        message = _run_error(net, net.get_objective())
    assert "loss 'sprint' of layer 'output' cannot be computed" in message
    assert "'/opt/rasr/nn-trainer.linux-x86_64-standard' (sprint_opts sprintExecPath)" in message


def test_fast_bw_via_layer_hybrid_constructs_with_the_original_templates():
    # the full-sum hybrid of published setups: prior-scaled log scores -> fast_bw -> via_layer loss on the softmax
    with tf.Graph().as_default():
        net = build_network({
            "output": {"class": "softmax", "n_out": 4, "from": "data"},
            "prior": {"class": "variable", "shape": (4,), "add_time_axis": True, "trainable": False},
            "scores": {"class": "combine", "kind": "eval", "from": ["output", "prior"],
                       "eval": "safe_log(source(0)) * 0.7 - source(1) * 0.3"},
            "fast_bw": {"class": "fast_bw", "align_target": "sprint", "from": "scores", "tdp_scale": 0.3,
                        "sprint_opts": SPRINT_OPTS},
            "output_bw": {"class": "copy", "from": "output", "loss": "via_layer",
                          "loss_opts": {"align_layer": "fast_bw", "loss_wrt_to_act_in": "softmax"}}},
            EXTERN, train_flag=True)
        bw = net.get_layer("fast_bw")
        assert not bw.params and bw.output.is_time_major() and bw.output.dim == 4 and not bw.output.sparse
        assert _params(net) == [("output/W", (5, 4)), ("output/b", (4,)), ("prior/prior", (4,))]
        scores = _run(net, net.get_layer("scores").output.placeholder)
        assert scores.shape == (2, 6, 4)
        for fetch in (bw.output.placeholder, net.get_objective()):
            assert re.search(r"layer 'fast_bw' \(fast_bw, align_target 'sprint'\) cannot be computed: it needs the "
                             r"RASR \(Sprint\) executable '/opt/rasr/nn-trainer", _run_error(net, fetch))


def test_fast_bw_loss_and_forced_align():
    with tf.Graph().as_default():
        net = build_network({
            "output": {"class": "softmax", "n_out": 4, "from": "data", "loss": "fast_bw",
                       "loss_opts": {"sprint_opts": SPRINT_OPTS, "tdp_scale": 0.5}},
            "log_probs": {"class": "activation", "activation": "safe_log", "from": "output"},
            "align": {"class": "forced_align", "align_target": "data:classes", "topology": "ctc",
                      "input_type": "log_prob", "from": "log_probs"},
            "viterbi_ce": {"class": "copy", "from": "output", "loss": "ce", "target": "layer:align"}},
            EXTERN, train_flag=True)
        align = net.get_layer("align")
        assert align.output.sparse and align.output.dim == 4 and align.output.is_time_major()
        assert align.output.batch_ndim == 2 and align.output.dtype == "int32"
        scores = net.get_layer("align/scores").output
        assert scores.batch_shape == (None,) and scores.dtype == "float32"
        assert "loss 'fast_bw' of layer 'output' cannot be computed: it needs the RASR" in _run_error(
            net, net.losses_dict["output"].get_loss_value())
        assert ("layer 'align' (forced_align, topology 'ctc') cannot be computed: it needs the original's native "
                "Viterbi") in _run_error(net, align.output.placeholder)


@pytest.mark.parametrize("desc, error", [
    ({"class": "fast_bw", "align_target": "viterbi"}, r"fast_bw: align_target must be one of 'sprint', 'ctc'"),
    ({"class": "forced_align", "align_target": "data:classes", "topology": "hmm", "input_type": "prob"},
     r"forced_align: topology must be 'ctc' or 'rna'"),
])
def test_bad_options_fail_at_construction(desc, error):
    with tf.Graph().as_default():
        with pytest.raises(Exception, match=error):
            build_network({"output": dict(desc, **{"from": "data"})}, EXTERN, train_flag=False)


def test_eval_for_output_loss_smooths_two_full_sum_losses():
    # CE-smoothed full-sum training of published CTC/hybrid setups: the eval is applied to the sources' output_loss
    # too (this layer is the via_layer loss's align_layer); computing still fails naming the fast_bw layer
    with tf.Graph().as_default():
        bw = {"class": "fast_bw", "align_target": "sprint", "sprint_opts": SPRINT_OPTS}
        net = build_network({
            "out_a": {"class": "softmax", "n_out": 4, "from": "data"},
            "out_b": {"class": "softmax", "n_out": 4, "from": "data"},
            "bw_a": dict(bw, **{"from": "out_a"}), "bw_b": dict(bw, **{"from": "out_b"}),
            "smooth": {"class": "combine", "kind": "eval", "from": ["bw_a", "bw_b"], "eval_for_output_loss": True,
                       "eval": "source(0) * (1 - s) + source(1) * s", "eval_locals": {"s": 0.25}},
            "output": {"class": "copy", "from": "out_a", "loss": "via_layer",
                       "loss_opts": {"align_layer": "smooth", "loss_wrt_to_act_in": "softmax"}}},
            EXTERN, train_flag=True)
        smooth = net.get_layer("smooth")
        assert smooth.output_loss is not None and smooth.output_loss.shape.rank == 0
        assert re.search(r"layer 'bw_[ab]' \(fast_bw", _run_error(net, net.get_objective()))  # both are needed
        with pytest.raises(Exception, match="eval_for_output_loss needs kind 'eval' and sources with an output_loss"):
            build_network({"output": {"class": "eval", "from": "data", "eval": "source(0)",
                                      "eval_for_output_loss": True}}, EXTERN, train_flag=True)
