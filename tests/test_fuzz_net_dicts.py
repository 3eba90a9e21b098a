"""The mutation fuzzer (tools/fuzz_net_dicts.py) over the conformance case networks, fixed seed: no crash, no raw
Python/TF error, no user error silently accepted (except the kinds still pending below), errors name the layer."""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))

import fuzz_net_dicts  # noqa: E402

# n_out that contradicts the real output of a layer whose loss is never computed (no train/eval flag: the loss
# would find it) is accepted
PENDING_ACCEPTED_KINDS = {"n_out_contradicts"}
COUNT = 200


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
