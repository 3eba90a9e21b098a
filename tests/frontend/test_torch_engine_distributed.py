"""``torch_distributed = {}`` under ``torchrun --standalone --nproc_per_node 2`` (gloo, CPU) on the rf 12AX config:
the data is sharded (each rank runs half of the steps), only rank 0 logs and writes, the dev error is in the
single-process band, and a rank that dies ends the run with one error line on the other, with nothing left running."""

import os
import re
import shlex
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_EXTRA = '''
backend = "torch"
device = "cpu"
train = {"class": "Task12AXDataset", "num_seqs": 100}
dev = {"class": "Task12AXDataset", "num_seqs": 20, "fixed_random_seed": 1}
num_epochs = 2
log_verbosity = 5
torch_distributed = {"barrier_timeout": %(timeout)i}
'''

_KILL_RANK1_IN_EPOCH2 = '''
_train_step = train_step


def train_step(*, model, extern_data, **kwargs):
    import signal

    if os.environ.get("RANK") == "1" and rf.get_run_ctx().epoch == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return _train_step(model=model, extern_data=extern_data, **kwargs)
'''


def _config(tmp_path, extra="", timeout=60):
    with open(os.path.join(ROOT, "configs", "12ax_rf_lstm.config")) as f:
        text = f.read()
    path = tmp_path / "ddp.config"
    path.write_text(text + _EXTRA % {"timeout": timeout} + extra)
    return str(path)


def _readme_torchrun_args():
    """The README's torchrun command (its arguments after ``torchrun``)."""
    from test_readme_torch import readme_blocks

    block = [b.strip() for b in readme_blocks("## Training on PyTorch") if b.strip().startswith("torchrun")][0]
    return shlex.split(block)[1:]


def _torchrun(config, tmp_path, timeout=180, args=None):
    if args is None:
        args = ["--standalone", "--nproc_per_node", "2", os.path.join(ROOT, "rnn.py"), config]
    cmd = [sys.executable, "-m", "torch.distributed.run"] + args + [
        "++model", str(tmp_path / "model"), "++learning_rate_file", str(tmp_path / "lr")]
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    start = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    return proc, time.time() - start


def _left_running(config):
    out = subprocess.run(["ps", "-eo", "args"], stdout=subprocess.PIPE, text=True).stdout
    return [line for line in out.splitlines() if config in line]


def test_two_ranks_shard_the_data_and_rank0_writes(tmp_path):
    # the README's command, on the CPU with a small dataset
    args = _readme_torchrun_args() + [
        "++device", "cpu", "++num_epochs", "2", "++log_verbosity", "5",
        "++train", "{'class': 'Task12AXDataset', 'num_seqs': 100}",
        "++dev", "{'class': 'Task12AXDataset', 'num_seqs': 20, 'fixed_random_seed': 1}"]
    config = os.path.join(ROOT, "configs", "12ax_rf_lstm.config")
    proc, _ = _torchrun(config, tmp_path, args=args)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    assert "torch_distributed: 2 processes (gloo)" in out
    for epoch in (1, 2):
        steps = re.findall(r"^train epoch %i, step (\d+)," % epoch, out, re.M)
        assert steps == [str(i) for i in range(5)], out[-3000:]  # 100 seqs, 10 per batch: 5 steps per rank
    assert len(re.findall(r"^epoch 2 score:", out, re.M)) == 1  # only rank 0 reports
    m = re.search(r"epoch 2 score: [0-9.e-]+ .* dev: score [0-9.e-]+ error ([0-9.e-]+)", out)
    assert m and 0.0 <= float(m.group(1)) < 0.3, out[-3000:]
    files = sorted(n for n in os.listdir(str(tmp_path)) if n.startswith("model"))
    assert files == ["model.001.pt", "model.002.pt"]
    with open(str(tmp_path / "lr")) as f:
        assert "2:" in f.read().replace(" ", "")
    assert not _left_running(str(tmp_path / "model"))
    # distributed eval: each rank scored its half of dev, the sums were reduced: the same as one process on all of it
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "rnn.py"), config, "++backend", "torch", "++task", "eval",
                           "++device", "cpu", "++model", str(tmp_path / "model"), "++learning_rate_file",
                           str(tmp_path / "lr"), "++dev", "{'class': 'Task12AXDataset', 'num_seqs': 20, "
                           "'fixed_random_seed': 1}"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    single = re.search(r"epoch 2 dev: score ([0-9.e-]+) error ([0-9.e-]+)", proc.stdout)
    distributed = re.search(r"epoch 2 score: .* dev: score ([0-9.e-]+) error ([0-9.e-]+)", out)
    assert single and distributed and abs(float(single.group(1)) - float(distributed.group(1))) < 1e-4, (
        proc.stdout[-1000:], out[-1000:])


def test_a_killed_rank_ends_the_run_with_one_error_line(tmp_path):
    config = _config(tmp_path, _KILL_RANK1_IN_EPOCH2, timeout=20)
    proc, elapsed = _torchrun(config, tmp_path)
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("rnn.py: error:")]
    assert len(errors) <= 1, out[-3000:]
    if errors:  # rank 0 noticed before torchrun ended it
        assert errors[0].startswith("rnn.py: error: torch_distributed: rank 0 of 2:"), errors
    assert "rank      : 1" in out or errors, out[-3000:]
    assert os.path.exists(str(tmp_path / "model.001.pt")) and not os.path.exists(str(tmp_path / "model.002.pt"))
    assert elapsed < 150
    assert not _left_running(config)
