"""
Bad input at the command line never escapes: each file fault ends with exit status 1, exactly one
``rnn.py: error: ...`` line naming the file/dataset and the problem, no traceback (unless ``--debug``), and the
files saved before are unchanged (checksums).
"""

import errno
import hashlib
import os
import re
import shutil

import h5py
import numpy
import pytest
from hdf_faults import hdf_train_args, write_12ax_hdf  # (tests/hdf_faults.py)

from returnn_lite.__main__ import main

CONFIG = """#!rnn.py
import numpy
task = "train"
train = {"class": "Task12AXDataset", "num_seqs": 12}
dev = {"class": "Task12AXDataset", "num_seqs": 4, "fixed_random_seed": 1}
num_inputs = 9
num_outputs = 2
batch_size = 400
max_seqs = 6
network = {
    "hidden": {"class": "linear", "activation": "tanh", "n_out": 6},
    "output": {"class": "softmax", "loss": "ce", "from": "hidden"},
}
adam = True
learning_rate = 0.01
num_epochs = 1
model = %(dir)r + "/model"
log_verbosity = 3
"""


@pytest.fixture
def setup(tmp_path):
    out = tmp_path / "out"
    path = tmp_path / "ff.config"
    path.write_text(CONFIG % {"dir": str(out)})
    return str(path), out


def _checksums(directory):
    if not directory.exists():
        return {}
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()
            and not p.name.endswith(".log")}


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


def _h5py_fails(path):
    """Whether plain h5py fails to read the whole file (so the damage is detectable at all)."""
    try:
        with h5py.File(path, "r") as f:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    obj[...]
            f.visititems(visit)
        return False
    except Exception:
        return True


def test_corrupt_hdf_random_bytes(setup, tmp_path, capsys):
    config, out = setup
    good = write_12ax_hdf(tmp_path / "good.hdf")
    size = os.path.getsize(good)
    found = 0
    for seed in range(60):
        rng = numpy.random.RandomState(seed)
        bad = str(tmp_path / ("corrupt%i.hdf" % seed))
        shutil.copy(good, bad)
        with open(bad, "r+b") as f:
            for offset in rng.randint(0, size, 3):
                f.seek(int(offset))
                f.write(rng.bytes(64))
        if not _h5py_fails(bad):
            os.remove(bad)
            continue
        line, _ = _fails_cleanly(capsys, [config] + hdf_train_args(bad), bad)
        assert "HDF" in line
        found += 1
        if found == 3:
            break
    assert found == 3
    assert not out.exists() or not list(out.glob("model.*"))


def test_hdf_dim_and_sparse_mismatch_checked_before_first_step(setup, tmp_path, capsys):
    config, out = setup
    line, stdout = _fails_cleanly(capsys, [config] + hdf_train_args(write_12ax_hdf(tmp_path / "dim5.hdf", dim=5)),
                                  "dataset 'train'", "'data'", "feature dim 5", "dim 9", "'hidden'")
    assert "start epoch" not in stdout
    _fails_cleanly(capsys, [config] + hdf_train_args(write_12ax_hdf(tmp_path / "sparse.hdf", sparse_data=True)),
                   "dataset 'train'", "'data'", "sparse", "dense")
    assert not out.exists() or not list(out.glob("model.*"))


def test_labels_above_num_outputs(setup, tmp_path, capsys):
    config, out = setup
    # the HDF's own number of classes is larger: found before the first step
    _fails_cleanly(capsys, [config] + hdf_train_args(write_12ax_hdf(tmp_path / "labels.hdf", label_offset=3)),
                   "dataset 'train'", "'classes'", "has only 2 classes", "'output'")
    # a dataset that declares 2 classes but has the label 5 in one seq: found in the batch, names the seq
    train = repr({"class": "StaticDataset", "output_dim": {"data": [9, 2], "classes": [2, 1]}, "data": [
        {"data": [[0.5] * 9] * 4, "classes": [0, 1, 0, 1]}, {"data": [[0.5] * 9] * 3, "classes": [1, 5, 0]}]})
    _fails_cleanly(capsys, [config, "++train", train, "++dev", ""],
                   "dataset 'train' key 'classes'", "label 5 out of range [0, 2)", "seq-1", "'output'")
    assert not out.exists() or not list(out.glob("model.*"))


def test_non_finite_input_values(setup, tmp_path, capsys):
    config, out = setup
    _fails_cleanly(capsys, [config] + hdf_train_args(write_12ax_hdf(tmp_path / "nan.hdf", nan_seq=2)),
                   "dataset 'train' key 'data'", "non-finite", "seq-2")


def test_runtime_error_names_layer(setup, capsys):
    config, out = setup
    net = ("{'h': {'class': 'eval', 'from': 'data', 'eval': 'tf.debugging.check_numerics(tf.math.log(source(0) * 0.0 - 1.0), "
           "\"x\")'}, 'output': {'class': 'softmax', 'loss': 'ce', 'from': 'h'}}")
    line, _ = _fails_cleanly(capsys, [config, "++network", net], "dataset 'train'", "layer 'h'", "runtime error",
                             "NaN values")
    # --debug: the traceback too
    assert main(["--debug", config, "++network", net]) == 1
    assert "Traceback" in capsys.readouterr().err
    assert main([config, "++network", net, "++log_verbosity", "5"]) == 1  # also at verbosity 5
    err = capsys.readouterr().err
    assert "Traceback" in err and len([x for x in err.splitlines() if x.startswith("rnn.py: error:")]) == 1


def _train_once(capsys, config, *extra):
    assert main([config] + list(extra)) == 0
    return capsys.readouterr().out


def test_truncated_checkpoint_and_missing_index(setup, capsys):
    config, out = setup
    _train_once(capsys, config)
    data_file = next(out.glob("model.001.data-*"))
    data_file.write_bytes(data_file.read_bytes()[:len(data_file.read_bytes()) // 2])
    before = _checksums(out)
    for extra in (["++num_epochs", "2"], ["++task", "eval"]):
        line, _ = _fails_cleanly(capsys, [config] + extra, "cannot load model", "model.001")
        assert "truncated" in line or "Read less bytes" in line, line
    assert _checksums(out) == before
    (out / "model.001.index").unlink()
    before = _checksums(out)
    _fails_cleanly(capsys, [config, "++task", "eval", "++load", str(out / "model.001")], "model.001.index",
                   "not found")
    assert _checksums(out) == before


def test_model_dir_not_writable_checked_before_training(setup, tmp_path, capsys):
    config, out = setup
    blocker = tmp_path / "file"
    blocker.write_text("a file where the model directory should be")
    line, stdout = _fails_cleanly(capsys, [config, "++model", str(blocker / "sub" / "model")],
                                  "model", str(blocker / "sub"), "not writable", "nothing was trained")
    assert "start epoch" not in stdout and "epoch 1 score" not in stdout


def test_disk_full_while_saving_keeps_previous_files(setup, capsys, monkeypatch):
    import tensorflow as tf

    config, out = setup
    _train_once(capsys, config)
    before = _checksums(out)
    real_save = tf.compat.v1.train.Saver.save

    def full_disk_save(self, sess, save_path, *args, **kwargs):
        with open(save_path + ".data-00000-of-00001", "wb") as f:  # a partly written file, then ENOSPC
            f.write(b"\0" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tf.compat.v1.train.Saver, "save", full_disk_save)
    line, stdout = _fails_cleanly(capsys, [config, "++num_epochs", "2"], "epoch 2", "saving checkpoint",
                                  "model.002", "No space left on device", "model.001", "unchanged")
    assert "epoch 2 score" in stdout
    assert _checksums(out) == before  # no model.002.*, no temp files, learning-rate file unchanged

    # the learning-rate file cannot be written: nothing of epoch 2 is saved either
    monkeypatch.setattr(tf.compat.v1.train.Saver, "save", real_save)
    from returnn_lite.engine import learning_rate_control

    def full_disk_write(filename, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(learning_rate_control, "atomic_write_text", full_disk_write)
    _fails_cleanly(capsys, [config, "++num_epochs", "2"], "learning-rate file", "No space left on device")
    assert _checksums(out) == before


def test_learning_rate_file_written_after_its_checkpoint(setup, capsys, monkeypatch):
    config, out = setup
    real_replace, moved = os.replace, []
    monkeypatch.setattr(os, "replace", lambda src, dst: (moved.append(os.path.basename(dst)), real_replace(src, dst)))
    _train_once(capsys, config)
    final = [name for name in moved if not name.startswith(".")]
    assert final[-2:] == ["model.001.index", "model.learning_rates"], moved
    monkeypatch.undo()
    lr_file = out / "model.learning_rates"
    before_lr = lr_file.read_text()

    from returnn_lite.engine import engine as engine_module

    def killed(pending):  # the process dies between the checkpoint and the learning-rate file
        raise KeyboardInterrupt

    monkeypatch.setattr(engine_module, "commit_pending_file", killed)
    assert main([config, "++num_epochs", "2"]) == 130
    capsys.readouterr()
    assert (out / "model.002.index").exists()
    assert lr_file.read_text() == before_lr  # still the state of epoch 1
    monkeypatch.undo()
    stdout = _train_once(capsys, config, "++num_epochs", "3")
    assert "Resume training after epoch 2" in stdout
    from returnn_lite.engine import LearningRateControl

    lrc = LearningRateControl(default_learning_rate=1.0, filename=str(lr_file))
    assert sorted(lrc.epoch_data) == [1, 2, 3]
    assert all("dev_score" in lrc.epoch_data[e].error for e in (1, 2, 3))
    assert not [p for p in os.listdir(out) if p.endswith((".pending", ".tmp"))]


def test_learning_rate_override_on_resume_notice(setup, capsys):
    config, out = setup
    _train_once(capsys, config)
    stdout = _train_once(capsys, config, "++num_epochs", "2", "++learning_rate", "0.05")
    notices = [line for line in stdout.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1, stdout
    assert "++learning_rate 0.05 is not used" in notices[0] and "0.01" in notices[0], notices
    assert re.search(r"start epoch 2 with learning rate 0.01\b", stdout)
    # no notice without the override, or where the override agrees with the saved state
    stdout = _train_once(capsys, config, "++num_epochs", "3")
    assert "notice:" not in stdout
    stdout = _train_once(capsys, config, "++num_epochs", "4", "++learning_rate", "0.01")
    assert "notice:" not in stdout
    stdout = _train_once(capsys, config, "++num_epochs", "5", "++learning_rates", "[0.01, 0.01, 0.01, 0.01, 0.3]")
    assert "notice:" not in stdout and "start epoch 5 with learning rate 0.3 " in stdout  # an epoch the file lacks
