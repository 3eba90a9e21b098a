"""On a CUDA GPU (skipped elsewhere): the rf 12AX config trains on the GPU with the torch engine, in float32 and
under bfloat16 autocast, to the CPU's dev error band; the checkpoint loads on the CPU (map_location)."""

import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _train(tmp_path, *args):
    cmd = [sys.executable, os.path.join(ROOT, "rnn.py"), os.path.join(ROOT, "configs", "12ax_rf_lstm.config"),
           "++backend", "torch", "++num_epochs", "2", "++model", str(tmp_path / "model"),
           "++learning_rate_file", str(tmp_path / "lr"), "++train", "{'class': 'Task12AXDataset', 'num_seqs': 300}",
           "++dev", "{'class': 'Task12AXDataset', 'num_seqs': 50, 'fixed_random_seed': 1}"] + list(args)
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc.stdout


@pytest.mark.parametrize("amp", [None, "bfloat16"])
def test_rf_12ax_trains_on_cuda(tmp_path, amp):
    out = _train(tmp_path, "++device", "gpu", *(["++torch_amp", amp] if amp else []))
    assert "device cuda" in out and (("amp bfloat16" in out) == bool(amp))
    m = re.search(r"epoch 2 score: [0-9.e-]+ .* dev: score [0-9.e-]+ error ([0-9.e-]+)", out)
    assert m and float(m.group(1)) < 0.3, out[-3000:]
    state = torch.load(str(tmp_path / "model.002.pt"), map_location="cpu", weights_only=False)
    assert all(v.device.type == "cpu" for v in state["model"].values())
    out = _train(tmp_path, "++device", "cpu", "++num_epochs", "3")  # resumes the GPU checkpoint on the CPU
    assert "Resume training after epoch 2" in out and "epoch 3 score:" in out
