"""CustomCheckpointLoader (seed 003): prefixes, ignore lists, renames with automatic layout conversions,
custom param importers, set_as_custom_init; LSTM and batch norm layouts give the same outputs after loading."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.checkpoint_loader import CheckpointError, CustomCheckpointLoader
from returnn_lite.checkpoint_tool import write_checkpoint
from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1
EXTERN = {"data": {"dim": 5}}
LENS = [6, 3, 4]


def run_net(net_dict, load=None, randomize=None, save=None, loader_kwargs=None, extern=EXTERN, fetch="output"):
    """Build net_dict; random params (seed randomize); load a checkpoint; :return: (output [B,T,F] masked, values)"""
    with tf.Graph().as_default():
        net = build_network(net_dict, extern)
        with tf1.Session() as session:
            net.initialize_params(session)
            if randomize is not None:
                rng = np.random.RandomState(randomize)
                for p in net.get_params_list():
                    v = 0.5 * rng.randn(*p.shape.as_list())
                    p.load((np.abs(v) + 0.1 if "variance" in p.op.name else v).astype("float32"), session)
            if load is not None:
                if loader_kwargs is None:
                    net.load_params_from_file(load, session)
                else:
                    CustomCheckpointLoader(load, saveable_params=net.get_params_list(), network=net,
                                           **loader_kwargs).load_now(session)
            if save:
                net.save_params_to_file(save, session)
            out = net.get_layer(fetch).output.copy_as_batch_major()
            y = session.run(out.placeholder, random_feed(net, LENS))
            values = {p.op.name: v for p, v in zip(net.get_params_list(), session.run(net.get_params_list()))}
    mask = np.arange(y.shape[1])[None, :] < np.array(LENS)[:, None]
    return y[mask], values


def lstm_net(unit, name="output", **unit_opts):
    layer = {"class": "rec", "unit": unit, "n_out": 4, "from": "data"}
    if unit_opts:
        layer["unit_opts"] = unit_opts
    net = {name: layer}
    if name != "output":
        net["output"] = {"class": "copy", "from": name}
    return net


UNITS = [("nativelstm2", {}), ("standardlstm", {}), ("basiclstm", {}), ("standardlstm", {"forget_bias": 0.3}),
         ("basiclstm", {"forget_bias": 0.0})]


@pytest.mark.parametrize("src", UNITS[:3], ids=lambda u: u[0])
def test_lstm_layouts_same_outputs(tmp_path, src):
    """A checkpoint of each LSTM unit loads into the units of other layouts (the target's forget_bias is taken out
    of the bias; the source's run-time forget_bias is TF's default 1.0): same outputs."""
    ckpt = str(tmp_path / "src")
    expected, _ = run_net(lstm_net(src[0], **src[1]), randomize=1, save=ckpt)
    for dst in UNITS:
        if dst[0] == src[0]:
            continue
        got, _ = run_net(lstm_net(dst[0], **dst[1]), load=ckpt)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg="%s -> %s" % (src, dst))


def test_batch_norm_param_versions(tmp_path):
    def bn_net(version):
        return {"output": {"class": "batch_norm", "from": "data", "param_version": version,
                           "update_sample_only_in_training": True}}

    for src in (0, 1, 2):
        ckpt = str(tmp_path / ("bn%i" % src))
        expected, _ = run_net(bn_net(src), randomize=src, save=ckpt)
        for dst in (0, 1, 2):
            got, _ = run_net(bn_net(dst), load=ckpt)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg="v%i -> v%i" % (src, dst))


LIN = {"class": "linear", "activation": None, "n_out": 3, "from": "data"}


def _ckpt(tmp_path, values, name="c"):
    return write_checkpoint(str(tmp_path / name), {k: np.asarray(v, "float32") for k, v in values.items()})


def test_params_prefix_is_removed(tmp_path):
    w, b = np.random.RandomState(0).randn(5, 3), np.arange(3)
    ckpt = _ckpt(tmp_path, {"W": w, "b": b})
    _, values = run_net({"output": LIN}, load=ckpt, loader_kwargs={"params_prefix": "output/"})
    np.testing.assert_allclose(values["output/W"], w, rtol=1e-6)
    np.testing.assert_allclose(values["output/b"], b)
    with pytest.raises(CheckpointError, match="params_prefix 'x/'.*'output/W'"):
        run_net({"output": LIN}, load=ckpt, loader_kwargs={"params_prefix": "x/"})


def test_load_if_prefix_contains(tmp_path):
    """Only vars containing the string are loaded, from the name without it (not only at the start)."""
    w = np.random.RandomState(0).randn(5, 3)
    ckpt = _ckpt(tmp_path, {"enc_lin/W": w, "enc_lin/b": np.ones(3)})
    net = {"enc_new_lin": LIN, "output": dict(LIN, **{"from": "enc_new_lin"}, n_out=3)}
    _, init = run_net(net)
    _, values = run_net(net, load=ckpt, loader_kwargs={"load_if_prefix": "new_"})
    np.testing.assert_allclose(values["enc_new_lin/W"], w, rtol=1e-6)
    np.testing.assert_allclose(values["output/W"], init["output/W"])  # not containing "new_": untouched


def test_ignore_missing_still_errors_when_nothing_matches(tmp_path):
    ckpt = _ckpt(tmp_path, {"other/W": np.ones((5, 3))})
    with pytest.raises(CheckpointError, match="none of the 2 params"):
        run_net({"output": LIN}, load=ckpt, loader_kwargs={"ignore_missing": True})
    with pytest.raises(CheckpointError, match="lacks params.*output/W"):
        run_net({"output": LIN}, load=ckpt, loader_kwargs={})
    ckpt = _ckpt(tmp_path, {"output/W": np.ones((5, 3))}, "partial")
    _, values = run_net({"output": LIN}, load=ckpt, loader_kwargs={"ignore_missing": True})
    np.testing.assert_allclose(values["output/W"], 1.0)


def test_ignore_params_and_prefixes(tmp_path):
    ckpt = _ckpt(tmp_path, {"output/W": np.ones((3, 3)), "a/W": np.ones((5, 3))})
    net = {"a": LIN, "output": dict(LIN, **{"from": "a"})}
    _, values = run_net(net, load=ckpt, loader_kwargs={"ignore_params": ["output/b", "a/b"]})
    assert values["a/W"].min() == 1 and values["output/W"].min() == 1
    _, values = run_net(net, load=ckpt, loader_kwargs={"ignore_params": ["output/b"], "ignore_params_prefixes": ["a/"]})
    assert values["a/W"].min() != 1 and values["output/W"].min() == 1


def test_shape_mismatch_names_file_and_param(tmp_path):
    ckpt = _ckpt(tmp_path, {"output/W": np.ones((4, 3)), "output/b": np.ones(3)})
    with pytest.raises(CheckpointError, match=r"checkpoint '.*c': param 'output/W' has shape \(4, 3\)"):
        run_net({"output": LIN}, load=ckpt, loader_kwargs={})


@pytest.mark.parametrize("mapping", [
    {"new/rec/W": "old/rec/W"},  # native names: the layer rename is derived, then converted from lstm_cell/*
    {"new/rec/lstm_cell/kernel": "old/rec/lstm_cell/kernel", "new/rec/lstm_cell/bias": "old/rec/lstm_cell/bias"},
])
def test_var_name_mapping_with_lstm_conversion(tmp_path, mapping):
    ckpt = str(tmp_path / "std")
    expected, _ = run_net(lstm_net("standardlstm", name="old"), randomize=2, save=ckpt)
    got, _ = run_net(lstm_net("nativelstm2", name="new"), load=ckpt, loader_kwargs={"var_name_mapping": mapping})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_variable_value_map_and_custom_importer_and_custom_init(tmp_path):
    w = np.random.RandomState(0).randn(5, 3).astype("float32")
    ckpt = _ckpt(tmp_path, {"output/W": w, "output/b": np.ones(3)})
    seen = {}

    def importer(layer, values_dict, session):
        seen.update(values_dict)
        layer.params["W"].load(values_dict["W"] * 2, session)
        layer.params["b"].load(values_dict["b"], session)

    with tf.Graph().as_default():
        net = build_network({"output": dict(LIN, custom_param_importer=importer)}, EXTERN)
        loader = CustomCheckpointLoader(ckpt, net.get_params_list(), network=net)
        vmap = loader.get_variable_value_map()
        assert all(isinstance(v, CustomCheckpointLoader.VariableValue) for v in vmap.values()) and len(vmap) == 2
        assert all(isinstance(v.custom_param_importer, CustomCheckpointLoader.CustomParamImporter)
                   for v in vmap.values())
        with tf1.Session() as session:
            net.initialize_params(session)
            loader.load_now(session)
            np.testing.assert_allclose(session.run(net.get_layer("output").params["W"]), 2 * w, rtol=1e-6)
    assert sorted(seen) == ["W", "b"]

    with tf.Graph().as_default():
        net = build_network({"output": LIN}, EXTERN)
        loader = CustomCheckpointLoader(ckpt, net.get_params_list(), network=net)
        vmap = loader.get_variable_value_map()
        np.testing.assert_allclose(vmap[net.get_layer("output").params["W"]].value, w)
        loader.set_as_custom_init()
        with tf1.Session() as session:
            net.initialize_params(session)  # random init, then the checkpoint
            np.testing.assert_allclose(session.run(net.get_layer("output").params["W"]), w, rtol=1e-6)
            np.testing.assert_allclose(session.run(net.get_layer("output").params["b"]), 1.0)


def test_engine_import_and_preload_convert_layouts(tmp_path):
    """import_model_train_epoch1 and preload_from_files (prefix: contained, removed) load a TF LSTMCell checkpoint
    into a NativeLstm2 network through the same conversions."""
    from returnn_lite import param_conversion as pc
    from returnn_lite.config import Config
    from returnn_lite.engine import Engine

    src = str(tmp_path / "src")
    net = {"enc": {"class": "rec", "unit": "standardlstm", "n_out": 4, "from": "data"},
           "output": {"class": "softmax", "loss": "ce", "from": "enc", "target": "classes"}}
    _, values = run_net(net, randomize=7, save=src, extern={"data": {"dim": 9}, "classes": {"dim": 2, "sparse": True}},
                        fetch="enc")
    layout = pc.get_lstm_layout("standardlstm")
    canon = pc.lstm_to_canonical(layout, [values["enc/rec/lstm_cell/kernel"], values["enc/rec/lstm_cell/bias"]])
    expected = dict(zip(["W", "W_re", "b"], pc.canonical_to_lstm(pc.get_lstm_layout("native"), canon)))
    base = {"task": "train", "train": {"class": "Task12AXDataset", "num_seqs": 5}, "num_epochs": 1,
            "batch_size": 400, "max_seqs": 10, "optimizer": {"class": "sgd"}, "learning_rate": 0.0,
            "log_verbosity": 0}
    native = {"class": "rec", "unit": "nativelstm2", "n_out": 4, "from": "data"}

    d = dict(base, model=str(tmp_path / "a" / "model"), import_model_train_epoch1=src,
             network={"enc": native, "output": dict(net["output"])})
    Engine(Config(d)).run()
    got = tf.train.load_checkpoint(str(tmp_path / "a" / "model.001"))
    for k in ("W", "W_re", "b"):
        np.testing.assert_allclose(got.get_tensor("enc/rec/" + k), expected[k], rtol=1e-6, atol=1e-6)

    d = dict(base, model=str(tmp_path / "b" / "model"),
             network={"x_enc": native, "output": {"class": "softmax", "loss": "ce", "from": "x_enc"}},
             preload_from_files={"enc": {"filename": src, "prefix": "x_", "init_for_train": True,
                                         "ignore_missing": True}})
    Engine(Config(d)).run()
    got = tf.train.load_checkpoint(str(tmp_path / "b" / "model.001"))
    for k in ("W", "W_re", "b"):
        np.testing.assert_allclose(got.get_tensor("x_enc/rec/" + k), expected[k], rtol=1e-6, atol=1e-6)

    d["preload_from_files"]["enc"]["bogus"] = 1
    d["model"] = str(tmp_path / "c" / "model")
    with pytest.raises(Exception, match="preload_from_files 'enc': unknown option.*bogus"):
        Engine(Config(d)).run()
