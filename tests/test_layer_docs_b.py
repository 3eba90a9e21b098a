"""Every __init__ option of the layer classes in math/norm/conv/signal/structure/attention/loss/search/unavailable
and rec/ is documented by a ``:param NAME:`` line (as ``python -m returnn_lite.doc`` shows it)."""

import inspect

from returnn_lite import doc
from returnn_lite.layers.base import LayerBase, get_layer_class, get_layer_class_names

_MODULES = {"returnn_lite.layers.%s" % m for m in (
    "math", "norm", "conv", "signal", "structure", "attention", "loss", "search", "unavailable",
    "rec.layer", "rec.subnet", "rec.cells")}


def _my_layer_classes():
    classes = {}
    for name in get_layer_class_names():
        cls = get_layer_class(name)
        if cls.__module__ in _MODULES:
            classes[cls] = name
    return classes


def test_classes_found():
    names = set(_my_layer_classes().values())
    assert {"reduce", "conv", "batch_norm", "stft", "subnetwork", "self_attention", "ctc_loss", "choice",
            "rec", "masked_computation"} <= names


def test_every_option_documented():
    common = set(inspect.signature(LayerBase.__init__).parameters)
    missing = []
    for cls, name in _my_layer_classes().items():
        docs = doc.option_docs(cls)
        for key, param in inspect.signature(cls.__init__).parameters.items():
            if key == "self" or key in common or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            if not docs.get(key):
                missing.append("%s.%s" % (name, key))
    assert not missing, "undocumented options: %s" % ", ".join(missing)


def test_doc_output_shows_option_docs():
    text = doc.format_layer_doc("reduce")
    assert "mode" in text and "reduce function" in text
    text = doc.format_layer_doc("rec")
    assert "unit_opts" in text and "dict of options for the cell" in text
