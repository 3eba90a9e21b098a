"""Engine parts: learning-rate control and its file, the updater (optimizers, clipping, accumulation, warmup),
atomic checkpoints, and engine runs with get_network / import_model_train_epoch1 / preload_from_files."""

import importlib
import os

import numpy
import pytest
import tensorflow as tf

from returnn_lite.config import Config
from returnn_lite.engine import (CheckpointSaver, ConstantLearningRate, Engine, EpochData, NewbobAbs,
                                 NewbobMultiEpoch, NewbobRelative, Updater, UpdaterError,
                                 load_learning_rate_control_from_config)
from returnn_lite.engine.checkpoints import get_existing_models, remove_stale_temp_files
from returnn_lite.engine.progress import Log, hms
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1


# ---- learning-rate control

def _lrc(cls, **kwargs):
    kwargs.setdefault("default_learning_rate", 1.0)
    return cls(**kwargs)


def test_constant_and_learning_rates_list():
    lrc = _lrc(ConstantLearningRate, default_learning_rates=[0.1, 0.2, 0.3])
    assert [lrc.get_learning_rate_for_epoch(e) for e in (1, 2, 3, 4, 5)] == [0.1, 0.2, 0.3, 0.3, 0.3]
    assert _lrc(ConstantLearningRate).get_learning_rate_for_epoch(7) == 1.0


def test_newbob_relative_decays_when_dev_score_does_not_improve():
    lrc = _lrc(NewbobRelative, relative_error_threshold=-0.01, learning_rate_decay=0.5)
    scores = {1: 1.0, 2: 0.5, 3: 0.499, 4: 0.3}
    lrs = []
    for epoch in range(1, 6):
        lrs.append(lrc.get_learning_rate_for_epoch(epoch))
        if epoch in scores:
            lrc.set_epoch_error(epoch, {"train_score": {"cost:output": 9.0}, "dev_score": scores[epoch]})
    # epoch 3: 1->0.5 improved; epoch 4: 0.5->0.499 is a relative change of -0.002 > -0.01: decay
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5]
    assert lrc.get_error_key(1) == "dev_score"


def test_newbob_abs_and_min_learning_rate():
    lrc = _lrc(NewbobAbs, error_threshold=-0.1, min_learning_rate=0.3)
    for epoch, err in [(1, 1.0), (2, 0.95), (3, 0.94)]:
        lrc.get_learning_rate_for_epoch(epoch)
        lrc.set_epoch_error(epoch, {"dev_score": err})
    assert lrc.get_learning_rate_for_epoch(3) == 0.5 and lrc.get_learning_rate_for_epoch(4) == 0.3


def test_newbob_multi_epoch_waits_for_num_epochs():
    lrc = _lrc(NewbobMultiEpoch, num_epochs=2, relative_error_threshold=-0.01)
    lrs = []
    for epoch in range(1, 6):
        lrs.append(lrc.get_learning_rate_for_epoch(epoch))
        lrc.set_epoch_error(epoch, {"dev_score": 1.0})  # no improvement at all
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5]


def test_multiple_losses_flattened_and_error_key():
    lrc = _lrc(ConstantLearningRate)
    lrc.set_epoch_error(1, {"dev_score": {"cost:output": 0.5, "cost:ctc": 2.0}, "train_score": {"cost:output": 1.0}})
    assert lrc.epoch_data[1].error == {"dev_score_output": 0.5, "dev_score_ctc": 2.0, "train_score": 1.0}
    assert lrc.get_error_key(1) == "train_score"  # the original's order: dev_score, train_score, dev_score_*


def test_learning_rate_file_roundtrip_and_config(tmp_path):
    fn = str(tmp_path / "lr")
    config = Config({"learning_rate": 0.01, "learning_rate_control": "newbob_rel", "learning_rate_file": fn,
                     "newbob_learning_rate_decay": 0.7, "newbob_relative_error_threshold": 0.0})
    lrc = load_learning_rate_control_from_config(config)
    assert isinstance(lrc, NewbobRelative) and lrc.learning_rate_decay == 0.7
    for epoch, err in [(1, 1.0), (2, 1.5)]:
        lrc.get_learning_rate_for_epoch(epoch)
        lrc.set_epoch_error(epoch, {"dev_score": err, "dev_error": float("nan")})
    lrc.save()
    text = open(fn).read()
    assert text.startswith("{\n  1: EpochData(learningRate=0.01, error={\n")
    assert not [p for p in os.listdir(tmp_path) if p != "lr"]  # no temp file left
    lrc2 = load_learning_rate_control_from_config(config)
    assert sorted(lrc2.epoch_data) == [1, 2] and lrc2.epoch_data[2].error["dev_score"] == 1.5
    assert numpy.isnan(lrc2.epoch_data[2].error["dev_error"])
    assert lrc2.get_learning_rate_for_epoch(3) == pytest.approx(0.007)
    # the original's file format (as written by RETURNN) loads too
    with open(fn, "w") as f:
        f.write("{\n  1: EpochData(learningRate=0.5, error={\n'dev_score': 0.3,\n}),\n}\n")
    assert load_learning_rate_control_from_config(config).get_learning_rate_for_epoch(1) == 0.5
    assert repr(EpochData(learningRate=0.1, error={"a": 1.0})) == "EpochData(learningRate=0.1, error={\n'a': 1.0,\n})"


# ---- updater

def _tiny_net(config_dict):
    config = Config(config_dict)
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        extern = ExternData({"data": {"dim": 3}, "classes": {"dim": 2, "sparse": True}})
        net = TFNetwork(config=config, extern_data=extern, train_flag=True, eval_flag=True)
        net.construct_from_dict({"output": {"class": "softmax", "loss": "ce", "from": "data"}})
        updater = Updater(config, net)
        updater.create_optim_op()
        session = tf1.Session(graph=graph)
        session.run(tf1.global_variables_initializer())
    data = extern.get_data("data")
    classes = extern.get_data("classes")
    rnd = numpy.random.RandomState(0)
    feed = {data.placeholder: rnd.normal(size=(2, 4, 3)).astype("float32"),
            data.get_sequence_lengths(): [4, 3],
            classes.placeholder: rnd.randint(0, 2, size=(2, 4)).astype("int32"),
            classes.get_sequence_lengths(): [4, 3],
            updater.learning_rate: 0.1}
    return graph, session, net, updater, feed


@pytest.mark.parametrize("opts", [
    {"optimizer": {"class": "adam"}}, {"adam": True}, {"optimizer": {"class": "sgd"}}, {"momentum": 0.9},
    {"optimizer": {"class": "nadam"}}, {"optimizer": {"class": "adamw", "weight_decay": 0.01}},
    {"optimizer": {"class": "rmsprop"}}, {"optimizer": {"class": "adadelta"}}, {"nadam": True},
    {"optimizer": {"class": "adam"}, "gradient_clip": 0.1, "gradient_clip_norm": 1.0,
     "gradient_clip_global_norm": 0.5, "gradient_noise": 0.01},
])
def test_optimizers_reduce_loss(opts):
    graph, session, net, updater, feed = _tiny_net(opts)
    objective = net.get_objective()
    before = session.run(objective, feed_dict=feed)
    for _ in range(15):
        session.run(updater.train_op, feed_dict=feed)
    after = session.run(objective, feed_dict=feed)
    assert after < before, (opts, before, after)
    assert net.get_global_train_step(session) == 15
    session.close()


def test_unknown_optimizer():
    with pytest.raises(UpdaterError, match="unknown optimizer class 'adamax'"):
        _tiny_net({"optimizer": {"class": "adamax"}})


def test_accum_grad_multiple_step():
    graph, session, net, updater, feed = _tiny_net({"optimizer": {"class": "sgd"}, "accum_grad_multiple_step": 2})
    w = net.layers["output"].params["W"]
    w0 = session.run(w)
    session.run(updater.train_op, feed_dict=feed)
    w1 = session.run(w)
    session.run(updater.train_op, feed_dict=feed)
    w2 = session.run(w)
    numpy.testing.assert_array_equal(w0, w1)  # first step only accumulates
    assert not numpy.allclose(w1, w2)
    # one SGD step with the summed gradients of both steps
    graph2, session2, net2, updater2, feed2 = _tiny_net({"optimizer": {"class": "sgd"}})
    with graph2.as_default():
        grad = tf.gradients(net2.get_objective(), [net2.layers["output"].params["W"]])[0]
    g = session2.run(grad, feed_dict=feed2)
    numpy.testing.assert_allclose(w2, w0 - 0.1 * 2 * g, rtol=1e-5, atol=1e-6)
    session.close()
    session2.close()


def test_learning_rate_warmup():
    graph, session, net, updater, feed = _tiny_net({"learning_rate_warmup_steps": 4})
    with graph.as_default():
        lr = updater.get_current_step_learning_rate()
    assert session.run(lr, feed_dict={updater.learning_rate: 1.0}) == pytest.approx(0.25)
    with graph.as_default():
        net.set_global_train_step(10, session)
    assert session.run(lr, feed_dict={updater.learning_rate: 1.0}) == pytest.approx(1.0)


# ---- checkpoints

def test_checkpoint_atomic_save_and_load(tmp_path):
    graph, session, net, updater, feed = _tiny_net({"adam": True})
    session.run(updater.train_op, feed_dict=feed)
    saver = CheckpointSaver(net, extra_vars=updater.optim_vars)
    prefix = str(tmp_path / "model")
    saver.save(session, prefix + ".001")
    names = sorted(os.listdir(tmp_path))
    assert names == ["model.001.data-00000-of-00001", "model.001.index"]
    reader = tf.train.load_checkpoint(prefix + ".001")
    keys = set(reader.get_variable_to_shape_map())
    assert {"output/W", "output/b", "global_step"} <= keys and any("Adam" in k for k in keys)
    w = net.layers["output"].params["W"]
    w_saved = session.run(w)
    session.run(updater.train_op, feed_dict=feed)
    saver.load(session, prefix + ".001")
    numpy.testing.assert_array_equal(session.run(w), w_saved)
    assert net.get_global_train_step(session) == 1
    # a save killed halfway: temp files and a data file without .index do not count
    (tmp_path / ".model.002.tmp123.index").write_text("x")
    (tmp_path / "model.003.data-00000-of-00001").write_text("x")
    (tmp_path / ".model.004.tmp9_temp").mkdir()
    assert get_existing_models(prefix) == {1: prefix + ".001"}
    remove_stale_temp_files(prefix)
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_log_and_hms(tmp_path, capsys):
    assert hms(3) == "0:00:03" and hms(3723) == "1:02:03"
    log = Log(verbosity=3, filename=str(tmp_path / "sub" / "log"), file_verbosity=5)
    log.v1("one")
    log.v5("five")
    log.close()
    assert capsys.readouterr().out == "one\n"
    assert open(tmp_path / "sub" / "log").read() == "one\nfive\n"


# ---- engine runs

BASE = {
    "task": "train",
    "train": {"class": "Task12AXDataset", "num_seqs": 20},
    "dev": {"class": "Task12AXDataset", "num_seqs": 5, "fixed_random_seed": 1},
    "batch_size": 400, "max_seqs": 10, "adam": True, "learning_rate": 0.01, "log_verbosity": 3,
}
FF_NET = {"hidden": {"class": "linear", "activation": "tanh", "n_out": 6},
          "output": {"class": "softmax", "loss": "ce", "from": "hidden"}}


def _engine_config(tmp_path, **kwargs):
    d = dict(BASE, model=str(tmp_path / "model"), learning_rate_file=str(tmp_path / "lr"))
    d.update(kwargs)
    return Config(d)


def test_engine_get_network_per_epoch_rebuilds(tmp_path, capsys):
    calls = []

    def get_network(epoch, **_kwargs):
        importlib.import_module("returnn.tf.util.data")  # config functions import from returnn.* when called

        calls.append(epoch)
        net = {"hidden": dict(FF_NET["hidden"]), "output": dict(FF_NET["output"])}
        if epoch >= 2:
            net["hidden2"] = {"class": "linear", "activation": "tanh", "n_out": 6, "from": "hidden"}
            net["output"]["from"] = "hidden2"
        return net

    # no num_inputs/num_outputs: extern data comes from the train dataset
    config = _engine_config(tmp_path, get_network=get_network, num_epochs=2)
    engine = Engine(config)
    engine.run()
    out = capsys.readouterr().out
    assert "epoch 1 score:" in out and "epoch 2 score:" in out and "rebuilding" in out
    assert calls[:2] == [1, 1] and 2 in calls
    reader = tf.train.load_checkpoint(str(tmp_path / "model.002"))
    assert "hidden2/W" in reader.get_variable_to_shape_map()


def test_engine_import_model_and_preload(tmp_path, capsys):
    first = tmp_path / "first"
    Engine(_engine_config(first, network=FF_NET, num_epochs=1)).run()
    src = str(first / "model.001")
    w_src = tf.train.load_checkpoint(src).get_tensor("hidden/W")
    capsys.readouterr()

    second = tmp_path / "second"
    config = _engine_config(second, network=FF_NET, num_epochs=1, import_model_train_epoch1=src, learning_rate=0.0,
                            optimizer={"class": "sgd"})
    Engine(config).run()
    numpy.testing.assert_allclose(tf.train.load_checkpoint(str(second / "model.001")).get_tensor("hidden/W"), w_src)

    third = tmp_path / "third"
    net = {"enc": {"class": "linear", "activation": "tanh", "n_out": 6, "from": "data"},
           "output": {"class": "softmax", "loss": "ce", "from": "enc"}}
    config = _engine_config(third, network=net, num_epochs=1, learning_rate=0.0, optimizer={"class": "sgd"},
                            preload_from_files={"x": {"filename": src, "init_for_train": True,
                                                      "var_name_mapping": {"enc/W": "hidden/W", "enc/b": "hidden/b"},
                                                      "prefix": "enc/", "ignore_missing": True}})
    Engine(config).run()
    numpy.testing.assert_allclose(tf.train.load_checkpoint(str(third / "model.001")).get_tensor("enc/W"), w_src)


class _FakeTTY:
    def __init__(self):
        self.parts = []

    def isatty(self):
        return True

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass


def test_progress_line_on_terminal():
    from returnn_lite.engine.progress import ProgressLine

    stream = _FakeTTY()
    log = Log(verbosity=4, stream=stream)
    progress = ProgressLine(log, "train epoch 1", min_interval=0.0)
    progress.update(3, 30, loss=0.5, complete_frac=0.25)
    text = "".join(stream.parts)
    assert "train epoch 1 step 3 (25%)" in text and "seqs/s" in text and "loss 0.5" in text and "ETA" in text
    log.v1("epoch 1 score: 0.1")  # clears the progress line first
    progress.finish()
    assert "".join(stream.parts).endswith("\repoch 1 score: 0.1\n") or "epoch 1 score: 0.1\n" in "".join(stream.parts)
    assert ProgressLine(Log(stream=_FakeTTY()), "x", enabled=False).enabled is False


def test_log_from_config_original_style(tmp_path):
    log = Log.from_config(Config({"log": ["stdout", str(tmp_path / "x.log")], "log_verbosity": 5}))
    assert log.verbosity == 5 and log.file is not None
    log.close()
    assert Log.from_config(Config({"log": "| grep x"})).file is None


def test_engine_batch_norm_updates_and_num_outputs_only(tmp_path, capsys):
    net = {"hidden": {"class": "linear", "activation": "tanh", "n_out": 6},
           "bn": {"class": "batch_norm", "from": "hidden"},
           "output": {"class": "softmax", "loss": "ce", "from": "bn"}}
    # only num_outputs in the config: "data" comes from the dataset
    Engine(_engine_config(tmp_path, network=net, num_epochs=1, num_outputs=2)).run()
    assert "epoch 1 score:" in capsys.readouterr().out
    reader = tf.train.load_checkpoint(str(tmp_path / "model.001"))
    means = [k for k in reader.get_variable_to_shape_map() if k.startswith("bn/") and "mean" in k]
    assert means and numpy.abs(reader.get_tensor(means[0])).sum() > 0  # running statistics were updated
