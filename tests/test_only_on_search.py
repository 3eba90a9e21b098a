"""
only_on_search (a layer, and the layers depending on it, only in a network with search_flag) and the config option
search_train_network_layers (those layers built in an extra search network during training; their losses train).
"""

import os
import re
import warnings

import numpy
import pytest
import tensorflow as tf

from returnn_lite.__main__ import main
from returnn_lite.extern_data import ExternData
from returnn_lite.extra_net import construct_search_train_net
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

NET = {
    "encoder": {"class": "linear", "activation": "tanh", "n_out": 8, "from": "data"},
    "enc_out": {"class": "softmax", "from": "encoder", "loss": "ce", "target": "classes"},
    "enc_mean": {"class": "reduce", "mode": "mean", "axis": "T", "from": "encoder"},
    "output": {"class": "rec", "from": [], "only_on_search": True, "target": "classes",
               "max_seq_len": "max_len_from('base:encoder')", "unit": {
                   "embed": {"class": "linear", "activation": None, "n_out": 8, "from": "prev:output"},
                   "s": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": 8, "from": ["embed", "base:enc_mean"]},
                   "prob": {"class": "softmax", "from": "s", "target": "classes"},
                   "output": {"class": "choice", "target": "classes", "beam_size": 1, "from": "prob",
                              "initial_output": 0},
                   "end": {"class": "compare", "from": "output", "value": 0},
                   # -log p(greedy label): trained in the search train net
                   "nll": {"class": "eval", "from": "prob", "loss": "as_is", "collocate_with": "output",
                           "eval": "-tf.math.log(tf.reduce_max(source(0), axis=-1))",
                           "out_type": {"shape": (), "time_dim_axis": None, "feature_dim_axis": None}},
               }},
    "decision": {"class": "decide", "from": "output", "is_output_layer": True},  # depends on a search-only layer
}
EXTERN = {"data": {"dim": 6, "sparse": True}, "classes": {"dim": 6, "sparse": True}}


def _build(search):
    net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=True, search_flag=search)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no warning about the layers only the search-only ones use)
        net.construct_from_dict(NET)
    return net


def test_only_on_search_layers_skipped_without_search():
    with tf.Graph().as_default():
        net = _build(search=False)
        assert sorted(net.layers) == ["data", "enc_out", "encoder"]
        assert sorted(net.losses_dict) == ["enc_out"]
    with tf.Graph().as_default():
        net = _build(search=True)
        assert {"output", "decision", "enc_mean"} <= set(net.layers)
        assert net.get_layer("output").output.beam is not None


def test_search_train_network_layers_train_the_search_net():
    with tf.Graph().as_default():
        net = _build(search=False)
        main_params = {p.op.name for p in net.get_params_list()}
        layers = construct_search_train_net(net, NET, ["output"])
        assert [x.name for x in layers] == ["output"] and layers[0].output.beam is not None
        assert sorted(net.losses_dict) == ["enc_out", "output/nll"]
        params = {p.op.name for p in net.get_params_list()}
        assert main_params < params and any(n.startswith("output/") for n in params)
        assert len(tf1.global_variables()) == len(params)  # the encoder's params are shared, not made twice
        grads = tf.gradients(net.get_objective(), [p for p in net.get_params_list() if p.op.name.startswith("output")])
        assert all(g is not None for g in grads)
        data, classes = net.extern_data.data["data"], net.extern_data.data["classes"]
        rnd = numpy.random.RandomState(1)
        x = rnd.randint(1, 6, size=(3, 5))
        feed = {data.placeholder: x, data.get_sequence_lengths(): [5, 4, 3], classes.placeholder: x,
                classes.get_sequence_lengths(): [5, 4, 3]}
        with tf1.Session() as session:
            net.initialize_params(session)
            nll = session.run(net.losses_dict["output/nll"].get_loss_value(), feed)
            assert numpy.isfinite(nll) and nll > 0


def test_search_train_network_layers_config(tmp_path, capsys):
    cfg = tmp_path / "train.config"
    cfg.write_text("#!rnn.py\n" + "\n".join("%s = %r" % kv for kv in {
        "task": "train", "extern_data": EXTERN, "network": NET, "search_train_network_layers": ["output"],
        "train": {"class": "CopyTaskDataset", "nsymbols": 6, "num_seqs": 20, "minlen": 3, "maxlen": 5},
        "batch_size": 100, "max_seqs": 10, "num_epochs": 1, "adam": True, "learning_rate": 0.01,
        "model": str(tmp_path / "model"), "log_verbosity": 5}.items()) + "\n")
    assert main([str(cfg)]) in (0, None)
    out = capsys.readouterr().out
    assert "search train network layers: rec 'output'" in out
    assert re.search(r"step 0, cost:enc_out [\d.]+, cost:output/nll [\d.]+", out), out[-2000:]
    assert main([str(cfg), "++search_train_network_layers", "['outptu']", "++model", str(tmp_path / "m2")]) == 1
    assert "search_train_network_layers ['outptu']: no layer(s) 'outptu'" in capsys.readouterr().err


def test_collocate_with_keeps_layers_together_in_the_loop():
    unit = {
        "lin": {"class": "linear", "activation": "tanh", "n_out": 3, "from": "data:source"},  # loop-independent
        "lin2": {"class": "linear", "activation": None, "n_out": 3, "from": "lin"},  # loop-independent
        "rec_in": {"class": "linear", "activation": "tanh", "n_out": 3, "from": ["lin2", "prev:output"]},
        "output": {"class": "combine", "kind": "add", "from": ["rec_in", "lin"]}}
    for collocate, in_loop in ((None, {"rec_in", "output"}), ("rec_in", {"lin", "lin2", "rec_in", "output"}),
                               ("nope", None)):
        with tf.Graph().as_default():
            net = TFNetwork(extern_data=ExternData({"data": {"dim": 2}}), train_flag=False)
            net_dict = {"output": {"class": "rec", "from": "data", "unit": dict(
                unit, lin=dict(unit["lin"], collocate_with=collocate))}}
            if in_loop is None:
                with pytest.raises(Exception, match=r"layer 'lin': collocate_with \['nope'\]: no such layer"):
                    net.construct_from_dict(net_dict)
                continue
            net.construct_from_dict(net_dict)  # lin collocated with rec_in: stays in the loop, so does lin2 (uses it)
            assert set(net.get_layer("output").subnet.in_loop) == in_loop
