"""
Builds every ``*.config`` in the directory $RETURNN_LITE_REAL_CONFIGS (default /tmp/realcfg; skipped when absent):
real published configs collected locally (never committed). Each is loaded as rnn.py does and its network is
constructed for the first training epoch, for the final network (after pretraining / get_network) with the objective,
and for search (train_flag False, search_flag True), with extern_data from the config only (no dataset is loaded).
"""

import glob
import os

import pytest
import tensorflow as tf

from returnn_lite.config import Config
from returnn_lite.network import TFNetwork
from returnn_lite.pretrain import get_net_dict_for_epoch, pretrain_from_config

REAL_DIR = os.environ.get("RETURNN_LITE_REAL_CONFIGS", "/tmp/realcfg")
FILES = sorted(glob.glob(os.path.join(REAL_DIR, "*.config")))


def build_real_config(filename, mode):
    """
    :param str mode: "train" (epoch 1), "final" (after pretraining, or a late epoch with get_network) or "search"
    :return: {param name: shape}
    """
    config = Config()
    config.load_file(filename)
    epoch = 1
    if mode == "final":
        pretrain = pretrain_from_config(config)
        epoch = pretrain.get_train_num_epochs() + 1 if pretrain is not None else 1
        if callable(config.typed_value("get_network", None)):
            epoch = max(epoch, 100)
    elif mode == "search":
        config.set("task", "search")
        epoch = 1000
    graph = tf.Graph()
    with graph.as_default():
        if mode == "search":
            net = TFNetwork(config=config, train_flag=False, search_flag=True, eval_flag=False)
        else:
            net = TFNetwork(config=config, train_flag=True)
        net.construct_from_dict(get_net_dict_for_epoch(config, epoch))
        if mode != "search":
            net.get_objective()
        return {p.op.name: tuple(p.shape.as_list()) for p in net.get_params_list()}


@pytest.mark.skipif(not FILES, reason="no real configs in %s (set RETURNN_LITE_REAL_CONFIGS)" % REAL_DIR)
@pytest.mark.parametrize("mode", ["train", "final", "search"])
@pytest.mark.parametrize("filename", FILES or ["none"], ids=lambda f: os.path.basename(f))
def test_real_config_builds(filename, mode):
    params = build_real_config(filename, mode)
    assert params  # every real setup has params
