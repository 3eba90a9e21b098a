"""`backend = "torch"`: the 12AX rf config trains on PyTorch through the same engine (one epoch, .pt checkpoint,
forward to HDF), and a run killed with -9 resumes from its last complete checkpoint."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_EXTRA = '''
backend = "torch"
train = {"class": "Task12AXDataset", "num_seqs": %(train)i}
dev = {"class": "Task12AXDataset", "num_seqs": 20, "fixed_random_seed": 1}
eval = {"class": "Task12AXDataset", "num_seqs": 5, "fixed_random_seed": 2}


def forward_step(*, model, extern_data, **_):
    logits = model(extern_data["data"])
    rf.softmax(logits, axis=classes_dim).mark_as_output("output", shape=[batch_dim, time_dim, classes_dim])
'''


def _config(tmp_path, train_seqs):
    with open(os.path.join(ROOT, "configs", "12ax_rf_lstm.config")) as f:
        text = f.read()
    path = tmp_path / "torch.config"
    path.write_text(text + _EXTRA % {"train": train_seqs})
    return str(path)


def _cmd(config, tmp_path, *args):
    return [sys.executable, os.path.join(ROOT, "rnn.py"), config, "++model", str(tmp_path / "model"),
            "++learning_rate_file", str(tmp_path / "lr")] + list(args)


def _env():
    return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


def test_torch_backend_trains_one_epoch_and_forwards(tmp_path):
    config = _config(tmp_path, 100)
    proc = subprocess.run(_cmd(config, tmp_path, "++num_epochs", "1"), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "torch backend" in proc.stdout and "2442 params" in proc.stdout
    m = re.search(r"epoch 1 score: [0-9.e-]+ .* dev: score [0-9.e-]+ error ([0-9.e-]+)", proc.stdout)
    assert m, proc.stdout[-3000:]
    assert 0.0 <= float(m.group(1)) < 0.5
    assert os.path.exists(str(tmp_path / "model.001.pt"))
    assert not os.path.exists(str(tmp_path / "model.001.index"))
    import torch

    state = torch.load(str(tmp_path / "model.001.pt"), weights_only=False)
    assert sorted(state["model"]) == ["lstm.bias", "lstm.ff_weight", "lstm.rec_weight", "output.bias",
                                      "output.weight"]
    assert state["global_step"] > 0
    out = tmp_path / "out.hdf"
    proc = subprocess.run(_cmd(config, tmp_path, "++task", "forward", "++output_file", str(out)), cwd=ROOT,
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    import h5py

    with h5py.File(str(out), "r") as f:
        assert f["inputs"].shape[1] == 2
        assert len(f["seqLengths"]) == 5
        assert abs(f["inputs"][:].sum(axis=1) - 1).max() < 1e-5  # softmax over the classes


def test_torch_backend_kill9_and_resume(tmp_path):
    config = _config(tmp_path, 60)
    cmd = _cmd(config, tmp_path, "++num_epochs", "3")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not os.path.exists(str(tmp_path / "model.001.pt")) and time.time() < deadline:
            assert proc.poll() is None or os.path.exists(str(tmp_path / "model.001.pt"))
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert os.path.exists(str(tmp_path / "model.001.pt"))
    done = sorted(int(n.split(".")[1]) for n in os.listdir(str(tmp_path)) if re.match(r"^model\.\d{3}\.pt$", n))
    assert not [n for n in os.listdir(str(tmp_path)) if ".tmp" in n and not n.startswith(".model")]
    res = subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    if done[-1] < 3:
        assert "Resume training after epoch %i" % done[-1] in res.stdout, res.stdout[-3000:]
        assert "start epoch %i " % (done[-1] + 1) in res.stdout
        assert "start epoch 1 " not in res.stdout
    assert os.path.exists(str(tmp_path / "model.003.pt"))
    with open(str(tmp_path / "lr")) as f:
        lr_text = f.read()
    assert "3:" in lr_text.replace(" ", "") or "3 :" in lr_text
