"""The README's torch / GPU command blocks run as written (with a small dataset and a temp model dir appended as
``++`` overrides); the PyTorch-only install line pins what pyproject.toml pins. The torchrun block runs in
test_torch_engine_distributed.py."""

import os
import re
import shlex
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["++num_epochs", "1", "++train", "{'class': 'Task12AXDataset', 'num_seqs': 60}",
         "++dev", "{'class': 'Task12AXDataset', 'num_seqs': 10, 'fixed_random_seed': 1}"]


def readme_blocks(section):
    """The code blocks of a README section (``## ...`` up to the next one)."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index(section)
    end = text.find("\n## ", start + 1)
    return re.findall(r"```[a-z]*\n(.*?)```", text[start:end if end >= 0 else None], re.S)


def torch_commands():
    cmds = []
    for section in ("## The PyTorch backend", "## Training on PyTorch"):
        cmds += [b.strip() for b in readme_blocks(section) if b.strip().startswith("python rnn.py")]
    return cmds


@pytest.mark.parametrize("command", torch_commands())
def test_readme_torch_command_runs(command, tmp_path):
    args = shlex.split(command)[1:]
    args = [sys.executable] + args + SMALL + ["++model", str(tmp_path / "model"),
                                              "++learning_rate_file", str(tmp_path / "lr")]
    proc = subprocess.run(args, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    if "++device gpu" in command and not torch.cuda.is_available():  # as documented: one error line
        assert proc.returncode == 1
        assert [line for line in proc.stderr.splitlines() if line.startswith("rnn.py:")] == [
            proc.stderr.strip().splitlines()[-1]]
        assert "device 'gpu': no CUDA GPU" in proc.stderr
        return
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "epoch 1 score:" in proc.stdout and os.path.exists(str(tmp_path / "model.001.pt"))


def test_readme_pytorch_only_install_pins_match_pyproject():
    block = [b for b in readme_blocks("## Training on PyTorch") if "pip install" in b][0].strip()
    assert block.startswith("pip install --no-deps -e . && pip install ")
    wanted = shlex.split(block.split("&&", 1)[1])[2:]
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        pyproject = f.read()
    pins = dict(re.findall(r'"(numpy|h5py|torch)([=<>!~][^"]*)"', pyproject))
    assert sorted(wanted) == sorted(name + spec for name, spec in pins.items()), (wanted, pins)
    assert "tensorflow" not in block
