"""Losses: values and normalization against numpy, LossHolder, loss layer, training objective."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.losses import get_loss_class, get_loss_class_names
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

EXTERN = {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}
LENS = np.array([7, 5, 4], dtype=np.int32)


def _build(net_dict, extern=None, train_flag=True):
    net = TFNetwork(extern_data=ExternData(extern or EXTERN), train_flag=train_flag)
    net.construct_from_dict(net_dict)
    return net


def _feed(net, rng, lens=LENS, classes_dim=4):
    d = {}
    for key, data in net.extern_data.data.items():
        t = int(lens.max())
        if data.sparse:
            shape = [len(lens)] + ([t] if data.have_time_axis() else [])
            d[data.placeholder] = rng.randint(0, data.dim, size=shape).astype(data.dtype)
        else:
            shape = [len(lens)] + ([t] if data.have_time_axis() else []) + [data.dim]
            d[data.placeholder] = rng.randn(*shape).astype(data.dtype)
        for axis, size in data.size_placeholder.items():
            d[size] = lens
    return d


def _run(net, rng, fetches):
    with tf1.Session(graph=tf1.get_default_graph()) as session:
        net.initialize_params(session)
        feed = _feed(net, rng)
        return session.run(fetches, feed_dict=feed), feed


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_unknown_loss_lists_known():
    with pytest.raises(ValueError) as exc:
        get_loss_class("cee")
    assert "ce" in str(exc.value) and "ctc" in str(exc.value) and "mse" in str(exc.value)
    for name in ("ce", "bin_ce", "generic_ce", "ctc", "edit_distance", "bleu", "expected_loss", "deep_clustering",
                 "l1", "mse", "mean_l1", "via_layer", "as_is", "search_score", "sampling_loss", "triplet_loss",
                 "sprint", "fast_bw"):
        assert name in get_loss_class_names()


def test_ce_sum_and_norm_factor():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "softmax", "from": "data", "loss": "ce"}})
        holder = net.losses_dict["output"]
        (loss, err, norm, y), feed = _run(
            net, np.random.RandomState(1),
            [holder.get_loss_value(), holder.get_error_value(), holder.get_norm_factor(),
             net.get_layer("output").output.placeholder])
        cls = feed[net.extern_data.get_data("classes").placeholder]
        mask = np.arange(7)[None, :] < LENS[:, None]
        p = np.take_along_axis(y, cls[..., None], -1)[..., 0]
        np.testing.assert_allclose(loss, -(np.log(p) * mask).sum(), rtol=1e-5)
        np.testing.assert_allclose(err, ((y.argmax(-1) != cls) * mask).sum())
        np.testing.assert_allclose(norm, 1.0 / LENS.sum(), rtol=1e-6)


def test_ce_label_smoothing_formula():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "softmax", "from": "data", "loss": "ce",
                                 "loss_opts": {"label_smoothing": 0.1}}})
        (loss, y), feed = _run(net, np.random.RandomState(2),
                               [net.losses_dict["output"].get_loss_value(), net.get_layer("output").output.placeholder])
        cls = feed[net.extern_data.get_data("classes").placeholder]
        mask = np.arange(7)[None, :] < LENS[:, None]
        conf, low = 0.9, 0.1 / 3
        t = np.where(np.eye(4)[cls] > 0, conf, low)
        norm_const = -(conf * np.log(conf) + 3 * low * np.log(low))
        ref = ((-(t * np.log(y)).sum(-1) - norm_const) * mask).sum()
        np.testing.assert_allclose(loss, ref, rtol=1e-4)


def test_ctc_norm_factor_by_target_lengths_and_auto_dim():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "softmax", "from": "data", "loss": "ctc"}})
        assert net.get_layer("output").output.dim == 5  # 4 classes + blank
        holder = net.losses_dict["output"]
        with tf1.Session() as session:
            net.initialize_params(session)
            feed = _feed(net, np.random.RandomState(3))
            feed[net.extern_data.get_data("classes").size_placeholder[0]] = np.array([3, 2, 2], dtype=np.int32)
            loss, err, norm = session.run(
                [holder.get_loss_value(), holder.get_error_value(), holder.get_norm_factor()], feed_dict=feed)
        assert np.isfinite(loss) and loss > 0
        assert err >= 0
        np.testing.assert_allclose(norm, 1.0 / 7, rtol=1e-6)


def test_sparse_target_dim_mismatch_names_both_dims():
    with tf.Graph().as_default():
        with pytest.raises(Exception) as exc:
            _build({"output": {"class": "softmax", "from": "data", "n_out": 3, "loss": "ce"}})
        msg = str(exc.value)
        assert "output" in msg and "3" in msg and "4" in msg


def test_missing_target_names_layer_and_key():
    with tf.Graph().as_default():
        with pytest.raises(Exception) as exc:
            _build({"output": {"class": "softmax", "from": "data", "n_out": 4, "loss": "ce", "target": "foo"}})
        assert "output" in str(exc.value) and "foo" in str(exc.value)


def test_as_is_no_default_target_and_use_normalized_loss():
    with tf.Graph().as_default():
        net = _build({"lin": {"class": "linear", "from": "data", "n_out": 1, "activation": None},
                      "output": {"class": "copy", "from": "lin", "loss": "as_is",
                                 "loss_opts": {"use_normalized_loss": True}, "loss_scale": 2.0}},
                     extern={"data": {"dim": 5}})
        holder = net.losses_dict["output"]
        (value, norm, obj), _ = _run(net, np.random.RandomState(4),
                                     [holder.get_loss_value(), holder.get_norm_factor(), net.get_objective()])
        np.testing.assert_allclose(obj, value * norm * 2.0, rtol=1e-5)


def test_loss_layer_per_frame_and_sublayers():
    with tf.Graph().as_default():
        net = _build({
            "out": {"class": "softmax", "from": "data", "n_out": 4},
            "ce": {"class": "loss", "from": "out", "loss_": "ce", "target_": "classes"},
            "err": {"class": "copy", "from": "ce/error"},
            "output": {"class": "copy", "from": "out", "loss": "ce"}})
        ce_layer, err_layer = net.get_layer("ce"), net.get_layer("err")
        assert ce_layer.output.batch_shape == (None, None) and ce_layer.output.dtype == "float32"
        assert ce_layer.output.dims[1] == net.get_layer("out").output.dims[1]  # same time dim tag
        assert "ce" not in net.losses_dict  # a loss layer is no training loss by itself
        (ce, err, y), feed = _run(net, np.random.RandomState(5),
                                  [ce_layer.output.placeholder, err_layer.output.placeholder,
                                   net.get_layer("out").output.placeholder])
        cls = feed[net.extern_data.get_data("classes").placeholder]
        p = np.take_along_axis(y, cls[..., None], -1)[..., 0]
        mask = np.arange(7)[None, :] < LENS[:, None]
        np.testing.assert_allclose(ce[mask], -np.log(p)[mask], rtol=1e-4)
        np.testing.assert_allclose(err[mask], (y.argmax(-1) != cls)[mask])


def test_fetches_dict_and_used_targets():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "softmax", "from": "data", "loss": "ce"}})
        d = net.get_fetches_dict()
        assert set(d) >= {"cost:output", "error:output", "loss_norm_factor:output"}
        assert net.get_used_targets() == ["classes"]


def test_l2_constraint():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "softmax", "from": "data", "loss": "ce", "L2": 0.01}})
        with tf1.Session() as session:
            net.initialize_params(session)
            c, params = session.run([net.get_total_constraints(), net.get_layer("output").params])
        np.testing.assert_allclose(c, 0.01 * sum((v ** 2).sum() for v in params.values()), rtol=1e-5)



def test_l2_of_shared_params_counts_once_for_their_owner():
    # a layer with reuse_params holds no params of its own: its L2 adds nothing (the conformer hybrids' transposed
    # convs that reuse one layer's params, each with L2)
    with tf.Graph().as_default():
        net = _build({
            "tconv": {"class": "transposed_conv", "from": "data", "n_out": 4, "filter_size": [3], "strides": [3],
                      "L2": 0.01},
            "tconv_shared": {"class": "transposed_conv", "from": "data", "n_out": 4, "filter_size": [3],
                             "strides": [3], "L2": 0.01, "reuse_params": "tconv"},
            "output": {"class": "copy", "from": ["tconv", "tconv_shared"]}})
        assert net.get_layer("tconv_shared").params == {}
        assert sorted(p.op.name for p in net.get_params_list()) == ["tconv/W_native_transposed_conv", "tconv/bias"]
        with tf1.Session() as session:
            net.initialize_params(session)
            c, params = session.run([net.get_total_constraints(), net.get_layer("tconv").params])
        np.testing.assert_allclose(c, 0.01 * sum((v ** 2).sum() for v in params.values()), rtol=1e-5)

def test_training_reduces_objective():
    with tf.Graph().as_default():
        tf1.set_random_seed(1)
        net = _build({"hidden": {"class": "linear", "activation": "tanh", "n_out": 8, "from": "data"},
                      "output": {"class": "softmax", "from": "hidden", "loss": "ce"}})
        objective = net.get_objective()
        params = net.get_trainable_params() if hasattr(net, "get_trainable_params") else net.get_params_list()
        grads = tf.gradients(objective, params)
        lr = 0.05
        update = tf.group(*[tf1.assign_sub(p, lr * g) for p, g in zip(params, grads)])
        with tf1.Session() as session:
            net.initialize_params(session)
            feed = _feed(net, np.random.RandomState(6))
            losses = []
            for _ in range(20):
                value, _ = session.run([objective, update], feed_dict=feed)
                losses.append(value)
            losses.append(session.run(objective, feed_dict=feed))
        assert losses[-1] < losses[0] * 0.8, losses


def test_losses_initialized_with_reduce_func_gives_frames():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "softmax", "from": "data", "loss": "ce"}})
        losses = net.get_losses_initialized(reduce_func=lambda x: x)[0]
        frames = losses["output"].get_loss_value()
        (frames_v, total), _ = _run(net, np.random.RandomState(7),
                                    [frames, net.losses_dict["output"].get_loss_value()])
        assert frames_v.shape == (LENS.sum(),)
        np.testing.assert_allclose(frames_v.sum(), total, rtol=1e-5)


def test_bleu_smoothed():
    from returnn_lite.losses.ctc import compute_bleu

    # no 3-/4-gram matches: those precisions become 1/(2*3) and 1/(4*2)
    value = compute_bleu([[2, 0, 1, 0, 0, 2]], [[2, 2, 1, 1, 0]])
    ref = (0.8 * 0.25 * (1 / 6) * (1 / 8)) ** 0.25 * np.exp(1 - 6 / 5)
    np.testing.assert_allclose(value, ref, rtol=1e-6)


def test_spatial_smoothing_non_square_dim():
    # dim 12 = 4 rows (h) of 3 features (w), circular padding, filter 1 center / -1/8 around; masked frames
    with tf.Graph().as_default():
        net = _build({"hidden": {"class": "linear", "activation": "tanh", "n_out": 12, "from": "data",
                                 "spatial_smoothing": 0.5},
                      "output": {"class": "softmax", "from": "hidden", "loss": "ce"}})
        (c, h), _ = _run(net, np.random.RandomState(8),
                         [net.get_total_constraints(), net.get_layer("hidden").output.placeholder])
        img = h.reshape(3, 7, 4, 3)
        pad = np.pad(img, [(0, 0), (0, 0), (1, 1), (1, 1)], mode="wrap")
        out = sum((1.0 if (a, b) == (1, 1) else -0.125) * pad[:, :, a:a + 4, b:b + 3]
                  for a in range(3) for b in range(3))
        mask = np.arange(7)[None, :] < LENS[:, None]
        np.testing.assert_allclose(c, 0.5 * ((out ** 2).sum((-1, -2)) * mask).sum(), rtol=1e-4)


def _sampling_net(train_flag, use_full_softmax, cls="softmax"):
    net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=train_flag, eval_flag=True)
    layer = {"class": cls, "from": "data", "n_out": 4, "use_transposed_weights": True, "loss": "sampling_loss",
             "loss_opts": {"num_sampled": 2, "use_full_softmax": use_full_softmax}, "target": "classes"}
    if cls == "linear":
        layer["activation"] = "log_softmax"
    net.construct_from_dict({"output": layer})
    return net


@pytest.mark.parametrize("cls", ["softmax", "linear"])
def test_sampling_loss_full_softmax_in_eval_sampled_in_training(cls):
    rng = np.random.RandomState(3)
    with tf.Graph().as_default():
        net = _sampling_net(False, True, cls)
        feed = _feed(net, rng)
        with tf1.Session() as session:
            net.initialize_params(session)
            loss, params = session.run([net.get_total_loss(), net.get_layer("output").params], feed_dict=feed)
    x, y = feed[net.extern_data.get_data("data").placeholder], feed[net.extern_data.get_data("classes").placeholder]
    logits = x @ params["W"].T + params["b"]  # W: [num_classes, dim]
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    mask = np.arange(x.shape[1])[None] < LENS[:, None]
    ref = -np.take_along_axis(logp, y[..., None], -1)[..., 0][mask].sum()
    np.testing.assert_allclose(loss, ref, rtol=1e-4)
    with tf.Graph().as_default():  # training: the sampled softmax (random), finite and positive
        net = _sampling_net(True, True, cls)
        with tf1.Session() as session:
            net.initialize_params(session)
            loss = session.run(net.get_total_loss(), feed_dict=_feed(net, rng))
        assert np.isfinite(loss) and loss > 0


def test_sampling_loss_needs_transposed_weights_naming_the_layer():
    with tf.Graph().as_default():
        with pytest.raises(Exception, match="output.*use_transposed_weights"):
            net = _build({"output": {"class": "softmax", "from": "data", "loss": "sampling_loss"}})
            net.get_objective()
