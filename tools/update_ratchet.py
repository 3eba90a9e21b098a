#!/usr/bin/env python3
"""Runs the conformance corpus and raises tests/conformance_ratchet.json to the current passing set."""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFORMANCE = os.path.normpath(os.path.join(ROOT, "..", "shared", "conformance"))
RATCHET = os.path.join(ROOT, "tests", "conformance_ratchet.json")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run([sys.executable, os.path.join(CONFORMANCE, "check.py"), "--cases",
                        os.path.join(CONFORMANCE, "cases"), "--json", out], stdout=subprocess.DEVNULL)
        with open(out) as f:
            results = json.load(f)
    passing = sorted(r["name"] for r in results if r["ok"])
    old = {"min_passed": 0, "passing": []}
    if os.path.exists(RATCHET):
        with open(RATCHET) as f:
            old = json.load(f)
    lost = sorted(set(old["passing"]) - set(passing))
    if lost:
        print("not raising: previously passing cases fail now: %s" % lost)
        return 1
    with open(RATCHET, "w") as f:
        json.dump({"min_passed": len(passing), "passing": passing}, f, indent=1)
        f.write("\n")
    print("%i passed, %i failed; ratchet %i -> %i" % (len(passing), len(results) - len(passing),
                                                     old["min_passed"], len(passing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
