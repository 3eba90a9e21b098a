"""Run one rf model (get_model + step function marking outputs) with given params on the torch backend and on the
layers backend (as the frontend checker does), for tests that compare both with numpy references."""

import numpy as np

import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, TensorDict, batch_dim


def random_params(get_model, seed=2, scale=0.5):
    """name -> array for every param of get_model() (uniform in [-scale, scale]; running variances positive)."""
    rf.select_backend_torch()
    rng = np.random.RandomState(seed)
    res = {}
    for name, p in get_model().named_parameters():
        shape = tuple(d.dimension for d in p.dims)
        value = rng.uniform(-scale, scale, shape)
        if name.endswith("running_variance"):
            value = np.abs(value) + 0.5
        res[name] = value.astype("float32")
    return res


def run_torch(extern_data, get_model, step, inputs, params, dyn_dims, *, train_flag=False):
    """inputs: key -> array, plus "size:<dim name>" lengths of each of dyn_dims. -> output name -> array (+ sizes)."""
    import torch

    rf.select_backend_torch()
    td = TensorDict()
    td.update(extern_data, auto_convert=True)
    for d in list(dyn_dims) + [batch_dim]:
        d.reset_eager()
    n_batch = len(inputs["size:" + dyn_dims[0].name])
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32",
                                    raw_tensor=torch.tensor(n_batch, dtype=torch.int32))
    for d in dyn_dims:
        d.dyn_size_ext = Tensor(d.name + "_size", dims=[batch_dim], dtype="int32",
                                raw_tensor=torch.tensor(inputs["size:" + d.name]))
    for key in extern_data:
        td.data[key].raw_tensor = torch.tensor(inputs[key])
    model = get_model()
    for name, p in model.named_parameters():
        with torch.no_grad():
            p.raw_tensor.copy_(torch.tensor(params[name]))
    rf.init_train_step_run_ctx(train_flag=train_flag, step=0, epoch=1)
    step(model=model, extern_data=td)
    res = {}
    for name, t in rf.get_run_ctx().outputs.data.items():
        res[name] = t.raw_tensor.detach().numpy()
        res[name + ":dims"] = list(t.dims)
    for d in list(dyn_dims) + [batch_dim]:
        d.reset_eager()
    return res, model


def extern_feed(net, inputs):
    """The feed dict of a TFNetwork's extern data: inputs[key] and the lengths inputs["size:" + dim name]."""
    feed = {}
    for key, t in net.extern_data.data.items():
        feed[t.placeholder] = inputs[key]
        for d in t.dims:
            if d.is_dynamic():
                feed[d.dyn_size_ext.raw_tensor] = inputs["size:" + d.name]
    return feed


def run_layers(extern_data, get_model, step, inputs, params, dyn_dims):
    """The same on the layers backend (TFNetwork), train_flag False."""
    import tensorflow as tf

    from returnn_lite.config import Config, global_config_ctx
    from returnn_lite.frontend_layers import get_net_dict
    from returnn_lite.network import TFNetwork

    tf1 = tf.compat.v1
    config = Config({"extern_data": extern_data, "get_model": lambda **_: get_model(), "task": "forward",
                     "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, model = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=False, eval_flag=False)
        net.construct_from_dict(net_dict)
        fetches = {name: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for name, t in outputs.items()}
        dims = {name: list(net.get_layer(t.raw_tensor.get_abs_name()).output.dims) for name, t in outputs.items()}
        param_vars = {v.op.name[:-len("/param")].replace("/", "."): v for v in net.get_params_list()}
        session.run(tf1.global_variables_initializer())
        for name, v in param_vars.items():
            v.load(params[name], session)
        feed = extern_feed(net, inputs)
        res = session.run(fetches, feed_dict=feed)
        for name in list(res):
            res[name + ":dims"] = dims[name]
        for d in dyn_dims:
            d.reset_eager()
    return res, sorted(param_vars)


def in_order(res, name, dims):
    """res[name] transposed to the given dims (matched by Dim equality)."""
    have = res[name + ":dims"]
    return np.transpose(res[name], [have.index(d) for d in dims])
