"""The checkpoint tool: inspect / convert (every LSTM layout pair, batch norm, renames, dtype, drop, --config) /
average / diff, and its error handling (one line naming file and param, exit status 2, OUT never half-written)."""

import io
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite import param_conversion as pc
from returnn_lite.checkpoint_tool import main, write_checkpoint

from test_checkpoint_loader import LENS, lstm_net, run_net

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = ["native", "standardlstm", "basiclstm", "lstmblock", "keras"]


def tool(*argv):
    out = io.StringIO()
    status = main([str(a) for a in argv], out=out)
    return status, out.getvalue()


def read(path):
    r = tf.train.load_checkpoint(str(path))
    return {k: r.get_tensor(k) for k in r.get_variable_to_shape_map()}


def _config(tmp_path, net, name="net.config"):
    path = tmp_path / name
    path.write_text("#!rnn.py\nextern_data = {'data': {'dim': 5}}\nnetwork = %r\n" % (net,))
    return str(path)


@pytest.fixture(scope="module")
def native_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    ckpt = str(d / "model")
    expected, _ = run_net(lstm_net("nativelstm2", name="lstm"), randomize=5, save=ckpt)
    return ckpt, expected


def test_every_lstm_layout_pair_same_outputs(tmp_path, native_ckpt):
    """native -> SRC (tool), SRC -> DST (tool), DST loaded into a native network: same outputs, for all pairs."""
    ckpt, expected = native_ckpt
    src_files = {}
    for src in LAYOUTS:
        src_files[src] = str(tmp_path / ("src_" + src))
        status, text = tool("convert", ckpt, src_files[src], "--lstm", src)
        assert status == 0, text
        names = set(read(src_files[src]))
        assert set(pc.get_lstm_layout(src).param_names("lstm/rec/")) <= names
    for src, dst in itertools.permutations(LAYOUTS, 2):
        out = str(tmp_path / ("%s_to_%s" % (src, dst)))
        status, text = tool("convert", src_files[src], out, "--lstm", dst)
        assert status == 0, text
        got, _ = run_net(lstm_net("nativelstm2", name="lstm"), load=out)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg="%s -> %s" % (src, dst))
    # the converted TF-cell layouts also run as their own units
    for dst, unit in (("standardlstm", "standardlstm"), ("basiclstm", "basiclstm")):
        got, _ = run_net(lstm_net(unit, name="lstm"), load=str(tmp_path / ("native_to_" + dst)))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_keras_layout_matches_keras_lstm(tmp_path, native_ckpt):
    """The keras layout (kernel, recurrent_kernel, bias; gates i, f, c, o) runs in Keras' own LSTM the same."""
    import keras

    ckpt, expected = native_ckpt
    out = str(tmp_path / "keras")
    assert tool("convert", ckpt, out, "--lstm", "keras")[0] == 0
    v = read(out)
    from returnn_lite.testing import random_feed  # same random input as run_net
    from returnn_lite.testing import build_network

    with tf.Graph().as_default():
        net = build_network(lstm_net("nativelstm2", name="lstm"), {"data": {"dim": 5}})
        x = random_feed(net, LENS)[net.extern_data.data["data"].placeholder]
    layer = keras.layers.LSTM(4, return_sequences=True)
    layer.build((None, None, 5))
    layer.set_weights([v["lstm/rec/lstm_cell/kernel"], v["lstm/rec/lstm_cell/recurrent_kernel"],
                       v["lstm/rec/lstm_cell/bias"]])
    got = np.asarray(layer(x))
    mask = np.arange(x.shape[1])[None, :] < np.array(LENS)[:, None]
    np.testing.assert_allclose(got[mask], expected, rtol=1e-4, atol=1e-5)


def test_forget_bias_options(tmp_path, native_ckpt):
    ckpt, expected = native_ckpt
    out = str(tmp_path / "fb")
    assert tool("convert", ckpt, out, "--lstm", "standardlstm", "--target-forget-bias", "0.25")[0] == 0
    got, _ = run_net(lstm_net("standardlstm", name="lstm", forget_bias=0.25), load=out)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    back = str(tmp_path / "back")
    assert tool("convert", out, back, "--lstm", "native", "--source-forget-bias", "0.25")[0] == 0
    np.testing.assert_allclose(read(back)["lstm/rec/b"], read(ckpt)["lstm/rec/b"], rtol=1e-6, atol=1e-6)


def test_convert_batch_norm_v2_rename_drop_dtype(tmp_path):
    bn = {"class": "batch_norm", "from": "data", "update_sample_only_in_training": True}
    ckpt = str(tmp_path / "bn0")
    expected, _ = run_net({"output": dict(bn, param_version=0)}, randomize=3, save=ckpt)
    out = str(tmp_path / "bn2")
    status, text = tool("convert", ckpt, out, "--batch-norm-v2")
    assert status == 0 and "batch norm -> v2: 4 params" in text
    assert sorted(read(out)) == ["output/batch_norm/v2_" + k for k in ("beta", "gamma", "mean", "variance")]
    got, _ = run_net({"output": dict(bn, param_version=2)}, load=out)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    renamed = str(tmp_path / "renamed")
    status, text = tool("convert", out, renamed, "--rename", r"output/(.*)=norm/\1",
                        "--dtype", "float16")
    assert status == 0, text
    v = read(renamed)
    assert sorted(v) == ["norm/batch_norm/v2_" + k for k in ("beta", "gamma", "mean", "variance")]
    assert all(x.dtype == np.float16 for x in v.values())
    net = {"norm": dict(bn, param_version=2), "output": {"class": "copy", "from": "norm"}}
    got, _ = run_net(net, load=renamed)  # float16 values cast back on load
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2)


def test_convert_with_config(tmp_path):
    """--config: exactly the target network's params, layouts converted, other params left out."""
    ckpt = str(tmp_path / "std")
    net = lstm_net("standardlstm", name="lstm")
    net["extra"] = {"class": "linear", "activation": None, "n_out": 2, "from": "data", "is_output_layer": True}
    expected, _ = run_net(net, randomize=4, save=ckpt)
    config = _config(tmp_path, lstm_net("nativelstm2", name="lstm"))
    out = str(tmp_path / "out")
    status, text = tool("convert", ckpt, out, "--config", config)
    assert status == 0, text
    assert "left out" in text and "extra/W" in text
    assert sorted(read(out)) == ["lstm/rec/W", "lstm/rec/W_re", "lstm/rec/b"]
    status, text = tool("convert", ckpt, out, "--drop", "extra/")
    assert status == 0 and "dropped 2 params with prefix 'extra/'" in text
    assert sorted(read(out)) == ["lstm/rec/lstm_cell/bias", "lstm/rec/lstm_cell/kernel"]
    got, _ = run_net(lstm_net("nativelstm2", name="lstm"), load=out)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_inspect(tmp_path, native_ckpt):
    ckpt, _ = native_ckpt
    status, text = tool("inspect", ckpt, "--stats", "--tensors", "lstm/rec/b")
    assert status == 0
    v = read(ckpt)
    assert "global step: none" in text
    n = sum(v[k].size for k in v if k != "global_step")
    assert "%i params in 3 tensors" % n in text
    line = next(ln for ln in text.splitlines() if ln.startswith("lstm/rec/W_re "))
    assert "[4, 16]" in line and "float32" in line
    stats = [float(x) for x in line.split()[-4:]]
    w = v["lstm/rec/W_re"].astype(np.float64)
    np.testing.assert_allclose(stats, [w.min(), w.max(), w.mean(), w.std()], rtol=1e-3)
    assert "lstm/rec/b [16]:" in text

    ok = _config(tmp_path, lstm_net("nativelstm2", name="lstm"))
    status, text = tool("inspect", ckpt, "--config", ok)
    assert status == 0 and "3 params ok, 0 by layout conversion, 0 missing, 0 shape-mismatched, 0 unexpected" in text
    conv = _config(tmp_path, lstm_net("standardlstm", name="lstm"), "std.config")
    status, text = tool("inspect", ckpt, "--config", conv)
    assert status == 0 and "2 by layout conversion" in text
    bad = {"lstm": {"class": "rec", "unit": "nativelstm2", "n_out": 6, "from": "data"},
           "out2": {"class": "linear", "activation": None, "n_out": 2, "from": "lstm"},
           "output": {"class": "copy", "from": "out2"}}
    status, text = tool("inspect", ckpt, "--config", _config(tmp_path, bad, "bad.config"))
    assert status == 1
    assert "mismatched lstm/rec/W (layer 'lstm'): checkpoint [5, 16], network [5, 24]" in text
    assert "missing    out2/W (layer 'out2')" in text
    status, text = tool("inspect", ckpt, "--config", _config(tmp_path, {"output": {
        "class": "linear", "activation": None, "n_out": 2, "from": "data"}}, "other.config"))
    assert status == 1 and "unexpected lstm/rec/W_re (layer 'lstm')" in text


def test_average_and_diff(tmp_path):
    rng = np.random.RandomState(0)
    ckpts, ws = [], []
    for i in range(3):
        w = rng.randn(4, 3).astype("float32")
        ws.append(w)
        ckpts.append(write_checkpoint(str(tmp_path / ("m%i" % i)), {"a/W": w, "a/b": np.full(3, i, "float32"),
                                                                     "a/W/Adam": w, "global_step": np.int64(10 * i)}))
    out = str(tmp_path / "avg")
    status, text = tool("average", *ckpts, out)
    assert status == 0 and "average of 3 checkpoints" in text
    v = read(out)
    assert sorted(v) == ["a/W", "a/b", "global_step"]  # params only
    np.testing.assert_allclose(v["a/W"], np.mean(ws, axis=0), rtol=1e-6)
    np.testing.assert_allclose(v["a/b"], 1.0)
    assert v["global_step"] == 20

    status, text = tool("inspect", ckpts[2], "--all")
    assert status == 0 and "global step: 20" in text and "a/W/Adam " in text
    assert "15 params in 2 tensors; optimizer state: 12 values in 1 tensors" in text
    status, text = tool("diff", ckpts[0], ckpts[0])
    assert status == 0 and "4 tensors equal, 0 differ" in text
    status, text = tool("diff", ckpts[0], out)
    assert status == 1
    d = np.abs(ws[0] - np.mean(ws, axis=0)).max()
    line = next(ln for ln in text.splitlines() if "a/W " in ln)
    assert "max abs diff %.4g" % d in line
    assert "only in A: a/W/Adam" in text
    assert "differs:   global_step" in text
    status, text = tool("diff", ckpts[0], out, "--params-only")
    assert status == 1 and "Adam" not in text and "global_step" not in text and "0 tensors equal, 2 differ" in text

    bad = write_checkpoint(str(tmp_path / "bad"), {"a/W": np.zeros((2, 3), "float32"), "a/b": np.zeros(3, "float32")})
    status, _ = tool("average", ckpts[0], bad, str(tmp_path / "never"))
    assert status == 2 and not os.path.exists(str(tmp_path / "never.index"))


def test_bad_input_one_line_errors(tmp_path, capsys, native_ckpt):
    ckpt, _ = native_ckpt
    status, _ = tool("inspect", str(tmp_path / "nothing"))
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "no index file" in err and "nothing.index" in err

    # corrupt index file
    bad = write_checkpoint(str(tmp_path / "badindex"), {"a/W": np.ones(3, "float32")})
    with open(bad + ".index", "wb") as f:
        f.write(b"garbage" * 10)
    status, _ = tool("average", bad, ckpt, str(tmp_path / "x"))
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "badindex" in err and "index file truncated or corrupt" in err

    # truncated data file: the error names the file and the param that cannot be read
    src = write_checkpoint(str(tmp_path / "big"), {"a/W": np.ones((64, 64), "float32"), "b/W": np.ones(8, "float32")})
    data = src + ".data-00000-of-00001"
    with open(data, "rb") as f:
        blob = f.read()
    with open(data, "wb") as f:
        f.write(blob[:100])
    for argv in (["inspect", src], ["convert", src, str(tmp_path / "out")], ["diff", src, src]):
        status, _ = tool(*argv)
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1, (argv, err)
        assert "big" in err and "a/W" in err, (argv, err)
    assert not os.path.exists(str(tmp_path / "out.index"))
    assert not [f for f in os.listdir(str(tmp_path)) if ".tmp" in f]

    # a rename map that maps two params onto one
    status, _ = tool("convert", ckpt, str(tmp_path / "r"), "--rename", r"lstm/rec/(W|W_re)=lstm/rec/X")
    err = capsys.readouterr().err
    assert status == 2 and "maps both 'lstm/rec/W' and 'lstm/rec/W_re' onto 'lstm/rec/X'" in err
    assert not os.path.exists(str(tmp_path / "r.index"))
    status, _ = tool("convert", ckpt, str(tmp_path / "r"), "--lstm", "grumpy")
    assert status == 2 and "unknown LSTM layout 'grumpy'" in capsys.readouterr().err
    status, _ = tool("inspect", ckpt, "--tensors", "lstm/rec/Wre")
    assert status == 2 and "no param 'lstm/rec/Wre'" in capsys.readouterr().err


def test_command_line_wrapper(tmp_path, native_ckpt):
    ckpt, _ = native_ckpt
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "checkpoint.py"), "inspect", ckpt],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "lstm/rec/W_re" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "checkpoint.py"), "convert", "--help"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "--lstm LAYOUT" in r.stdout
