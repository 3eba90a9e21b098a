"""The mutation fuzzer (tools/fuzz_net_dicts.py) over the conformance case networks, fixed seed: no crash, no raw
Python/TF error, no user error silently accepted (except the kinds still pending below), errors name the layer."""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))

import fuzz_net_dicts  # noqa: E402

# (none pending: an n_out that contradicts a target is an error also where the loss is never computed)
PENDING_ACCEPTED_KINDS = set()
COUNT = 250


@pytest.mark.skipif(not os.path.isdir(fuzz_net_dicts.DEFAULT_CASES), reason="no conformance cases")
def test_fuzz_fixed_seed():
    counts, results = fuzz_net_dicts.run_fuzzer(seed=0, count=COUNT)
    print("fuzz_net_dicts seed 0, %i mutants:" % COUNT, counts)
    assert sum(counts.get(k, 0) for k in ("clean", "clean_run", "raw", "crash", "accepted", "accepted_ok")) == COUNT
    bad = [(m["kind"], m["case"] + ":" + m["path"], m.get("desc"), (r.get("message") or r.get("stage"))[:300])
           for m, r, c in results if c in ("raw", "crash")]
    assert not bad, "\n".join(map(str, bad))
    accepted = [(m["kind"], m["case"] + ":" + m["path"], m.get("desc")) for m, r, c in results
                if c == "accepted" and m["kind"] not in PENDING_ACCEPTED_KINDS]
    assert not accepted, "\n".join(map(str, accepted))
    # every error names a layer (or the extern_data key) and is our text
    for m, r, c in results:
        if r.get("stage") == "construct":
            assert c == "clean", (m["kind"], m.get("desc"), r.get("message"))
            assert r["message"].startswith(("layer '", "extern_data '", "dependency loop")), r["message"]
    assert counts["clean"] >= 0.8 * COUNT
    assert counts.get("clean_named_option", 0) >= 0.75 * counts["clean"]
    assert len({m["kind"] for m, r, c in results}) >= 20  # the wider kinds are drawn too


def test_mutants_are_reproducible():
    if not os.path.isdir(fuzz_net_dicts.DEFAULT_CASES):
        pytest.skip("no conformance cases")
    cases = fuzz_net_dicts.load_cases(fuzz_net_dicts.DEFAULT_CASES)
    a = fuzz_net_dicts.make_mutants(cases, 7, 30)
    b = fuzz_net_dicts.make_mutants(cases, 7, 30)
    assert [(m["case"], m["kind"], m["desc"]) for m in a] == [(m["case"], m["kind"], m["desc"]) for m in b]
    assert len({m["kind"] for m in a}) >= 5


def test_classify():
    m = {"kind": "bad_size", "layer": "lin", "option": "n_out", "must_fail": True}
    assert fuzz_net_dicts.classify(m, {"stage": "construct", "message": "layer 'lin' (class 'linear'): option "
                                                                        "'n_out' must be positive"}) == "clean"
    assert fuzz_net_dicts.classify(m, {"stage": "construct", "message": "layer 'lin' (class 'linear'): ValueError: "
                                                                        "Dimension -4 must be >= 0"}) == "raw"
    assert fuzz_net_dicts.classify(m, {"stage": "construct", "message": "Dimension -4 must be >= 0"}) == "raw"
    assert fuzz_net_dicts.classify(m, {"stage": "run", "message": "x"}) == "raw"
    assert fuzz_net_dicts.classify(m, {"stage": "run", "message": "assertion failed: [loss 'ce' of layer 'lin': the "
                                                                  "sequence lengths ... differ]"}) == "clean_run"
    assert fuzz_net_dicts.classify(m, {"stage": "crash"}) == "crash"
    assert fuzz_net_dicts.classify(m, {"stage": "ok"}) == "accepted"
    assert fuzz_net_dicts.classify(dict(m, must_fail=False), {"stage": "ok"}) == "accepted_ok"
    # a removed option may surface at the layer that uses this one: clean if our text names that layer
    removed = dict(m, kind="remove_option", must_fail=False, layer="enc")
    assert fuzz_net_dicts.classify(removed, {"stage": "construct", "message": "layer 'dec' (class 'x'): needs a "
                                                                              "feature axis"}) == "clean"
    assert fuzz_net_dicts.classify(dict(m, layer="enc"), {"stage": "construct", "message": "layer 'dec' (class "
                                                                                           "'x'): bad"}) == "raw"


def test_wider_mutation_kinds():
    """Each kind of the wider mutations applies to some case and yields what it says."""
    if not os.path.isdir(fuzz_net_dicts.DEFAULT_CASES):
        pytest.skip("no conformance cases")
    import random

    cases = fuzz_net_dicts.load_cases(fuzz_net_dicts.DEFAULT_CASES)
    assert any(c.get("search_flag") for c in cases)
    rng = random.Random(3)
    found = {}
    for _ in range(3000):
        kind = rng.choice(fuzz_net_dicts.MUTATIONS)
        if kind not in found:
            mutant = fuzz_net_dicts.mutate(rng.choice(cases), kind, rng)
            if mutant is not None:
                found[kind] = mutant
    missing = set(fuzz_net_dicts.MUTATIONS) - set(found)
    assert not missing, missing
    assert "prev:no_such_layer" in repr(found["bad_prev_ref"]["net"])
    assert "base:no_such_layer" in repr(found["base_missing"]["net"])
    assert found["extern_bad"]["extern_data"] and found["extern_bad"]["desc"].startswith("extern_data")


# ---- the classes of bad input the fuzzer found, one unit test each (small nets, built directly)

def _build(net_dict, extern_data, train_flag=False, search_flag=False):
    import tensorflow as tf

    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    graph = tf.Graph()
    with graph.as_default():
        net = TFNetwork(extern_data=ExternData(extern_data), train_flag=train_flag,
                        **({"search_flag": True} if search_flag else {}))
        net.construct_from_dict(net_dict)
    return net, graph


_EXT = {"data": {"dim": 3}, "classes": {"dim": 5, "sparse": True}}


def _decoder(n_out):
    unit = {"embed": {"class": "linear", "activation": None, "n_out": 4, "from": "prev:output"},
            "output": {"class": "softmax", "target": "classes", "from": "embed", "n_out": n_out}}
    return {"output": {"class": "rec", "from": [], "target": "classes", "loss": "ce", "unit": unit}}


@pytest.mark.parametrize("train_flag", [False, True])
def test_rec_unit_output_n_out_contradicts_target(train_flag):
    from returnn_lite.errors import NetworkLayerException

    _build(_decoder(5), _EXT, train_flag=train_flag)  # (the right dim: fine)
    with pytest.raises(NetworkLayerException, match=r"'output/output'.*n_out=12345 contradicts the target 'classes'"):
        _build(_decoder(12345), _EXT, train_flag=train_flag)


def test_n_out_contradicts_target_without_loss_top_level():
    from returnn_lite.errors import NetworkLayerException

    with pytest.raises(NetworkLayerException, match=r"layer 'output'.*n_out=7 contradicts the target 'classes'"):
        _build({"output": {"class": "softmax", "from": "data", "target": "classes", "n_out": 7}}, _EXT)


@pytest.mark.parametrize("train_flag", [False, True])
def test_triplet_loss_n_out_contradicts_target(train_flag):
    from returnn_lite.errors import NetworkLayerException

    ext = {"data": {"shape": (5,)}, "tri": {"shape": (3,), "dim": 4, "sparse": True, "dtype": "int32",
                                             "time_dim_axis": None}}
    net = {"output": {"class": "linear", "activation": None, "n_out": 6, "from": "data", "loss": "triplet_loss",
                      "loss_opts": {"margin": 0.5}, "target": "tri"}}
    _build(net, ext, train_flag=train_flag)
    net["output"]["n_out"] = 7
    with pytest.raises(NetworkLayerException, match=r"layer 'output'.*n_out.*multiple of 3"):
        _build(net, ext, train_flag=train_flag)


def test_gather_position_sparse_dim_larger_than_axis():
    from returnn_lite.errors import NetworkLayerException

    ext = {"data": {"dim": 5}, "pos": {"dim": 7, "sparse": True}}
    with pytest.raises(NetworkLayerException, match=r"layer 'output'.*option 'position'.*sparse with dim 7"):
        _build({"output": {"class": "gather", "from": "data", "axis": "F", "position": "data:pos"}}, ext)


def test_gather_position_out_of_range_at_run_time():
    import numpy
    import tensorflow as tf

    from returnn_lite.engine.checks import tf_error_text

    ext = {"data": {"dim": 5}, "pos": {"dim": 5, "sparse": True}}
    net, graph = _build({"output": {"class": "gather", "from": "data", "axis": "F", "position": "data:pos"}}, ext)
    with graph.as_default(), tf.compat.v1.Session() as session:
        data, pos = net.extern_data.data["data"], net.extern_data.data["pos"]
        feed = {data.placeholder: numpy.zeros((2, 3, 5), "float32"), data.size_placeholder[0]: [3, 2],
                pos.placeholder: numpy.array([[0, -1, 2], [1, 1, 0]], "int32"), pos.size_placeholder[0]: [3, 2]}
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            session.run(net.layers["output"].output.placeholder, feed)
    text = tf_error_text(str(info.value))
    assert "layer 'output' (class 'gather'): option 'position'" in text and "indices[" not in text


def test_prev_ref_to_layer_not_in_unit():
    from returnn_lite.errors import NetworkLayerException

    net = _decoder(5)
    net["output"]["unit"]["embed"]["from"] = ["prev:output", "prev:no_such_layer"]
    with pytest.raises(NetworkLayerException, match=r"'output/embed'.*'prev:no_such_layer'.*no layer 'no_such_layer'"):
        _build(net, _EXT)


@pytest.mark.parametrize("option, value", [
    ("with_bias", [True]), ("collocate_with", -7), ("out_dim", "no_such_value"), ("param_device", "no_such_value"),
    ("loss_opts", "no_such_value"), ("L2", "0.1"), ("activation", 3.5)])
def test_option_of_wrong_type(option, value):
    """The declared type of every option (the default's type, or a common declaration) is checked by name."""
    from returnn_lite.errors import NetworkLayerException

    layer = {"class": "linear", "from": "data", "n_out": 4, option: value}
    with pytest.raises(NetworkLayerException, match=r"layer 'output'.*option '?%s" % option):
        _build({"output": layer}, _EXT)
