"""
Configs written in the style of published setups (tests/configs/legacy/): old module names at load time and at
construction time, the `config` global, '#' net dict keys, pretraining with WrapEpochValue, SpecAugment with
get_config() and global_train_step, TF1 names in eval strings, the num_outputs forms.
"""

import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.config import Config, ConfigError
from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork
from returnn_lite.pretrain import Pretrain, WrapEpochValue, get_net_dict_for_epoch, pretrain_from_config
from returnn_lite.testing import random_feed

HERE = os.path.dirname(os.path.abspath(__file__))
LEGACY = os.path.join(HERE, "configs", "legacy")
tf1 = tf.compat.v1


def _load(name, **overrides):
    config = Config()
    config.load_file(os.path.join(LEGACY, name))
    config.update(overrides)
    return config


def _construct(config, epoch=1, train_flag=True):
    graph = tf.Graph()
    with graph.as_default():
        net = TFNetwork(config=config, train_flag=train_flag)
        net.construct_from_dict(get_net_dict_for_epoch(config, epoch))
        net.get_objective()
    return graph, net


def _returnn_modules():
    return [m for m in sys.modules if m in ("Pretrain", "Util", "TFUtil") or m.split(".")[0] == "returnn"]


def test_old_module_names_at_load_time():
    config = _load("pretrain_wrap_epoch.config")
    assert config.typed_value("layer_dim") == 16  # config.int(...) via the `config` global
    assert config.typed_value("demo_name").endswith("pretrain_wrap_epoch")  # __file__
    assert "config" not in config.keys()
    tf_util = config.typed_value("TFUtil")
    assert callable(tf_util.where_bc) and callable(tf_util.safe_log)
    assert _returnn_modules() == []  # nothing left behind in sys.modules


def test_pretrain_grows_network_per_epoch():
    config = _load("pretrain_wrap_epoch.config")
    pretrain = pretrain_from_config(config)
    # 2 custom steps + the full net, each repeated twice
    assert pretrain.get_train_num_epochs() == 6
    layers = []
    for epoch in range(1, 8):
        net_dict = get_net_dict_for_epoch(config, epoch, pretrain=pretrain)
        layers.append(sorted(k for k in net_dict if k.startswith("lstm")))
        assert net_dict["lstm0"]["dropout"] == pytest.approx(min(0.1 * epoch, 0.3))  # WrapEpochValue resolved
    assert layers[0] == layers[1] == ["lstm0"]
    assert layers[2] == layers[3] == ["lstm0", "lstm1"]
    assert layers[4] == layers[6] == ["lstm0", "lstm1", "lstm2"]
    graph, net = _construct(config, epoch=1)
    assert sorted(n for n in net.layers if n.startswith("lstm")) == ["lstm0"]
    assert "#info" not in net.layers and "#config" not in net.layers
    graph, net = _construct(config, epoch=5)
    assert net.get_num_params() == sum(int(np.prod(p.shape)) for p in net.get_params_list())
    assert sorted(n for n in net.layers if n.startswith("lstm")) == ["lstm0", "lstm1", "lstm2"]


def test_pretrain_default_from_output():
    net = {
        "h0": {"class": "linear", "activation": "tanh", "n_out": 5},
        "h1": {"class": "linear", "activation": "tanh", "n_out": 5, "from": "h0"},
        "h2": {"class": "linear", "activation": "tanh", "n_out": 5, "from": ["h1"]},
        "output": {"class": "softmax", "loss": "ce", "from": ["h2"]},
    }
    config = Config({"network": net, "pretrain": "default", "num_inputs": 3, "num_outputs": 2})
    pretrain = pretrain_from_config(config)
    nets = [pretrain.get_network_json_for_epoch(e) for e in range(1, 5)]
    assert [sorted(n) for n in nets] == [["h0", "output"], ["h0", "h1", "output"], ["h0", "h1", "h2", "output"]] * 1 + [
        ["h0", "h1", "h2", "output"]]
    assert nets[0]["output"]["from"] == ["h0"]
    assert pretrain.get_train_num_epochs() == 3
    reps = Pretrain(net, repetitions={"default": 1, "final": 3, 0: 2})
    assert reps.repetitions == [2, 1, 3] and reps.get_train_num_epochs() == 6


def test_pretrain_line_format_config(tmp_path):
    fn = tmp_path / "pretrain.config"
    fn.write_text("train GeneratingDataset::Task12AXDataset(num_seqs=10)\nnum_inputs 9\nnum_outputs 2\n"
                  "hidden_size 10,10,10\nhidden_type forward\nactivation sigmoid\nbidirectional false\n"
                  "pretrain default\nnum_epochs 5\n")
    config = Config()
    config.load_file(str(fn))
    sizes = [len(get_net_dict_for_epoch(config, e)) for e in range(1, 5)]
    assert sizes == [2, 3, 4, 4]
    graph, net = _construct(config, epoch=1)
    assert net.layers["hidden_0"].output.dim == 10


def test_specaugment_eval_with_get_config_and_global_step():
    config = _load("specaug_tf1.config")
    graph, net = _construct(config)
    assert "_hidden" in net.layers and "#source_info" not in net.layers
    assert net.layers["_hidden"].params["W"].op.name == ".95.hidden/W"  # '_' is no valid TF scope start
    step = net.global_train_step
    assert step is not None and step.dtype.base_dtype == tf.int64
    with graph.as_default(), tf1.Session(graph=graph) as session:
        session.run(tf1.global_variables_initializer())
        feed = random_feed(net, [7, 5, 6])
        loss = session.run(net.get_objective(), feed_dict=feed)
    assert np.isfinite(loss)  # the eval in the rec unit found the config via its subnetwork's get_config()


def test_config_function_imports_resolve_at_construction_time():
    config = Config()
    config.load_string(
        "#!rnn.py\n"
        "def f(source, **kwargs):\n"
        "    import tensorflow as tf\n"
        "    from TFUtil import where_bc, nd_indices\n"
        "    from returnn.tf.util.basic import safe_log\n"
        "    import returnn.tf.compat as tf_compat\n"
        "    x = source(0)\n"
        "    return where_bc(tf.greater(x, 0.), safe_log(tf.to_float(x) + 1.), tf_compat.v1.zeros_like(x))\n"
        "network = {'output': {'class': 'eval', 'from': 'data', 'eval': f, 'loss': 'mse', 'target': 'data'}}\n"
        "num_inputs = 3\n", filename="fn.config")
    graph, net = _construct(config)
    with graph.as_default(), tf1.Session(graph=graph) as session:
        feed = random_feed(net, [4, 2])
        out = session.run(net.layers["output"].output.placeholder, feed_dict=feed)
    x = list(feed.values())[0]
    np.testing.assert_allclose(out, np.where(x > 0, np.log(np.maximum(x, 0) + 1), 0), rtol=1e-5)


def test_unknown_old_name_fails_naming_module_and_name():
    config = Config()
    with pytest.raises(ConfigError, match=r"x.config:2.*TFUtil.*no_such_helper"):
        config.load_string("#!rnn.py\nfrom TFUtil import no_such_helper\n", filename="x.config")
    with pytest.raises(ConfigError, match=r"returnn.tf.util.ken_lm"):
        Config().load_string("#!rnn.py\nimport returnn.tf.util.ken_lm\n", filename="y.config")


def test_hyper_param_clear_error():
    config = Config()
    config.load_string("#!rnn.py\nfrom HyperParamTuning import HyperParam\n"
                       "num_outputs = {'classes': [HyperParam(int, [1, 10], default=2), 1]}\n", filename="h.config")
    with pytest.raises(ValueError, match=r"num_outputs.*HyperParam.*hyper-parameter tuning"):
        ExternData().init_from_config(config)


@pytest.mark.parametrize("num_inputs, num_outputs, expect", [
    (9, 2, {"data": (9, False, "float32"), "classes": (2, True, "int32")}),
    (None, {"data": [10, 1], "classes": [10, 1]}, {"data": (10, True, "int32"), "classes": (10, True, "int32")}),
    (205, {"data": {"sparse": True, "dim": 205, "dtype": "uint8"}, "classes": {"sparse": True, "dim": 205,
                                                                            "dtype": "uint8"}},
     {"data": (205, True, "uint8"), "classes": (205, True, "uint8")}),
    (9, {"classes": (5, 1)}, {"data": (9, False, "float32"), "classes": (5, True, "int32")}),
    (9, {"classes": 7, "data": 9}, {"data": (9, False, "float32"), "classes": (7, True, "int32")}),
    (40, {"classes": {"dim": 30, "sparse": True, "dtype": "int32"}},
     {"data": (40, False, "float32"), "classes": (30, True, "int32")}),
])
def test_num_outputs_forms(num_inputs, num_outputs, expect):
    opts = {"num_outputs": num_outputs}
    if num_inputs is not None:
        opts["num_inputs"] = num_inputs
    with tf.Graph().as_default():
        extern_data = ExternData()
        extern_data.init_from_config(Config(opts))
        got = {k: (d.dim, d.sparse, d.dtype) for k, d in extern_data.data.items()}
    assert got == expect


def test_extern_data_with_dim_objects():
    config = Config()
    config.load_string("#!rnn.py\nfrom returnn.tf.util.data import Dim, FeatureDim\n"
                       "feat = FeatureDim('feat', 6)\n"
                       "extern_data = {'data': {'dim': feat}, 'classes': {'dim': 3, 'sparse': True}}\n",
                       filename="d.config")
    with tf.Graph().as_default():
        extern_data = ExternData()
        extern_data.init_from_config(config)
        assert extern_data.data["data"].dim == 6


def test_wrap_epoch_value_without_pretrain():
    config = Config({"num_inputs": 3, "num_outputs": 2, "network": {
        "output": {"class": "softmax", "loss": "ce", "dropout": WrapEpochValue(lambda epoch: epoch * 0.1)}}})
    assert get_net_dict_for_epoch(config, 3)["output"]["dropout"] == pytest.approx(0.3)


def test_get_network_with_kwargs():
    config = Config()
    config.load_string("#!rnn.py\nnum_inputs = 3\nnum_outputs = 2\n"
                       "def get_network(epoch, **kwargs):\n"
                       "    return {'output': {'class': 'softmax', 'loss': 'ce', 'n_out': 2}, '#epoch': epoch}\n",
                       filename="g.config")
    assert get_net_dict_for_epoch(config, 4)["#epoch"] == 4
    graph, net = _construct(config, epoch=4)
    assert "output" in net.layers and "#epoch" not in net.layers


def test_new_style_module_names_map_to_mirrored_packages():
    config = Config()
    config.load_string("#!rnn.py\nimport returnn.frontend as rf\nfrom returnn.tensor import Tensor, Dim, batch_dim\n"
                       "from returnn.tf.layers.basic import LayerBase, _ConcatInputLayer, LinearLayer\n"
                       "from returnn.util.basic import unicode, NotSpecified\n", filename="rf.config")
    import returnn_lite.frontend as rf_lite
    from returnn_lite.layers.base import ConcatInputLayer, get_layer_class

    assert config.typed_value("rf").Module is rf_lite.Module
    assert config.typed_value("_ConcatInputLayer") is ConcatInputLayer
    assert config.typed_value("LinearLayer") is get_layer_class("linear")
    assert config.typed_value("unicode") is str


@pytest.mark.parametrize("name, line, what", [("python2_print.config", 7, "print statement"),
                                              ("python2_except.config", 7, "'except X, e:'")])
def test_python2_config_fails_with_one_line(name, line, what):
    with pytest.raises(ConfigError) as exc_info:
        _load(name)
    msg = str(exc_info.value)
    assert "\n" not in msg and msg.startswith("%s:%i: Python 2 syntax" % (os.path.join(LEGACY, name), line)), msg
    assert what in msg


def test_python2_config_cli_one_line_in_the_first_second(capsys):
    import time

    from returnn_lite.__main__ import main

    start = time.time()
    rc = main([os.path.join(LEGACY, "python2_print.config")])
    captured = capsys.readouterr()
    lines = [x for x in (captured.out + captured.err).splitlines() if x.strip()]
    assert rc == 1 and time.time() - start < 3.0  # (about 0.1 s CPU; margin for a loaded test machine)
    assert len(lines) == 1 and "python2_print.config:7: Python 2 syntax" in lines[0], lines


@pytest.mark.parametrize("source, what", [
    ("x = 0777\n", "octal"), ("raise ValueError, 'x'\n", "'raise E, msg'"), ("x = `1`\n", "backtick"),
    ("if 1 <> 2: pass\n", "'<>'"), ("for i in xrange(3): pass\n", "xrange"), ("d = {}\nd.has_key(1)\n", "has_key"),
    ("import sys\nprint >>sys.stderr, 'x'\n", "print >>f")])
def test_python2_constructs(source, what):
    with pytest.raises(ConfigError, match="Python 2 syntax.*%s" % re.escape(what)):
        Config().load_string("#!rnn.py\n" + source, filename="py2.config")
    Config().load_string("#!rnn.py\nx = u'abc'\ny = 0o777\n", filename="py3.config")  # Python 3 forms are fine


def test_copy_n_out_contradicting_the_input_fails_clearly():
    # the project refuses an explicit n_out that contradicts the output (the original would silently ignore it)
    config = Config()
    config.update({"extern_data": {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}})
    with tf.Graph().as_default():
        net = TFNetwork(config=config, train_flag=True)
        net.construct_from_dict({"output": {"class": "copy", "from": "data:classes", "n_out": 4}})  # matching: fine
    with tf.Graph().as_default(), pytest.raises(Exception, match=r"'output'.*n_out=7.*(its dim is|the input dim) 5"):
        TFNetwork(config=config, train_flag=True).construct_from_dict(
            {"output": {"class": "copy", "from": "data", "n_out": 7}})


def test_net_dict_config_learning_rate_reaches_the_engine(tmp_path, capsys):
    # "#config": {"learning_rate": ...} of the pretrain nets is the learning rate really used in those epochs (and
    # in the learning-rate file); the other pretrain epochs (5, 6: the full net, repeated) and the first epoch after
    # pretraining use the initial learning rate, then the learning-rate control decides (newbob: always decay)
    from returnn_lite.__main__ import main

    rc = main([os.path.join(LEGACY, "pretrain_wrap_epoch.config"), "++model", str(tmp_path / "model"),
               "++num_epochs", "8", "++log_verbosity", "3", "++learning_rate_control", "newbob_abs",
               "++newbob_error_threshold", "-1000", "++newbob_learning_rate_decay", "0.5"])
    out = capsys.readouterr().out
    assert rc in (0, None), out[-2000:]
    used = [float(x) for x in re.findall(r"start epoch \d+ with learning rate ([\d.e+-]+)", out)]
    assert used == [0.001, 0.001, 0.002, 0.002, 0.01, 0.01, 0.01, 0.005], out[-3000:]
    with open(str(tmp_path / "model.learning_rates")) as f:
        text = f.read()
    assert re.search(r"3: EpochData\(learningRate=0\.002\b", text) and re.search(r"5: EpochData\(learningRate=0\.01\b",
                                                                                  text), text


def test_net_dict_config_batching_reaches_the_engine(tmp_path, capsys):
    from returnn_lite.__main__ import main

    rc = main([os.path.join(LEGACY, "net_dict_config_batching.config"), "++model", str(tmp_path / "model"),
               "++log_verbosity", "5"])
    out = capsys.readouterr().out
    assert rc in (0, None), out[-2000:]
    seqs = {int(e): [] for e in (1, 2)}
    for epoch, n in re.findall(r"train epoch (\d+), step \d+, .*?num_seqs (\d+),", out):
        seqs[int(epoch)].append(int(n))
    assert seqs == {1: [2, 2, 2, 2], 2: [4, 4]}, out[-3000:]  # "#config": {"max_seqs": 2} only in epoch 1
    # the constant learning-rate control continues with the rate of the last epoch (as the original's)
    assert re.findall(r"start epoch \d+ with learning rate ([\d.e+-]+)", out) == ["0.005", "0.005"], out[-3000:]


def test_python2_config_function_fails_clearly_when_it_runs():
    config = Config()
    config.load_string("#!rnn.py\nnum_inputs = 3\nnum_outputs = 2\n\ndef get_network(epoch):\n"
                       "    net = {}\n    for i in xrange(2):\n        pass\n    return net\n", filename="py2f.config")
    with pytest.raises(Exception, match=r"py2f.config:7: Python 2 syntax in config: 'xrange'"):
        get_net_dict_for_epoch(config, 1)


def test_util_helpers_of_old_setups(tmp_path, monkeypatch):
    # Sisyphus/cluster setups clean LD_LIBRARY_PATH at load time with Util.cleanup_env_var_path
    monkeypatch.setenv("LIBPATH_FOR_TEST", os.pathsep.join(["/opt/glibc217/lib", "/usr/lib", "/opt/glibc217"]))
    path = tmp_path / "util_helpers.config"
    path.write_text(
        "#!crnn/rnn.py\n"
        "from Util import cleanup_env_var_path, hms, human_bytes_size\n"
        "from returnn.util.basic import dict_joined\n"
        "cleanup_env_var_path('LIBPATH_FOR_TEST', '/opt/glibc217')\n"
        "elapsed = hms(3725)\n"
        "size = human_bytes_size(1536)\n"
        "opts = dict_joined({'a': 1}, {'b': 2})\n"
    )
    config = Config()
    config.load_file(str(path))
    assert os.environ["LIBPATH_FOR_TEST"] == "/usr/lib"
    assert config.typed_value("elapsed") == "1:02:05"
    assert config.typed_value("size") == "1.5KB"
    assert config.typed_value("opts") == {"a": 1, "b": 2}


def test_prev_of_an_eval_of_the_choice_is_sparse_in_the_template():
    config = _load("transducer_switchout.config")
    graph, net = _construct(config)
    sub = net.layers["output"].output
    assert sub.dim == 8
    with graph.as_default(), tf1.Session(graph=graph) as session:
        session.run(tf1.global_variables_initializer())
        loss = session.run(net.get_objective(), feed_dict=random_feed(net, [6, 4]))
    assert np.isfinite(loss)


def test_json_config_with_comments():
    config = _load("json_comments.config")
    assert config.value("train", None).endswith("http://host/x.corpus.gz")
    graph, net = _construct(config, epoch=1)
    assert sorted(net.layers) == ["data", "lstm0_bw", "lstm0_fw", "output"]
    assert net.layers["output"].output.dim == 4


def test_json_config_error_keeps_line_numbers(tmp_path):
    path = tmp_path / "broken.config"
    path.write_text('{\n// comment\n"num_inputs": 3,\n"network": {,}\n}\n')
    with pytest.raises(ConfigError, match=r"broken.config:4: invalid JSON config"):
        Config().load_file(str(path))


def test_tf1_contrib_gru_block_unit_and_cudnn_unit_error():
    config = Config()
    config.update({"num_inputs": 3, "num_outputs": {"classes": (4, 1)}})
    net_dict = {"gru": {"class": "rec", "unit": "GRUBlock", "n_out": 5, "from": "data"},
                "output": {"class": "softmax", "loss": "ce", "from": "gru"}}
    graph = tf.Graph()
    with graph.as_default():
        net = TFNetwork(config=config, train_flag=True)
        net.construct_from_dict(net_dict)
        assert sorted(net.layers["gru"].params) == ["rec/gru_cell/" + n for n in ("candidate/bias", "candidate/kernel", "gates/bias", "gates/kernel")]
        assert net.layers["gru"].output.dim == 5
    net_dict["gru"]["unit"] = "cudnnlstm"
    with tf.Graph().as_default(), pytest.raises(Exception, match=r"layer 'gru'.*unit 'cudnnlstm'.*use unit 'nativelstm2'"):
        TFNetwork(config=config, train_flag=True).construct_from_dict(net_dict)


def test_old_module_names_inside_the_returnn_package(tmp_path, monkeypatch):
    # the original answers its old module names also inside the package (returnn.TFUtil = returnn.tf.util.basic)
    config = Config()
    config.load_string(
        "#!rnn.py\nimport returnn.TFUtil\nfrom returnn.Util import describe_returnn_version\n"
        "from returnn.Pretrain import WrapEpochValue\nimport TFHorovod\nfrom Util import cf\n"
        "tf_version = returnn.TFUtil.tf_version_tuple()\nhvd = TFHorovod.get_ctx(config=config)\n"
        "version = describe_returnn_version()\nwrapped = WrapEpochValue(lambda epoch: epoch * 2)\n"
        "path = cf('/data/corpus.zip')\n", filename="old_names.config")
    assert config.typed_value("tf_version")[0] == int(tf.__version__.split(".")[0])
    assert config.typed_value("hvd") is None and isinstance(config.typed_value("version"), str)
    assert isinstance(config.typed_value("wrapped"), WrapEpochValue)
    assert config.typed_value("path") == "/data/corpus.zip"  # no cache manager: the path unchanged
    with pytest.raises(ConfigError, match=r"'returnn.TFKenLM' \(returnn.tf.util.ken_lm\), which returnn_lite "
                                          r"does not provide"):
        Config().load_string("#!rnn.py\nimport returnn.TFKenLM\n", filename="k.config")


def test_cf_uses_the_cache_manager_when_there_is_one(tmp_path, monkeypatch):
    from returnn_lite.compat import util_basic

    cached = tmp_path / "cached.zip"
    cached.write_text("x")
    tool = tmp_path / "bin" / "cf"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho %s\n" % cached)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tool.parent) + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(util_basic, "_cf_cache", {})
    assert util_basic.cf("/remote/corpus.zip") == str(cached)


def test_timit_dataset_classes_at_config_load_time():
    # the TIMIT demo uses the dataset class at load time (its 61->39 label map for the error rate)
    config = Config()
    config.load_string("#!rnn.py\nfrom returnn.datasets.generating import TimitDataset, NltkTimitDataset\n"
                       "label_map = TimitDataset.get_label_map()\nnum_labels = len(NltkTimitDataset.get_labels())\n",
                       filename="timit.config")
    assert len(config.typed_value("label_map")) == 61 and config.typed_value("num_labels") == 61


def test_extern_data_dim_ndim_tuples():
    # (dim, ndim) as in num_outputs: ndim 1 sparse, 2 dense, more: extra spatial axes
    config = Config({"extern_data": {"data": (80, 2), "classes": (61, 1), "image": [3, 4]}})
    with tf.Graph().as_default():
        extern_data = ExternData()
        extern_data.init_from_config(config)
        got = {k: (d.batch_shape, d.sparse, d.dtype) for k, d in extern_data.data.items()}
    assert got == {"data": ((None, None, 80), False, "float32"), "classes": ((None, None), True, "int32"),
                   "image": ((None, None, None, None, 3), False, "float32")}
    with pytest.raises(ValueError, match=r"extern_data\['data'\] = \(80, 2, 1\): expected \(dim, ndim\)"):
        ExternData().init_from_config(Config({"extern_data": {"data": (80, 2, 1)}}))


def test_tts_location_attention_config_trains_and_searches():
    # window/merge_dims targets registered as extern data (not fed), an eval over them with source(0, as_data=True),
    # location-aware attention (pad, 'valid' conv) in the decoder loop, a regression choice, get_network
    config = _load("tts_location_attention.config")
    graph, net = _construct(config, epoch=3)
    params = {p.op.name: p.shape.as_list() for p in net.get_params_list()}
    assert params["decoder/rec/convolved_att/W"] == [5, 1, 3]
    assert params["decoder/rec/location_feedback/W"] == [3, 5]
    assert params["enc_conv/W"] == [3, 6, 6]  # no bias by default (behavior version 0)
    assert net.extern_data.extra_added_keys == {"windowed_data_target", "stop_token_target", "padded_data_target"}
    with graph.as_default(), tf1.Session(graph=graph) as session:
        session.run(tf1.global_variables_initializer())
        feed = random_feed(net, [6, 4])
        assert len(feed) == 4  # data, classes and their lengths: the registered targets are computed
        loss, stop = session.run([net.get_objective(), net.layers["stop_token_target"].output.placeholder], feed)
    assert np.isfinite(loss)
    np.testing.assert_allclose(stop[0, :, 0], [0., 0.5, 1.])  # 3 stacked frames of 6: the ramp (length 2) ends at 1
    # search (as the original's search task): the decoder ends by its 'end' layer (stop token), not at the length of
    # its target, though the target is computed from the data; at most max_seq_len frames
    graph = tf.Graph()
    with graph.as_default():
        net = TFNetwork(config=config, train_flag=False, search_flag=True, eval_flag=False)
        net.construct_from_dict(get_net_dict_for_epoch(config, 3))
        dec = net.layers["decoder"].output
        assert dec.get_time_dim_tag() != net.layers["windowed_data_target"].output.get_time_dim_tag()
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            lens = session.run(dec.get_sequence_lengths(), random_feed(net, [6, 4]))
    assert all(1 <= n <= 20 for n in lens)


def test_custom_layer_classes_registered_by_the_config():
    # auto_register_layer_classes(list(globals().values())) and (a module file name): the config's own
    # _ConcatInputLayer subclasses become layer classes of the net dict
    config = _load("custom_layer_class.config")
    graph = tf.Graph()
    with graph.as_default():
        net = TFNetwork(config=config, train_flag=True)
        net.construct_from_dict(config.typed_value("network"))
        out = net.get_layer("shifted").output.placeholder
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            feed = random_feed(net, [4, 2])
            x, y = session.run([net.extern_data.data["data"].placeholder, out], feed_dict=feed)
    np.testing.assert_allclose(y, x * 3. + 0.5, rtol=1e-6)
    assert type(net.get_layer("scaled")).__name__ == "ScaleLayer"
