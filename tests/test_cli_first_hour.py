"""
What a new user meets in the first hour (issue 25): task forward on the 12AX LSTM (time-major output), the search
demo (its own EOS; search and export --search), ++key value errors naming the key, stderr free of TF's log lines,
--help without TensorFlow; and (issue 31) the notice on resume when the saved state supersedes a ++ override.
"""

import json
import os
import subprocess
import sys

import h5py
import numpy
import pytest

from returnn_lite.__main__ import main
from returnn_lite.config import Config, ConfigError
from returnn_lite.tf_startup import filter_import_lines

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNN = os.path.join(REPO, "rnn.py")


def _user_env(**extra):
    """The environment of a user who did not set TF's log level (the test session sets one)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env.update(extra)
    return env


@pytest.fixture
def pure_tf_lstm(monkeypatch):
    monkeypatch.setenv("RETURNN_LITE_NATIVE_OPS", "0")  # no C++ build in these tests


# ---- task forward

def test_forward_of_the_12ax_lstm_writes_time_major_output_to_hdf(tmp_path, capsys, pure_tf_lstm):
    config = os.path.join(REPO, "configs", "12ax_lstm.config")
    paths = ["++model", str(tmp_path / "model"), "++learning_rate_file", str(tmp_path / "lr")]
    assert main([config, "++num_epochs", "1", "++train", '{"class": "Task12AXDataset", "num_seqs": 20}',
                 "++dev", '{"class": "Task12AXDataset", "num_seqs": 4}'] + paths) == 0
    eval_opts = {"class": "Task12AXDataset", "num_seqs": 5, "fixed_random_seed": 3}
    hdf = tmp_path / "out.hdf"
    capsys.readouterr()
    assert main([config, "++task", "forward", "++eval", repr(eval_opts), "++output_file", str(hdf)] + paths) == 0
    assert "forward: wrote 5 seqs of layer 'output'" in capsys.readouterr().out

    from returnn_lite.datasets import init_dataset

    dataset = init_dataset(dict(eval_opts))
    dataset.init_seq_order(epoch=1)
    lens = [len(dataset.get_data(i, "data")) for i in range(5)]
    with h5py.File(str(hdf), "r") as f:
        assert f["seqLengths"][:, 0].tolist() == lens
        inputs = f["inputs"][...]
        assert inputs.shape == (sum(lens), 2)  # [frames of all seqs, classes]
        assert f.attrs["inputPattSize"] == 2 and f.attrs["numSeqs"] == 5
    numpy.testing.assert_allclose(inputs.sum(axis=1), 1.0, rtol=1e-5)  # softmax rows


# ---- ++key value errors

@pytest.mark.parametrize("key,kind", [("window", "int"), ("load_epoch", "int"),
                                      ("newbob_relative_error_threshold", "float")])
def test_bad_value_read_as_number_names_the_key(key, kind):
    config = Config({"window": 1})
    config.parse_cmd_args(["++" + key, "abc"])
    with pytest.raises(ConfigError) as info:
        getattr(config, kind)(key)
    assert str(info.value) == "config value %r: cannot interpret 'abc' as %s (given on the command line: ++%s abc)" % (
        key, kind, key)


@pytest.mark.parametrize("arg", [["++batch_size", "abc"], ["++log_verbosity=abc"], ["++max_seqs", "x1"],
                                 ["++num_epochs", "abc"], ["++learning_rate", "1e-3x"]])
def test_bad_number_key_fails_at_once(arg):
    key = arg[0][2:].split("=")[0]
    with pytest.raises(ConfigError, match=r"^command line: \+\+%s .*%r must be a number$" % (key, key)):
        Config({"batch_size": 1000}).parse_cmd_args(arg)


def test_cli_bad_override_is_one_line_naming_the_key(tmp_path, capsys):
    config = os.path.join(REPO, "configs", "12ax_lstm.config")
    assert main([config, "++num_epochs", "abc", "++model", str(tmp_path / "model")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rnn.py: error: command line: ++num_epochs abc: 'num_epochs' must be a number"]
    assert main([config, "++load_epoch", "abc", "++model", str(tmp_path / "model")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rnn.py: error: config value 'load_epoch': cannot interpret 'abc' as int (given on the command "
                   "line: ++load_epoch abc)"]


# ---- stderr: no absl / oneDNN lines

def test_filter_import_lines_keeps_what_is_not_below_the_level():
    text = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
            "I0000 00:00:1795807891.582329    6453 port.cc:153] oneDNN custom operations are on.\n"
            "W0000 00:00:1795807891.582329    6453 x.cc:1] a warning\n"
            "E0000 00:00:1795807891.582329    6453 y.cc:2] an error\n"
            "/some/file.py:3: DeprecationWarning: from Python\n")
    assert filter_import_lines(text, 0) == text
    assert filter_import_lines(text, 2) == "".join(text.splitlines(True)[3:])
    assert filter_import_lines(text, 3) == "/some/file.py:3: DeprecationWarning: from Python\n"


def test_rnn_error_is_exactly_one_stderr_line_without_tf_logs(tmp_path):
    """A subprocess as the user runs it: TF is imported and an engine error ends the run."""
    config = os.path.join(REPO, "configs", "12ax_lstm.config")
    proc = subprocess.run([sys.executable, RNN, config, "++task", "forward", "++model", str(tmp_path / "none"),
                           "++output_file", str(tmp_path / "x.hdf"), "++eval", '{"class": "Task12AXDataset"}'],
                          capture_output=True, text=True, env=_user_env(), timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "rnn.py: error: task forward needs a trained model: set 'load' or 'model' (with existing checkpoints "
        "%s.NNN.index)" % (tmp_path / "none")], proc.stderr


def test_checkpoint_tool_error_is_exactly_one_stderr_line(tmp_path):
    missing = str(tmp_path / "missing.003")
    proc = subprocess.run([sys.executable, "-m", "returnn_lite.checkpoint_tool", "inspect", missing],
                          capture_output=True, text=True, env=_user_env(), timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("returnn-lite-checkpoint inspect: error: ") and missing in lines[0], \
        proc.stderr


def test_user_log_level_is_kept(tmp_path):
    """TF_CPP_MIN_LOG_LEVEL=0 (asked for TF's logging): whatever TF prints at import passes."""
    code = ("import sys; from returnn_lite.tf_startup import configure_cli_log_level, import_tensorflow; "
            "print(configure_cli_log_level()); import_tensorflow()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_user_env(TF_CPP_MIN_LOG_LEVEL="0"), timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr


# ---- --help without TensorFlow

def test_help_does_not_import_tensorflow():
    code = """
import sys
from returnn_lite import __main__ as rnn, checkpoint_tool, export, launch
status = [rnn.main(["--help"]), launch.main(["--help"])]
for tool in (checkpoint_tool, export):
    try:
        tool.main(["--help"])
    except SystemExit as exc:
        status.append(exc.code)
print("tensorflow" in sys.modules, status, file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_user_env(),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "False [0, 0, 0, 0]", proc.stderr
    assert "usage: rnn.py" in proc.stdout and "returnn-lite-checkpoint" in proc.stdout
    assert "returnn-lite-export" in proc.stdout


# ---- resume notices (issue 31)

FF_CONFIG = """#!rnn.py
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
log = %(dir)r + "/train.log"
log_verbosity = 3
"""


def test_resume_notice_names_each_superseded_override(tmp_path, capsys):
    out = tmp_path / "out"
    config = tmp_path / "ff.config"
    config.write_text(FF_CONFIG % {"dir": str(out)})
    assert main([str(config), "++num_epochs", "2"]) == 0
    capsys.readouterr()
    first, last = str(out / "model.001"), str(out / "model.002")
    assert main([str(config), "++num_epochs", "3", "++learning_rate", "1e30", "++import_model_train_epoch1", first,
                 "++load", first]) == 0
    captured = capsys.readouterr()
    notices = captured.err.strip().splitlines()
    assert len(notices) == 3, captured.err
    assert notices[0].startswith("notice: ++learning_rate 1e30 is not used: resuming after epoch 2, the "
                                 "learning-rate file ")
    assert "learning rate 0.01 for epoch 3" in notices[0]
    assert notices[1].startswith("notice: ++import_model_train_epoch1 %s is not used: resuming after epoch 2 from %s"
                                 % (first, last))
    assert notices[2].startswith("notice: ++load %s is not used: training continues from the existing checkpoint %s "
                                 "of epoch 2" % (first, last))
    log_text = (out / "train.log").read_text()
    assert all(n in log_text for n in notices)
    assert "start epoch 3 with learning rate 0.01 " in captured.out  # the saved state wins
    # a rerun without overrides, or with agreeing values: no notice
    assert main([str(config), "++num_epochs", "4", "++learning_rate", "0.01"]) == 0
    assert "notice:" not in capsys.readouterr().err


def test_resume_notice_on_stderr_once_when_stdout_is_stderr(tmp_path):
    """rnn.py ... 2>&1 (stdout and stderr the same file): the notice appears once."""
    out = tmp_path / "out"
    config = tmp_path / "ff.config"
    config.write_text(FF_CONFIG % {"dir": str(out)})
    assert main([str(config)]) == 0
    with open(str(tmp_path / "both.txt"), "w") as f:
        proc = subprocess.run([sys.executable, RNN, str(config), "++num_epochs", "2", "++learning_rate", "1e30"],
                              stdout=f, stderr=subprocess.STDOUT, env=_user_env(), timeout=300)
    text = (tmp_path / "both.txt").read_text()
    assert proc.returncode == 0, text
    assert [line for line in text.splitlines() if line.startswith("notice:")] == [
        line for line in text.splitlines() if "++learning_rate 1e30 is not used" in line]
    assert text.count("++learning_rate 1e30 is not used") == 1, text


# ---- the search demo

def _attention_config_values():
    config = Config()
    config.load_file(os.path.join(REPO, "configs", "attention_copy.config"))
    return config


def test_attention_copy_data_has_its_own_end_symbol():
    config = _attention_config_values()
    eos = config.typed_value("EOS")
    for key in ("train", "dev"):
        for seq in config.typed_value(key)["data"]:
            assert eos not in seq["data"].tolist()
            assert seq["classes"].tolist() == seq["data"].tolist() + [eos]
    unit = config.typed_value("network")["output"]["unit"]
    assert unit["end"]["value"] == eos and config.typed_value("network")["output"]["include_eos"]


def test_attention_copy_search_and_export(tmp_path, capsys, pure_tf_lstm):
    """Mechanics after one short epoch (the full 12 epochs decode the dev set at WER 0%, see README)."""
    config = os.path.join(REPO, "configs", "attention_copy.config")
    paths = ["++model", str(tmp_path / "model"), "++learning_rate_file", str(tmp_path / "lr")]
    assert main([config, "++num_epochs", "1"] + paths) == 0
    capsys.readouterr()
    txt = tmp_path / "out.txt"
    assert main([config, "++task", "search", "++search_output_file", str(txt)] + paths) == 0
    stdout = capsys.readouterr().out
    assert "search: wrote 100 seqs of layer 'output'" in stdout and "search: WER " in stdout
    assert len(txt.read_text().splitlines()) == 100

    from returnn_lite.export import main as export_main

    graph = tmp_path / "search.pb"
    assert export_main([config, "--checkpoint", str(tmp_path / "model.001"), "--graph", str(graph), "--search"]) == 0
    names = json.loads((tmp_path / "search.json").read_text())
    assert names["output_layer"] == "decision" and names["search"]

    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph.read_bytes())
    with tf.Graph().as_default() as g:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as session:
            x = numpy.array([[3, 1, 4, 1, 5], [2, 7, 1, 0, 0]], dtype="int32")
            y, y_lens = session.run(
                [names["outputs"]["output"]["name"], names["outputs"]["output_seq_lens"]["name"]],
                {names["inputs"]["data"]["name"]: x, names["inputs"]["data_seq_lens"]["name"]: [5, 3]})
    assert y.shape[0] == 2 and y_lens.shape == (2,)
    assert all(1 <= n <= 2 * 5 for n in y_lens)  # max_seq_len: twice the encoder length
