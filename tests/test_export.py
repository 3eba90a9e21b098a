"""Export: the frozen GraphDef (.pb, .pbtxt + names JSON) and the SavedModel (run where returnn_lite cannot be
imported) give the in-process network's outputs."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.export import main
from returnn_lite.testing import build_network

tf1 = tf.compat.v1
NET = {"lstm": {"class": "rec", "unit": "nativelstm2", "n_out": 6, "from": "data"},
       "output": {"class": "softmax", "loss": "ce", "from": "lstm"}}
EXTERN = {"data": {"dim": 5}, "classes": {"dim": 3, "sparse": True}}
LENS = np.array([7, 4, 5], "int32")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    config = d / "net.config"
    config.write_text("#!rnn.py\nextern_data = %r\nnetwork = %r\n" % (EXTERN, NET))
    x = np.random.RandomState(1).randn(3, 7, 5).astype("float32")
    with tf.Graph().as_default():
        net = build_network(NET, EXTERN)
        with tf1.Session() as session:
            net.initialize_params(session)
            rng = np.random.RandomState(0)
            for p in net.get_params_list():
                p.load(rng.randn(*p.shape.as_list()).astype("float32"), session)
            net.save_params_to_file(str(d / "model"), session)
            data = net.extern_data.data["data"]
            out = net.get_layer("output").output.copy_as_batch_major()
            y = session.run(out.placeholder, {data.placeholder: x, data.get_sequence_lengths(): LENS})
    return d, str(config), str(d / "model"), x, y


def _masked(y):
    return y[np.arange(y.shape[1])[None, :] < LENS[:, None]]


@pytest.mark.parametrize("ext", [".pb", ".pbtxt"])
def test_frozen_graph(model, ext):
    d, config, ckpt, x, expected = model
    path = str(d / ("graph" + ext))
    out = io.StringIO()
    assert main([config, "--checkpoint", ckpt, "--graph", path], out=out) == 0
    names = json.load(open(str(d / "graph.json")))
    assert names["inputs"]["data"]["name"] == "extern_data/placeholders/data/data:0"
    assert names["inputs"]["data_seq_lens"]["name"] == "extern_data/placeholders/data/data_dim0_size:0"
    assert names["outputs"]["output"]["name"] == "output/output_batch_major:0"
    assert names["outputs"]["output_seq_lens"]["name"] == "output/output_seq_lens:0"
    graph_def = tf1.GraphDef()
    if ext == ".pb":
        graph_def.ParseFromString(open(path, "rb").read())
    else:
        from google.protobuf import text_format

        text_format.Merge(open(path).read(), graph_def)
    assert not any(n.op in ("VarHandleOp", "VariableV2") for n in graph_def.node)  # frozen
    with tf.Graph().as_default() as g:
        tf1.import_graph_def(graph_def, name="")
        with tf1.Session() as session:
            y, lens = session.run(["output/output_batch_major:0", "output/output_seq_lens:0"],
                                  {"extern_data/placeholders/data/data:0": x,
                                   "extern_data/placeholders/data/data_dim0_size:0": LENS})
    np.testing.assert_array_equal(lens, LENS)
    np.testing.assert_allclose(_masked(y), _masked(expected), rtol=1e-5, atol=1e-6)


def test_saved_model_without_returnn_lite(model, tmp_path):
    d, config, ckpt, x, expected = model
    sm = str(tmp_path / "saved")
    assert main([config, "--checkpoint", ckpt, "--saved-model", sm], out=io.StringIO()) == 0
    np.save(str(tmp_path / "x.npy"), x)
    script = (
        "import sys; sys.modules['returnn_lite'] = None\n"  # any import of returnn_lite would fail
        "import numpy as np, tensorflow as tf\n"
        "f = tf.saved_model.load(%r).signatures['serving_default']\n"
        "r = f(features=tf.constant(np.load(%r)), lengths=tf.constant(%r, dtype=tf.int32))\n"
        "np.save(%r, r['output'].numpy()); np.save(%r, r['output_lengths'].numpy())\n" % (
            sm, str(tmp_path / "x.npy"), LENS.tolist(), str(tmp_path / "y.npy"), str(tmp_path / "n.npy")))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    np.testing.assert_array_equal(np.load(str(tmp_path / "n.npy")), LENS)
    np.testing.assert_allclose(_masked(np.load(str(tmp_path / "y.npy"))), _masked(expected), rtol=1e-5, atol=1e-6)


def test_export_errors(model, tmp_path, capsys):
    d, config, ckpt, _, _ = model
    assert main([config, "--checkpoint", ckpt, "--graph", str(tmp_path / "g.pb"), "--search"]) == 2
    assert "beam search export is not available" in capsys.readouterr().err
    assert main([config, "--checkpoint", str(tmp_path / "none"), "--graph", str(tmp_path / "g.pb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.index" in err
    assert main([config, "--checkpoint", ckpt, "--graph", str(tmp_path / "g.pb"), "--output-layer", "nope"]) == 2
    assert "output layer 'nope' not in the network" in capsys.readouterr().err
    assert not os.path.exists(str(tmp_path / "g.pb"))
