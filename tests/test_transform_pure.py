"""
``transform_config_dict`` is pure: it turns names into objects and fills defaults, but creates no TF ops (child
networks and templates are built by the explicit ``construct_children`` step, inside the layer's name scope) and
puts no private keys (``_name``, ``_network``, ...) into the options. Checked on the layer dicts of all conformance
cases (built in a graph; ops created by layers it asks for via ``get_layer`` do not count).
"""

import ast
import os

import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.layers.base import LayerBase, layer_registry
from returnn_lite.network import TFNetwork

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "conformance", "cases"))
# private options still set by layers owned by the beam search work (issue 13)
ALLOWED_PRIVATE = {("choice", "_target_layer")}


def _cases():
    if not os.path.isdir(CASES):
        return []
    res = []
    for name in sorted(os.listdir(CASES)):
        path = os.path.join(CASES, name, "case.py")
        if os.path.isfile(path):
            with open(path) as f:
                case = ast.literal_eval(f.read())
            if not case.get("expect_error") and not case.get("search_flag"):
                res.append(case)
    return res


@pytest.mark.skipif(not os.path.isdir(CASES), reason="../shared/conformance absent")
def test_transform_config_dict_creates_no_ops(monkeypatch):
    records = []  # (layer class, ops created, private keys)
    state = {"depth": 0}

    def wrap(orig):
        def transform_config_dict(cls, d, network, get_layer):
            if state["depth"]:  # a super() call: counted by the outermost call
                return orig(cls, d, network=network, get_layer=get_layer)
            graph = tf.compat.v1.get_default_graph()
            excluded = [0]

            def counting_get_layer(name):
                n = len(graph.get_operations())
                depth, state["depth"] = state["depth"], 0  # layers built on the way count on their own
                try:
                    return get_layer(name)
                finally:
                    state["depth"] = depth
                    excluded[0] += len(graph.get_operations()) - n

            n0 = len(graph.get_operations())
            state["depth"] += 1
            try:
                return orig(cls, d, network=network, get_layer=counting_get_layer)
            finally:
                state["depth"] -= 1
                created = len(graph.get_operations()) - n0 - excluded[0]
                private = sorted(k for k in d if k.startswith("_") and (cls.layer_class, k) not in ALLOWED_PRIVATE)
                records.append((cls.layer_class, created, private))

        return classmethod(transform_config_dict)

    for cls in {LayerBase} | {c for _, c in layer_registry.items()} | {
            c for _, k in layer_registry.items() for c in k.__mro__ if issubclass(c, LayerBase)}:
        if "transform_config_dict" in cls.__dict__:
            monkeypatch.setattr(cls, "transform_config_dict", wrap(cls.__dict__["transform_config_dict"].__func__))

    cases = _cases()
    assert len(cases) > 250
    failed_cases = []
    for case in cases:
        with tf.Graph().as_default():
            net = TFNetwork(extern_data=ExternData(case["extern_data"]), train_flag=case["train_flag"])
            try:
                net.construct_from_dict(case["network"])
            except Exception as exc:  # noqa (cases that fail today are the conformance test's business)
                failed_cases.append((case["name"], str(exc)[:200]))
    bad = sorted({(cls, n, tuple(p)) for cls, n, p in records if n or p})
    assert not bad, "transform_config_dict created ops or private keys (class, ops, keys): %s" % bad
    assert len(records) > 300
    assert len(failed_cases) < 10, failed_cases
