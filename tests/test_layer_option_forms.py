"""
The declared forms of options that name layers (``LayerBase.layer_options``, ``layer_ref.resolve_layer_option``):
what each form resolves to, and the errors for values that do not fit the declaration.
"""

import pytest
import tensorflow as tf

from returnn_lite.layer_ref import LayerOption, resolve_layer_option, target_ref
from returnn_lite.layers.base import LayerBase, get_layer_class
from returnn_lite.network import NetworkLayerException
from returnn_lite.testing import build_network

EXTERN = {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}


def _resolve(form, value, **kwargs):
    return resolve_layer_option(LayerOption("x", form, **kwargs), value, lambda name: "<%s>" % name)


def test_forms():
    assert _resolve("layer", "a") == "<a>"
    assert _resolve("layer", ["a", "b"]) == ["<a>", "<b>"]
    assert _resolve("layer", 3) == 3 and _resolve("layer", [1, 2]) == [1, 2]  # constants stay
    assert _resolve("layer", {"class": "copy"}) == {"class": "copy"}  # a layer dict (built by construct_children)
    assert _resolve("layer", "zeros", keywords=("zeros",)) == "zeros"
    assert _resolve("layers", "a") == ["<a>"] and _resolve("layers", ["a", "none"]) == ["<a>"]
    assert _resolve("dict", {0: "a", "k": "zeros"}, keywords=("zeros",)) == {0: "<a>", "k": "zeros"}
    assert _resolve("dict", "a") == "<a>"
    assert _resolve("pairs", [("a", "T"), ("b", "F")]) == [("<a>", "T"), ("<b>", "F")]
    assert _resolve("target", "layer:t") == "<t>" and _resolve("target", "classes") == "<data:classes>"
    assert target_ref("layer:x/y") == "x/y" and target_ref("classes") == "data:classes"


def test_pairs_form_error_names_option():
    with pytest.raises(ValueError, match="option 'x' must be a list of \\(layer name, value\\) pairs"):
        _resolve("pairs", ["a", "b"])


def test_unknown_form_refused():
    with pytest.raises(ValueError, match="unknown form"):
        _resolve("layerz", "a")


def test_declarations_merge_along_mro():
    names = [o.name for o in get_layer_class("concat_attention").get_layer_option_decls()]
    assert names[:2] == ["base", "base_ctx"] and names[-1] == "initial_output"
    assert [o.name for o in LayerBase.get_layer_option_decls()] == ["initial_output"]
    assert not LayerBase.get_layer_option_decls()[0].dependency


def _error(net_dict):
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException) as info:
            build_network(net_dict, EXTERN)
    return str(info.value)


def test_concat_from_not_pairs():
    msg = _error({"output": {"class": "concat", "from": ["data", "data"]}})
    assert "'output'" in msg and "option 'from' must be a list of (layer name, value) pairs" in msg


def test_required_layer_option_none():
    msg = _error({"output": {"class": "unmask", "from": "data", "mask": None}})
    assert "'output'" in msg and "option 'mask' is required for layer class 'unmask' (got None)" in msg


def test_masked_from_is_the_units_input():
    # as the original: with masked_from (already the masked frames) the unit runs over it, the mask is not used
    with tf.Graph().as_default():
        net = build_network({"m": {"class": "compare", "kind": "greater", "value": 0, "from": "data:classes"},
                             "output": {"class": "masked_computation", "mask": "m", "masked_from": "data",
                                        "unit": {"class": "copy"}}}, EXTERN)
        out, data = net.get_layer("output").output, net.get_layer("data").output
        assert out.get_time_dim_tag() == data.get_time_dim_tag() and out.dim == 5


def test_dict_form_dependencies():
    with tf.Graph().as_default():
        net = build_network({
            "m": {"class": "compare", "kind": "greater", "value": 0, "from": "data:classes"},
            "output": {"class": "hdf_dump", "filename": "/nonexistent/x.hdf", "from": "data",
                       "extra": {"mask": "m"}}}, EXTERN)
        out = net.get_layer("output")
        assert out.extra == {"mask": net.get_layer("m")}
        assert out.get_dep_layers() == [net.get_layer("data"), net.get_layer("m")]


def test_layer_prefix_is_the_same_as_the_name():
    """'layer:x' (the grammar's explicit form) resolves as x: in a network, a rec unit's template and its loop."""
    with tf.Graph().as_default():
        net = build_network({
            "a": {"class": "copy", "from": "data"},
            "output": {"class": "copy", "from": "layer:a"},
            "r": {"class": "rec", "from": "data", "is_output_layer": True, "unit": {
                "h": {"class": "linear", "n_out": 3, "from": ["layer:data:source", "prev:h"]},
                "output": {"class": "copy", "from": "layer:h"}}}}, EXTERN)
        assert net.get_layer("output").sources == [net.get_layer("a")]
        assert net.get_layer("r").output.dim == 3
