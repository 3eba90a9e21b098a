"""
Moving a rec unit's layers out of the loop (issue 19): a Transformer decoder unit as in
../shared/bench/big_construct.config (choice on the target, prev:output, causal self_attention, positional_encoding,
encoder-decoder attention) is built entirely over the whole sequence in training, with the same outputs, losses and
gradients as the loop; under search everything that depends on the choice stays in the loop.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1
D, HEADS = 8, 2
DATA_LENS = np.array([7, 5, 4], "int32")
CLASSES_LENS = np.array([5, 3, 4], "int32")  # other lengths than the input (masking)
EXTERN = {"data": {"dim": 5}, "classes": {"dim": 6, "sparse": True}}


def _dec_layer(top, unit, inp, out, drop):
    unit.update({
        out + "_self_att_laynorm": {"class": "layer_norm", "from": inp},
        out + "_self_att_att": {"class": "self_attention", "num_heads": HEADS, "total_key_dim": D, "n_out": D,
                                "from": out + "_self_att_laynorm", "attention_left_only": True,
                                "attention_dropout": drop},
        out + "_self_att_lin": {"class": "linear", "activation": None, "with_bias": False, "n_out": D,
                                "from": out + "_self_att_att"},
        out + "_self_att_drop": {"class": "dropout", "from": out + "_self_att_lin", "dropout": drop},
        out + "_self_att_out": {"class": "combine", "kind": "add", "from": [inp, out + "_self_att_drop"]},
        out + "_att_laynorm": {"class": "layer_norm", "from": out + "_self_att_out"},
        out + "_att_query0": {"class": "linear", "activation": None, "with_bias": False, "n_out": D,
                              "from": out + "_att_laynorm"},
        out + "_att_query": {"class": "split_dims", "axis": "F", "dims": (HEADS, D // HEADS),
                             "from": out + "_att_query0"},
        out + "_att_energy": {"class": "dot", "red1": "dim:%i" % (D // HEADS), "red2": "dim:%i" % (D // HEADS),
                              "var1": "T", "var2": "T?", "from": ["base:" + out + "_att_key", out + "_att_query"]},
        out + "_att_weights": {"class": "softmax_over_spatial", "from": out + "_att_energy",
                               "energy_factor": (D // HEADS) ** -0.5},
        out + "_att_weights_drop": {"class": "dropout", "dropout_noise_shape": {"*": None},
                                    "from": out + "_att_weights", "dropout": drop},
        out + "_att0": {"class": "generic_attention", "weights": out + "_att_weights_drop",
                        "base": "base:" + out + "_att_value"},
        out + "_att_att": {"class": "merge_dims", "axes": ["dim:%i" % HEADS, "dim:%i" % (D // HEADS)],
                           "from": out + "_att0"},
        out + "_att_lin": {"class": "linear", "activation": None, "with_bias": False, "n_out": D,
                           "from": out + "_att_att"},
        out + "_att_out": {"class": "combine", "kind": "add", "from": [out + "_self_att_out", out + "_att_lin"]},
        out + "_ff_laynorm": {"class": "layer_norm", "from": out + "_att_out"},
        out + "_ff_conv1": {"class": "linear", "activation": "relu", "n_out": 2 * D, "from": out + "_ff_laynorm"},
        out + "_ff_conv2": {"class": "linear", "activation": None, "n_out": D, "from": out + "_ff_conv1"},
        out + "_ff_out": {"class": "combine", "kind": "add", "from": [out + "_att_out", out + "_ff_conv2"]},
        out: {"class": "copy", "from": out + "_ff_out"}})
    for kv in ("key", "value"):
        top[out + "_att_%s0" % kv] = {"class": "linear", "activation": None, "with_bias": False, "n_out": D,
                                      "from": "encoder"}
        top[out + "_att_%s" % kv] = {"class": "split_dims", "axis": "F", "dims": (HEADS, D // HEADS),
                                     "from": out + "_att_%s0" % kv}


def _net_dict(move_out, drop=0.0, initial_output=0, n_dec=2):
    unit = {
        "output": {"class": "choice", "target": "classes", "beam_size": 3, "from": "output_prob",
                   "initial_output": initial_output},
        "end": {"class": "compare", "from": "output", "value": 0},
        "prev_out": {"class": "copy", "from": "prev:output", "is_output_layer": True},
        "target_embed_raw": {"class": "linear", "activation": None, "with_bias": False, "n_out": D,
                             "from": "prev:output"},
        "target_embed_weighted": {"class": "eval", "from": "target_embed_raw", "eval": "source(0) * 2.0"},
        "target_embed_with_pos": {"class": "positional_encoding", "add_to_input": True,
                                  "from": "target_embed_weighted"},
        "target_embed": {"class": "dropout", "from": "target_embed_with_pos", "dropout": drop},
        "decoder": {"class": "layer_norm", "from": "dec_%02d" % n_dec},
        "output_prob": {"class": "softmax", "from": "decoder", "target": "classes", "loss": "ce",
                        "loss_opts": {"label_smoothing": 0.1}, "with_bias": False, "is_output_layer": True}}
    top = {
        "source_embed": {"class": "linear", "activation": None, "n_out": D, "from": "data:data"},
        "source_embed_with_pos": {"class": "positional_encoding", "add_to_input": True, "from": "source_embed"},
        "encoder": {"class": "layer_norm", "from": "source_embed_with_pos"},
        "output": {"class": "rec", "from": [], "target": "classes", "unit": unit,
                   "max_seq_len": "max_len_from('base:encoder') * 3", "optimize_move_layers_out": move_out},
        "decision": {"class": "decide", "from": "output", "loss": "edit_distance", "target": "classes"}}
    _dec_layer(top, unit, "target_embed", "dec_01", drop)
    for i in range(1, n_dec):
        _dec_layer(top, unit, "dec_%02d" % i, "dec_%02d" % (i + 1), drop)
    return top


def _build(net_dict, train=True, search=False):
    net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=train, search_flag=search, eval_flag=not search)
    net.construct_from_dict(net_dict)
    return net


def _feed(net, seed=0):
    rng = np.random.RandomState(seed)
    data, classes = net.extern_data.get_data("data"), net.extern_data.get_data("classes")
    n = len(DATA_LENS)
    return {data.placeholder: rng.randn(n, DATA_LENS.max(), 5).astype("float32"),
            data.get_sequence_lengths(): DATA_LENS,
            classes.placeholder: rng.randint(1, 6, (n, CLASSES_LENS.max())).astype("int32"),
            classes.get_sequence_lengths(): CLASSES_LENS}


def test_transformer_decoder_unit_moves_out_entirely_in_training():
    with tf.Graph().as_default() as graph:
        net = _build(_net_dict(move_out=True, drop=0.1))
        rec = net.get_layer("output")
        assert rec.subnet.in_loop == []
        assert "output" in rec.subnet.moved_out and "dec_02_self_att_att" in rec.subnet.moved_out
        types = {op.type for op in graph.get_operations()}
        assert not {t for t in types if "While" in t or t.startswith("TensorList") or t == "EmptyTensorList"}, types


def test_search_keeps_the_choice_and_what_depends_on_it_in_the_loop():
    with tf.Graph().as_default():
        net = _build(_net_dict(move_out=True), train=False, search=True)
        rec = net.get_layer("output")
        assert {"output", "end", "prev_out", "target_embed_raw", "target_embed_with_pos", "dec_01_self_att_att",
                "dec_02_att0", "output_prob"} <= set(rec.subnet.in_loop)
        assert rec.subnet.moved_out == []


def _run_train(move_out, param_values=None, initial_output=0):
    with tf.Graph().as_default():
        net = _build(_net_dict(move_out, initial_output=initial_output, n_dec=1))  # (one layer: a fast test)
        rec = net.get_layer("output")
        assert (rec.subnet.in_loop == []) == move_out
        params = net.get_params_list()
        if param_values is None:
            rng = np.random.RandomState(1)
            param_values = {p.op.name: rng.randn(*p.shape.as_list()).astype("float32") * 0.5 for p in params}
        assert sorted(param_values) == sorted(p.op.name for p in params)
        loss = net.get_objective()
        grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, params)]
        fetches = {"prob": rec.subnet.get_accumulated_layer("output_prob").output.copy_as_time_major().placeholder,
                   "prev_out": rec.subnet.get_accumulated_layer("prev_out").output.copy_as_time_major().placeholder,
                   "output": rec.output.copy_as_time_major().placeholder,
                   "loss": loss, "grads": dict(zip([p.op.name for p in params], grads))}
        for k, holder in net.losses_dict.items():
            for kind, value in (("loss", holder.get_loss_value()), ("error", holder.get_error_value())):
                if value is not None:
                    fetches["loss %s %s" % (kind, k)] = value
        with tf1.Session() as session:
            net.initialize_params(session)
            for p in params:
                p.load(param_values[p.op.name], session)
            feed = _feed(net)
            res = session.run(fetches, feed)
            res["classes"] = feed[net.extern_data.get_data("classes").placeholder]
    return res, param_values


def test_move_out_same_outputs_losses_gradients(initial_output=2):
    out, values = _run_train(True, initial_output=initial_output)
    ref, _ = _run_train(False, values, initial_output=initial_output)
    mask = np.arange(CLASSES_LENS.max())[:, None] < CLASSES_LENS[None, :]  # [T, B]
    # prev:output is the target shifted by one frame, the initial output at frame 0
    expected_prev = np.concatenate([np.full((1, 3), initial_output), out["classes"].T[:-1]], 0)
    for res in (out, ref):
        np.testing.assert_array_equal(res["prev_out"][mask], expected_prev[mask])
        np.testing.assert_array_equal(res["output"][mask], out["classes"].T[mask])
    np.testing.assert_allclose(out["prob"][mask], ref["prob"][mask], rtol=1e-4, atol=1e-6)
    assert sorted(k for k in out if k.startswith("loss")) == sorted(k for k in ref if k.startswith("loss"))
    for k in out:
        if k.startswith("loss"):
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, err_msg=k)
    assert sorted(out["grads"]) == sorted(ref["grads"])
    for k in out["grads"]:
        np.testing.assert_allclose(out["grads"][k], ref["grads"][k], rtol=1e-3, atol=1e-5, err_msg=k)


def _run_small(net_dict, move_out, feed_seed=0):
    for layer in net_dict.values():
        if layer.get("class") == "rec":
            layer["optimize_move_layers_out"] = move_out
    with tf.Graph().as_default():
        net = _build(net_dict, train=False)
        rec = net.get_layer("output")
        out = rec.output.copy_as_time_major()
        with tf1.Session() as session:
            net.initialize_params(session)
            y, lens = session.run([out.placeholder, out.get_time_dim_tag().dyn_size], _feed(net, feed_seed))
    return rec.subnet, y, lens


@pytest.mark.parametrize("end", [False, True])
def test_prev_of_a_layer_constant_over_frames(end):
    """prev:c of a layer c without the loop's time axis: its initial output at frame 0, then c; in a loop ended by
    'end' (unknown length) c and its prev: users stay in the loop."""
    unit = {"c": {"class": "reduce", "mode": "mean", "axis": "T", "from": "base:data"},  # [B, 5], every frame
            "x": {"class": "combine", "kind": "add", "from": ["prev:c", "frame"]},
            "output": {"class": "copy", "from": "x"}}
    if end:
        unit.update({"frame": {"class": "constant", "value": 0.5},
                     "i": {"class": "copy", "from": ":i"},
                     "lim": {"class": "length", "from": "base:data"},
                     "end": {"class": "compare", "from": ["i", "lim"], "kind": "greater_equal"}})
        rec = {"class": "rec", "from": [], "unit": unit, "max_seq_len": 10}
    else:
        unit["frame"] = {"class": "copy", "from": "data:source"}
        rec = {"class": "rec", "from": "data", "unit": unit}
    res = [_run_small({"output": dict(rec, unit=dict(unit))}, move_out) for move_out in (True, False)]
    (sub, y, lens), (_, y_ref, lens_ref) = res
    np.testing.assert_array_equal(lens, lens_ref)
    assert ("x" in sub.in_loop) == end and ("c" in sub.moved_out) != end
    mask = np.arange(y.shape[0])[:, None] < lens[None, :]
    np.testing.assert_allclose(y[mask], y_ref[mask], rtol=1e-6)
    np.testing.assert_allclose(y[0] - (0.5 if end else _feed_data(0)), 0, atol=1e-6)  # frame 0: prev:c = 0


def _feed_data(t):
    """data's frame t [B, 5] of _feed (seed 0)."""
    rng = np.random.RandomState(0)
    return rng.randn(len(DATA_LENS), DATA_LENS.max(), 5).astype("float32")[:, t]


def test_prev_of_a_layer_with_state_stays_in_the_loop():
    """prev:s of a cell also carries its state (get_last_hidden_state of it): s stays in the loop."""
    unit = {"s": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": 3, "from": "data:source"},
            "c": {"class": "get_last_hidden_state", "from": "prev:s", "key": "c", "n_out": 3},
            "output": {"class": "combine", "kind": "add", "from": ["s", "c"]}}
    res = [_run_small({"output": {"class": "rec", "from": "data", "unit": dict(unit)}}, move_out)
           for move_out in (True, False)]
    (sub, y, lens), (_, y_ref, _) = res
    assert "s" in sub.in_loop
    mask = np.arange(y.shape[0])[:, None] < lens[None, :]
    np.testing.assert_allclose(y[mask], y_ref[mask], rtol=1e-5)


def _two_loops(move_out):
    """rec 'output': x1 -> x2 -> x3 moved out (frame-wise), acc in the loop; rec 'other' reads output/x2 per frame."""
    unit = {"x1": {"class": "linear", "activation": "tanh", "n_out": 4, "from": "data:source"},
            "x2": {"class": "linear", "activation": "tanh", "n_out": 4, "from": "x1"},
            "x3": {"class": "linear", "activation": None, "n_out": 4, "from": "x2"},
            "acc": {"class": "combine", "kind": "add", "from": ["prev:acc", "x3"]},
            "output": {"class": "copy", "from": "acc"}}
    other = {"y": {"class": "combine", "kind": "add", "from": ["prev:y", "base:output/x2"]},
             "output": {"class": "copy", "from": "y"}}
    net_dict = {"output": {"class": "rec", "from": "data", "unit": unit, "optimize_move_layers_out": move_out},
                "other": {"class": "rec", "from": "data", "unit": other, "optimize_move_layers_out": move_out,
                          "is_output_layer": True}}
    with tf.Graph().as_default() as graph:
        net = _build(net_dict, train=False)
        sub = net.get_layer("output").subnet
        outs = [net.get_layer(x).output.copy_as_batch_major() for x in ("output", "other")]
        with tf1.Session() as session:
            net.initialize_params(session)
            for p in net.get_params_list():
                p.load(np.random.RandomState(len(p.op.name)).randn(*p.shape.as_list()).astype("float32"), session)
            ys = session.run([o.placeholder for o in outs], _feed(net))
        ops = graph.get_operations()
    return sub, ys, ops


def test_moved_out_layers_time_major_only_where_used():
    """issue #30: a moved-out layer gets its time-major copy (a transpose) only where something reads it: x3 in the
    loop, x2 from the other rec layer's loop (built in the outer graph, not in that loop's body); x1 never."""
    sub, ys, ops = _two_loops(True)
    _, ys_ref, _ = _two_loops(False)
    assert set(sub.moved_out) == {"x1", "x2", "x3"}
    assert sub.accumulated.is_lazy("x1") and not sub.accumulated.is_lazy("x2")
    for y, y_ref in zip(ys, ys_ref):
        assert y.shape[:2] == (len(DATA_LENS), DATA_LENS.max())
        mask = np.arange(y.shape[1])[None, :] < DATA_LENS[:, None]  # [B, T]
        np.testing.assert_allclose(y[mask], y_ref[mask], rtol=1e-5, atol=1e-6)
    assert not [op.name for op in ops if op.type == "Transpose" and "/x1" in op.name]
