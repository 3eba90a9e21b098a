"""The public frontend conformance cases on the layers backend (skipped without ../shared)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER = os.path.join(ROOT, "..", "shared", "conformance", "frontend", "check_frontend.py")


@pytest.mark.skipif(not os.path.exists(CHECKER), reason="../shared/conformance/frontend is not available")
def test_check_frontend_layers_backend():
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, CHECKER, "--backends", "layers"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0 and last.endswith(" 0 failed"), proc.stdout[-3000:] + proc.stderr[-2000:]
