"""twod_lstm: the original's param names and shapes, the grid against a numpy double loop, pooling, the rec loop."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.testing import build_network

tf1 = tf.compat.v1
EXTERN = {"data": {"dim": 3}, "classes": {"dim": 2}}  # data: source [B,S,3]; classes: dense target [B,T,2]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_grid(src, trg, src_lens, w, v_h, v_v):
    """Reference: the 2D LSTM cell by cell. src [B,S,Fs], trg [B,T,Ft] -> h [B,T,S,n]."""
    n_b, n_s, _ = src.shape
    n_t = trg.shape[1]
    n = v_h.shape[0]
    c = np.zeros((n_b, n_t + 1, n_s + 1, n))  # padded with one zero row (above) and column (left)
    h = np.zeros((n_b, n_t + 1, n_s + 1, n))
    for b in range(n_b):
        for t in range(n_t):
            for s in range(src_lens[b]):
                z = np.concatenate([src[b, s], trg[b, t]]) @ w + h[b, t + 1, s] @ v_h + h[b, t, s + 1] @ v_v
                i, f, lam, o = [_sigmoid(z[k * n:(k + 1) * n]) for k in range(4)]
                c[b, t + 1, s + 1] = i * np.tanh(z[4 * n:]) + f * lam * c[b, t, s + 1] + f * (1 - lam) * c[b, t + 1, s]
                h[b, t + 1, s + 1] = o * np.tanh(c[b, t + 1, s + 1])
    return h[:, 1:, 1:]


def _feed(net, src, trg, src_lens, trg_lens):
    data, classes = net.extern_data.get_data("data"), net.extern_data.get_data("classes")
    return {data.placeholder: src, data.size_placeholder[0]: src_lens,
            classes.placeholder: trg, classes.size_placeholder[0]: trg_lens}


@pytest.mark.parametrize("pooling", ["last", "max", "average", "weighted"])
def test_twod_lstm_grid_matches_numpy(pooling):
    rng = np.random.RandomState(1)
    src, trg = rng.randn(2, 4, 3).astype("float32"), rng.randn(2, 3, 2).astype("float32")
    src_lens, trg_lens = np.array([4, 2], "int32"), np.array([3, 3], "int32")
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "twod_lstm", "from": ["data", "data:classes"], "n_out": 5,
                                        "pooling": pooling}}, EXTERN, train_flag=False)
        layer = net.get_layer("output")
        expected_params = [("output/rec-twod/Vh_re", (5, 25)), ("output/rec-twod/Vv_re", (5, 25)),
                           ("output/rec-twod/W_re", (5, 25))]
        if pooling == "weighted":
            expected_params.insert(2, ("output/rec-twod/W_att", (2, 5)))
        assert sorted((p.op.name, tuple(p.shape.as_list())) for p in net.get_params_list()) == expected_params
        assert layer.output.dim == 5 and layer.output.get_time_dim_tag() is \
            net.extern_data.get_data("classes").get_time_dim_tag()
        with tf1.Session() as session:
            net.initialize_params(session)
            params = session.run({k.split("/")[-1]: v for k, v in layer.params.items()})
            out = session.run(layer.output.copy_as_batch_major().placeholder,
                              feed_dict=_feed(net, src, trg, src_lens, trg_lens))
    h = _numpy_grid(src, trg, src_lens, params["W_re"], params["Vh_re"], params["Vv_re"])  # [B,T,S,n]
    mask = (np.arange(4)[None, :] < src_lens[:, None])[:, None, :, None]  # [B,1,S,1]
    if pooling == "last":
        expected = np.stack([h[b, :, src_lens[b] - 1] for b in range(2)])
    elif pooling == "max":
        expected = h.max(axis=2)  # the padded cells are zero and take part, as in the original
    elif pooling == "average":
        expected = (h * mask).sum(axis=2) / mask.sum(axis=2)
    else:
        energies = np.einsum("btf,fn,btsn->bts", trg, params["W_att"], h)
        weights = np.exp(energies) / np.exp(energies).sum(axis=2, keepdims=True)
        expected = (weights[..., None] * h).sum(axis=2)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_twod_lstm_gradients_reach_all_params():
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "twod_lstm", "from": ["data", "data:classes"], "n_out": 4}},
                            EXTERN, train_flag=True)
        out = net.get_layer("output").output.placeholder
        params = net.get_params_list()
        grads = tf1.gradients(tf.reduce_sum(out), params)
        rng = np.random.RandomState(0)
        with tf1.Session() as session:
            net.initialize_params(session)
            values = session.run(grads, feed_dict=_feed(net, rng.randn(2, 4, 3), rng.randn(2, 3, 2),
                                                        np.array([4, 3]), np.array([3, 2])))
    assert all(np.all(np.isfinite(g)) and np.any(g != 0) for g in values)


def test_twod_lstm_in_a_rec_loop_equals_the_grid():
    # inside a rec loop one target step per loop step (the previous row as the state) gives the grid's rows
    rng = np.random.RandomState(2)
    src, trg = rng.randn(2, 4, 3).astype("float32"), rng.randn(2, 3, 2).astype("float32")
    src_lens, trg_lens = np.array([4, 3], "int32"), np.array([3, 3], "int32")
    with tf.Graph().as_default():
        net = build_network({
            "grid": {"class": "twod_lstm", "from": ["data", "data:classes"], "n_out": 4, "pooling": "max",
                     "is_output_layer": True},
            "loop": {"class": "rec", "from": "data:classes", "optimize_move_layers_out": False, "is_output_layer": True,
                     "unit": {
                "twod": {"class": "twod_lstm", "from": ["base:data", "data:source"], "n_out": 4, "pooling": "max",
                         "reuse_params": "base:grid"},
                "output": {"class": "copy", "from": "twod"}}}}, EXTERN, train_flag=False)
        assert len(net.get_params_list()) == 3  # the loop shares the grid's params
        with tf1.Session() as session:
            net.initialize_params(session)
            grid, loop = session.run([net.get_layer(n).output.copy_as_batch_major().placeholder
                                      for n in ("grid", "loop")], feed_dict=_feed(net, src, trg, src_lens, trg_lens))
    np.testing.assert_allclose(loop, grid, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("desc, error", [
    ({"from": ["data"]}, r"twod_lstm: needs exactly 2 sources"),
    ({"from": ["data", "data:classes"], "pooling": "mean"}, r"twod_lstm: pooling must be one of 'last'"),
    ({"from": ["data", "data:classes"], "unit_opts": {"step": 2}}, r"twod_lstm: unit_opts"),
])
def test_twod_lstm_bad_options(desc, error):
    with tf.Graph().as_default():
        with pytest.raises(Exception, match=error):
            build_network({"output": dict({"class": "twod_lstm", "n_out": 3}, **desc)}, EXTERN, train_flag=False)
