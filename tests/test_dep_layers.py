"""
``get_dep_layers`` of every layer of every conformance network (built as the checker builds them, rec units, cond
branches and subnetworks included) equals the reference recorded before the option declarations
(``LayerBase.layer_options`` & co.) replaced the hand-written resolution and ``get_dep_layers`` overrides.
The reference (tests/data/dep_layers_reference.json) maps "case: layer [class]" to the dependencies' names.
Record it again (only when a dependency change is intended): ``python tests/test_dep_layers.py --record``.
"""

import ast
import json
import os
import sys

import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "conformance", "cases"))
REFERENCE = os.path.join(HERE, "data", "dep_layers_reference.json")


def _cases():
    res = []
    for name in sorted(os.listdir(CASES)):
        path = os.path.join(CASES, name, "case.py")
        if os.path.isfile(path):
            with open(path) as f:
                case = ast.literal_eval(f.read())
            if not case.get("expect_error"):
                res.append(case)
    return res


def _layer_name(layer):
    return "%s[%s]" % (layer.get_absolute_name(), getattr(layer, "layer_class", None))


def case_deps(case):
    """{"layer[class]": sorted dependency names} of all layers (deep) of the case's network."""
    with tf.Graph().as_default():
        flags = dict(train_flag=case["train_flag"])
        if case.get("search_flag"):
            flags = dict(train_flag=False, search_flag=True)
            if "eval_flag" in case:
                flags["eval_flag"] = case["eval_flag"]
        net = TFNetwork(extern_data=ExternData(case["extern_data"]), **flags)
        try:
            net.construct_from_dict(case["network"])
        except Exception as exc:  # noqa (recorded: a case that fails to build must keep failing the same way)
            return {"<error>": [type(exc).__name__]}
        res = {}
        for layer in net.get_all_layers_deep():
            key = _layer_name(layer)
            deps = sorted(_layer_name(d) for d in layer.get_dep_layers())
            if key in res and res[key] != deps:  # same name twice (e.g. a rec sub-layer in and outside the loop)
                key += "#%i" % sum(k.startswith(key) for k in res)
            res[key] = deps
        return res


def all_deps():
    return {case["name"]: case_deps(case) for case in _cases()}


@pytest.mark.skipif(not os.path.isdir(CASES), reason="../shared/conformance absent")
def test_dep_layers_equal_reference():
    with open(REFERENCE) as f:
        reference = json.load(f)
    current = all_deps()
    assert len(current) > 290
    diffs = []
    for name in sorted(set(reference) | set(current)):
        ref, cur = reference.get(name), current.get(name)
        if ref != cur:
            keys = sorted(set(ref or {}) | set(cur or {}))
            diffs.append("%s: %s" % (name, ["%s: %s != %s" % (k, (ref or {}).get(k), (cur or {}).get(k))
                                            for k in keys if (ref or {}).get(k) != (cur or {}).get(k)][:3]))
    assert not diffs, "get_dep_layers differs from the reference:\n" + "\n".join(diffs[:20])


if __name__ == "__main__":
    assert sys.argv[1:] == ["--record"], "usage: python tests/test_dep_layers.py --record"
    with open(REFERENCE, "w") as f:
        json.dump(all_deps(), f, indent=0, sort_keys=True)
        f.write("\n")
    print("wrote", REFERENCE)
