"""Construction errors name the layer and the option; TF's / Python's text is never the whole message; losses in
rec units get the same dim checks as outside; layers that nothing reaches are reported."""

import warnings

import pytest
import tensorflow as tf

from returnn_lite.error_hints import UnreachedLayersWarning, describe_build_error, guess_options
from returnn_lite.extern_data import ExternData
from returnn_lite.network import NetworkError, TFNetwork

EXTERN = {"data": {"dim": 5}, "classes": {"dim": 7, "sparse": True}}


def _build(net_dict, train=True):
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=train)
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
    assert ours == "ValueError: reduce layer 'x': invalid mode 'foo'"
