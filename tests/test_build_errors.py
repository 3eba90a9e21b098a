"""Construction errors name the layer and the option; TF's / Python's text is never the whole message; losses in
rec units get the same dim checks as outside; layers that nothing reaches are reported."""

import warnings

import pytest
import tensorflow as tf

from returnn_lite.error_hints import UnreachedLayersWarning, describe_build_error, guess_options
from returnn_lite.extern_data import ExternData
from returnn_lite.network import NetworkError, TFNetwork

EXTERN = {"data": {"dim": 5}, "classes": {"dim": 7, "sparse": True}}


def _build(net_dict, train=True, **flags):
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=train, **flags)
        net.construct_from_dict(net_dict)
        net.get_objective()
        return net


def _rec(unit, **opts):
    return {"output": dict({"class": "rec", "from": "data", "unit": unit}, **opts)}


CASES = {
    # name: (net dict, layer named, fragments of the message)
    "repeat_negative": ({"output": {"class": "repeat", "from": "data", "repetitions": -2, "axis": "T"}},
                        "output", ["'repetitions'", "-2"]),
    "repeat_negative_feature": ({"output": {"class": "repeat", "from": "data", "repetitions": -1, "axis": "F"}},
                                "output", ["'repetitions'"]),
    "n_out_zero": ({"output": {"class": "linear", "from": "data", "n_out": 0}}, "output", ["'n_out'", "0"]),
    "n_out_zero_rec_unit": (_rec({"lin": {"class": "linear", "activation": "tanh", "from": "data:source", "n_out": 0},
                                  "output": {"class": "linear", "from": ["lin", "prev:output"], "n_out": 4}}),
                            "output/lin", ["'n_out'"]),
    "n_out_zero_rec_cell": ({"output": {"class": "rec", "unit": "lstm", "from": "data", "n_out": 0}}, "output",
                            ["'n_out'"]),
    "n_out_string": ({"output": {"class": "linear", "from": "data", "n_out": "5"}}, "output", ["'n_out'", "'5'"]),
    "softmax_in_rec_fewer_classes": (
        _rec({"output": {"class": "softmax", "from": "data:source", "n_out": 3, "loss": "ce", "target": "classes"}}),
        "output/output", ["loss 'ce'", "dim 3", "7 classes"]),
    "ce_in_rec_linear_fewer_classes": (
        _rec({"lin": {"class": "linear", "activation": None, "from": "data:source", "n_out": 3, "loss": "ce",
                      "target": "classes"}, "output": {"class": "copy", "from": "lin"}}),
        "output/lin", ["loss 'ce'", "7 classes"]),
    "from_dict": ({"output": {"class": "copy", "from": {"x": 1}}}, "output", ["'from'"]),
    "from_int": ({"output": {"class": "activation", "activation": "relu", "from": 5}}, "output", ["'from'"]),
    "loss_not_str": ({"output": {"class": "softmax", "from": "data", "loss": 3}}, "output", ["'loss'"]),
    "target_dict": ({"output": {"class": "softmax", "from": "data", "loss": "ce", "target": {"a": 1}}}, "output",
                    ["'target'"]),
    "is_output_layer_str": ({"output": {"class": "copy", "from": "data"},
                             "x": {"class": "copy", "from": "data", "is_output_layer": "True"}}, "x",
                            ["'is_output_layer'"]),
    "conv_filter_zero": ({"output": {"class": "conv", "from": "data", "filter_size": (0,), "padding": "same",
                                     "n_out": 3}}, "output", ["'filter_size'"]),
    "weighted_sum_negative_size": ({"output": {"class": "weighted_sum", "from": "data", "axes": ["T", "F"],
                                               "padding": "same", "size": (2, -2)}}, "output", ["'size'"]),
    "constant_value_quoted_bool": ({"output": {"class": "constant", "value": "True", "dtype": "bool"}}, "output",
                                   ["'value'"]),
    "combine_kind_dict": ({"output": {"class": "combine", "kind": {"x": 1}, "from": ["data", "data"]}}, "output",
                          ["'kind'"]),
    "bool_as_string": ({"output": {"class": "linear", "from": "data", "n_out": 3, "with_bias": "False"}}, "output",
                       ["'with_bias'", "'False'"]),
    "l2_as_string": ({"output": {"class": "softmax", "from": "data", "loss": "ce", "L2": "0.01"}}, "output",
                     ["'L2'"]),
    "dropout_above_one": ({"output": {"class": "copy", "from": "data", "dropout": 1.5}}, "output", ["'dropout'"]),
    "misspelled_is_output_layer_drops_layer": ({"output": {"class": "copy", "from": "data"},
                                                "x": {"class": "linear", "n_out": 3, "from": "data",
                                                      "is_ouput_layer": True}},
                                               "x", ["'is_ouput_layer'", "'is_output_layer'"]),
    "misspelled_loss_drops_layer": ({"output": {"class": "copy", "from": "data"},
                                     "x": {"class": "softmax", "from": "data", "los": "ce"}},
                                    "x", ["'los'", "'loss'"]),
    "unchunking_not_from_chunks": ({"chunked": {"class": "time_chunking", "chunk_size": 3, "chunk_step": 3,
                                                "from": "data"},
                                    "output": {"class": "time_unchunking", "chunking_layer": "chunked",
                                               "from": "data"}}, "output", ["'from'", "'chunked'"]),
    # checks added from the fuzzer's findings (tools/fuzz_net_dicts.py)
    "n_out_on_output_without_feature": ({"output": {"class": "reduce", "mode": "sum", "axes": "F", "from": "data",
                                                    "n_out": 5}}, "output", ["n_out=5", "no feature dim"]),
    "subnetwork_in_unit_from_int": (_rec({"sub": {"class": "subnetwork", "from": 5, "subnetwork": {
        "output": {"class": "copy", "from": "base:data:source"}}}, "output": {"class": "copy", "from": "sub"}}),
        "output/sub", ["'from'", "5"]),
    "subnetwork_in_unit_from_missing": (_rec({"sub": {"class": "subnetwork", "from": "nope", "subnetwork": {
        "output": {"class": "copy", "from": "base:data:source"}}}, "output": {"class": "copy", "from": "sub"}}),
        "sub", ["'from'", "'nope'"]),
    "subnetwork_in_unit_from_itself": (_rec({"sub": {"class": "subnetwork", "from": "sub", "subnetwork": {
        "output": {"class": "copy", "from": "base:data:source"}}}, "output": {"class": "copy", "from": "sub"}}),
        "sub", ["'from'", "dependency loop"]),
    "unit_layer_never_built_bad_option": (_rec({"unused": {"class": "linear", "n_out": 3, "from": "data:source",
                                                            "with_bias": "yes"},
                                                 "output": {"class": "copy", "from": "data:source"}}),
                                          "output/unused", ["'with_bias'"]),
    "target_unknown_without_loss": ({"output": {"class": "softmax", "from": "data", "n_out": 7, "target": "clases"}},
                                    "output", ["option 'target'", "'clases'"]),
    "cumsum_str_summand": ({"output": {"class": "cumsum", "from": "data",
                                       "additional_left_summand_per_element": "2.0"}},
                           "output", ["'additional_left_summand_per_element'", "'2.0'"]),
    "softmax_over_spatial_window_list": ({"output": {"class": "softmax_over_spatial", "from": "data", "axis": "T",
                                                     "window_start": 0, "window_size": [3, 3]}},
                                         "output", ["'window_size'", "[3, 3]"]),
    "rnn_cell_without_n_out": (_rec({"s": {"class": "rnn_cell", "unit": "LSTMBlock", "from": "data:source"},
                                     "output": {"class": "copy", "from": "s"}}), "output/s", ["'n_out'"]),
    "numeric_option_as_string": ({"output": {"class": "layer_norm", "from": "data", "epsilon": "1e-6"}},
                                 "output", ["'epsilon'", "'1e-6'"]),
    "expand_dims_dim_zero": ({"output": {"class": "expand_dims", "from": "data", "axis": "T", "dim": 0}},
                             "output", ["'dim'"]),
    "none_for_required_option": ({"output": {"class": "pool", "mode": "max", "from": "data", "pool_size": (2,),
                                             "padding": None}}, "output", ["'padding' (None)"]),
    "ce_on_sparse_output": ({"output": {"class": "copy", "from": "data:classes", "loss": "ce", "target": "classes"}},
                            "output", ["loss 'ce'", "dense float", "sparse"]),
    "ctc_without_feature_axis": ({"f": {"class": "cast", "from": "data:classes", "dtype": "float32"},
                                  "output": {"class": "cumsum", "from": "f", "loss": "ctc", "target": "classes"}},
                                 "output", ["loss 'ctc'", "feature axis"]),
    "ctc_dense_target": ({"output": {"class": "softmax", "from": "data", "n_out": 5, "loss": "ctc",
                                     "target": "data"}}, "output", ["loss 'ctc'", "sparse target"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_user_error_names_layer_and_option(name):
    net_dict, layer, fragments = CASES[name]
    with pytest.raises(NetworkError) as info:
        _build(net_dict)
    message = str(info.value)
    assert ("'%s'" % layer) in message, message
    for fragment in fragments:
        assert fragment in message, message
    # TF's / Python's own text is never the whole message: after the layer prefix comes our text
    core = message.split("): ", 1)[-1]
    assert not core.startswith(("TypeError: unhashable", "ValueError: Dimension", "AttributeError")), message


def test_unreached_layers_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _build({"output": {"class": "copy", "from": "data"}, "unused1": {"class": "copy", "from": "data"},
                "unused2": {"class": "linear", "n_out": 3, "from": "unused1"}})
    msgs = [str(w.message) for w in caught if issubclass(w.category, UnreachedLayersWarning)]
    assert len(msgs) == 1 and "'unused1'" in msgs[0] and "'unused2'" in msgs[0], msgs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _build({"output": {"class": "copy", "from": "data"}})
    assert not [w for w in caught if issubclass(w.category, UnreachedLayersWarning)]


def test_describe_build_error():
    desc = {"class": "combine", "from": ["a", "b"], "n_out": -4}
    assert describe_build_error(TypeError("__init__() missing 1 required positional argument: 'kind'"), desc) == \
        "missing required option 'kind'"
    text = describe_build_error(TypeError("f() missing 1 required positional argument: 'activation'"),
                                {"activvation": "relu"})
    assert "'activation'" in text and "'activvation'" in text
    assert describe_build_error(ValueError("Dimension -4 must be >= 0"), desc).startswith("option 'n_out' (-4)")
    assert guess_options("unhashable type: 'dict'", {"kind": {"x": 1}, "from": "data"}) == ["kind"]
    ours = describe_build_error(ValueError("reduce layer 'x': invalid mode 'foo'"), {"mode": "foo"})
    assert ours == "option 'mode': ValueError: reduce layer 'x': invalid mode 'foo'"  # (the option it quotes)
    assert describe_build_error(ValueError("option 'mode' is bad"), {"mode": "foo"}) == \
        "ValueError: option 'mode' is bad"


def test_choice_target_dim_differs_from_scores():
    net_dict = {"output": {"class": "rec", "from": [], "max_seq_len": 4, "target": "classes", "unit": {
        "prob": {"class": "softmax", "from": "prev:output", "n_out": 9},
        "output": {"class": "choice", "from": "prob", "target": "classes", "beam_size": 2, "initial_output": 0},
        "end": {"class": "compare", "from": "output", "value": 0}}}}
    with pytest.raises(NetworkError, match=r"'output/output'.*option 'target' 'classes' has 7 classes.*'from'.*dim 9"):
        _build(net_dict, train=False, search_flag=True)


@pytest.mark.parametrize("opts, fragments", [
    ({"dim": -3}, ["'dim'", "-3"]),
    ({"dim": "5"}, ["'dim'", "'5'"]),
    ({"dim": 0}, ["'dim'"]),
    ({"dim": 5, "shape": 5}, ["'shape'"]),
    ({"dim": 5, "sparse": "yes"}, ["'sparse'", "'yes'"]),
    ({"dim": 5, "available_for_inference": "x"}, ["'available_for_inference'"]),
    ({"dim": 5, "dtype": "flaot32"}, ["'dtype'", "'flaot32'"]),
    ({"dim": 5, "time_dim_axis": 5}, ["time_dim_axis=5", "(None, 5)"]),
    ({"dim": 5, "feature_dim_axis": 7}, ["feature_dim_axis=7"]),
    ({"dim": 5, "shape": (None, 6)}, ["dim=5", "(None, 6)"]),
])
def test_extern_data_mistakes(opts, fragments):
    with tf.Graph().as_default():
        with pytest.raises(ValueError) as info:
            ExternData({"data": opts})
    message = str(info.value)
    assert message.startswith("extern_data 'data': "), message
    for fragment in fragments:
        assert fragment in message, message


def test_extern_data_valid_variants_accepted():
    with tf.Graph().as_default():
        ext = ExternData({"a": {"dim": None, "sparse": True}, "b": {"shape": (None, 3, 5), "time_dim_axis": 2},
                          "c": {"dim": 5, "batch_dim_axis": None, "shape": (3, 5)}, "d": {"shape": (), "dim": None},
                          "e": {"shape": (None, 5), "batch_dim_axis": 1}})
    assert ext.data["a"].sparse and ext.data["a"].dim is None and ext.data["e"].batch_dim_axis == 1


def test_runtime_error_hint():
    from returnn_lite.error_hints import runtime_error_hint

    assert "padding 'valid'" in runtime_error_hint("Computed output size would be negative: -102 [input_size: 97]")
    assert "ctc" in runtime_error_hint("Not enough time for target transition sequence (required: 84, available: 1)")
    assert runtime_error_hint("Something else") is None


def test_cli_sequence_shorter_than_valid_filter(tmp_path, capsys):
    """Run-time bad input: data shorter than a conv with padding 'valid' needs -> one line naming the layer and
    what it means (no traceback)."""
    from returnn_lite.__main__ import main

    config = tmp_path / "short.config"
    config.write_text("""#!rnn.py
task = "train"
train = {"class": "Task12AXDataset", "num_seqs": 4}
num_inputs = 9
num_outputs = 2
batch_size = 400
network = {"c": {"class": "conv", "from": "data", "filter_size": (500,), "padding": "valid", "n_out": 3},
           "output": {"class": "softmax", "loss": "ctc", "from": "c"}}
adam = True
num_epochs = 1
model = %r
""" % str(tmp_path / "out" / "model"))
    assert main([str(config)]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rnn.py: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "layer 'c'" in lines[0] and "shorter than the filter" in lines[0], lines[0]


def test_framewise_loss_lengths_differ_at_run_time():
    """Output and target lengths from different data keys: only the data tells; a clear run-time error naming the
    loss and the layer (no TF shape error from inside the loss op)."""
    import numpy

    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData({"data": {"dim": 3}, "classes": {"dim": 4, "sparse": True}}),
                        train_flag=True)
        net.construct_from_dict({"output": {"class": "softmax", "from": "data", "loss": "ce", "target": "classes"}})
        loss = net.get_total_loss()
        data, classes = net.extern_data.data["data"], net.extern_data.data["classes"]
        feed = {data.placeholder: numpy.zeros((2, 5, 3), "float32"), data.size_placeholder[0]: [5, 4],
                classes.placeholder: numpy.zeros((2, 5), "int32"), classes.size_placeholder[0]: [5, 4]}
        with tf.compat.v1.Session() as session:
            net.initialize_params(session)
            session.run(loss, feed_dict=feed)  # same lengths: fine
            feed[classes.size_placeholder[0]] = [5, 3]
            with pytest.raises(tf.errors.InvalidArgumentError) as info:
                session.run(loss, feed_dict=feed)
    from returnn_lite.engine.checks import tf_error_text

    text = tf_error_text(str(info.value))  # (the CLI's one-line text)
    assert "loss 'ce' of layer 'output': the sequence lengths of the output and of the target 'classes'" in text
