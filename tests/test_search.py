"""Beam search: task = "search" on a tiny trained attention model, search layers, bad input errors."""

import os
import re
import ast

import numpy
import pytest
import tensorflow as tf

from returnn_lite.__main__ import main
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

SEARCH_CONFIG = """#!rnn.py
import numpy
_rnd = numpy.random.RandomState(%(seed)i)
def _seqs(n):
    res = []
    for _ in range(n):
        x = _rnd.randint(1, 5, size=_rnd.randint(2, 5))
        res.append({"data": x, "classes": numpy.concatenate([x, [0]])})
    return res
task = "train"
train = {"class": "StaticDataset", "data": _seqs(60), "output_dim": {"data": (5, 1), "classes": (5, 1)}}
dev = {"class": "StaticDataset", "data": _seqs(6), "output_dim": {"data": (5, 1), "classes": (5, 1)}}
extern_data = {"data": {"dim": 5, "sparse": True}, "classes": {"dim": 5, "sparse": True}}
batch_size = 400
max_seqs = 20
network = {
    "embed": {"class": "linear", "activation": None, "n_out": 8, "from": "data"},
    "encoder": {"class": "rec", "unit": "lstm", "n_out": 8, "from": "embed"},
    "enc_ctx": {"class": "linear", "activation": None, "n_out": 8, "from": "encoder"},
    "output": {"class": "rec", "from": [], "target": "classes", "max_seq_len": "max_len_from('base:encoder') * 2",
               "unit": {
        "output": {"class": "choice", "target": "classes", "beam_size": 3, "from": "prob", "initial_output": 0},
        "end": {"class": "compare", "from": "output", "value": 0},
        "embed": {"class": "linear", "activation": None, "n_out": 8, "from": "prev:output"},
        "s": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": 8, "from": ["embed", "prev:c"]},
        "c": {"class": "dot_attention", "from": "s", "base": "base:encoder", "base_ctx": "base:enc_ctx"},
        "prob": {"class": "softmax", "from": ["s", "c"], "target": "classes", "loss": "ce"},
    }},
    "decision": {"class": "decide", "from": "output"},
}
adam = True
learning_rate = 0.05
num_epochs = 3
model = %(dir)r + "/model"
log = %(dir)r + "/log"
log_verbosity = 4
"""


def test_search_task_writes_hypotheses_and_error(tmp_path, capsys):
    cfg = tmp_path / "search.config"
    cfg.write_text(SEARCH_CONFIG % {"seed": 1, "dir": str(tmp_path / "out")})
    assert main([str(cfg)]) in (0, None)
    txt, py = tmp_path / "out.txt", tmp_path / "out.py"
    assert main([str(cfg), "++task", "search", "++search_output_file", str(txt)]) in (0, None)
    log = (tmp_path / "out" / "log").read_text() + capsys.readouterr().out
    lines = txt.read_text().splitlines()
    assert len(lines) == 6
    assert all(re.fullmatch(r"[0-4]( [0-4])*|", line) for line in lines)
    m = re.search(r"search: WER (\d+\.\d+)% \((\d+)/(\d+) labels\)", log)
    assert m, log
    assert 0 < int(m.group(3)) <= 6 * 5 and float(m.group(1)) == pytest.approx(100. * int(m.group(2)) / int(m.group(3)),
                                                                                abs=0.01)
    assert main([str(cfg), "++task", "search", "++search_output_file", str(py), "++search_output_file_format", "py"]) \
        in (0, None)
    res = ast.literal_eval(py.read_text())
    assert len(res) == 6
    for tag, hyps in res.items():
        assert len(hyps) == 3  # the whole beam, best first
        scores = [s for s, _ in hyps]
        assert scores == sorted(scores, reverse=True)
        assert all(re.fullmatch(r"[0-4]( [0-4])*|", h) for _, h in hyps)
    assert [res["seq-%i" % i][0][1] for i in range(6)] == lines  # txt: the best hypothesis per seq, in order


def _build(net_dict, search=True, extern=None):
    extern = extern or {"data": {"dim": 4}, "classes": {"dim": 5, "sparse": True}}
    net = TFNetwork(extern_data=ExternData(extern), train_flag=False, search_flag=search)
    net.construct_from_dict(net_dict)
    return net


_DECODER = {
    "enc": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"},
    "output": {"class": "rec", "from": [], "target": "classes", "max_seq_len": 6, "unit": {
        "embed": {"class": "linear", "activation": None, "n_out": 4, "from": "prev:output"},
        "s": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": 6, "from": ["embed", "base:enc"]},
        "prob": {"class": "softmax", "from": "s", "target": "classes"},
        "output": {"class": "choice", "target": "classes", "beam_size": 3, "from": "prob", "initial_output": 0},
        "end": {"class": "compare", "from": "output", "value": 0},
    }},
    "decision": {"class": "decide", "from": "output", "is_output_layer": True},
}


def _run(net, layers, seed=0, extra=()):
    rnd = numpy.random.RandomState(seed)
    data = net.extern_data.data["data"]
    feed = {data.placeholder: rnd.normal(size=(2, 5, 4)).astype("float32"), data.size_placeholder[0]: [5, 3]}
    with tf1.Session() as session:
        net.initialize_params(session)
        for p in net.get_params_list():  # peaky distributions
            session.run(p.assign(p * 3.0))
        return session.run([net.get_layer(x).output.placeholder for x in layers] + list(extra) +
                           [net.get_layer(x).output.get_time_dim_tag().dyn_size for x in layers
                            if net.get_layer(x).output.have_time_axis()], feed)


def test_search_beam_templates_and_decide():
    with tf.Graph().as_default():
        net = _build(_DECODER)
        out = net.get_layer("output").output
        assert out.beam is not None and out.beam.beam_size == 3
        assert net.get_layer("decision").output.beam is None
        labels, decided, lens, dec_lens = _run(net, ["output", "decision"])
        assert labels.shape[1] == 2 * 3 and decided.shape[0] == 2
        scores = None
        for b in range(2):  # the decided hypothesis is the first (best) of its beam
            assert dec_lens[b] == lens[b * 3]
            numpy.testing.assert_array_equal(decided[b, :dec_lens[b]], labels[:lens[b * 3], b * 3])
        assert scores is None


def test_search_errors_name_layer_and_option():
    bad = dict(_DECODER, output=dict(_DECODER["output"], unit=dict(_DECODER["output"]["unit"])))
    bad["output"]["unit"]["output"] = {k: v for k, v in _DECODER["output"]["unit"]["output"].items()
                                       if k != "beam_size"}
    with tf.Graph().as_default():
        with pytest.raises(Exception, match=r"output.*beam_size"):
            _build(bad)
    with tf.Graph().as_default():
        with pytest.raises(Exception, match=r"split.*no search beam"):
            _build({"lin": {"class": "linear", "n_out": 3, "from": "data"},
                    "split": {"class": "split_batch_beam", "from": "lin", "is_output_layer": True}})


def test_search_beam_mismatch_names_layer():
    second = dict(_DECODER["output"])
    net_dict = dict(_DECODER, output2=second,
                    len1={"class": "length", "from": "output"}, len2={"class": "length", "from": "output2"},
                    both={"class": "combine", "kind": "add", "from": ["len1", "len2"], "is_output_layer": True})
    with tf.Graph().as_default():
        with pytest.raises(Exception, match=r"both.*beam mismatch"):
            _build(net_dict)


def test_search_task_refuses_net_without_choice():
    from types import SimpleNamespace

    from returnn_lite.engine.search import _check_has_search

    with tf.Graph().as_default():
        net = _build({"output": {"class": "softmax", "from": "data", "target": "classes"}}, search=True)
        with pytest.raises(RuntimeError, match=r"no 'choice' layer.*'output'"):
            _check_has_search(SimpleNamespace(network=net), "output", RuntimeError)


def test_extra_search_net_shares_params():
    net_dict = dict(_DECODER, output=dict(_DECODER["output"], unit=dict(
        _DECODER["output"]["unit"], output=dict(_DECODER["output"]["unit"]["output"]))))
    net_dict["decision"] = {"class": "decide", "from": "extra.search:output", "is_output_layer": True}
    extern = {"data": {"dim": 4}, "classes": {"dim": 5, "sparse": True}}
    with tf.Graph().as_default():
        net = _build(net_dict, search=False, extern=extern)
        assert net.get_layer("output").output.beam is None  # teacher forcing in the main net
        names = sorted(p.op.name for p in net.get_params_list())
        assert len(names) == len(set(names)) and all(not n.startswith("extra") for n in names)
        assert net.get_layer("decision").output.beam is None
        assert len(tf1.global_variables()) == len(names)  # the extra net made no variables of its own


def test_beam_scores_read_inside_the_loop_are_the_score_sums():
    # with length normalization (the default), the original ranks by the score sum (ended hypotheses scaled) and
    # exposes that sum inside the loop; the rec layer's final scores are normalized by the length
    unit = dict(_DECODER["output"]["unit"], end={"class": "compare", "from": "output", "value": -1},  # never ends
                step_scores={"class": "choice_get_beam_scores", "from": "output", "is_output_layer": True},
                log_prob={"class": "activation", "activation": "safe_log", "from": "prob"},
                label_score={"class": "gather", "from": "log_prob", "axis": "F", "position": "output",
                             "is_output_layer": True})
    net_dict = dict(_DECODER, output=dict(_DECODER["output"], unit=unit),
                    final_scores={"class": "choice_get_beam_scores", "from": "output", "is_output_layer": True})
    with tf.Graph().as_default():
        net = _build(net_dict)
        step_scores, label_scores, final, lens = _run(net, ["output/step_scores", "output/label_score",
                                                            "final_scores"])[:4]
    assert step_scores.shape == (6, 2 * 3) and list(lens) == [6] * 6
    # per hypothesis (backtracked): the sum of its label log probs so far (not the running mean)
    numpy.testing.assert_allclose(step_scores, numpy.cumsum(label_scores, axis=0), rtol=1e-4, atol=1e-4)
    # the final (normalized) scores: proportional to the last sums (all hypotheses have the same length here)
    ratio = final / step_scores[-1]
    numpy.testing.assert_allclose(ratio, numpy.full_like(ratio, ratio[0]), rtol=1e-4)
    assert 0 < ratio[0] < 1


def _fertility_decoder():
    # MLP attention with fertility: the accumulated attention weights over the encoder time are a loop state
    return {
        "encoder": {"class": "linear", "activation": "tanh", "n_out": 6, "from": "data"},
        "enc_ctx": {"class": "linear", "activation": None, "n_out": 6, "from": "encoder"},
        "inv_fertility": {"class": "linear", "activation": "sigmoid", "with_bias": False, "n_out": 1,
                          "from": "encoder"},
        "output": {"class": "rec", "from": [], "target": "classes", "max_seq_len": 6, "unit": {
            "weight_feedback": {"class": "linear", "activation": None, "with_bias": False, "n_out": 6,
                                "from": "prev:accum_att_weights"},
            "s_transformed": {"class": "linear", "activation": None, "with_bias": False, "n_out": 6, "from": "prev:s"},
            "energy_in": {"class": "combine", "kind": "add", "n_out": 6,
                          "from": ["base:enc_ctx", "weight_feedback", "s_transformed"]},
            "energy_tanh": {"class": "activation", "activation": "tanh", "from": "energy_in"},
            "energy": {"class": "linear", "activation": None, "with_bias": False, "n_out": 1, "from": "energy_tanh"},
            "att_weights": {"class": "softmax_over_spatial", "from": "energy"},
            "accum_att_weights": {"class": "eval", "from": ["prev:accum_att_weights", "att_weights",
                                                            "base:inv_fertility"],
                                  "eval": "source(0) + source(1) * source(2) * 0.5",
                                  "out_type": {"dim": 1, "shape": (None, 1)}},
            "att": {"class": "generic_attention", "weights": "att_weights", "base": "base:encoder",
                    "auto_squeeze": True},
            "s": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": 6, "from": ["prev:target_embed", "att"]},
            "output_prob": {"class": "softmax", "from": ["s", "att"], "target": "classes"},
            "log_prob": {"class": "activation", "activation": "safe_log", "from": "output_prob"},
            "label_score": {"class": "gather", "from": "log_prob", "axis": "F", "position": "output",
                            "is_output_layer": True},
            "output": {"class": "choice", "target": "classes", "beam_size": 3, "from": "output_prob",
                       "initial_output": 0},
            "target_embed": {"class": "linear", "activation": None, "n_out": 4, "from": "output", "initial_output": 0},
            "end": {"class": "compare", "from": "output", "value": 0}}},
        "decision": {"class": "decide", "from": "output", "is_output_layer": True},
    }


def test_search_with_fertility_state_over_the_encoder_time():
    # the loop state over the (beam-repeated) encoder time keeps the encoder's tags: the choice sees [B*beam, dim];
    # the best hypothesis' label scores are those of the same net fed with it as the target (no search)
    rnd = numpy.random.RandomState(3)
    x, x_lens = rnd.normal(size=(2, 5, 4)).astype("float32"), numpy.array([5, 3], "int32")
    with tf.Graph().as_default():
        net = _build(_fertility_decoder())
        assert net.get_layer("output/output").output.beam.beam_size == 3
        data = net.extern_data.data["data"]
        with tf1.Session() as session:
            net.initialize_params(session)
            params = {p.op.name: session.run(p) * 3.0 for p in net.get_params_list()}  # peaky distributions
            for p in net.get_params_list():
                p.load(params[p.op.name], session)
            labels, scores, lens, dec_lens = session.run(
                [net.get_layer("output").output.placeholder, net.get_layer("output/label_score").output.placeholder,
                 net.get_layer("output").output.get_time_dim_tag().dyn_size,
                 net.get_layer("decision").output.get_time_dim_tag().dyn_size],
                {data.placeholder: x, data.size_placeholder[0]: x_lens})
    best = labels[:, 0::3]  # [T, B]: the first hypothesis of each sequence is the best
    with tf.Graph().as_default():
        net = _build(_fertility_decoder(), search=False)
        data, classes = net.extern_data.data["data"], net.extern_data.data["classes"]
        with tf1.Session() as session:
            for p in net.get_params_list():
                p.load(params[p.op.name], session)
            forced = session.run(net.get_layer("output/label_score").output.placeholder, {
                data.placeholder: x, data.size_placeholder[0]: x_lens,
                classes.placeholder: best.T, classes.size_placeholder[0]: lens[0::3]})
    for b in range(2):
        n = lens[b * 3]
        assert dec_lens[b] == n
        numpy.testing.assert_allclose(forced[:n, b], scores[:n, b * 3], rtol=1e-4, atol=1e-5)


_TWO_CHOICES = dict(_DECODER, output=dict(_DECODER["output"], unit={
    "embed": {"class": "linear", "activation": None, "n_out": 4, "from": "prev:output"},
    "s": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": 6, "from": ["embed", "base:enc"]},
    "prob1": {"class": "softmax", "from": "s", "target": "classes"},
    "c1": {"class": "choice", "target": "classes", "beam_size": 3, "from": "prob1", "initial_output": 0},
    "embed_c1": {"class": "linear", "activation": None, "n_out": 4, "from": "c1"},
    "prob": {"class": "softmax", "from": ["s", "embed_c1"], "target": "classes"},
    "output": {"class": "choice", "target": "classes", "beam_size": 6, "from": "prob", "initial_output": 0},
    "end": {"class": "compare", "from": "output", "value": 0},
}))


def test_search_second_choice_on_the_first_ones_beam():
    # as the original: c1 chooses 3 of the (6 hypotheses x 5 labels), output chooses 6 of (c1's 3 x 5); the next step
    # starts from output's beam (size 6); the hypotheses go back through both choices to the previous step
    with tf.Graph().as_default():
        net = _build(_TWO_CHOICES)
        rec = net.get_layer("output")
        assert rec.output.beam.beam_size == 6 and rec.output.beam.dependency.name == "output/c1"
        scores = rec.output.beam.beam_scores
        labels, decided, scores, lens, dec_lens = _run(net, ["output", "decision"], extra=[scores])
        assert labels.shape[1] == 2 * 6 and decided.shape[0] == 2 and scores.shape == (2, 6)
        assert numpy.isfinite(scores).all() and (numpy.diff(scores, axis=1) <= 1e-6).all()  # best first
        for b in range(2):  # the decided hypothesis is the first (best) of its beam
            assert dec_lens[b] == lens[b * 6]
            numpy.testing.assert_array_equal(decided[b, :dec_lens[b]], labels[:lens[b * 6], b * 6])


def _two_choices_with_outer_layers(via_unit_copy):
    # 'att' and 'mix' are on the first choice's beam (3); 'att0' (same outer encoder) on the loop's beam (6)
    enc_ref = "enc_in" if via_unit_copy else "base:encoder"
    unit = dict(_TWO_CHOICES["output"]["unit"], **{
        "att0": {"class": "dot_attention", "from": "s", "base": "base:encoder", "base_ctx": "base:encoder"},
        "prob1": {"class": "softmax", "from": ["s", "att0"], "target": "classes"},
        "embed_c1": {"class": "linear", "activation": None, "n_out": 6, "from": "c1"},
        "att": {"class": "dot_attention", "from": "embed_c1", "base": enc_ref, "base_ctx": enc_ref},
        "mix": {"class": "combine", "kind": "add", "from": ["embed_c1", "base:enc_lin"]},
        "prob": {"class": "softmax", "from": ["s", "att", "mix"], "target": "classes"},
    })
    if via_unit_copy:
        unit["enc_in"] = {"class": "copy", "from": "base:encoder"}
    return dict(_TWO_CHOICES, output=dict(_TWO_CHOICES["output"], unit=unit), **{
        "encoder": {"class": "linear", "activation": "tanh", "n_out": 6, "from": "data"},
        "enc_lin": {"class": "linear", "n_out": 6, "from": "enc"}})


def test_search_outer_layers_on_the_first_choices_smaller_beam():
    # as the original: an outer layer (base:) used by a layer on the first choice's beam is repeated for that beam
    # (3 hypotheses), where the loop's beam has 6; the same as reading it through a layer of the unit
    results = []
    for via_unit_copy in (False, True):
        with tf.Graph().as_default():
            tf1.set_random_seed(3)
            net = _build(_two_choices_with_outer_layers(via_unit_copy))
            rec = net.get_layer("output")
            assert rec.output.beam.beam_size == 6 and rec.output.beam.dependency.beam_size == 3
            results.append(_run(net, ["output", "decision"], extra=[rec.output.beam.beam_scores]))
    (labels, decided, scores, lens, dec_lens), other = results
    assert labels.shape[1] == 2 * 6 and numpy.isfinite(scores).all() and (numpy.diff(scores, axis=1) <= 1e-6).all()
    numpy.testing.assert_array_equal(labels, other[0])
    numpy.testing.assert_allclose(scores, other[2], rtol=1e-5)
    for b in range(2):
        numpy.testing.assert_array_equal(decided[b, :dec_lens[b]], labels[:lens[b * 6], b * 6])
