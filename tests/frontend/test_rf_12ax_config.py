"""configs/12ax_rf_lstm.config (the 12AX LSTM written with rf) trains one epoch with `python rnn.py`."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_12ax_rf_config_trains_one_epoch(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [sys.executable, os.path.join(ROOT, "rnn.py"), os.path.join(ROOT, "configs", "12ax_rf_lstm.config"),
           "++num_epochs", "1", "++model", str(tmp_path / "model"),
           "++learning_rate_file", str(tmp_path / "lr")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    m = re.search(r"epoch 1 score: .* dev: score ([0-9.e-]+) error ([0-9.e-]+)", proc.stdout)
    assert m, proc.stdout[-3000:]
    assert float(m.group(2)) < 0.1  # frame error on dev after one epoch (the dict config: about 0.03)
    assert os.path.exists(str(tmp_path / "model.001.index"))
    assert "2442 params" in proc.stdout  # the same params as configs/12ax_lstm.config
