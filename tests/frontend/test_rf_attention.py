"""rf attention (torch backend) against numpy references written from the papers: dot attention, multi-head self
attention, Transformer-XL relative positional self attention, learned relative positions (Shaw et al.), causal self
attention (whole sequence == step by step), cross attention, positional encodings; param names and shapes as the
original's. The layers backend runs SelfAttention / RelPosSelfAttention in one case each."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, Tensor, batch_dim, single_step_dim  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
LENS = np.array([6, 4, 1], dtype="int32")
B, T = len(LENS), int(LENS.max())


# ---- torch helpers ----
def _setup(lens=LENS):
    rf.select_backend_torch()
    time_dim = Dim(None, name="time")
    batch_dim.reset_eager()
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(len(lens)))
    time_dim.dyn_size_ext = Tensor("time_size", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor(lens))
    return time_dim


def _tensor(x, dims, dtype="float32", sparse_dim=None):
    return Tensor("x", dims=dims, dtype=dtype, raw_tensor=torch.tensor(x), sparse_dim=sparse_dim)


def _np(t, dims):
    return t.copy_transpose(dims).raw_tensor.detach().numpy()


def _set_random_params(model, seed=3, scale=0.5):
    rng = np.random.RandomState(seed)
    params = {}
    for name, p in model.named_parameters():
        v = rng.uniform(-scale, scale, tuple(d.dimension for d in p.dims)).astype("float32")
        with torch.no_grad():
            p.raw_tensor.copy_(torch.tensor(v))
        params[name] = v
    return params


def _valid(x, lens=LENS):
    """x [B,T,...] with padded frames zeroed (compare only frames within the lengths)."""
    x = x.copy()
    for b, n in enumerate(lens):
        x[b, n:] = 0
    return x


# ---- numpy references ----
def _softmax(x, mask):
    x = np.where(mask, x, -np.inf)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.where(mask, np.exp(x), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def _linear(x, p, name):
    y = x @ p[name + ".weight"]
    return y + p[name + ".bias"] if name + ".bias" in p else y


def _heads_qkv(x, p, heads, key, value):
    qkv = _linear(x, p, "qkv").reshape(x.shape[:-1] + (heads, 2 * key + value))
    return qkv[..., :key], qkv[..., key:2 * key], qkv[..., 2 * key:]


def _attend(scores, v, mask):
    """scores [B,H,T,S], v [B,S,H,V], mask [B,1,T,S] -> [B,T,H*V]"""
    w = _softmax(scores, mask)
    att = np.einsum("bhts,bshv->bthv", w, v)
    return att.reshape(att.shape[:2] + (-1,))


def _np_self_attention(x, p, heads, key, value, lens, causal=False):
    q, k, v = _heads_qkv(x, p, heads, key, value)
    scores = np.einsum("bthk,bshk->bhts", q, k) / math.sqrt(key)
    mask = np.arange(x.shape[1])[None, None, None, :] < lens[:, None, None, None]
    if causal:
        mask = mask & (np.arange(x.shape[1])[None, None, None, :] <= np.arange(x.shape[1])[None, None, :, None])
    return _linear(_attend(scores, v, mask), p, "proj")


def _np_sinusoids(positions, feat, log_step):
    w = np.exp(-np.arange(feat // 2) * log_step)
    arg = positions[:, None].astype("float64") * w[None, :]
    return np.concatenate([np.sin(arg), np.cos(arg)], axis=-1)


def _np_rel_pos_self_attention(x, p, heads, key, value, lens, learned_clip=None, causal=False):
    """Transformer-XL (Dai et al. 2019, section 3.3): a + c = (q + u) k, b + d = (q + v) W_r R_{j-i}."""
    t = x.shape[1]
    q, k, v = _heads_qkv(x, p, heads, key, value)
    rel = np.arange(-(t - 1), t)  # kv_pos - q_pos
    if learned_clip is None:
        enc = _np_sinusoids(rel, x.shape[-1], 2 * math.log(1e4) / x.shape[-1])
    else:
        enc = p["learned_pos_emb.pos_emb"][np.clip(rel, -learned_clip, learned_clip) + learned_clip]
    pos = (enc @ p["linear_pos.weight"]).reshape(len(rel), heads, key)  # [2T-1,H,K]
    ac = np.einsum("bthk,bshk->bhts", q + p["pos_bias_u"], k)
    pos_ij = pos[np.arange(t)[None, :] - np.arange(t)[:, None] + t - 1]  # [T(i),T(j),H,K]: R_{j-i}
    bd = np.einsum("bthk,tshk->bhts", q + p["pos_bias_v"], pos_ij)
    mask = np.arange(t)[None, None, None, :] < lens[:, None, None, None]
    if causal:
        mask = mask & (np.arange(t)[None, None, None, :] <= np.arange(t)[None, None, :, None])
    return _linear(_attend((ac + bd) / math.sqrt(key), v, mask), p, "proj")


# ---- tests ----
def test_dot_attention_matches_numpy_with_masked_keys():
    time_dim = _setup()
    kv_dim = Dim(None, name="kv")
    kv_dim.dyn_size_ext = time_dim.dyn_size_ext
    key_dim, val_dim = Dim(3, name="key"), Dim(2, name="val")
    rng = np.random.RandomState(0)
    q, k, v = rng.randn(B, T, 3), rng.randn(B, T, 3), rng.randn(B, T, 2)
    out = rf.dot_attention(_tensor(q.astype("float32"), [batch_dim, time_dim, key_dim]),
                           _tensor(k.astype("float32"), [batch_dim, kv_dim, key_dim]),
                           _tensor(v.astype("float32"), [batch_dim, kv_dim, val_dim]), key_dim=key_dim, axis=kv_dim)
    mask = np.arange(T)[None, None, :] < LENS[:, None, None]
    ref = np.einsum("bts,bsv->btv", _softmax(np.einsum("btk,bsk->bts", q, k) / math.sqrt(3), mask), v)
    np.testing.assert_allclose(_np(out, [batch_dim, time_dim, val_dim]), ref, rtol=RTOL, atol=ATOL)


def _model_dims(same):
    """(in, key_total, value_total, out): one Dim for all (the common case: Linear(d, d) inside) or four Dims."""
    if same:
        d = Dim(8, name="model")
        return d, d, d, d
    return Dim(8, name="in"), Dim(8, name="key"), Dim(8, name="value"), Dim(8, name="out")


@pytest.mark.parametrize("same", [False, True])
def test_self_attention_matches_numpy(same):
    """With same: rf.SelfAttention(d, d, key_dim_total=d, value_dim_total=d), whose projection is Linear(d, d)."""
    time_dim = _setup()
    model_dim, key_dim, value_dim, out_dim = _model_dims(same)
    att = rf.SelfAttention(model_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim, num_heads=2,
                           att_dropout=0.0)
    assert {n: [d.dimension for d in p.dims] for n, p in att.named_parameters()} == {
        "qkv.weight": [8, 24], "qkv.bias": [24], "proj.weight": [8, 8], "proj.bias": [8]}
    p = _set_random_params(att)
    x = np.random.RandomState(1).randn(B, T, 8).astype("float32")
    out = att(_tensor(x, [batch_dim, time_dim, model_dim]), axis=time_dim)
    ref = _np_self_attention(x, p, 2, 4, 4, LENS)
    np.testing.assert_allclose(_valid(_np(out, [batch_dim, time_dim, out_dim])), _valid(ref), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("learned,same", [(False, False), (True, False), (False, True), (True, True)])
def test_rel_pos_self_attention_matches_transformer_xl_numpy(learned, same):
    time_dim = _setup()
    model_dim, key_dim, value_dim, out_dim = _model_dims(same)
    clip = 2
    att = rf.RelPosSelfAttention(model_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim,
                                 num_heads=2, att_dropout=0.0, learnable_pos_emb=learned,
                                 learnable_pos_emb_clipping=clip)
    shapes = {n: [d.dimension for d in p.dims] for n, p in att.named_parameters()}
    expected = {"qkv.weight": [8, 24], "qkv.bias": [24], "proj.weight": [8, 8], "proj.bias": [8],
                "linear_pos.weight": [8, 8], "pos_bias_u": [2, 4], "pos_bias_v": [2, 4]}
    if learned:
        expected["learned_pos_emb.pos_emb"] = [2 * clip + 1, 8]
    assert shapes == expected
    p = _set_random_params(att)
    x = np.random.RandomState(1).randn(B, T, 8).astype("float32")
    out = att(_tensor(x, [batch_dim, time_dim, model_dim]), axis=time_dim)
    ref = _np_rel_pos_self_attention(x, p, 2, 4, 4, LENS, learned_clip=clip if learned else None)
    np.testing.assert_allclose(_valid(_np(out, [batch_dim, time_dim, out_dim])), _valid(ref), rtol=RTOL, atol=ATOL)


def test_rel_pos_self_attention_shaw_options_param_names():
    in_dim, key_dim = Dim(6, name="in"), Dim(8, name="key")
    rf.select_backend_torch()
    att = rf.RelPosSelfAttention(in_dim, None, key_dim_total=key_dim, value_dim_total=key_dim, num_heads=2,
                                 with_bias=False, with_linear_pos=False, with_pos_bias=False, learnable_pos_emb=True,
                                 separate_pos_emb_per_head=False)
    assert {n: [d.dimension for d in p.dims] for n, p in att.named_parameters()} == {
        "qkv.weight": [6, 24], "learned_pos_emb.pos_emb": [33, 4]}
    assert att.out_dim is key_dim


@pytest.mark.parametrize("cls,same", [("CausalSelfAttention", False), ("RelPosCausalSelfAttention", False),
                                      ("CausalSelfAttention", True), ("RelPosCausalSelfAttention", True)])
def test_causal_self_attention_whole_sequence_equals_steps(cls, same):
    time_dim = _setup()
    model_dim, key_dim, value_dim, out_dim = _model_dims(same)
    att = getattr(rf, cls)(model_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim, num_heads=2,
                           att_dropout=0.0)
    p = _set_random_params(att)
    x = np.random.RandomState(1).randn(B, T, 8).astype("float32")
    seq, _ = att(_tensor(x, [batch_dim, time_dim, model_dim]), axis=time_dim,
                 state=att.default_initial_state(batch_dims=[batch_dim]))
    seq = _np(seq, [batch_dim, time_dim, out_dim])
    ref_fn = _np_self_attention if cls == "CausalSelfAttention" else _np_rel_pos_self_attention
    np.testing.assert_allclose(seq, ref_fn(x, p, 2, 4, 4, np.full([B], T), causal=True), rtol=RTOL, atol=ATOL)
    state = att.default_initial_state(batch_dims=[batch_dim])
    steps = []
    for t in range(T):
        y, state = att(_tensor(x[:, t], [batch_dim, model_dim]), axis=single_step_dim, state=state)
        steps.append(_np(y, [batch_dim, out_dim]))
    np.testing.assert_allclose(np.stack(steps, axis=1), seq, rtol=RTOL, atol=ATOL)


def test_cross_attention_transform_encoder_matches_numpy():
    time_dim = _setup()
    enc_lens = np.array([3, 5, 2], dtype="int32")
    enc_dim = Dim(None, name="enc")
    enc_dim.dyn_size_ext = Tensor("enc_size", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor(enc_lens))
    enc_feat, model_dim = Dim(5, name="enc_feat"), Dim(8, name="model")
    key_dim, value_dim, out_dim = Dim(8, name="key"), Dim(8, name="value"), Dim(8, name="out")
    att = rf.CrossAttention(enc_feat, model_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim,
                            num_heads=2, att_dropout=0.0)
    assert {n: [d.dimension for d in p.dims] for n, p in att.named_parameters()} == {
        "kv.weight": [5, 16], "kv.bias": [16], "q.weight": [8, 8], "q.bias": [8], "proj.weight": [8, 8],
        "proj.bias": [8]}
    p = _set_random_params(att)
    rng = np.random.RandomState(1)
    enc, x = rng.randn(B, 5, 5).astype("float32"), rng.randn(B, T, 8).astype("float32")
    state = att.transform_encoder(_tensor(enc, [batch_dim, enc_dim, enc_feat]), axis=enc_dim)
    out = att(_tensor(x, [batch_dim, time_dim, model_dim]), state)
    kv = _linear(enc, p, "kv").reshape(B, 5, 2, 8)
    q = _linear(x, p, "q").reshape(B, T, 2, 4)
    scores = np.einsum("bthk,bshk->bhts", q, kv[..., :4]) / 2.0
    mask = np.arange(5)[None, None, None, :] < enc_lens[:, None, None, None]
    ref = _linear(_attend(scores, kv[..., 4:], mask), p, "proj")
    np.testing.assert_allclose(_np(out, [batch_dim, time_dim, out_dim]), ref, rtol=RTOL, atol=ATOL)
    # a single query step gives the same as the frame of the sequence
    y = att(_tensor(x[:, 2], [batch_dim, model_dim]), state)
    np.testing.assert_allclose(_np(y, [batch_dim, out_dim]), ref[:, 2], rtol=RTOL, atol=ATOL)


def test_positional_encodings_match_formulas():
    time_dim = _setup()
    feat = Dim(6, name="feat")
    enc = rf.sinusoidal_positional_encoding(spatial_dim=time_dim, feat_dim=feat)
    ref = _np_sinusoids(np.arange(T), 6, math.log(1e4) / 2)
    np.testing.assert_allclose(_np(enc, [time_dim, feat]), ref, rtol=RTOL, atol=ATOL)
    step = rf.sinusoidal_positional_encoding(spatial_dim=single_step_dim, feat_dim=feat, offset=3)
    np.testing.assert_allclose(_np(step, [feat]), ref[3], rtol=RTOL, atol=ATOL)
    rel, rel_dim = rf.relative_positional_encoding(query_spatial_dim=time_dim, key_value_spatial_dim=time_dim,
                                                   feat_dim=feat)
    ref = _np_sinusoids(np.arange(-(T - 1), T), 6, 2 * math.log(1e4) / 6)
    np.testing.assert_allclose(_np(rel, [rel_dim, feat]), ref, rtol=RTOL, atol=ATOL)
    # older call form (spatial_dim, feat_dim)
    rel2, _ = rf.relative_positional_encoding(time_dim, feat)
    np.testing.assert_allclose(_np(rel2, list(rel2.dims)), ref, rtol=RTOL, atol=ATOL)


def test_bad_options_are_refused_with_clear_errors():
    rf.select_backend_torch()
    d = Dim(6, name="d")
    with pytest.raises(ValueError, match="multiple of num_heads"):
        rf.SelfAttention(d, d, key_dim_total=d, value_dim_total=d, num_heads=4)
    time_dim = _setup()
    att = rf.CausalSelfAttention(d, d, key_dim_total=d, value_dim_total=d, num_heads=2)
    with pytest.raises(rf.FrontendError, match="needs state"):
        att(_tensor(np.zeros((B, 6), "float32"), [batch_dim, d]), axis=single_step_dim)
    assert time_dim is not None


# ---- layers backend ----
class _CausalWhole(rf.Module):
    """A causal self attention over the whole sequence, called like a non-causal one."""

    def __init__(self, att):
        super().__init__()
        self.att = att

    def __call__(self, x, *, axis):
        y, _ = self.att(x, axis=axis, state=None)
        return y


def _run_layers(make_model, x, lens, in_dim, out_dim, params):
    """The model (self attention over time) on the RETURNN-layers backend: -> output [B,T,out]."""
    import tensorflow as tf

    from returnn_lite.config import Config, global_config_ctx
    from returnn_lite.frontend_layers import get_net_dict
    from returnn_lite.network import TFNetwork

    time_dim = Dim(None, name="time")
    extern_data = {"data": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}

    def train_step(*, model, extern_data, **_):
        y = model(extern_data["data"], axis=time_dim)
        y.mark_as_output("y", shape=[batch_dim, time_dim, out_dim])
        rf.reduce_sum(y, axis=[batch_dim, time_dim, out_dim]).mark_as_loss("sum")

    config = Config({"extern_data": extern_data, "get_model": lambda **_: make_model(), "task": "train",
                     "train_step": train_step})
    rf.select_backend_returnn_layers_tf()
    try:
        with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session, \
                global_config_ctx(config):
            net_dict, _ = get_net_dict(epoch=1, step=0)
            out = rf.get_run_ctx().outputs.data["y"]
            net = TFNetwork(config=config, train_flag=False, eval_flag=True)
            net.construct_from_dict(net_dict)
            fetch = net.get_layer(out.raw_tensor.get_abs_name()).output.placeholder
            param_vars = {v.op.name[:-len("/param")].replace("/", "."): v for v in net.get_params_list()}
            assert set(param_vars) == set(params)
            session.run(tf.compat.v1.global_variables_initializer())
            for name, v in param_vars.items():
                v.load(params[name], session)
            data = net.extern_data.data["data"]
            feed = {data.placeholder: x, data.dims[1].dyn_size_ext.raw_tensor: lens}
            return session.run(fetch, feed_dict=feed)
    finally:
        time_dim.reset_eager()
        rf.select_backend_torch()


@pytest.mark.parametrize("cls", ["SelfAttention", "RelPosSelfAttention", "CausalSelfAttention",
                                 "RelPosCausalSelfAttention"])
def test_self_attention_on_layers_backend_matches_numpy(cls):
    in_dim, key_dim, value_dim, out_dim = _model_dims(False)
    rf.select_backend_torch()
    shapes = {n: tuple(d.dimension for d in p.dims) for n, p in getattr(rf, cls)(
        in_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim, num_heads=2).named_parameters()}
    rng = np.random.RandomState(3)
    params = {n: rng.uniform(-0.5, 0.5, s).astype("float32") for n, s in sorted(shapes.items())}
    x = np.random.RandomState(1).randn(B, T, 8).astype("float32")

    causal = "Causal" in cls

    def make_model():
        att = getattr(rf, cls)(in_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim, num_heads=2,
                               att_dropout=0.0)
        return _CausalWhole(att) if causal else att

    out = _run_layers(make_model, x, LENS, in_dim, out_dim,
                      {("att." if causal else "") + k: v for k, v in params.items()})
    ref_fn = _np_rel_pos_self_attention if "RelPos" in cls else _np_self_attention
    ref = ref_fn(x, params, 2, 4, 4, LENS, causal=causal)
    np.testing.assert_allclose(_valid(out), _valid(ref), rtol=RTOL, atol=ATOL)


def _np_rope(x, positions):
    """Standard RoPE (Su et al. 2021): pairs (x[2i], x[2i+1]) rotated by pos * 10000^(-2i/F)."""
    feat = x.shape[-1]
    ang = positions[:, None] * 1e4 ** (-2 * np.arange(feat // 2) / feat)  # [T,F/2]
    ang = ang[None, :, None, :]  # [1,T,1,F/2]
    re, im = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = re * np.cos(ang) - im * np.sin(ang)
    out[..., 1::2] = re * np.sin(ang) + im * np.cos(ang)
    return out


def test_rotary_pos_self_attention_matches_numpy_and_causal_steps():
    time_dim = _setup()
    in_dim, key_dim, value_dim, out_dim = _model_dims(False)
    att = rf.RotaryPosSelfAttention(in_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim, num_heads=2,
                                    att_dropout=0.0)
    p = _set_random_params(att)
    x = np.random.RandomState(1).randn(B, T, 8).astype("float32")
    out = att(_tensor(x, [batch_dim, time_dim, in_dim]), axis=time_dim)
    q, k, v = _heads_qkv(x.astype("float64"), p, 2, 4, 4)
    pos = np.arange(T, dtype="float64")
    q, k = _np_rope(q, pos), _np_rope(k, pos)
    mask = np.arange(T)[None, None, None, :] < LENS[:, None, None, None]
    ref = _linear(_attend(np.einsum("bthk,bshk->bhts", q, k) / 2.0, v, mask), p, "proj")
    np.testing.assert_allclose(_valid(_np(out, [batch_dim, time_dim, out_dim])), _valid(ref), rtol=RTOL, atol=ATOL)
    # the causal variant: whole sequence == step by step, and == causal numpy
    catt = rf.RotaryPosCausalSelfAttention(in_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim,
                                           num_heads=2, att_dropout=0.0)
    for name, param in catt.named_parameters():
        with torch.no_grad():
            param.raw_tensor.copy_(torch.tensor(p[name]))
    seq, _ = catt(_tensor(x, [batch_dim, time_dim, in_dim]), axis=time_dim)
    seq = _np(seq, [batch_dim, time_dim, out_dim])
    full_mask = np.broadcast_to(np.arange(T)[None, None, None, :] <= np.arange(T)[None, None, :, None],
                                (B, 1, T, T))
    ref_causal = _linear(_attend(np.einsum("bthk,bshk->bhts", q, k) / 2.0, v, full_mask), p, "proj")
    np.testing.assert_allclose(seq, ref_causal, rtol=RTOL, atol=ATOL)
    state = catt.default_initial_state(batch_dims=[batch_dim])
    for t in range(T):
        y, state = catt(_tensor(x[:, t], [batch_dim, in_dim]), axis=single_step_dim, state=state)
        np.testing.assert_allclose(_np(y, [batch_dim, out_dim]), seq[:, t], rtol=RTOL, atol=ATOL)


class _CausalSteps(rf.Module):
    """A causal self attention run frame by frame in rf.Loop (step-wise with its state)."""

    def __init__(self, att):
        super().__init__()
        self.att = att

    def __call__(self, x, *, axis):
        loop = rf.Loop(axis=axis)
        loop.state.att = self.att.default_initial_state(batch_dims=[batch_dim])
        with loop:
            y_t, loop.state.att = self.att(loop.unstack(x), axis=single_step_dim, state=loop.state.att)
            y = loop.stack(y_t)
        return y


@pytest.mark.parametrize("cls", ["CausalSelfAttention", "RelPosCausalSelfAttention"])
def test_causal_self_attention_steps_in_loop_on_layers_backend(cls):
    in_dim, key_dim, value_dim, out_dim = _model_dims(False)
    rf.select_backend_torch()
    shapes = {n: tuple(d.dimension for d in p.dims) for n, p in getattr(rf, cls)(
        in_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim, num_heads=2).named_parameters()}
    rng = np.random.RandomState(3)
    params = {n: rng.uniform(-0.5, 0.5, s).astype("float32") for n, s in sorted(shapes.items())}
    x = np.random.RandomState(1).randn(B, T, 8).astype("float32")

    def make_model():
        return _CausalSteps(getattr(rf, cls)(in_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim,
                                             num_heads=2, att_dropout=0.0))

    out = _run_layers(make_model, x, LENS, in_dim, out_dim, {"att." + k: v for k, v in params.items()})
    ref_fn = _np_rel_pos_self_attention if "RelPos" in cls else _np_self_attention
    np.testing.assert_allclose(_valid(out), _valid(ref_fn(x, params, 2, 4, 4, LENS, causal=True)), rtol=RTOL,
                               atol=ATOL)


class _ReshapeRelShift(rf.Module):
    """The Transformer-XL shift as pad/reshape/slice over dynamic dims (as model code written for the original
    does), of x[i, p] = 100 i + p; summed over the history: -> [B, T, out] (out: 1 channel, broadcast)."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim

    def __call__(self, x, *, axis):
        pos_dim = axis - 1 + axis
        hist_dim = Dim(None, name="hist")
        x_sum = rf.reduce_sum(x, axis=self.in_dim)
        keys, _ = rf.replace_dim(x_sum, in_dim=axis, out_dim=hist_dim)
        values = rf.cast(rf.combine_bc(rf.range_over_dim(axis) * 100, "+", rf.range_over_dim(pos_dim)), "float32")
        values = rf.combine_bc(values, "+", rf.reduce_sum(x_sum, axis=axis) * 0.0)  # [B,T,P]
        padded, (pos_dim_,) = rf.pad(values, axes=[pos_dim], padding=[(1, 0)], value=0.0)
        padded = rf.reshape(padded, (axis, pos_dim_), (pos_dim_, axis))
        padded, pos_dim_ = rf.slice(padded, axis=pos_dim_, start=1)
        padded = rf.reshape(padded, (pos_dim_, axis), (axis, pos_dim_))
        shifted, _ = rf.slice(padded, axis=pos_dim_, size=hist_dim)  # [B,T,T'] = 100 i + (j - i + T - 1)
        shifted = rf.combine_bc(shifted, "+", keys * 0.0)
        return rf.expand_dim(rf.reduce_sum(shifted, axis=hist_dim, use_mask=False), self.out_dim)


def test_reshape_rel_shift_on_layers_backend():
    in_dim, out_dim = Dim(3, name="in"), Dim(2, name="out")
    x = np.random.RandomState(1).randn(B, T, 3).astype("float32")
    out = _run_layers(lambda: _ReshapeRelShift(in_dim, out_dim), x, LENS, in_dim, out_dim, {})
    ref = [sum(100 * i + (j - i + T - 1) for j in range(T)) for i in range(T)]
    np.testing.assert_allclose(out[0, :, 0], ref)
    np.testing.assert_allclose(out[:, :, 1], out[:, :, 0])


class _HistoryDimCausal(rf.Module):
    """Causal attention as model code written for the original does it: keys/values over a history Dim whose
    lengths are i + 1 at query frame i (Dim of a size tensor)."""

    def __init__(self, att):
        super().__init__()
        self.att = att

    def __call__(self, x, *, axis):
        q, k, v = self.att.forward_qkv(x)
        hist_dim = Dim(rf.range_over_dim(axis, device="cpu") + 1, name="hist")
        k, _ = rf.replace_dim(k, in_dim=axis, out_dim=hist_dim)
        v, _ = rf.replace_dim(v, in_dim=axis, out_dim=hist_dim)
        return self.att.attention(q, k, v, kv_axis=hist_dim)


def test_history_dim_of_size_tensor_on_layers_backend():
    in_dim, key_dim, value_dim, out_dim = _model_dims(False)
    rf.select_backend_torch()
    shapes = {n: tuple(d.dimension for d in p.dims) for n, p in rf.CausalSelfAttention(
        in_dim, out_dim, key_dim_total=key_dim, value_dim_total=value_dim, num_heads=2).named_parameters()}
    rng = np.random.RandomState(3)
    params = {n: rng.uniform(-0.5, 0.5, s).astype("float32") for n, s in sorted(shapes.items())}
    x = np.random.RandomState(1).randn(B, T, 8).astype("float32")

    def make_model():
        return _HistoryDimCausal(rf.CausalSelfAttention(in_dim, out_dim, key_dim_total=key_dim,
                                                        value_dim_total=value_dim, num_heads=2, att_dropout=0.0))

    out = _run_layers(make_model, x, LENS, in_dim, out_dim, {"att." + k: v for k, v in params.items()})
    np.testing.assert_allclose(_valid(out), _valid(_np_self_attention(x, params, 2, 4, 4, LENS, causal=True)),
                               rtol=RTOL, atol=ATOL)
