"""The rnn.py command line: a tiny training run, kill -9 and resume, forward to HDF, ++overrides, error exits."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest


from returnn_lite.__main__ import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNN = os.path.join(REPO, "rnn.py")

# configs of the original import from returnn.* (kept out of line starts: the project itself never imports returnn)
RETURNN_IMPORTS = "\n".join([
    "from returnn.tf.util.data import Dim, batch_dim, SpatialDim, FeatureDim",
    "from returnn.config import get_global_config",
])
FF_CONFIG = """#!rnn.py
%(returnn_imports)s
task = "train"
train = {"class": "Task12AXDataset", "num_seqs": %(num_seqs)i}
dev = {"class": "Task12AXDataset", "num_seqs": 10, "fixed_random_seed": 1}
num_inputs = 9
num_outputs = 2
batch_size = %(batch_size)i
max_seqs = 10
chunking = "200:200"
network = {
    "hidden": {"class": "linear", "activation": "tanh", "n_out": 10},
    "output": {"class": "softmax", "loss": "ce", "from": "hidden"},
}
adam = True
learning_rate = 0.01
num_epochs = %(num_epochs)i
model = %(dir)r + "/model"
learning_rate_file = %(dir)r + "/learning_rates"
log = %(dir)r + "/train.log"
log_verbosity = 4
"""


def _write_config(tmp_path, num_seqs=40, batch_size=500, num_epochs=2, name="ff.config"):
    out = tmp_path / "out"
    path = tmp_path / name
    path.write_text(FF_CONFIG % {"returnn_imports": RETURNN_IMPORTS, "num_seqs": num_seqs, "batch_size": batch_size,
                                 "num_epochs": num_epochs,
                                 "dir": str(out)})
    return str(path), out


def _no_outputs(out):
    """No checkpoint and no learning-rate file (a log file may exist)."""
    return not out.exists() or not (list(out.glob("model.*")) or (out / "learning_rates").exists())


EPOCH_LINE = re.compile(r"^epoch (\d+) score: [\d.e+-]+ error: [\d.e+-]+ elapsed: \d+:\d\d:\d\d "
                        r"dev: score [\d.e+-]+ error [\d.e+-]+$", re.M)


def test_train_run_to_completion_then_forward_and_eval(tmp_path, capsys):
    config, out = _write_config(tmp_path)
    assert main([config]) == 0  # in-process: the same code path as rnn.py, without another TF import
    stdout = capsys.readouterr().out
    epochs = [int(e) for e in EPOCH_LINE.findall(stdout)]
    assert epochs == [1, 2], stdout
    for epoch in (1, 2):
        assert (out / ("model.%03d.index" % epoch)).exists()
        assert list(out.glob("model.%03d.data-*" % epoch))
    assert not [p for p in os.listdir(out) if ".tmp" in p]
    log_text = (out / "train.log").read_text()
    assert len(EPOCH_LINE.findall(log_text)) == 2
    lr_text = (out / "learning_rates").read_text()
    assert "1: EpochData(learningRate=0.01" in lr_text and "'dev_score'" in lr_text and "'train_score'" in lr_text

    # rerun: nothing left to do
    assert main([config]) == 0
    assert "No epochs to train" in capsys.readouterr().out

    # eval task on the last model (in-process)
    assert main([config, "++task", "eval"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"epoch 2 dev: score [\d.e+-]+ error [\d.e+-]+", text), text

    # forward task writes an HDF file that HDFDataset reads back
    hdf = tmp_path / "fwd.hdf"
    assert main([config, "++task", "forward", "++output_file", str(hdf),
                 "++eval", "{'class': 'Task12AXDataset', 'num_seqs': 5, 'fixed_random_seed': 3}"]) == 0
    from returnn_lite.datasets import HDFDataset, Task12AXDataset

    ds = HDFDataset(files=[str(hdf)])
    ds.init_seq_order(epoch=1)
    assert ds.num_seqs == 5
    ref = Task12AXDataset(num_seqs=5, fixed_random_seed=3)
    ref.init_seq_order(epoch=1)
    lengths = sorted(ref.get_seq_length(i)["data"] for i in range(5))
    got = sorted(ds.get_seq_length(i)["data"] for i in range(5))
    assert got == lengths
    probs = ds.get_data(0, "data")
    assert probs.shape[1] == 2 and abs(float(probs.sum(axis=1).mean()) - 1.0) < 1e-4  # softmax output
    ds.close()


def test_kill9_mid_training_then_resume(tmp_path, capsys):
    config, out = _write_config(tmp_path, num_seqs=200, batch_size=100, num_epochs=4)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, RNN, config], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    try:
        deadline = time.time() + 180
        while not (out / "model.001.index").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "no checkpoint after 180s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = sorted(int(p.name.split(".")[1]) for p in out.glob("model.*.index"))
    assert done and done[0] == 1 and done[-1] < 4, done
    last = done[-1]
    for epoch in done:  # every epoch with an .index is complete and loadable
        import tensorflow as tf

        reader = tf.train.load_checkpoint(str(out / ("model.%03d" % epoch)))
        assert "output/W" in reader.get_variable_to_shape_map()

    assert main([config]) == 0  # the same command again (in-process)
    stdout = capsys.readouterr().out
    assert "Resume training after epoch %i" % last in stdout
    epochs = [int(e) for e in EPOCH_LINE.findall(stdout)]
    assert epochs == list(range(last + 1, 5)), stdout
    assert (out / "model.004.index").exists()
    assert not [p for p in os.listdir(out) if ".tmp" in p]
    from returnn_lite.engine import LearningRateControl

    lrc = LearningRateControl.__new__(LearningRateControl)
    lrc.filename = str(out / "learning_rates")
    lrc.load()
    assert sorted(lrc.epoch_data) == [1, 2, 3, 4]
    assert all("dev_score" in lrc.epoch_data[e].error for e in range(1, 5))


def test_overrides(tmp_path, capsys):
    config, out = _write_config(tmp_path, num_epochs=3)
    assert main([config, "++num_epochs", "1", "++learning_rate", "0.05", "++log_verbosity", "5"]) == 0
    text = capsys.readouterr().out
    assert "train epoch 1, step 0" in text  # per-step lines at verbosity 5
    assert (out / "model.001.index").exists() and not (out / "model.002.index").exists()
    assert "learningRate=0.05" in (out / "learning_rates").read_text()


def _expect_error(capsys, argv, *fragments):
    assert main(argv) != 0
    err = capsys.readouterr().err
    for fragment in fragments:
        assert fragment in err, err
    return err


def test_error_missing_and_broken_config(tmp_path, capsys):
    missing = str(tmp_path / "nope.config")
    _expect_error(capsys, [missing], "nope.config", "not found")
    broken = tmp_path / "broken.config"
    broken.write_text("#!rnn.py\nnum_epochs = 2\nlearning_rate = = 0.1\nbatch_size = 10\n")
    _expect_error(capsys, [str(broken)], "broken.config:3")
    failing = tmp_path / "failing.config"
    failing.write_text("#!rnn.py\nnum_epochs = 2\n\nx = 1 / 0\n")
    _expect_error(capsys, [str(failing)], "failing.config:4", "ZeroDivisionError")
    assert main([]) != 0


def test_error_unknown_dataset_class(tmp_path, capsys):
    config, out = _write_config(tmp_path)
    _expect_error(capsys, [config, "++train", "{'class': 'Task12AXDatset'}"],
                  "unknown dataset class 'Task12AXDatset'", "Task12AXDataset", "HDFDataset")
    assert _no_outputs(out)


def test_error_missing_and_malformed_hdf(tmp_path, capsys):
    config, out = _write_config(tmp_path)
    missing = str(tmp_path / "missing.hdf")
    _expect_error(capsys, [config, "++train", "{'class': 'HDFDataset', 'files': [%r]}" % missing],
                  missing, "not found")
    bad = tmp_path / "bad.hdf"
    bad.write_text("this is not HDF5")
    _expect_error(capsys, [config, "++train", "{'class': 'HDFDataset', 'files': [%r]}" % str(bad)],
                  str(bad), "HDF5")
    assert _no_outputs(out)


def test_error_network_without_loss(tmp_path, capsys):
    config, out = _write_config(tmp_path)
    _expect_error(capsys, [config, "++network", "{'output': {'class': 'linear', 'activation': 'tanh', 'n_out': 2}}"],
                  "no loss")
    assert _no_outputs(out)
    _expect_error(capsys, [config, "++network", "{'output': {'class': 'sofmax', 'loss': 'ce'}}"],
                  "'output'", "sofmax", "softmax")
    assert _no_outputs(out)


def test_error_nonfinite_loss(tmp_path, capsys):
    config, out = _write_config(tmp_path)
    net = ("{'h': {'class': 'eval', 'from': 'data', 'eval': 'source(0) / 0.0 * 0.0'},"
           " 'output': {'class': 'softmax', 'loss': 'ce', 'from': 'h'}}")
    _expect_error(capsys, [config, "++network", net], "non-finite", "epoch 1")
    assert _no_outputs(out)


def test_error_unknown_task_and_missing_model(tmp_path, capsys):
    config, out = _write_config(tmp_path)
    _expect_error(capsys, [config, "++task", "dance"], "unknown task 'dance'")
    _expect_error(capsys, [config, "++task", "eval"], "needs a trained model")
    _expect_error(capsys, [config, "++load", str(tmp_path / "nomodel.007")], "nomodel.007", "not found")


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(os.path.join(REPO, "configs")) if n.endswith(".config")))
def test_example_configs_run_one_tiny_epoch(tmp_path, capsys, name):
    """Every example config builds its network and trains one epoch on a few seqs."""
    from returnn_lite.config import Config
    from returnn_lite.engine import Engine

    config = Config()
    config.load_file(os.path.join(REPO, "configs", name))
    for key in ("train", "dev"):
        opts = config.typed_value(key)
        few = {"data": opts["data"][:4]} if opts["class"] == "StaticDataset" else {"num_seqs": 4}
        config.set(key, dict(opts, **few))
    config.update({"num_epochs": 1, "model": str(tmp_path / "model"), "learning_rate_file": str(tmp_path / "lr"),
                   "log_verbosity": 3})
    Engine(config).run()
    assert "epoch 1 score:" in capsys.readouterr().out
    marker = ".pt" if config.value("backend", None) == "torch" else ".index"  # the torch engine saves .pt
    assert (tmp_path / ("model.001" + marker)).exists()


DIM_TAG_CONFIG = """#!rnn.py
""" + RETURNN_IMPORTS + """
time_dim = SpatialDim("time")
extern_data = {"data": {"dim_tags": [batch_dim, time_dim, FeatureDim("input", 9)]},
               "classes": {"dim_tags": [batch_dim, time_dim], "sparse_dim": FeatureDim("classes", 2),
                           "dtype": "int32"}}
train = {"class": "Task12AXDataset", "num_seqs": 20}
dev = {"class": "Task12AXDataset", "num_seqs": 5, "fixed_random_seed": 1}
batch_size = 500
max_seqs = 10
def get_network(epoch, **kwargs):
    config = get_global_config()  # config functions run with the returnn.* imports mapped
    return {"hidden": {"class": "linear", "activation": "tanh", "n_out": config.int("hidden_size", 4)},
            "output": {"class": "softmax", "loss": "ce", "from": "hidden"}}
optimizer = {"class": "adam"}
learning_rate = 0.01
num_epochs = 1
"""


def test_config_with_dim_tags_and_get_network(tmp_path, capsys):
    path = tmp_path / "dims.config"
    path.write_text(DIM_TAG_CONFIG)
    assert main([str(path), "++model", str(tmp_path / "model"), "++hidden_size", "5"]) == 0
    assert "epoch 1 score:" in capsys.readouterr().out
    import tensorflow as tf

    assert tf.train.load_checkpoint(str(tmp_path / "model.001")).get_variable_to_shape_map()["hidden/W"] == [9, 5]


def test_train_on_hdf_file(tmp_path, capsys):
    from returnn_lite.datasets import SimpleHDFWriter, Task12AXDataset

    src = Task12AXDataset(num_seqs=12, fixed_random_seed=5)
    src.init_seq_order(epoch=1)
    hdf = str(tmp_path / "train.hdf")
    writer = SimpleHDFWriter(hdf, dim=9, ndim=2)
    for i in range(12):
        data, classes = src.get_data(i, "data"), src.get_data(i, "classes")
        writer.insert_batch(data[None], [len(data)], ["seq-%i" % i], extra={"classes": classes[None]})
    writer.close()
    config, out = _write_config(tmp_path, num_epochs=1)
    assert main([config, "++train", hdf, "++dev", "", "++chunking", "20:10"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^epoch 1 score: [\d.e+-]+ error: [\d.e+-]+ elapsed: \S+$", text, re.M), text
    assert (out / "model.001.index").exists()
