"""Construction cost of rf code on the layers backend (issue 16): the net dict of a deep rf model is built without
recursing along its layers (TF records the Python stack for every op it creates, so a stack as deep as the model
made every op slower). The rf net reaches its layers through layer options (the cross entropy's ``logits``, the
norm's ``scale`` / ``bias``), whose "from" sources must be built iteratively as those of a plain output layer."""

import sys

import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, batch_dim


def _depth():
    f, n = sys._getframe(), 0
    while f is not None:
        f, n = f.f_back, n + 1
    return n


def _max_add_layer_depth(monkeypatch, build):
    """
    Deepest Python stack (relative to the caller's) at which a layer was added while build() ran; the layer names in
    construction order.
    """
    depths, names = [], []
    orig = TFNetwork.add_layer
    base = _depth()

    def add_layer(self, name, layer_class, **kwargs):
        depths.append(_depth() - base)
        names.append(name)
        return orig(self, name, layer_class, **kwargs)

    monkeypatch.setattr(TFNetwork, "add_layer", add_layer)
    build()
    monkeypatch.setattr(TFNetwork, "add_layer", orig)
    return max(depths), names


def _rf_build(num_blocks):
    time_dim, in_dim, model_dim, classes_dim = Dim(None, name="time"), Dim(3, name="in"), Dim(4, name="model"), \
        Dim(5, name="classes")
    hidden_dim = Dim(6, name="hidden")

    class Block(rf.Module):
        def __init__(self):
            super().__init__()
            self.norm = rf.LayerNorm(model_dim)
            self.lin1 = rf.Linear(model_dim, hidden_dim)
            self.lin2 = rf.Linear(hidden_dim, model_dim)

        def __call__(self, x):
            return x + self.lin2(rf.relu(self.lin1(self.norm(x))))

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.inp = rf.Linear(in_dim, model_dim)
            self.blocks = rf.Sequential(Block() for _ in range(num_blocks))
            self.out = rf.Linear(model_dim, classes_dim)

        def __call__(self, x):
            return self.out(self.blocks(self.inp(x)))

    def train_step(*, model, extern_data, **_):
        rf.cross_entropy(estimated=model(extern_data["data"]), estimated_type="logits", axis=classes_dim,
                         target=extern_data["classes"]).mark_as_loss("ce")

    config = Config({
        "extern_data": {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
                        "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim}},
        "get_model": lambda **_: Model(), "train_step": train_step, "task": "train"})

    def build():
        rf.select_backend_returnn_layers_tf()
        with tf.Graph().as_default(), global_config_ctx(config):
            net_dict, _ = get_net_dict(epoch=1, step=0)
            net = TFNetwork(config=config, train_flag=True)
            net.construct_from_dict(net_dict)
            net.get_total_loss()
            assert len(net.layers) > 10 * num_blocks

    return build


def test_rf_net_construction_depth_does_not_grow_with_the_model(monkeypatch):
    shallow, _ = _max_add_layer_depth(monkeypatch, _rf_build(1))
    deep, names = _max_add_layer_depth(monkeypatch, _rf_build(8))
    assert deep == shallow, (shallow, deep)
    assert deep < 40, deep
    # bottom-up: the input projection before the blocks, block i before block i + 1, the loss last
    assert names.index("inp/dot") < names.index("blocks/0/norm/norm") < names.index("blocks/7/norm/norm") \
        < names.index("cross_entropy")


def test_layer_option_chain_built_iteratively(monkeypatch):
    """A hand-written dict: a long "from" chain reached only through a norm's scale option."""
    n = 60
    net_dict = {"scale0": {"class": "variable", "shape": [3], "init": 1.0}}
    for i in range(1, n):
        net_dict["scale%i" % i] = {"class": "copy", "from": "scale%i" % (i - 1)}
    net_dict["output"] = {"class": "norm", "from": "data", "axis": "F", "param_shape": (),
                          "scale": "scale%i" % (n - 1), "bias": False}
    config = Config({"extern_data": {"data": {"dim": 3}}})

    def build():
        with tf.Graph().as_default():
            net = TFNetwork(config=config, train_flag=False)
            net.construct_from_dict(net_dict)
            assert len(net.layers) == n + 2

    depth, names = _max_add_layer_depth(monkeypatch, build)
    assert depth < 40, depth
    assert names == ["scale%i" % i for i in range(n)] + ["output"]


def test_dot_attention_values_matmul_needs_no_mask():
    """rf.dot_attention: as the original, att_weights . values is a dot without masking (the softmax gave the
    padded frames of the axis weight 0), so padded frames of the values, whatever they hold, do not leak."""
    import numpy as np

    time_dim, kv_dim, key_dim, val_dim = Dim(None, name="q"), Dim(None, name="kv"), Dim(3, name="key"), \
        Dim(2, name="val")
    extern_data = {"q": {"dims": (batch_dim, time_dim, key_dim), "dtype": "float32"},
                   "k": {"dims": (batch_dim, kv_dim, key_dim), "dtype": "float32"},
                   "v": {"dims": (batch_dim, kv_dim, val_dim), "dtype": "float32"}}

    class Empty(rf.Module):
        pass

    def step(*, model, extern_data, **_):
        rf.dot_attention(extern_data["q"], extern_data["k"], extern_data["v"], key_dim=key_dim, axis=kv_dim,
                         att_dropout=0.0).mark_as_output("att", shape=(batch_dim, time_dim, val_dim))

    rng = np.random.RandomState(3)
    q, k, v = rng.randn(2, 3, 3).astype("float32"), rng.randn(2, 4, 3).astype("float32"), \
        rng.randn(2, 4, 2).astype("float32")
    kv_lens = np.array([4, 2], "int32")
    v[1, 2:] = 1e6  # padded frames of the values: must get weight 0
    config = Config({"extern_data": extern_data, "get_model": lambda **_: Empty(), "forward_step": step,
                     "task": "forward"})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session, \
            global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        dots = [d for d in net_dict.values() if d["class"] == "dot"]
        assert [d["use_mask"] for d in dots] == [True, False]  # energy (over key_dim), att . v (over kv_dim)
        out = rf.get_run_ctx().outputs.data["att"]
        net = TFNetwork(config=config, train_flag=False, eval_flag=False)
        net.construct_from_dict(net_dict)
        feed = {net.extern_data.data["q"].placeholder: q, net.extern_data.data["k"].placeholder: k,
                net.extern_data.data["v"].placeholder: v, time_dim.dyn_size_ext.raw_tensor: [3, 3],
                kv_dim.dyn_size_ext.raw_tensor: kv_lens}
        att = session.run(net.get_layer(out.raw_tensor.get_abs_name()).output.copy_compatible_to(
            out.copy_template()).placeholder, feed_dict=feed)
    for b in range(2):
        n = kv_lens[b]
        energy = q[b] @ k[b, :n].T / np.sqrt(3)
        w = np.exp(energy - energy.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        np.testing.assert_allclose(att[b], w @ v[b, :n], rtol=1e-5, atol=1e-6)
