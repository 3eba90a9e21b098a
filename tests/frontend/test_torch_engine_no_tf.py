"""Packaging guards: the torch path (engine loop, torch engine, rf on torch, rnn.py with backend = "torch") runs
where importing TensorFlow fails, and the TF path runs where importing torch fails (each in a subprocess with a
``sys.meta_path`` blocker)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_BLOCKER = '''
import importlib.machinery
import sys


class _Absent:  # as if the package were not installed: a spec without origin whose loading fails
    def create_module(self, spec):
        raise ModuleNotFoundError("%(name)s is blocked in this test: " + spec.name, name=spec.name)

    def exec_module(self, module):
        pass


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name == %(name)r or name.startswith(%(name)r + "."):
            return importlib.machinery.ModuleSpec(name, _Absent())
        return None


sys.meta_path.insert(0, _Blocker())
'''


def _run_blocked(blocked, code, tmp_path, timeout=600):
    script = tmp_path / "blocked.py"
    script.write_text(_BLOCKER % {"name": blocked} + code)
    env = dict(os.environ, PYTHONPATH=ROOT, RETURNN_LITE_NATIVE_OPS="0")
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def test_engine_and_torch_engine_modules_import_without_tensorflow(tmp_path):
    pytest.importorskip("torch")
    proc = _run_blocked("tensorflow", '''
import returnn_lite.engine, returnn_lite.engine.engine, returnn_lite.engine.torch_engine
import returnn_lite.engine.torch_distributed, returnn_lite.engine.torch_data, returnn_lite.engine.torch_forward
import returnn_lite.__main__
assert "tensorflow" not in sys.modules
print("ok")
''', tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-3000:]


def test_rf_12ax_config_trains_one_epoch_on_torch_without_tensorflow(tmp_path):
    pytest.importorskip("torch")
    config = os.path.join(ROOT, "configs", "12ax_rf_lstm.config")
    proc = _run_blocked("tensorflow", '''
from returnn_lite.__main__ import main

status = main([%r, "++backend", "torch", "++num_epochs", "1", "++model", %r, "++learning_rate_file", %r,
               "++train", "{'class': 'Task12AXDataset', 'num_seqs': 100}",
               "++dev", "{'class': 'Task12AXDataset', 'num_seqs': 20, 'fixed_random_seed': 1}"])
assert "tensorflow" not in sys.modules
sys.exit(status)
''' % (config, str(tmp_path / "model"), str(tmp_path / "lr")), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "epoch 1 score:" in proc.stdout and os.path.exists(str(tmp_path / "model.001.pt"))


def test_tf_config_trains_one_epoch_without_torch(tmp_path):
    config = os.path.join(ROOT, "configs", "12ax_lstm.config")
    proc = _run_blocked("torch", '''
from returnn_lite.__main__ import main

status = main([%r, "++num_epochs", "1", "++model", %r, "++learning_rate_file", %r,
               "++train", "{'class': 'Task12AXDataset', 'num_seqs': 20}",
               "++dev", "{'class': 'Task12AXDataset', 'num_seqs': 5, 'fixed_random_seed': 1}"])
assert "torch" not in sys.modules
sys.exit(status)
''' % (config, str(tmp_path / "model"), str(tmp_path / "lr")), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "epoch 1 score:" in proc.stdout and os.path.exists(str(tmp_path / "model.001.index"))
