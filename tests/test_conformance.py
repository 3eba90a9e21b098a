"""
Runs the conformance corpus (../shared/conformance) with a ratchet: the number of passing cases may
never drop below the count recorded in tests/conformance_ratchet.json, and no case listed there as
passing may fail. Skipped when ../shared is absent.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CONFORMANCE = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "conformance"))
RATCHET = os.path.join(HERE, "conformance_ratchet.json")


@pytest.mark.skipif(not os.path.isfile(os.path.join(CONFORMANCE, "check.py")), reason="../shared/conformance absent")
def test_conformance_ratchet():
    with open(RATCHET) as f:
        ratchet = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        proc = subprocess.run(
            [sys.executable, os.path.join(CONFORMANCE, "check.py"), "--cases", os.path.join(CONFORMANCE, "cases"),
             "--json", out],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
        assert os.path.exists(out), "checker crashed:\n" + proc.stdout[-3000:]
        with open(out) as f:
            results = json.load(f)
    passed = {r["name"] for r in results if r["ok"]}
    messages = {r["name"]: r["message"] for r in results}
    regressed = sorted(set(ratchet["passing"]) - passed)
    assert not regressed, "cases that passed before now fail:\n" + "\n".join(
        "%s: %s" % (n, messages.get(n, "missing")) for n in regressed)
    assert len(passed) >= ratchet["min_passed"], "%i passed, ratchet is %i" % (len(passed), ratchet["min_passed"])
    print("conformance: %i passed, %i failed (ratchet %i)" % (len(passed), len(results) - len(passed),
                                                              ratchet["min_passed"]))
