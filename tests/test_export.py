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
    assert "custom_ops" not in names  # TF's own ops only (not returnn_lite's native LSTM op)
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


SEARCH_EXTERN = {"data": {"dim": 5}, "classes": {"dim": 6, "sparse": True, "available_for_inference": False}}
SEARCH_NET = {
    "encoder": {"class": "linear", "activation": "tanh", "n_out": 6, "from": "data"},
    "ctx": {"class": "reduce", "mode": "mean", "axis": "T", "from": "encoder"},
    "output": {"class": "rec", "from": [], "target": "classes", "max_seq_len": 9, "unit": {
        "output": {"class": "choice", "target": "classes", "beam_size": 3, "from": "output_prob", "initial_output": 0},
        "end": {"class": "compare", "from": "output", "value": 0},
        "embed": {"class": "linear", "activation": None, "from": "prev:output", "n_out": 4, "initial_output": 0},
        "s": {"class": "rnn_cell", "unit": "LSTMBlock", "from": ["embed", "base:ctx"], "n_out": 6},
        "output_prob": {"class": "softmax", "from": "s", "target": "classes"}}},
    "decision": {"class": "decide", "from": "output", "is_output_layer": True},
}


def test_search_export(tmp_path):
    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    config = tmp_path / "search.config"
    config.write_text("#!rnn.py\nextern_data = %r\nnetwork = %r\n" % (SEARCH_EXTERN, SEARCH_NET))
    x = np.random.RandomState(2).randn(3, 7, 5).astype("float32")
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(SEARCH_EXTERN), train_flag=False, search_flag=True)
        net.construct_from_dict(SEARCH_NET)
        with tf1.Session() as session:
            net.initialize_params(session)
            rng = np.random.RandomState(2)
            for p in net.get_params_list():
                p.load(rng.randn(*p.shape.as_list()).astype("float32"), session)
            net.save_params_to_file(str(tmp_path / "model"), session)
            data, out = net.extern_data.data["data"], net.get_layer("decision").output
            expected = session.run([out.copy_as_batch_major().placeholder, out.get_sequence_lengths()],
                                   {data.placeholder: x, data.get_sequence_lengths(): LENS})
    path = str(tmp_path / "search.pb")
    assert main([str(config), "--checkpoint", str(tmp_path / "model"), "--graph", path, "--search"],
                out=io.StringIO()) == 0
    names = json.load(open(str(tmp_path / "search.json")))
    assert names["search"] and names["output_layer"] == "decision"
    graph_def = tf1.GraphDef()
    graph_def.ParseFromString(open(path, "rb").read())
    with tf.Graph().as_default():
        tf1.import_graph_def(graph_def, name="")
        with tf1.Session() as session:
            got = session.run([names["outputs"]["output"]["name"], names["outputs"]["output_seq_lens"]["name"]],
                              {names["inputs"]["data"]["name"]: x, names["inputs"]["data_seq_lens"]["name"]: LENS})
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
    assert len(set(expected[0].ravel().tolist())) > 2 and min(expected[1]) < 9  # not trivial: varied, one ended
    # a layer with a beam cannot be exported as it is
    assert main([str(config), "--checkpoint", str(tmp_path / "model"), "--graph", path, "--search",
                 "--output-layer", "output"]) == 2


def test_export_errors(model, tmp_path, capsys):
    d, config, ckpt, _, _ = model
    assert main([config, "--checkpoint", str(tmp_path / "none"), "--graph", str(tmp_path / "g.pb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.index" in err
    assert main([config, "--checkpoint", ckpt, "--graph", str(tmp_path / "g.pb"), "--output-layer", "nope"]) == 2
    assert "output layer 'nope' not in the network" in capsys.readouterr().err
    assert not os.path.exists(str(tmp_path / "g.pb"))
