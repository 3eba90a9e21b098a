"""
``get_dep_layers`` of every layer of every conformance network (built as the checker builds them, rec units, cond
branches and subnetworks included) equals the reference recorded before the option declarations
(``LayerBase.layer_options`` & co.) replaced the hand-written resolution and ``get_dep_layers`` overrides.
Also built: the example of every layer class (tests/layers/examples.py) and EXTRA_NETS (the option forms the
conformance cases do not cover: dict-valued options, static switch, cond with names, explicit search sources, ...).
The reference (tests/data/dep_layers_reference.json) maps "case: layer [class]" to the dependencies' names.
The sub-layers of rec units are left out (whether the loop moves a sub-layer out, and so what it depends on there,
is decided by the rec loop's classification, which changes independently); test_masks_in_loop_are_dependencies
checks the declared option of a sub-layer inside the loop.
INTENDED_CHANGES lists where the declarations changed the dependencies on purpose (with the reason); the reference
file itself stays as recorded before the change (``python tests/test_dep_layers.py --record`` rewrites it).
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
EXTERN = {"data": {"dim": 6}, "classes": {"dim": 4, "sparse": True}}
_MASK = {"class": "compare", "kind": "greater", "value": 0, "from": "data:classes"}
_SM = {"class": "softmax", "n_out": 4, "from": "data"}
_REC = {"class": "rec", "from": "data", "unit": {
    "h": {"class": "linear", "n_out": 3, "from": ["data:source", "prev:h"]}, "output": {"class": "copy", "from": "h"}}}
EXTRA_NETS = {
    "switch_static_false": {"c": dict(_SM), "output": {"class": "switch", "condition": False, "true_from": "x",
                                                        "false_from": "c"}},
    "switch_dynamic": {"m": dict(_MASK), "c": {"class": "copy", "from": "data"},
                       "output": {"class": "switch", "condition": "m", "true_from": "c", "false_from": "data"}},
    "cond_names": {"flag": {"class": "constant", "value": True, "from": []}, "a": {"class": "copy", "from": "data"},
                   "output": {"class": "cond", "condition": "flag", "true_layer": "a", "false_layer": "data"}},
    "hdf_dump_extra": {"m": dict(_MASK), "output": {"class": "hdf_dump", "filename": "/nonexistent/x.hdf",
                                                     "extra": {"mask": "m", "cls": "data:classes"}}},
    "unflatten_nd_same_sizes": {
        "len": {"class": "length", "from": "data"},
        "sz": {"class": "eval", "from": "len", "eval": "tf.stack([source(0), source(0) * 0 + 1], axis=1)",
               "out_type": {"shape": (2,), "dim": 2, "dtype": "int32", "batch_dim_axis": 0, "time_dim_axis": None,
                            "feature_dim_axis": 1}},
        "output": {"class": "unflatten_nd", "from": "data", "sizes": "sz", "num_axes": 2,
                   "declare_same_sizes_as": {0: "data"}}},
    "concat_two": {"a": {"class": "linear", "n_out": 2, "from": "data"},
                   "output": {"class": "concat", "from": [("data", "F"), ("a", "F")]}},
    "loss_layer_target_layer": {"sm": dict(_SM), "t": {"class": "copy", "from": "data:classes"},
                                "output": {"class": "loss", "from": "sm", "loss_": "ce", "target_": "layer:t"}},
    "loss_layer_default_target": {"sm": dict(_SM), "output": {"class": "loss", "from": "sm", "loss_": "ce"}},
    "rec_initial_state_layer": {"init": {"class": "reduce", "mode": "mean", "axis": "T", "from": "lin"},
                                "lin": {"class": "linear", "n_out": 3, "from": "data"},
                                "output": {"class": "rec", "unit": "lstm", "n_out": 3, "from": "data",
                                           "initial_state": {"h": "init", "c": "zeros"}}},
    "rec_last_output": {"r": dict(_REC), "output": {"class": "rec_last_output", "rec_layer": "r",
                                                    "sub_layer_name": "h"}},
    "masked_computation_unmask": {"m": dict(_MASK), "mc": {"class": "masked_computation", "mask": "m", "from": "data",
                                                           "unit": {"class": "linear", "n_out": 3}},
                                  "output": {"class": "unmask", "from": "mc", "mask": "m"}},
    "masked_computation_in_loop": {"output": {"class": "rec", "from": "data", "unit": {
        "red": {"class": "reduce", "mode": "max", "axis": "F", "from": "data:source"},
        "m": {"class": "compare", "kind": "greater", "value": 0.0, "from": "red"},
        "mc": {"class": "masked_computation", "mask": "m", "from": "data:source",
               "unit": {"class": "rec", "unit": "lstm", "n_out": 3}},
        "output": {"class": "unmask", "from": "mc", "mask": "m"}}}},
    "choice_explicit_sources": {
        "_search": True, "enc": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"},
        "sm": dict(_SM, **{"from": "enc"}), "lin": {"class": "linear", "n_out": 4, "from": "enc"},
        "output": {"class": "choice", "from": "sm", "target": "classes", "beam_size": 2,
                   "explicit_search_sources": ["lin"]}},
    "target_layer_softmax": {"t": {"class": "copy", "from": "data:classes"},
                             "output": {"class": "softmax", "from": "data", "loss": "ce", "target": "layer:t"}},
}


_MASK_READ = "the mask is read by the layer: a dependency (the hand-written resolution had left it out)"
_ONCE = "a layer that is a source and named by an option is listed once (the old override appended it again)"
_EXPLICIT = "explicit_search_sources define the beam: dependencies (as the original's ChoiceLayer.get_dep_layers)"
# case -> {layer: (its dependencies now, why they differ from the reference)}
INTENDED_CHANGES = {
    "example_masked_computation": {"output[masked_computation]": (["data[None]", "m[compare]"], _MASK_READ)},
    "example_unmask": {"output[unmask]": (["data[None]", "m[compare]"], _MASK_READ)},
    "extra_masked_computation_unmask": {
        "mc[masked_computation]": (["data[None]", "m[compare]"], _MASK_READ),
        "output[unmask]": (["m[compare]", "mc[masked_computation]"], _MASK_READ)},
    "example_rec_last_output": {"output[rec_last_output]": (["r[rec]"], "its last frame is read from rec_layer")},
    "extra_rec_last_output": {"output[rec_last_output]": (["r[rec]"], "its last frame is read from rec_layer")},
    "rec_last_output_basic": {"output[rec_last_output]": (["rec[rec]"], "its last frame is read from rec_layer")},
    "example_switch": {"output[switch]": (["data[None]"], _ONCE)},
    "extra_unflatten_nd_same_sizes": {"output[unflatten_nd]": (["data[None]", "sz[eval]"], _ONCE)},
    "extra_choice_explicit_sources": {"output[choice]": (["lin[linear]", "sm[softmax]"], _EXPLICIT)},
}


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


def _example_cases():
    """The example of every layer class (tests/layers/examples.py) and EXTRA_NETS, as cases."""
    sys.path.insert(0, os.path.join(HERE, "layers"))
    from examples import EXAMPLES

    res = []
    for name, opts in sorted(EXAMPLES.items()):
        opts = dict(opts)
        if opts.pop("_out_like_data", False):
            continue  # frontend_op: its option is a template object
        net = dict(opts.pop("_net", {}))
        search = opts.pop("_search", False)
        net["output"] = dict({"class": name, "from": "data"}, **opts)
        res.append(dict(name="example_" + name, network=_no_tmp(net), extern_data=EXTERN, train_flag=True,
                        search_flag=search))
    for name, net in sorted(EXTRA_NETS.items()):
        net = dict(net)
        search = net.pop("_search", False)
        res.append(dict(name="extra_" + name, network=net, extern_data=EXTERN, train_flag=True, search_flag=search))
    return res


def _no_tmp(obj):
    if isinstance(obj, str):
        return obj.replace("__TMP__", "/nonexistent")
    if isinstance(obj, dict):
        return {k: _no_tmp(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_no_tmp(v) for v in obj)
    return obj


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
            if layer.network.is_inside_rec_layer(inside_loop=False):
                continue  # (which sub-layers a rec loop moves out, and so their deps, is the rec loop's business)
            key = _layer_name(layer)
            deps = sorted(_layer_name(d) for d in layer.get_dep_layers())
            if key in res and res[key] != deps:  # same name twice (e.g. a rec sub-layer in and outside the loop)
                key += "#%i" % sum(k.startswith(key) for k in res)
            res[key] = deps
        return res


def all_deps():
    return {case["name"]: case_deps(case) for case in _cases() + _example_cases()}


@pytest.mark.skipif(not os.path.isdir(CASES), reason="../shared/conformance absent")
def test_dep_layers_equal_reference():
    with open(REFERENCE) as f:
        reference = json.load(f)
    for case, layers in INTENDED_CHANGES.items():
        for layer, (deps, _why) in layers.items():
            assert layer in reference[case], (case, layer)
            reference[case][layer] = deps
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


def test_masks_in_loop_are_dependencies():
    case = [c for c in _example_cases() if c["name"] == "extra_masked_computation_in_loop"][0]
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=True)
        net.construct_from_dict(case["network"])
        loop_net = net.get_layer("output").subnet.loop_net
        select, unmask = loop_net.layers["mc"], loop_net.layers["output"]
        assert select.layer_class == "_masked_select" and unmask.layer_class == "unmask"
        for layer in (select, unmask):
            mask = layer.kwargs["mask"]
            assert mask.name == "m" and mask in layer.get_dep_layers()


if __name__ == "__main__":
    assert sys.argv[1:] == ["--record"], "usage: python tests/test_dep_layers.py --record"
    with open(REFERENCE, "w") as f:
        json.dump(all_deps(), f, indent=0, sort_keys=True)
        f.write("\n")
    print("wrote", REFERENCE)
