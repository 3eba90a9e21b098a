"""The mutation fuzzer (tools/fuzz_net_dicts.py) over the conformance case networks, fixed seed: no crash, no raw
Python/TF error, no user error silently accepted (except the kinds still pending below), errors name the layer."""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))

import fuzz_net_dicts  # noqa: E402

# n_out that contradicts the real output: part of the option validation of the redesign (not yet everywhere)
PENDING_ACCEPTED_KINDS = {"n_out_contradicts"}


@pytest.mark.skipif(not os.path.isdir(fuzz_net_dicts.DEFAULT_CASES), reason="no conformance cases")
def test_fuzz_fixed_seed():
    counts, results = fuzz_net_dicts.run_fuzzer(seed=0, count=150)
    print("fuzz_net_dicts seed 0, 150 mutants:", counts)
    assert sum(counts.get(k, 0) for k in ("clean", "raw", "crash", "accepted", "accepted_ok")) == 150
    bad = [(m["kind"], m["case"] + ":" + m["path"], m.get("desc"), (r.get("message") or r.get("stage"))[:300])
           for m, r, c in results if c in ("raw", "crash")]
    assert not bad, "\n".join(map(str, bad))
    accepted = [(m["kind"], m["case"] + ":" + m["path"], m.get("desc")) for m, r, c in results
                if c == "accepted" and m["kind"] not in PENDING_ACCEPTED_KINDS]
    assert not accepted, "\n".join(map(str, accepted))
    assert counts["clean"] >= 120


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
    assert fuzz_net_dicts.classify(m, {"stage": "crash"}) == "crash"
    assert fuzz_net_dicts.classify(m, {"stage": "ok"}) == "accepted"
    assert fuzz_net_dicts.classify(dict(m, must_fail=False), {"stage": "ok"}) == "accepted_ok"
