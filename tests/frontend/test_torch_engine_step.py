"""The torch engine's per-step path (issue 30, benchmarks/torch_engine_step.py): batches are checked by their
producer (the prefetch thread or a DataLoader worker) ahead of the step, with the step's error line; loader
workers send a batch's data once (as tensors), and the step sees the same numbers."""

import os
import re

import pytest

torch = pytest.importorskip("torch")

from returnn_lite.__main__ import main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BAD_LABEL = repr({"class": "StaticDataset", "output_dim": {"data": [9, 2], "classes": [2, 1]}, "data": [
    {"data": [[0.5] * 9] * 4, "classes": [0, 1, 0, 1]}, {"data": [[0.5] * 9] * 3, "classes": [1, 5, 0]}]})
_INF = repr({"class": "StaticDataset", "output_dim": {"data": [9, 2], "classes": [2, 1]}, "data": [
    {"data": [[0.5] * 9] * 4, "classes": [0, 1, 0, 1]}, {"data": [[0.5] * 9, [7.0] * 9], "classes": [1, 0]}]}
             ).replace("7.0", "1e999")  # inf, as a literal


def _argv(out, *extra):
    return [os.path.join(ROOT, "configs", "12ax_rf_lstm.config"), "++model", str(out / "model"),
            "++learning_rate_file", str(out / "lr"), "++backend", "torch", "++num_epochs", "1", "++log_verbosity", "5",
            "++max_seqs", "1"] + list(extra)


@pytest.mark.parametrize("loader", [None, "{'num_workers': 1, 'pin_memory': False}"])
@pytest.mark.parametrize("train, fragments", [
    (_BAD_LABEL, ["dataset 'train' key 'classes'", "label 5 out of range [0, 2)", "seq-1"]),
    (_INF, ["dataset 'train' key 'data'", "non-finite", "seq-1"])])
def test_batch_checked_ahead_fails_at_its_step(tmp_path, capsys, loader, train, fragments):
    extra = ["++train", train, "++dev", ""] + (["++torch_dataloader_opts", loader] if loader else [])
    assert main(_argv(tmp_path, *extra)) == 1
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("rnn.py: error:")]
    assert len(lines) == 1, captured.err  # (log_verbosity 5 adds the traceback)
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    # the first batch (seq 0) trained; the bad one (seq 1) stopped the run at its own step
    assert re.findall(r"^train epoch 1, step (\d+),", captured.out, re.M) == ["0"], captured.out


def test_loader_workers_feed_the_same_numbers(tmp_path, capsys):
    def step_costs(out, *extra):
        train = ["++train", "{'class': 'Task12AXDataset', 'num_seqs': 30}", "++dev", ""]
        assert main(_argv(out, "++max_seqs", "5", *train, *extra)) == 0, capsys.readouterr().err
        return re.findall(r"^train epoch 1, step \d+, cost:ce ([\d.e+-]+)", capsys.readouterr().out, re.M)

    in_thread = step_costs(tmp_path / "a")
    in_workers = step_costs(tmp_path / "b", "++torch_dataloader_opts", "{'num_workers': 2, 'pin_memory': False}")
    assert len(in_thread) == 6 and in_workers == in_thread


def test_torch_engine_step_benchmark_runs():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "torch_engine_step.py"), "--rounds", "1"],
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for fragment in ("backend train_step, prebuilt arrays:", "bare rf step, prebuilt tensors:", "ratio engine/bare:"):
        assert fragment in out.stdout, out.stdout
