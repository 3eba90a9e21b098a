"""The layers backend emits ordinary layer classes (issue 16): the net dict of rf code reads like a hand-written one,
every emitted layer carries ``out_shape`` (the rf Tensor's dims, checked at construction, naming the rf call site),
and the layer options the backend needs (Dim-valued axes etc.) work in hand-written dicts too."""

import numpy as np
import pytest
import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.errors import NetworkLayerException
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.layers.base import OutShape
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, batch_dim
from returnn_lite.testing import build_network

tf1 = tf.compat.v1

# what a hand-written net dict uses (frontend_op only for the few ops without a layer class)
ORDINARY = {"variable", "dot", "combine", "compare", "activation", "cast", "copy", "reduce", "softmax_over_spatial",
            "norm", "concat", "pad", "gather", "slice", "split_dims", "merge_dims", "expand_dims", "squeeze",
            "reinterpret_data", "dropout", "switch", "constant", "range_in_axis", "transpose",
            "sparse_softmax_cross_entropy_with_logits", "scaled_grad", "length", "batch_norm", "random", "ctc_loss"}


def _model_and_step():
    time_dim, in_dim, out_dim = Dim(None, name="time"), Dim(3, name="in"), Dim(4, name="out")
    two = Dim(2, name="two")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lin = rf.Linear(in_dim, out_dim)
            self.norm = rf.LayerNorm(out_dim)

        def __call__(self, x):
            return self.norm(rf.relu(self.lin(x)))

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        y = rf.dropout(model(x), 0.1, axis=out_dim)
        y = rf.where(y > 0.5, y, 0.0) * 2.0
        m = rf.reduce_mean(y, axis=time_dim)  # masked
        sm = rf.softmax(y, axis=time_dim)
        c, cat_dim = rf.concat((m, out_dim), (rf.cast(rf.reduce_argmax(m, axis=out_dim), "float32") +
                                              rf.zeros([batch_dim, two]), two))
        pos = rf.range_over_dim(time_dim)
        sizes = time_dim.get_size_tensor() + time_dim.get_dim_value_tensor() * 10 + \
            batch_dim.get_dim_value_tensor() * 100
        sizes.mark_as_output("sizes", shape=(batch_dim,))
        m.mark_as_output("mean", shape=(batch_dim, out_dim))
        sm.mark_as_output("sm", shape=(batch_dim, out_dim, time_dim))
        c.mark_as_output("cat", shape=(batch_dim, cat_dim))
        pos.mark_as_output("pos", shape=(time_dim,))

    extern_data = {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}
    return extern_data, Model, step


def test_net_dict_uses_ordinary_layer_classes():
    extern_data, model_cls, step = _model_and_step()
    config = Config({"extern_data": extern_data, "get_model": lambda **_: model_cls(), "task": "forward",
                     "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, model = get_net_dict(epoch=1, step=0)
        for name, d in net_dict.items():
            print(name, {k: v for k, v in d.items() if k != "out_shape"})
        classes = {d["class"] for d in net_dict.values()}
        assert classes <= ORDINARY, classes - ORDINARY
        assert net_dict["lin/dot"]["reduce"] == [model.lin.in_dim] and net_dict["lin/dot"]["from"] == [
            "data:data", "lin/weight"]
        assert net_dict["lin/add"] == dict(net_dict["lin/add"], **{"class": "combine", "kind": "add"})
        assert net_dict["norm/norm"]["scale"] == "norm/scale" and net_dict["norm/norm"]["bias"] == "norm/bias"
        # every op layer says which dims it must have (params and the shared scalar constants need not)
        assert all(isinstance(d["out_shape"], OutShape) for name, d in net_dict.items()
                   if d["class"] != "variable" and not name.startswith("const"))
        net = TFNetwork(config=config, train_flag=False)
        net.construct_from_dict(net_dict)
        outputs = rf.get_run_ctx().outputs.data
        fetches = {k: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for k, t in outputs.items()}
        session.run(tf1.global_variables_initializer())
        x = np.random.RandomState(0).randn(2, 5, 3).astype("float32")
        lens = np.array([5, 3], "int32")
        data = net.extern_data.data["data"]
        res = session.run(fetches, feed_dict={data.placeholder: x, data.dims[1].dyn_size: lens})
        params = session.run({n: net.get_layer(n.replace(".", "/")).output.placeholder for n in ("lin.weight",
                              "lin.bias", "norm.scale", "norm.bias")})
    h = np.maximum(x @ params["lin.weight"] + params["lin.bias"], 0)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-6) * params["norm.scale"] + \
        params["norm.bias"]
    y = np.where(h > 0.5, h, 0.0) * 2.0
    np.testing.assert_allclose(res["mean"], [y[0].mean(0), y[1, :3].mean(0)], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res["sm"][1].sum(-1), np.ones(4), rtol=1e-5)
    assert res["sm"].shape == (2, 4, 5) and np.all(res["sm"][1, :, 3:] == 0)
    np.testing.assert_allclose(res["cat"][:, 4:], np.argmax(res["mean"], -1)[:, None] * np.ones((2, 2)))
    np.testing.assert_array_equal(res["pos"], np.arange(5))
    np.testing.assert_array_equal(res["sizes"], [5 + 50 + 200, 3 + 50 + 200])


def test_batch_norm_random_ctc_and_dense_ce_use_layer_classes():
    """rf.BatchNorm, rf.random, rf.ctc_loss, cross entropy with dense targets: no frontend_op (issue 16)."""
    time_dim, label_time, in_dim = Dim(None, name="time"), Dim(None, name="label-time"), Dim(3, name="in")
    classes, labels = Dim(4, name="classes"), Dim(3, name="labels")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.bn = rf.BatchNorm(in_dim)
            self.lin = rf.Linear(in_dim, classes)

    def step(*, model, extern_data, **_):
        x = model.bn(extern_data["data"]) + rf.random_normal([batch_dim, time_dim, in_dim], stddev=0.1)
        logits = model.lin(x)
        rf.ctc_loss(logits=logits, targets=extern_data["targets"], input_spatial_dim=time_dim,
                    targets_spatial_dim=label_time, blank_index=3).mark_as_loss("ctc")
        soft = rf.softmax(rf.random_uniform([batch_dim, time_dim, classes]), axis=classes)
        rf.cross_entropy(estimated=logits, estimated_type="logits", target=soft, axis=classes).mark_as_loss("ce")

    extern_data = {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
                   "targets": {"dims": (batch_dim, label_time), "dtype": "int32", "sparse_dim": labels}}
    config = Config({"extern_data": extern_data, "get_model": lambda **_: Model(), "task": "train",
                     "train_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default(), global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        classes_used = {d["class"] for d in net_dict.values()}
        assert classes_used <= ORDINARY, classes_used - ORDINARY
        assert {"batch_norm", "random", "ctc_loss"} <= classes_used
        net = TFNetwork(config=config, train_flag=True)
        net.construct_from_dict(net_dict)
        assert sorted(v.op.name for v in net.get_params_list()) == [
            "bn/beta/param", "bn/gamma/param", "bn/running_mean/param", "bn/running_variance/param",
            "lin/bias/param", "lin/weight/param"]


def test_rf_lstm_model_has_no_frontend_op():
    """rf.LSTM (over time, and one step in an rf.scan) is a rec layer with a cell unit, params via reuse_params."""
    time_dim, in_dim, hid = Dim(None, name="time"), Dim(3, name="in"), Dim(4, name="hid")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(in_dim, hid)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        y, st = model.lstm(x, state=model.lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=time_dim)
        ys, _, _ = rf.scan(spatial_dim=time_dim, xs=x, initial=st, ys=None, body=lambda x_t, s: model.lstm(
            x_t, state=s, spatial_dim=rf.single_step_dim))
        ys.mark_as_output("y", shape=(batch_dim, time_dim, hid))

    config = Config({"extern_data": {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}},
                     "get_model": lambda **_: Model(), "task": "forward", "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default(), global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        classes = {d["class"] for d in net_dict.values()} | {d["class"] for d in net_dict["loop"]["unit"].values()}
        assert classes <= ORDINARY | {"rec", "get_last_hidden_state", "rec_unstack", "rec_last_output"}, classes
        net = TFNetwork(config=config, train_flag=False)
        net.construct_from_dict(net_dict)
        assert sorted(v.op.name for v in net.get_params_list()) == [
            "lstm/bias/param", "lstm/ff_weight/param", "lstm/rec_weight/param"]


def test_out_shape_mismatch_names_origin():
    time_dim, feat = Dim(None, name="time"), Dim(3, name="feat")
    extern = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}
    net_dict = {"y": {"class": "copy", "from": "data", "is_output_layer": True,
                      "out_shape": OutShape([batch_dim, feat], origin="model.py:12")}}
    with pytest.raises(NetworkLayerException, match=r"model\.py:12.*output dims \[B, 'time'.*\], expected \{B, .*\}"):
        with tf.Graph().as_default():
            build_network(net_dict, extern)
    with tf.Graph().as_default():  # a plain set of Dims (the original's form)
        net = build_network({"y": {"class": "copy", "from": "data", "is_output_layer": True,
                                   "out_shape": {batch_dim, time_dim, feat}}}, extern)
        assert set(net.get_layer("y").output.dims) == {batch_dim, time_dim, feat}


def test_rf_dim_mismatch_error_names_call_site():
    """A layer whose output does not have the rf Tensor's dims: the error names the rf call (via out_shape)."""
    from returnn_lite.frontend_layers import _emit

    time_dim, feat = Dim(None, name="time"), Dim(3, name="feat")

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        y = _emit._emit("copy", [x], [batch_dim, feat], x.dtype)  # claims a dim less than the copy has
        y.mark_as_output("y", shape=(batch_dim, feat))

    config = Config({"extern_data": {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}},
                     "get_model": lambda **_: rf.Module(), "task": "forward", "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default(), global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        with pytest.raises(NetworkLayerException, match=r"test_rf_layer_classes\.py:\d+.*out_shape"):
            TFNetwork(config=config, train_flag=False).construct_from_dict(net_dict)


def _run(net_dict, extern_data, feed_values, out="y"):
    for opts in extern_data.values():
        for d in opts["dims"]:
            d.reset_eager()  # lengths of the previous graph
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session:
        net = build_network(net_dict, extern_data)
        session.run(tf1.global_variables_initializer())
        feed = {}
        for key, value in feed_values.items():
            if key.startswith("size:"):
                feed[net.extern_data.data[key[5:]].dims[1].dyn_size] = value
            else:
                feed[net.extern_data.data[key].placeholder] = value
        layer = net.get_layer(out)
        return session.run(layer.output.placeholder, feed_dict=feed), layer.output


def test_layer_options_with_dims():
    time_dim, feat = Dim(None, name="time"), Dim(6, name="feat")
    heads, per_head, sl, three = Dim(2, name="heads"), Dim(3, name="per-head"), Dim(2, name="sl"), Dim(3, "three")
    extern = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"}}
    x = np.arange(2 * 4 * 6, dtype="float32").reshape(2, 4, 6)
    net = {"split": {"class": "split_dims", "from": "data", "axis": feat, "dims": [heads, per_head]},
           "sl": {"class": "slice", "from": "split", "axis": per_head, "slice_start": 1, "out_dim": sl},
           "merged": {"class": "merge_dims", "from": "sl", "axes": [heads, sl], "keep_order": True,
                      "out_dim": Dim(4, name="m")},
           "y": {"class": "expand_dims", "from": "merged", "axis": "spatial", "dim": three}}
    y, out = _run(net, extern, {"data": x, "size:data": np.array([4, 2], "int32")})
    assert three in out.dims and sl not in out.dims and len(out.dims) == 4
    y = _ordered(y, out, ["batch", "time", "m", "three"])
    np.testing.assert_array_equal(y[..., 0], x.reshape(2, 4, 2, 3)[..., 1:].reshape(2, 4, 4))
    with pytest.raises(NetworkLayerException, match="out_dim"):
        _run({"y": {"class": "slice", "from": "data", "axis": feat, "slice_end": 2, "out_dim": sl.__class__(3)}},
             extern, {"data": x, "size:data": np.array([4, 2], "int32")})


def _ordered(value, data, names):
    """value of data transposed to the order of the dims with these descriptions."""
    order = [[d.description for d in data.dims].index(n) if n != "batch" else data.batch_dim_axis for n in names]
    return np.transpose(value, order)


def test_dot_use_mask_and_norm_with_param_layers():
    time_dim, feat = Dim(None, name="time"), Dim(3, name="feat")
    extern = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"},
              "w": {"dims": (batch_dim, time_dim), "dtype": "float32"}}
    x = np.random.RandomState(1).randn(2, 4, 3).astype("float32")
    w = np.random.RandomState(2).randn(2, 4).astype("float32")
    lens = np.array([4, 2], "int32")
    for use_mask in (True, False):
        net = {"y": {"class": "dot", "from": ["data", "data:w"], "reduce": time_dim, "var1": feat, "var2": [],
                     "add_var2_if_empty": False, "use_mask": use_mask}}
        y, _ = _run(net, extern, {"data": x, "w": w, "size:data": lens})
        n = [4, 2] if use_mask else [4, 4]  # without the mask: the padded frames as they are
        np.testing.assert_allclose(y, [(x[b, :n[b]] * w[b, :n[b], None]).sum(0) for b in range(2)], atol=1e-5)
    scale = np.array([1.0, 2.0, 3.0], "float32")
    net = {"s": {"class": "constant", "value": scale.tolist(), "shape": [feat]},
           "b": {"class": "constant", "value": [0.5, 0.0, -0.5], "shape": [feat]},
           "y": {"class": "norm", "from": "data", "axis": feat, "param_shape": (), "scale": "s", "bias": "b"}}
    y, _ = _run(net, extern, {"data": x, "size:data": lens})
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * scale + [0.5, 0.0, -0.5]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_switch_broadcasts_condition_and_scalars():
    time_dim, feat = Dim(None, name="time"), Dim(3, name="feat")
    extern = {"data": {"dims": (batch_dim, time_dim, feat), "dtype": "float32"},
              "c": {"dims": (batch_dim, feat), "dtype": "bool"}}
    x = np.random.RandomState(2).randn(2, 4, 3).astype("float32")
    c = np.array([[True, False, True], [False, False, True]])
    net = {"y": {"class": "switch", "condition": "data:c", "true_from": "data", "false_from": 0.0}}
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session:
        n = build_network(net, extern)
        ed = n.extern_data.data
        y = session.run(n.get_layer("y").output.placeholder, feed_dict={
            ed["data"].placeholder: x, ed["c"].placeholder: c, ed["data"].dims[1].dyn_size: [4, 3]})
    np.testing.assert_array_equal(y, np.where(c[:, None, :], x, 0.0))
