"""Variants of the losses and the attention layers (time-major inputs, other activations, options) vs. numpy."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], dtype=np.int32)
MASK = np.arange(7)[None, :] < LENS[:, None]  # [B,T]
BM = {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}
TM = {"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}, "classes": {"dim": 4, "sparse": True}}


def _run(net_dict, extern, layers=(), train_flag=True, lens_by_key=None, seed=1):
    """Builds the net, feeds random inputs; returns (fetched values, inputs, params, net)."""
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(extern), train_flag=train_flag)
        net.construct_from_dict(net_dict)
        fetches = {name: net.get_layer(name).output.placeholder for name in layers}
        for name, holder in net.losses_dict.items():
            for key, value in (("loss", holder.get_loss_value()), ("error", holder.get_error_value()),
                               ("norm", holder.get_norm_factor())):
                if value is not None:
                    fetches["%s:%s" % (name, key)] = tf.convert_to_tensor(value)
        rng = np.random.RandomState(seed)
        feed, inputs = {}, {}
        for key, data in net.extern_data.data.items():
            lens = (lens_by_key or {}).get(key, LENS)
            shape = [len(lens) if i == data.batch_dim_axis else int(lens.max()) if d is None else d
                     for i, d in enumerate(data.batch_shape)]
            x = rng.randint(0, data.dim, size=shape) if data.sparse else rng.randn(*shape)
            inputs[key] = feed[data.placeholder] = x.astype(data.dtype)
            for size in data.size_placeholder.values():
                feed[size] = lens
        with tf1.Session() as session:
            net.initialize_params(session)
            out = session.run(fetches, feed_dict=feed)
            params = {p.op.name: session.run(p) for p in net.get_params_list()}
        return out, inputs, params, net


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("activation", [None, "log_softmax", "relu"])
def test_ce_on_non_softmax_output_is_clipped_log(activation):
    # the output is taken as probabilities: -log(max(p_target, 1e-20)), finite also for p <= 0
    out, inp, _, _ = _run({"output": {"class": "linear", "activation": activation, "n_out": 4, "from": "data",
                                      "loss": "ce"}}, BM, layers=["output"])
    y, cls = out["output"], inp["classes"]
    p = np.take_along_axis(y, cls[..., None], -1)[..., 0]
    np.testing.assert_allclose(out["output:loss"], (-np.log(np.maximum(p, 1e-20)) * MASK).sum(), rtol=1e-5)
    np.testing.assert_allclose(out["output:error"], ((y.argmax(-1) != cls) * MASK).sum())
    np.testing.assert_allclose(out["output:norm"], 1.0 / LENS.sum(), rtol=1e-6)


def test_ce_fake_upper_bound_exact_and_focal_time_major():
    out, inp, _, _ = _run({"output": {"class": "linear", "activation": None, "n_out": 4, "from": "data",
                                      "loss": "ce", "loss_opts": {"fake_upper_bound": 3.0}}}, BM, layers=["output"])
    p = np.take_along_axis(out["output"], inp["classes"][..., None], -1)[..., 0]
    ref = np.minimum(-np.log(np.maximum(p, 1e-20)), 3.0)
    np.testing.assert_allclose(out["output:loss"], (ref * MASK).sum(), rtol=1e-5)
    out, inp, _, _ = _run({"output": {"class": "softmax", "from": "data", "loss": "ce",
                                      "loss_opts": {"focal_loss_factor": 2.0}}}, TM, layers=["output"])
    y = out["output"].transpose(1, 0, 2)
    p = np.take_along_axis(y, inp["classes"][..., None], -1)[..., 0]
    np.testing.assert_allclose(out["output:loss"], (-np.log(p) * (1 - p) ** 2 * MASK).sum(), rtol=1e-5)


@pytest.mark.parametrize("loss", ["bin_ce", "mse", "l1", "mean_l1"])
def test_regression_losses_time_major(loss):
    extern = dict(TM, t={"dim": 4})
    out, inp, _, _ = _run({"output": {"class": "linear", "n_out": 4, "from": "data", "loss": loss, "target": "t"}},
                          extern, layers=["output"])
    y, t, m = out["output"].transpose(1, 0, 2), inp["t"], MASK[..., None]
    ref = {"bin_ce": (np.maximum(y, 0) - y * t + np.log1p(np.exp(-abs(y)))) / 4, "mse": (y - t) ** 2 / 4,
           "l1": abs(y - t), "mean_l1": abs(y - t) / 4}[loss]
    np.testing.assert_allclose(out["output:loss"], (ref * m).sum(), rtol=1e-5)
    if loss == "bin_ce":
        err = ((y > 0) != (t > 0.5)) * m / 4
    else:
        err = (y.argmax(-1) != t.argmax(-1)) * MASK
    np.testing.assert_allclose(out["output:error"], err.sum(), rtol=1e-6)


def test_ctc_log_softmax_output_taken_as_probs_and_output_in_log_space():
    tl = {"classes": np.array([3, 2, 2], np.int32)}
    net = {"output": {"class": "linear", "activation": "log_softmax", "n_out": 5, "from": "data", "loss": "ctc"}}
    out_prob, _, _, _ = _run(net, BM, lens_by_key=tl)
    net["output"]["loss_opts"] = {"output_in_log_space": True}
    out_log, _, _, _ = _run(net, BM, lens_by_key=tl)
    out_sm, _, _, _ = _run({"output": {"class": "softmax", "n_out": 5, "from": "data", "loss": "ctc"}}, BM,
                           lens_by_key=tl)
    # same params (same seed/init): log_softmax in log space == softmax output
    np.testing.assert_allclose(out_log["output:loss"], out_sm["output:loss"], rtol=1e-5)
    # as probabilities, safe_log(log-probs) is constant log(1e-20): not the softmax value
    assert abs(out_prob["output:loss"] - out_sm["output:loss"]) > 1.0
    np.testing.assert_allclose(out_sm["output:norm"], 1.0 / 7, rtol=1e-6)


def test_sparse_softmax_ce_layer_targets_with_other_time_tag():
    for extern in (BM, TM):
        out, inp, _, net = _run(
            {"logits": {"class": "linear", "n_out": 4, "from": "data"},
             "output": {"class": "sparse_softmax_cross_entropy_with_logits", "logits": "logits",
                        "targets": "data:classes"}}, extern, layers=["output", "logits"], train_flag=False)
        lg, res = out["logits"], out["output"]
        if extern is TM:
            lg, res = lg.transpose(1, 0, 2), res.T
            assert net.get_layer("output").output.time_dim_axis == 0
        ref = -np.log(np.take_along_axis(_softmax(lg), inp["classes"][..., None], -1)[..., 0])
        np.testing.assert_allclose(res * MASK, ref * MASK, rtol=1e-5, atol=1e-6)


def _np_self_att(x, lens, qkv, heads, key_dim, n_out, left=False, key_shift=None):
    b, t, _ = x.shape
    y = (x @ qkv).reshape(b, t, heads, -1).transpose(0, 2, 1, 3)
    kd = key_dim // heads
    q, k, v = y[..., :kd] * kd ** -0.5, y[..., kd:2 * kd], y[..., 2 * kd:]
    e = q @ k.transpose(0, 1, 3, 2)
    if key_shift is not None:
        e = e + np.einsum("bhqd,qkd->bhqk", q, key_shift)
    mask = np.tril(np.ones((t, t), bool))[None, None] if left else (np.arange(t)[None] < lens[:, None])[:, None, None]
    return (_softmax(np.where(mask, e, -np.inf)) @ v).transpose(0, 2, 1, 3).reshape(b, t, n_out)


@pytest.mark.parametrize("left", [False, True])
def test_self_attention_time_major_key_shift_eval_dropout(left):
    net = {"rel": {"class": "relative_positional_encoding", "from": "data", "n_out": 2, "clipping": 2},
           "output": {"class": "self_attention", "from": "data", "n_out": 12, "num_heads": 4, "total_key_dim": 8,
                      "key_shift": "rel", "attention_left_only": left, "attention_dropout": 0.3}}
    out, inp, params, net_ = _run(net, {"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}},
                                  layers=["output", "rel"], train_flag=False)
    o = net_.get_layer("output").output
    assert (o.batch_dim_axis, o.time_dim_axis, o.feature_dim_axis, o.dim) == (0, 1, 2, 12)
    r = net_.get_layer("rel").output
    assert r.batch_dim_axis is None and r.dims[0] is r.dims[1] and r.feature_dim_axis == 2
    x = inp["data"].transpose(1, 0, 2)
    idx = np.clip(np.arange(7)[None, :] - np.arange(7)[:, None], -2, 2) + 2
    key_shift = params["rel/encoding_matrix"][idx]
    np.testing.assert_allclose(out["rel"], key_shift, rtol=1e-6)
    ref = _np_self_att(x, LENS, params["output/QKV"], 4, 8, 12, left=left, key_shift=key_shift)
    np.testing.assert_allclose(out["output"] * MASK[..., None], ref * MASK[..., None], rtol=1e-4, atol=1e-5)


def test_self_attention_static_time_and_sparse_input():
    out, inp, params, _ = _run({"output": {"class": "self_attention", "from": "data", "n_out": 6, "num_heads": 1,
                                           "total_key_dim": 4}},
                               {"data": {"shape": (6, 5), "time_dim_axis": 1}}, layers=["output"], train_flag=False)
    ref = _np_self_att(inp["data"], np.array([6, 6, 6]), params["output/QKV"], 1, 4, 6)
    np.testing.assert_allclose(out["output"], ref, rtol=1e-4, atol=1e-5)
    out, inp, params, _ = _run({"output": {"class": "self_attention", "from": "data:classes", "n_out": 8,
                                           "num_heads": 2, "total_key_dim": 8}}, BM, layers=["output"],
                               train_flag=False)
    ref = _np_self_att(np.eye(4)[inp["classes"]], LENS, params["output/QKV"], 2, 8, 8)
    np.testing.assert_allclose(out["output"] * MASK[..., None], ref * MASK[..., None], rtol=1e-4, atol=1e-5)


def _np_pos_enc(pos, n):
    half = n // 2
    inv = np.exp(np.arange(half) * -(np.log(1e4) / (half - 1)))
    s = np.asarray(pos, np.float64)[..., None] * inv
    e = np.concatenate([np.sin(s), np.cos(s)], -1)
    return np.concatenate([e, np.zeros(e.shape[:-1] + (n % 2,))], -1)


@pytest.mark.parametrize("opts", [{"n_out": 7}, {"add_to_input": True, "constant": 2}])
def test_positional_encoding_time_major(opts):
    out, inp, _, net = _run({"output": dict({"class": "positional_encoding", "from": "data"}, **opts)},
                            {"data": {"dim": 6, "time_dim_axis": 0, "batch_dim_axis": 1}}, layers=["output"],
                            train_flag=False)
    o = net.get_layer("output").output
    assert (o.time_dim_axis, o.batch_dim_axis, o.dim) == (0, 1, opts.get("n_out", 6))
    pos = np.full((7,), opts["constant"]) if "constant" in opts else np.arange(7)
    ref = _np_pos_enc(pos, o.dim)[:, None]
    if opts.get("add_to_input"):
        ref = ref + inp["data"]
    np.testing.assert_allclose(out["output"], np.broadcast_to(ref, out["output"].shape), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", ["dot_attention", "concat_attention"])
def test_global_attention_time_major_base(cls):
    net = {"ctx": {"class": "linear", "activation": None, "n_out": 4, "from": "data"},
           "output": {"class": cls, "from": "data:q", "base": "data", "base_ctx": "ctx"}}
    extern = {"data": {"dim": 5, "time_dim_axis": 0, "batch_dim_axis": 1}, "q": {"shape": (4,), "time_dim_axis": None}}
    out, inp, params, _ = _run(net, extern, layers=["output", "ctx"], train_flag=False)
    x, c, q = inp["data"].transpose(1, 0, 2), out["ctx"].transpose(1, 0, 2), inp["q"]
    if cls == "dot_attention":
        e = np.einsum("btf,bf->bt", c, q)
    else:
        e = (np.tanh(c + q[:, None]) * params["output/v"]).sum(-1)
    w = _softmax(np.where(MASK, e, -np.inf))
    np.testing.assert_allclose(out["output"], np.einsum("bt,btf->bf", w, x), rtol=1e-4, atol=1e-5)


def test_ctc_use_viterbi_is_best_path_score():
    import itertools

    tl = {"classes": np.array([3, 2, 2], np.int32)}
    out, inp, _, _ = _run({"output": {"class": "softmax", "from": "data", "loss": "ctc",
                                      "loss_opts": {"use_viterbi": True}}}, TM, layers=["output"], lens_by_key=tl)
    log_probs = np.log(out["output"].transpose(1, 0, 2))
    ref = 0.0
    for b in range(3):
        lp, labels, best = log_probs[b, :LENS[b]], list(inp["classes"][b, :tl["classes"][b]]), -np.inf
        for align in itertools.product(range(5), repeat=len(lp)):
            collapsed = [k for i, k in enumerate(align) if (i == 0 or k != align[i - 1]) and k != 4]
            if collapsed == labels:
                best = max(best, sum(lp[t, k] for t, k in enumerate(align)))
        ref -= best
    np.testing.assert_allclose(out["output:loss"], ref, rtol=1e-5)


def test_ctc_loss_layer_max_approx_not_below_full_sum():
    tl = {"classes": np.array([3, 2, 2], np.int32)}
    net = {"logits": {"class": "linear", "n_out": 5, "from": "data"},
           "full": {"class": "ctc_loss", "logits": "logits", "targets": "data:classes"},
           "best": {"class": "ctc_loss", "logits": "logits", "targets": "data:classes", "max_approx": True}}
    out, _, _, net_ = _run(net, TM, layers=["full", "best"], train_flag=False, lens_by_key=tl)
    assert net_.get_layer("best").output.batch_shape == (None,)
    assert np.all(out["best"] >= out["full"] - 1e-5) and np.all(out["best"] - out["full"] < 10.0)


def test_ce_and_loss_layer_static_time_axis():
    extern = {"data": {"shape": (6, 5), "time_dim_axis": 1},
              "classes": {"shape": (6,), "dim": 4, "sparse": True, "time_dim_axis": 1}}
    out, inp, _, _ = _run({"output": {"class": "softmax", "from": "data", "loss": "ce"},
                           "l": {"class": "loss", "from": "output", "loss_": "ce"}}, extern, layers=["output", "l"])
    nll = -np.log(np.take_along_axis(out["output"], inp["classes"][..., None], -1)[..., 0])
    np.testing.assert_allclose(out["output:loss"], nll.sum(), rtol=1e-5)
    np.testing.assert_allclose(out["output:norm"], 1.0 / 18, rtol=1e-6)
    np.testing.assert_allclose(out["l"], nll, rtol=1e-5)


def test_only_on_eval_loss_is_zero_in_training():
    out, _, _, net = _run({"output": {"class": "softmax", "from": "data", "loss": "ce", "only_on_eval": True}}, BM)
    assert out["output:loss"] == 0.0 and out["output:error"] == 0.0
    np.testing.assert_allclose(out["output:norm"], 1.0 / LENS.sum(), rtol=1e-6)


def test_loss_error_at_objective_names_the_layer():
    from returnn_lite.network import NetworkLayerException

    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(BM), train_flag=True)
        net.construct_from_dict({"out": {"class": "linear", "n_out": 4, "from": "data", "loss": "l1"}})
        with pytest.raises(NetworkLayerException, match="'out'.*l1"):
            net.get_objective()


def _levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        new = [i]
        for j in range(1, len(b) + 1):
            new.append(min(row[j] + 1, new[j - 1] + 1, row[j - 1] + (a[i - 1] != b[j - 1])))
        row = new
    return row[-1]


def test_edit_distance_layer_time_major_and_loss_layer_use_error():
    tl = {"classes": np.array([3, 2, 2], np.int32)}
    extern = {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True},
              "hyp": {"dim": 4, "sparse": True, "time_dim_axis": 0, "batch_dim_axis": 1}}
    out, inp, _, net = _run({"output": {"class": "edit_distance", "a": "data:hyp", "b": "data:classes"},
                             "sm": {"class": "softmax", "n_out": 4, "from": "data"},
                             "err": {"class": "loss", "from": "sm", "loss_": "ce", "target_": "hyp",
                                     "use_error": True}},
                            extern, layers=["output", "sm", "err"], train_flag=False, lens_by_key=tl)
    hyp, ref = inp["hyp"].T, inp["classes"]
    expected = [_levenshtein(list(hyp[b, :LENS[b]]), list(ref[b, :tl["classes"][b]])) for b in range(3)]
    np.testing.assert_array_equal(out["output"], expected)
    assert net.get_layer("output").output.dtype == "int32"
    err = net.get_layer("err").output
    assert err.batch_shape == (None, None) and err.dtype == "float32" and err.feature_dim_axis is None
    np.testing.assert_array_equal(out["err"] * MASK, (out["sm"].argmax(-1) != hyp) * MASK)
