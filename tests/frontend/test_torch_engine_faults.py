"""
The torch engine keeps the TF engine's promises (tests/test_cli_faults.py) on the rf 12AX config with
``++backend torch``: each injected fault ends with exit status 1, exactly one ``rnn.py: error: ...`` line naming
the file / step / loss / key, no traceback, and the files saved before are unchanged (checksums). kill -9 at five
points (a step, the ``.pt`` write, before its rename, between the checkpoint and the learning-rate file, the dev
eval) resumes to the uninterrupted run's scores and params.
"""

import errno
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile

import numpy
import pytest
from hdf_faults import hdf_train_args, write_12ax_hdf  # (tests/hdf_faults.py)

torch = pytest.importorskip("torch")

from returnn_lite.__main__ import main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TRAIN = ["++backend", "torch", "++train", "{'class': 'Task12AXDataset', 'num_seqs': 40}",
          "++dev", "{'class': 'Task12AXDataset', 'num_seqs': 10, 'fixed_random_seed': 1}", "++num_epochs", "1",
          "++log_verbosity", "4"]


def _argv(out, *extra):
    config = os.path.join(ROOT, "configs", "12ax_rf_lstm.config")
    return [config, "++model", str(out / "model"), "++learning_rate_file", str(out / "model.learning_rates")] + \
        _TRAIN + list(extra)


def _checksums(directory):
    if not directory.exists():
        return {}
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def _fails_cleanly(capsys, argv, *fragments):
    """Exit status 1, exactly one 'rnn.py: error:' line (containing fragments), no traceback."""
    status = main(argv)
    captured = capsys.readouterr()
    err = captured.err
    assert status == 1, (status, err)
    lines = [line for line in err.splitlines() if line.startswith("rnn.py: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0], captured.out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One epoch trained (in-process), shared: tests copy its directory."""
    out = tmp_path_factory.mktemp("trained") / "out"
    assert main(_argv(out)) == 0
    return out


@pytest.fixture
def out(trained, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(str(trained), str(copy))
    return copy


def _dev_score(stdout):
    return re.search(r"dev: score ([\d.e+-]+)", stdout).group(1)


def test_corrupt_pt_on_resume_load_and_preload_names_the_file(out, tmp_path, capsys):
    good = (out / "model.001.pt").read_bytes()
    pt = out / "model.001.pt"
    preload = "{'x': {'filename': %r}}" % str(pt)
    cases = [("truncated", good[:len(good) // 2])]
    for seed in range(3):  # random bytes inside (the tensor data too: torch.load alone does not notice those)
        rng = numpy.random.RandomState(seed)
        data = bytearray(good)
        for offset in rng.randint(0, len(data) - 16, 2):
            data[offset:offset + 16] = rng.bytes(16)
        cases.append(("random bytes %i" % seed, bytes(data)))
    for what, data in cases:
        pt.write_bytes(data)
        before = _checksums(out)
        for extra in (["++num_epochs", "2"], ["++task", "eval", "++load", str(out / "model.001")]):
            line, _ = _fails_cleanly(capsys, _argv(out, *extra), "cannot load model %r" % str(pt))
            assert "truncated or corrupt" in line, (what, line)
        line, _ = _fails_cleanly(capsys, _argv(tmp_path / "fresh", "++preload_from_files", preload.replace(
            "'x': {", "'x': {'init_for_train': True, ")), "preload_from_files 'x'", str(pt), "truncated or corrupt")
        assert _checksums(out) == before, what
    assert not (tmp_path / "fresh").exists() or not list((tmp_path / "fresh").glob("model.*"))


def _resave(src, dst, location=None, to_meta=False):
    """``src`` saved again as if on another device: the storages tagged ``location``, or the params on 'meta'."""
    import torch.serialization

    state = torch.load(str(src), weights_only=False)
    if to_meta:
        state["model"] = {k: v.to("meta") for k, v in state["model"].items()}
    real = torch.serialization.location_tag
    if location:
        torch.serialization.location_tag = lambda storage: location
    try:
        torch.save(state, str(dst))
    finally:
        torch.serialization.location_tag = real
    if location:
        with zipfile.ZipFile(str(dst)) as zf:
            assert location.encode() in zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))


def test_pt_from_another_device_loads_and_a_meta_pt_names_the_file(out, tmp_path, capsys):
    assert main(_argv(out, "++task", "eval", "++load", str(out / "model.001"))) == 0
    reference = _dev_score(capsys.readouterr().out)
    gpu = tmp_path / "gpu.001.pt"  # written on a GPU (storages tagged cuda:5): mapped onto this device
    _resave(out / "model.001.pt", gpu, location="cuda:5")
    assert main(_argv(out, "++task", "eval", "++load", str(gpu))) == 0
    assert _dev_score(capsys.readouterr().out) == reference
    meta = tmp_path / "meta.001.pt"  # params without data
    _resave(out / "model.001.pt", meta, to_meta=True)
    before = _checksums(out)
    _fails_cleanly(capsys, _argv(out, "++task", "eval", "++load", str(meta)), "cannot load model %r" % str(meta),
                   "'meta' device", "lstm.")
    _fails_cleanly(capsys, _argv(tmp_path / "fresh", "++preload_from_files",
                                 "{'m': {'filename': %r, 'init_for_train': True}}" % str(meta)),
                   "preload_from_files 'm'", str(meta), "'meta' device")
    not_ours = tmp_path / "plain.001.pt"  # another program's file: a bare list
    torch.save([1, 2, 3], str(not_ours))
    _fails_cleanly(capsys, _argv(out, "++task", "eval", "++load", str(not_ours)), str(not_ours),
                   "not a returnn_lite torch checkpoint")
    assert _checksums(out) == before


def test_disk_full_while_saving_keeps_previous_files(out, capsys, monkeypatch):
    before = _checksums(out)
    real_save = torch.save

    def full_disk_save(obj, f, *args, **kwargs):
        f.write(b"\0" * 100)  # a partly written file, then ENOSPC
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk_save)
    line, stdout = _fails_cleanly(capsys, _argv(out, "++num_epochs", "2"), "epoch 2", "saving checkpoint",
                                  "model.002", "No space left on device", "model.001", "unchanged")
    assert "epoch 2 score" in stdout
    assert _checksums(out) == before  # no model.002.pt, no temp file, learning-rate file unchanged

    monkeypatch.setattr(torch, "save", real_save)  # the learning-rate file cannot be written: no model.002 either
    from returnn_lite.engine import learning_rate_control

    def full_disk_write(filename, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(learning_rate_control, "atomic_write_text", full_disk_write)
    _fails_cleanly(capsys, _argv(out, "++num_epochs", "2"), "learning-rate file", "No space left on device")
    assert _checksums(out) == before


def test_non_finite_loss_names_the_step_and_the_loss(out, capsys, monkeypatch):
    from returnn_lite.engine import torch_engine

    real = torch_engine._collect_losses
    calls = []

    def collect():
        total, items = real()
        calls.append(1)
        if len(calls) == 3:  # epoch 2, step 2 (epoch 1 is done)
            items = [(key, summed * float("nan") if key == "cost:ce" else summed, inv) for key, summed, inv in items]
        return total, items

    monkeypatch.setattr(torch_engine, "_collect_losses", collect)
    before = _checksums(out)
    line, stdout = _fails_cleanly(capsys, _argv(out, "++num_epochs", "2"), "non-finite training loss",
                                  "epoch 2, step 2", "cost:ce=nan", "Nothing was saved")
    assert "Resume training after epoch 1" in stdout
    assert _checksums(out) == before


def test_model_dir_not_writable_checked_before_training(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the model directory should be")
    argv = _argv(blocker / "sub")
    line, stdout = _fails_cleanly(capsys, argv, "model", str(blocker / "sub"), "not writable", "nothing was trained")
    assert "start epoch" not in stdout


def test_learning_rate_override_on_resume_notice(out, capsys):
    assert main(_argv(out, "++num_epochs", "2", "++learning_rate", "0.05")) == 0
    stdout = capsys.readouterr().out
    notices = [line for line in stdout.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1 and "++learning_rate 0.05 is not used" in notices[0], stdout
    assert re.search(r"start epoch 2 with learning rate 0.01\b", stdout)


def test_dataset_mismatches_are_found_before_the_first_step(tmp_path, capsys):
    out = tmp_path / "out"
    line, stdout = _fails_cleanly(capsys, _argv(out, *hdf_train_args(write_12ax_hdf(tmp_path / "dim5.hdf", dim=5))),
                                  "dataset 'train'", "'data'", "feature dim 5", "dim 9")
    assert "start epoch" not in stdout
    _fails_cleanly(capsys, _argv(out, *hdf_train_args(write_12ax_hdf(tmp_path / "sparse.hdf", sparse_data=True))),
                   "dataset 'train'", "'data'", "sparse", "dense")
    _fails_cleanly(capsys, _argv(out, *hdf_train_args(write_12ax_hdf(tmp_path / "labels.hdf", label_offset=3))),
                   "dataset 'train'", "'classes'", "has only 2 classes")
    # a dataset that declares 2 classes but has the label 5 in one seq: found in the batch, names the seq
    train = repr({"class": "StaticDataset", "output_dim": {"data": [9, 2], "classes": [2, 1]}, "data": [
        {"data": [[0.5] * 9] * 4, "classes": [0, 1, 0, 1]}, {"data": [[0.5] * 9] * 3, "classes": [1, 5, 0]}]})
    _fails_cleanly(capsys, _argv(out, "++train", train, "++dev", ""),
                   "dataset 'train' key 'classes'", "label 5 out of range [0, 2)", "seq-1")
    _fails_cleanly(capsys, _argv(out, *hdf_train_args(write_12ax_hdf(tmp_path / "nan.hdf", nan_seq=2))),
                   "dataset 'train' key 'data'", "non-finite", "seq-2")
    assert not out.exists() or not list(out.glob("model.*"))


# Runs rnn.py's main with a kill -9 (SIGKILL to itself) at a named point of a named epoch.
_KILL_DRIVER = r'''
import io
import os
import signal
import sys

import torch

from returnn_lite.__main__ import main
from returnn_lite.engine import engine as engine_module, torch_engine

point, at_epoch = os.environ["KILL_POINT"], int(os.environ.get("KILL_EPOCH", "0"))
now = {"epoch": 0, "steps": 0}


def kill_here(armed=True):
    if armed and now["epoch"] == at_epoch:
        os.kill(os.getpid(), signal.SIGKILL)


real_train_epoch = engine_module.Engine.train_epoch


def train_epoch(self, epoch, final_epoch):
    now["epoch"], now["steps"] = epoch, 0
    return real_train_epoch(self, epoch, final_epoch)


engine_module.Engine.train_epoch = train_epoch
if point == "step":  # in the 3rd train step
    real_forward = torch_engine._StepModule.forward

    def forward(self, *args):
        now["steps"] += 1
        kill_here(now["steps"] == 3)
        return real_forward(self, *args)

    torch_engine._StepModule.forward = forward
elif point == "pt_write":  # half of the .pt temp file written
    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        buf = io.BytesIO()
        real_save(obj, buf, *args, **kwargs)
        f.write(buf.getvalue()[:len(buf.getvalue()) // 2])
        f.flush()
        kill_here()

    torch.save = save
elif point == "before_rename":  # the .pt temp file complete, not yet renamed
    real_replace = os.replace

    def replace(src, dst):
        kill_here(dst.endswith(".pt"))
        return real_replace(src, dst)

    os.replace = replace
elif point == "before_lr_file":  # the checkpoint in place, the learning-rate file not yet
    real_commit = engine_module.commit_pending_file

    def commit(pending):
        kill_here()
        return real_commit(pending)

    engine_module.commit_pending_file = commit
elif point == "dev_eval":
    real_eval = torch_engine.TorchBackend.eval_step

    def eval_step(self, *args, **kwargs):
        kill_here()
        return real_eval(self, *args, **kwargs)

    torch_engine.TorchBackend.eval_step = eval_step
sys.exit(main(sys.argv[1:]))
'''


def _run_killed_at(driver, out, point, epoch, num_epochs):
    argv = _argv(out, "++num_epochs", str(num_epochs), "++train", "{'class': 'Task12AXDataset', 'num_seqs': 60}")
    env = dict(os.environ, PYTHONPATH=ROOT, KILL_POINT=point, KILL_EPOCH=str(epoch), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, str(driver)] + argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    return proc


def _params(path):
    return torch.load(str(path), weights_only=False)["model"]


def test_kill9_at_five_points_resumes_to_identical_scores(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(_KILL_DRIVER)
    ref, out = tmp_path / "ref", tmp_path / "out"
    proc = _run_killed_at(driver, ref, "none", 0, 3)
    assert proc.returncode == 0, proc.stdout[-3000:]
    reference_scores = re.findall(r"^epoch \d+ score: .*$", proc.stdout, re.M)
    assert len(reference_scores) == 3
    checkpoints = lambda: sorted(p.name for p in out.glob("model.*.pt"))  # noqa: E731
    for point, epoch, saved_after in [("step", 1, []), ("pt_write", 1, []), ("before_rename", 1, []),
                                      ("before_lr_file", 1, ["model.001.pt"]), ("dev_eval", 2, ["model.001.pt"])]:
        before = {k: v for k, v in _checksums(out).items() if re.match(r"^model\.\d{3}\.pt$", k)}
        proc = _run_killed_at(driver, out, point, epoch, 3)
        assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stdout[-3000:])
        assert checkpoints() == saved_after, (point, checkpoints())
        after = _checksums(out)
        assert all(after.get(k) == v for k, v in before.items()), point  # saved files unchanged
        if point in ("pt_write", "before_rename"):
            assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")], point  # the killed save's temp file
        if point == "before_lr_file":
            assert not (out / "model.learning_rates").exists()  # pending: completed on resume
        if point == "dev_eval":  # the run after "before_lr_file" completed its learning-rate file
            assert "completed the learning-rate file" in proc.stdout and "Resume training after epoch 1" in proc.stdout
    proc = _run_killed_at(driver, out, "none", 0, 3)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Resume training after epoch 1" in proc.stdout and "start epoch 1 " not in proc.stdout
    assert "completed the learning-rate file" not in proc.stdout  # (done by the run killed in its dev eval)
    resumed_scores = re.findall(r"^epoch \d+ score: .*$", proc.stdout, re.M)
    strip = lambda lines: [re.sub(r" elapsed: \S+", "", line) for line in lines]  # noqa: E731
    assert strip(resumed_scores) == strip(reference_scores[1:])
    assert (out / "model.learning_rates").read_text() == (ref / "model.learning_rates").read_text()
    for epoch in (1, 2, 3):
        a, b = _params(out / ("model.%03d.pt" % epoch)), _params(ref / ("model.%03d.pt" % epoch))
        assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a), epoch
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in ref.iterdir())  # no temp files left


def test_torch_oom_retry_splits_an_out_of_memory_batch(tmp_path, capsys, monkeypatch):
    from returnn_lite.engine import torch_engine

    assert main(_argv(tmp_path / "plain")) == 0
    plain = capsys.readouterr().out
    limit = {"seqs": 5}  # "memory" for at most this many seqs: train forward, backward, eval all run out above it
    real_forward, real_eval, real_backward = (torch_engine._StepModule.forward, torch_engine.TorchBackend._eval_items,
                                              torch.Tensor.backward)
    seen = {"backward": 0}

    def forward(self, step_func, extern_data):
        if extern_data["data"].raw_tensor.shape[0] > limit["seqs"] + 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_forward(self, step_func, extern_data)

    def backward(self, *args, **kwargs):  # batches of limit + 1 seqs pass the forward, not the backward
        seen["backward"] += 1
        if self.grad_fn is not None and seen.get("seqs", 0) > limit["seqs"]:
            raise torch.OutOfMemoryError("CUDA out of memory (backward)")
        return real_backward(self, *args, **kwargs)

    real_set = torch_engine.TorchBackend._set_extern_data

    def set_extern_data(self, arrays):
        seen["seqs"] = arrays.num_seqs
        return real_set(self, arrays)

    def eval_items(self, arrays, epoch, step_func):
        if arrays.num_seqs > limit["seqs"]:
            raise torch.OutOfMemoryError("CUDA out of memory (eval)")
        return real_eval(self, arrays, epoch, step_func)

    monkeypatch.setattr(torch_engine._StepModule, "forward", forward)
    monkeypatch.setattr(torch.Tensor, "backward", backward)
    monkeypatch.setattr(torch_engine.TorchBackend, "_set_extern_data", set_extern_data)
    monkeypatch.setattr(torch_engine.TorchBackend, "_eval_items", eval_items)
    # without the option: one line naming the step and the batch
    _fails_cleanly(capsys, _argv(tmp_path / "no_retry"), "train step 0 of dataset 'train': out of memory on cpu "
                   "with a batch of 10 seqs x")
    assert main(_argv(tmp_path / "retry", "++torch_oom_retry", "True")) == 0
    retried = capsys.readouterr().out
    retries = re.findall(r"^(train|eval) step (\d+) of dataset '(\w+)': out of memory with a batch of (\d+) seqs x "
                         r"\d+ frames; retrying it as (\d+) \+ (\d+) seqs \(torch_oom_retry\)$", retried, re.M)
    assert [r[0] for r in retries].count("eval") == 1 and [r[0] for r in retries].count("train") == 4, retries
    assert ("train", "0", "train", "10", "5", "5") in retries
    score = lambda text: [float(x) for x in re.search(  # noqa: E731
        r"epoch 1 score: ([\d.e+-]+) error: ([\d.e+-]+) .*dev: score ([\d.e+-]+) error ([\d.e+-]+)", text).groups()]
    assert score(retried) == pytest.approx(score(plain), rel=1e-5)  # the same training, in halves
    a, b = (torch.load(str(tmp_path / d / "model.001.pt"), weights_only=False) for d in ("plain", "retry"))
    assert a["global_step"] == b["global_step"] == 4  # one update per batch
    assert all(torch.allclose(a["model"][k], b["model"][k], atol=1e-5) for k in a["model"])
    limit["seqs"] = 3  # halves that still run out of memory are split again
    assert main(_argv(tmp_path / "deeper", "++torch_oom_retry", "True")) == 0
    assert "retrying it as 2 + 3 seqs" in capsys.readouterr().out
    # a backward out of memory: retried while the params had no gradients (the first half), not after (the
    # second half's backward already added to the first half's gradients)
    limit["seqs"] = 4
    line, stdout = _fails_cleanly(capsys, _argv(tmp_path / "backward", "++torch_oom_retry", "True"),
                                  "train step 0 of dataset 'train'", "with a batch of 5 seqs",
                                  "not split: its backward pass ran out of memory after adding to the gradients")
    assert "retrying it as 2 + 3 seqs" in stdout and seen["backward"] >= 3
    limit["seqs"] = 0
    _fails_cleanly(capsys, _argv(tmp_path / "single", "++torch_oom_retry", "True"), "train step 0 of dataset 'train'",
                   "with a batch of 1 seqs", "(torch_oom_retry: a single seq)")
    for value, msg in [("'yes'", "torch_oom_retry 'yes': expected True or False"),
                       ("True ++torch_distributed {}", "torch_oom_retry: not with torch_distributed")]:
        _fails_cleanly(capsys, _argv(tmp_path / "bad", "++torch_oom_retry", *value.split(" ")), msg)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_cuda_out_of_memory_one_line_and_torch_oom_retry(tmp_path, capsys, monkeypatch):
    from returnn_lite.engine import torch_engine

    real_forward = torch_engine._StepModule.forward
    per_seq = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory // 8

    def forward(self, step_func, extern_data):  # 1/8 of the GPU's memory per seq: 10 seqs do not fit, 5 do
        block = torch.empty(extern_data["data"].raw_tensor.shape[0] * per_seq, dtype=torch.uint8, device="cuda")
        del block
        return real_forward(self, step_func, extern_data)

    monkeypatch.setattr(torch_engine._StepModule, "forward", forward)
    _fails_cleanly(capsys, _argv(tmp_path / "no_retry", "++device", "gpu"), "train step 0 of dataset 'train': out of "
                   "memory on cuda", "with a batch of 10 seqs x", "peak", "GiB of", "lower batch_size or max_seqs")
    assert main(_argv(tmp_path / "retry", "++device", "gpu", "++torch_oom_retry", "True")) == 0
    stdout = capsys.readouterr().out
    assert len(re.findall(r"^train step \d+ of dataset 'train': out of memory with a batch of 10 seqs x \d+ frames; "
                          r"retrying it as 5 \+ 5 seqs \(torch_oom_retry\)$", stdout, re.M)) == 4, stdout
    assert torch.load(str(tmp_path / "retry" / "model.001.pt"), weights_only=False)["global_step"] == 4
