"""rf.scaled_gradient / scaled_gradient_ext, rf.label_smoothing / smooth_one_hot / label_smoothed_log_prob_gradient
and the rf math aliases (add, pow, ceil_divide, lerp, opt_logical_*), on both backends, against numpy."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

a_dim = Dim(3, name="a")
c_dim = Dim(5, name="c")
rng = np.random.RandomState(7)
P = rng.randn(3, 5).astype("float32")
Q = rng.randn(3, 5).astype("float32")
SCALE = rng.uniform(0.5, 2.0, 5).astype("float32")


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.p = rf.Parameter([a_dim, c_dim])
        self.q = rf.Parameter([a_dim, c_dim], trainable=False)
        self.scale = rf.Parameter([c_dim], trainable=False)


def _losses(model, variant):
    p = model.p
    if variant == "scaled":
        y = rf.scaled_gradient(p, -0.5)
    elif variant == "ext":
        y = rf.scaled_gradient_ext(p, scale=model.scale, shift=0.25, scale_shift_by_sum_over_axis=c_dim)
    else:  # label smoothing of log-prob gradients (blank 0 excluded), then CE-like loss with target probs q
        log_prob = rf.log_softmax(p, axis=c_dim)
        y = rf.label_smoothed_log_prob_gradient(log_prob, 0.2, axis=c_dim, exclude_labels=[0] if variant ==
                                                "ls_excl" else None)
    return rf.reduce_sum(rf.reduce_sum(y * model.q, axis=c_dim), axis=a_dim)


def _np_grad(variant):
    if variant == "scaled":
        return -0.5 * Q
    if variant == "ext":
        return Q * SCALE + 0.25 * np.abs(Q).sum(axis=1, keepdims=True)
    g = Q.copy()  # d loss / d log_prob
    if variant == "ls":
        floor = 0.2 / 4
        g = g * (1 - 5 * floor) - floor * np.abs(Q).sum(axis=1, keepdims=True)
    else:
        floor = 0.2 / 3
        factor = np.where(np.arange(5) != 0, 1 - 4 * floor, 1.0)
        floor_v = np.where(np.arange(5) != 0, floor, 0.0)
        g = g * factor - floor_v * np.abs(Q).sum(axis=1, keepdims=True)
    sm = np.exp(P) / np.exp(P).sum(axis=1, keepdims=True)
    return g - sm * g.sum(axis=1, keepdims=True)  # back through log_softmax


def _model():
    m = Model()
    return m


@pytest.mark.parametrize("variant", ["scaled", "ext", "ls", "ls_excl"])
def test_gradients_torch(variant):
    rf.select_backend_torch()
    model = _model()
    with torch.no_grad():
        model.p.raw_tensor.copy_(torch.tensor(P))
        model.q.raw_tensor.copy_(torch.tensor(Q))
        model.scale.raw_tensor.copy_(torch.tensor(SCALE))
    rf.init_train_step_run_ctx(train_flag=True, step=0, epoch=1)
    loss = _losses(model, variant)
    loss.raw_tensor.backward()
    np.testing.assert_allclose(model.p.raw_tensor.grad.numpy(), _np_grad(variant), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", ["scaled", "ext", "ls", "ls_excl"])
def test_gradients_layers_backend(variant):
    tf = pytest.importorskip("tensorflow")
    from returnn_lite.config import Config, global_config_ctx
    from returnn_lite.frontend_layers import get_net_dict
    from returnn_lite.network import TFNetwork

    def train_step(*, model, extern_data, **_):
        _losses(model, variant).mark_as_loss("loss")

    tf1 = tf.compat.v1
    extern_data = {"data": {"dims": (batch_dim, a_dim), "dtype": "float32"}}
    config = Config({"extern_data": extern_data, "get_model": lambda **_: _model(), "task": "train",
                     "train_step": train_step})
    rf.select_backend_returnn_layers_tf()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, model = get_net_dict(epoch=1, step=0)
        net = TFNetwork(config=config, train_flag=False, eval_flag=True)
        net.construct_from_dict(net_dict)
        params = {v.op.name[:-len("/param")].replace("/", "."): v for v in net.get_params_list()}
        session.run(tf1.global_variables_initializer())
        for name, value in (("p", P), ("q", Q), ("scale", SCALE)):
            params[name].load(value, session)
        (grad,) = tf.gradients(net.get_total_loss(), [params["p"]])
        got = session.run(grad)
    np.testing.assert_allclose(got, _np_grad(variant), rtol=1e-4, atol=1e-5)


def test_label_smoothing_and_smooth_one_hot():
    rf.select_backend_torch()
    t_dim = Dim(4, name="t")
    idx = rf.convert_to_tensor(torch.tensor([0, 3, 4, 1], dtype=torch.int32), dims=[t_dim], sparse_dim=c_dim)
    dense = rf.label_smoothing(idx, 0.2).copy_transpose([t_dim, c_dim]).raw_tensor.numpy()
    ref = np.full((4, 5), 0.05)
    ref[np.arange(4), [0, 3, 4, 1]] = 0.8
    np.testing.assert_allclose(dense, ref, rtol=1e-6)
    probs = rf.convert_to_tensor(torch.tensor(ref, dtype=torch.float32), dims=[t_dim, c_dim])
    smoothed = rf.label_smoothing(probs, 0.1, axis=c_dim).copy_transpose([t_dim, c_dim]).raw_tensor.numpy()
    floor = 0.1 / 4
    np.testing.assert_allclose(smoothed, ref * (1 - 5 * floor) + floor, rtol=1e-6)
    np.testing.assert_allclose(smoothed.sum(axis=1), 1.0, rtol=1e-6)


def test_math_aliases():
    rf.select_backend_torch()
    x = rf.convert_to_tensor(torch.tensor([7, -7, 6], dtype=torch.int32), dims=[a_dim])
    assert rf.ceil_divide(x, 2).raw_tensor.tolist() == [4, -3, 3]
    assert rf.add(x, 1).raw_tensor.tolist() == [8, -6, 7]
    assert rf.pow(x, 2).raw_tensor.tolist() == [49, 49, 36]
    assert rf.mod(x, 4).raw_tensor.tolist() == [3, 1, 2]
    assert rf.maximum(x, 0, 6).raw_tensor.tolist() == [7, 6, 6]
    f = rf.cast(x, "float32")
    np.testing.assert_allclose(rf.lerp(f, f * 3.0, 0.25).raw_tensor.numpy(), [10.5, -10.5, 9.0])
    assert rf.opt_logical_or(True, x > 0) is True and rf.opt_logical_and(True, 5) == 5
    b = rf.opt_logical_and(x > 0, x < 7)
    assert b.raw_tensor.tolist() == [False, False, True]
    with rf.gradient_checkpoint_scope():
        y = f * 2.0
    assert y.raw_tensor.tolist() == [14.0, -14.0, 12.0]


def test_stop_gradient_scope_torch():
    rf.select_backend_torch()
    p = rf.Parameter([a_dim])
    with rf.stop_gradient_scope():
        x = p * 2.0
    y = p * 3.0
    assert not x.raw_tensor.requires_grad and y.raw_tensor.requires_grad
