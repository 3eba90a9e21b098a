"""Dim-level API of rf (issue 28) on both backends: deepcopy keeps Dims, get_size_tensor(device=), Dim(size_tensor),
and the dim-match priority that lets a param have the same Dim twice (rf.Linear(d, d), rf.SelfAttention(d, d))."""

import copy

import numpy as np
import pytest
import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, Tensor, TensorDict, batch_dim

torch = pytest.importorskip("torch")
tf1 = tf.compat.v1

time_dim = Dim(None, name="time")
feat_dim = Dim(4, name="feat")
extern_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
LENS = np.array([5, 3], dtype="int32")


def _inputs():
    return np.random.RandomState(3).randn(2, 5, 4).astype("float32")


def _params(model):
    rng = np.random.RandomState(4)
    return {n: rng.uniform(-0.5, 0.5, [d.dimension for d in p.dims]).astype("float32")
            for n, p in model.named_parameters()}


def _run_torch(get_model, step, x, params):
    rf.select_backend_torch()
    td = TensorDict()
    td.update(extern_data, auto_convert=True)
    for d in (time_dim, batch_dim):
        d.reset_eager()
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(2, dtype=torch.int32))
    time_dim.dyn_size_ext = Tensor("time_size", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor(LENS))
    td.data["data"].raw_tensor = torch.tensor(x)
    model = get_model()
    for name, p in model.named_parameters():
        with torch.no_grad():
            p.raw_tensor.copy_(torch.tensor(params[name]))
    rf.init_forward_step_run_ctx()
    step(model=model, extern_data=td)
    res = {k: t.raw_tensor.detach().numpy() for k, t in rf.get_run_ctx().outputs.data.items()}
    for d in (time_dim, batch_dim):
        d.reset_eager()
    return res, model


def _run_layers(get_model, step, x, params):
    config = Config({"extern_data": extern_data, "get_model": get_model, "task": "forward", "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=False, eval_flag=False)
        net.construct_from_dict(net_dict)
        fetches = {k: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for k, t in outputs.items()}
        session.run(tf1.global_variables_initializer())
        shapes = {}
        for v in net.get_params_list():
            name = v.op.name[:-len("/param")].replace("/", ".")
            v.load(params[name], session)
            shapes[name] = v.shape.as_list()
        data = net.extern_data.data["data"]
        res = session.run(fetches, feed_dict={data.placeholder: x, time_dim.dyn_size_ext.raw_tensor: LENS})
    time_dim.reset_eager()
    return res, shapes


def test_deepcopy_keeps_dims():
    d = Dim(3, name="d")
    assert copy.deepcopy(d) is d and copy.copy(d) is d
    rf.select_backend_torch()
    lin = rf.Linear(feat_dim, feat_dim)
    lin2 = copy.deepcopy(lin)
    assert lin2.in_dim is feat_dim and lin2.out_dim is feat_dim and lin2.weight.dims == lin.weight.dims
    assert lin2.weight.raw_tensor is not lin.weight.raw_tensor  # a new param, with the same dims
    assert isinstance(lin2.weight.raw_tensor, torch.nn.Parameter)
    t = Tensor("x", dims=[batch_dim, feat_dim], dtype="float32", raw_tensor=torch.zeros(2, 4))
    assert copy.deepcopy(t).dims == t.dims and all(a is b for a, b in zip(copy.deepcopy(t).dims, t.dims))


def test_match_priority_copy_and_when_needed():
    d, e = Dim(3, name="d"), Dim(3, name="e")
    p = d.copy(match_priority=1)
    assert p == d and hash(p) == hash(d) and p is not d and p.match_priority == 1 and d.match_priority == 0
    assert rf.dim_match_priority_when_needed(d, e) is d
    q = rf.dim_match_priority_when_needed(d, e, d)
    assert q == d and q.match_priority == 1
    w = Tensor("w", dims=[q, d], dtype="float32")
    assert w.get_axes_from_description(d) == [0]  # the axis of the higher priority


def test_get_size_tensor_device_and_dim_from_size_tensor_torch():
    rf.select_backend_torch()
    t = Dim(None, name="t")
    sizes = Tensor("sizes", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor([3, 1], dtype=torch.int32))
    d = Dim(sizes, name="from-sizes")
    assert d.dimension is None and d.name == "from-sizes" and d.dyn_size_ext is sizes
    size = d.get_size_tensor(device="cpu")
    assert size.dims == (batch_dim,) and size.raw_tensor.tolist() == [3, 1]
    assert Dim(4, name="s").get_size_tensor(device="cpu").raw_tensor.item() == 4
    batch_dim.dyn_size_ext = Tensor("b", dims=[], dtype="int32", raw_tensor=torch.tensor(2, dtype=torch.int32))
    try:
        x = rf.ones([batch_dim, d], dtype="float32")
        assert rf.reduce_sum(x, axis=d).raw_tensor.tolist() == [3.0, 1.0]  # masked by the sizes
    finally:
        batch_dim.reset_eager()
    assert t.dyn_size_ext is None


def test_get_size_tensor_device_layers_backend():
    def step(*, model, extern_data, **_):
        size = time_dim.get_size_tensor(device="cuda")  # (no meaning on the layers backend: ignored)
        size.mark_as_output("size", shape=[batch_dim])

    res, _ = _run_layers(lambda **_: rf.Module(), step, _inputs(), {})
    assert res["size"].tolist() == LENS.tolist()


class _LinearModel(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(feat_dim, feat_dim)

    def __call__(self, x):
        return self.lin(x)


def _linear_step(*, model, extern_data, **_):
    y = model(extern_data["data"])
    y.mark_as_output("y", shape=[batch_dim, time_dim, feat_dim])
    w_sum = rf.reduce_sum(model.lin.weight, axis=feat_dim)  # reduces the in_dim axis (the higher priority)
    w_sum.mark_as_output("w_sum", shape=[feat_dim])


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_linear_same_in_and_out_dim(backend):
    rf.select_backend_torch()
    model = _LinearModel()
    assert [n for n, _ in model.named_parameters()] == ["lin.weight", "lin.bias"]
    assert model.lin.weight.dims[0] == feat_dim and model.lin.weight.dims[0].match_priority == 1
    params = _params(model)
    x = _inputs()
    if backend == "torch":
        res, _ = _run_torch(lambda **_: _LinearModel(), _linear_step, x, params)
    else:
        res, shapes = _run_layers(lambda **_: _LinearModel(), _linear_step, x, params)
        assert shapes == {"lin.weight": [4, 4], "lin.bias": [4]}
    ref = x @ params["lin.weight"] + params["lin.bias"]
    np.testing.assert_allclose(res["y"], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res["w_sum"], params["lin.weight"].sum(axis=0), rtol=1e-5)


class _AttModel(rf.Module):
    def __init__(self):
        super().__init__()
        self.att = rf.SelfAttention(feat_dim, feat_dim, key_dim_total=feat_dim, value_dim_total=feat_dim,
                                    num_heads=2, att_dropout=0.0)

    def __call__(self, x):
        return self.att(x, axis=time_dim)


def _att_step(*, model, extern_data, **_):
    model(extern_data["data"]).mark_as_output("y", shape=[batch_dim, time_dim, feat_dim])


def test_self_attention_same_dims_both_backends():
    rf.select_backend_torch()
    params = _params(_AttModel())
    assert sorted(params) == ["att.proj.bias", "att.proj.weight", "att.qkv.bias", "att.qkv.weight"]
    x = _inputs()
    res_torch, _ = _run_torch(lambda **_: _AttModel(), _att_step, x, params)
    res_layers, _ = _run_layers(lambda **_: _AttModel(), _att_step, x, params)
    mask = np.arange(5)[None, :] < LENS[:, None]
    assert res_torch["y"].shape == (2, 5, 4)
    np.testing.assert_allclose(res_torch["y"][mask], res_layers["y"][mask], rtol=1e-4, atol=1e-5)


def _sizes_step(*, model, extern_data, **_):
    shorter = Dim(time_dim.get_size_tensor() - 1, name="shorter")  # a dim whose lengths are a Tensor of the model
    y, _ = rf.replace_dim(extern_data["data"], in_dim=time_dim, out_dim=shorter)
    rf.reduce_sum(y, axis=shorter).mark_as_output("y", shape=[batch_dim, feat_dim])  # masked by the new lengths


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_dim_from_size_tensor_in_model(backend):
    x = _inputs()
    run = _run_torch if backend == "torch" else _run_layers
    res, _ = run(lambda **_: rf.Module(), _sizes_step, x, {})
    np.testing.assert_allclose(res["y"], np.stack([x[0, :4].sum(0), x[1, :2].sum(0)]), rtol=1e-5)


def test_subnetwork_importable_from_network():
    from returnn_lite.network import Subnetwork
    from returnn_lite.subnetwork import Subnetwork as own

    assert Subnetwork is own


def test_get_dim_value_of_eager_lengths_is_their_max():
    """On the torch backend a dynamic dim's padded length comes from its eager lengths (a Python loop over steps)."""
    rf.select_backend_torch()
    dim = Dim(None, name="steps")
    dim.dyn_size_ext = Tensor("steps_size", dims=[batch_dim], dtype="int32",
                              raw_tensor=torch.tensor([4, 6, 2], dtype=torch.int32))
    try:
        assert int(dim.get_dim_value()) == 6
        assert Dim(3, name="static").get_dim_value() == 3
    finally:
        dim.reset_eager()


def _broadcast_sizes_step(*, model, extern_data, **_):
    """(T - 1) + hist: the lengths of T - 1 have dims [B], those of hist (i + 1 at frame i) dims [T]."""
    hist_dim = Dim(rf.range_over_dim(time_dim) + 1, name="hist")
    total = (time_dim - 1) + hist_dim
    x = rf.reduce_sum(extern_data["data"], axis=feat_dim)  # [B, T]
    ones = rf.expand_dim(rf.ones([batch_dim, time_dim]), total)  # [B, T, total], masked below by the [B, T] lengths
    rf.reduce_sum(ones, axis=total).mark_as_output("n", shape=[batch_dim, time_dim])
    rf.reduce_sum(ones * x, axis=total).mark_as_output("nx", shape=[batch_dim, time_dim])


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_dim_arithmetic_broadcasts_lengths_of_different_dims(backend):
    x = _inputs()
    run = _run_torch if backend == "torch" else _run_layers
    res, _ = run(lambda **_: rf.Module(), _broadcast_sizes_step, x, {})
    expected = LENS[:, None] - 1 + np.arange(1, 6)[None, :]  # [B, T]: (len_b - 1) + (t + 1)
    mask = np.arange(5)[None, :] < LENS[:, None]
    np.testing.assert_array_equal(res["n"][mask], expected[mask])
    np.testing.assert_allclose(res["nx"][mask], (expected * x.sum(-1))[mask], rtol=1e-5)


def test_dim_arithmetic_lengths_dims_torch():
    """The lengths of a derived dim are a Tensor over the union of its operands' length dims, padded to their max."""
    rf.select_backend_torch()
    steps = Dim(None, name="steps")
    steps.dyn_size_ext = Tensor("steps_size", dims=[batch_dim], dtype="int32",
                                raw_tensor=torch.tensor([4, 6, 2], dtype=torch.int32))
    other = Dim(None, name="other")
    other.dyn_size_ext = Tensor("other_size", dims=[feat_dim], dtype="int32",
                                raw_tensor=torch.tensor([1, 2, 3, 4], dtype=torch.int32))
    try:
        for total, dims in (((steps - 1) + other, [batch_dim, feat_dim]), (other + 2 * steps, [feat_dim, batch_dim])):
            ext = total.dyn_size_ext
            assert list(ext.dims) == dims
            got = ext.raw_tensor.numpy()
            if dims[0] == feat_dim:
                got = got.T
            ref = (np.array([4, 6, 2])[:, None] - 1 + np.array([1, 2, 3, 4])[None, :]) if dims[0] == batch_dim \
                else np.array([1, 2, 3, 4])[None, :] + 2 * np.array([4, 6, 2])[:, None]
            np.testing.assert_array_equal(got, ref)
            assert int(total.get_dim_value()) == ref.max()
    finally:
        steps.reset_eager()
        other.reset_eager()


def test_tensor_constructor_forms_as_the_original():
    """(name, dims, dtype) positional as the original's Tensor: empty dims is a scalar (not the classic [B]); the
    classic Data options go by keyword; dims with shape, or a classic shape passed as dims, are refused."""
    from returnn_lite.data import Data
    from returnn_lite.tensor import Tensor, batch_dim

    for cls in (Tensor, Data):
        scalar = cls("x", [], "int64")
        assert scalar.dims == () and scalar.dtype == "int64"
        assert cls("x", dims=[], dtype="float32").dims == ()
        assert cls("x", [batch_dim], "float32").dims == (batch_dim,)
        assert cls(name="x", shape=()).dims == (batch_dim,)  # classic: the batch dim is implied
        classic = cls(name="x", shape=(None, 5))
        assert classic.batch_shape == (None, None, 5) and classic.dtype == "float32"
        with pytest.raises(TypeError, match="shape="):
            cls("x", (None, 5))
        with pytest.raises(TypeError, match="dims and shape"):
            cls("x", [batch_dim], shape=(None,))
