"""Every __init__ option of every layer class in the "docA" modules has a ``:param NAME:`` doc line (issue 10)."""

import inspect

import pytest

import returnn_lite.layers  # noqa: F401  (registers all layer classes)
from returnn_lite.doc import option_docs
from returnn_lite.layers.base import get_layer_class, layer_registry

MODULES = ["returnn_lite.layers.%s" % m for m in ("basic", "shape", "shape_split", "sequence", "concat", "indexing")]


def _layer_classes():
    classes = set()
    for name in layer_registry.names():
        cls = get_layer_class(name)
        if isinstance(cls, type) and cls.__module__ in MODULES:
            classes.add(cls)
    return sorted(classes, key=lambda c: (c.__module__, c.__name__))


def _undocumented(cls):
    docs = option_docs(cls)
    skip = {"self"}
    params = inspect.signature(cls.__init__).parameters
    return [k for k, p in params.items()
            if k not in skip and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and k not in docs]


def test_found_classes_in_every_module():
    found = {c.__module__ for c in _layer_classes()}
    assert found == set(MODULES)


@pytest.mark.parametrize("cls", _layer_classes(), ids=lambda c: c.__name__)
def test_all_init_options_documented(cls):
    assert _undocumented(cls) == [], "%s: options without a ':param NAME:' docstring line" % cls.__name__


def test_doc_cli_shows_option_doc(capsys):
    from returnn_lite.doc import main
    assert main(["linear"]) == 0
    out = capsys.readouterr().out
    line = [ln for ln in out.splitlines() if ln.strip().startswith("with_bias ")][0]
    assert "default True: add a bias vector b" in line
