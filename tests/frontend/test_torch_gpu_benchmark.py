"""benchmarks/torch_gpu.py runs end to end with tiny sizes on the CPU (--cpu-smoke): every row measured, none
failed, the compact table last."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gpu_benchmark_cpu_smoke():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "torch_gpu.py"), "--cpu-smoke",
                           "--workers", "1"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed" not in proc.stdout, proc.stdout[-3000:]
    table = proc.stdout[proc.stdout.index("model        prec"):]
    for name in ("transformer  fp32", "transformer  bf16", "lstm         fp32", "lstm         bf16",
                 "engine e2e transformer fp32, 0 loader workers", "engine e2e transformer fp32, 1 loader workers",
                 "engine e2e transformer bf16, 1 loader workers"):
        assert name in table, table
    assert proc.stdout.rstrip().splitlines()[-1].startswith("goals:")
