"""rf Transformer decoder and encoder (torch backend) against numpy references of the pre-norm Transformer (Vaswani
et al. 2017 with the norms before each block): param names/shapes as the original's, decoder full sequence == step
by step (with cross attention), encoder, gated feed-forward, make_norm / build_from_dict options."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.frontend.decoder.transformer import (  # noqa: E402
    FeedForward, FeedForwardGated, TransformerDecoder, TransformerDecoderLayer, make_norm)
from returnn_lite.frontend.encoder.transformer import TransformerEncoder  # noqa: E402
from returnn_lite.tensor import Dim, Tensor, batch_dim, single_step_dim  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
VOCAB, MODEL, HEADS, FF, ENC = 7, 8, 2, 12, 5
DEC_LENS = np.array([5, 3], "int32")
ENC_LENS = np.array([4, 6], "int32")


def _dyn_dim(name, lens):
    d = Dim(None, name=name)
    d.dyn_size_ext = Tensor(name + "_size", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor(lens))
    return d


def _setup():
    rf.select_backend_torch()
    batch_dim.reset_eager()
    batch_dim.dyn_size_ext = Tensor("batch", dims=[], dtype="int32", raw_tensor=torch.tensor(len(DEC_LENS)))


def _set_random_params(model, seed=5):
    rng = np.random.RandomState(seed)
    params = {}
    for name, p in model.named_parameters():
        v = rng.uniform(-0.5, 0.5, tuple(d.dimension for d in p.dims)).astype("float32")
        if name.endswith("layer_norm.scale") or name.endswith("norm.scale"):
            v = v + 1.0
        with torch.no_grad():
            p.raw_tensor.copy_(torch.tensor(v))
        params[name] = v.astype("float64")
    return params


def _np_out(t, dims):
    return t.copy_transpose(dims).raw_tensor.detach().numpy()


# ---- numpy reference ----
def _ln(x, p, name, eps=1e-6):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * p[name + ".scale"] + p[name + ".bias"]


def _lin(x, p, name):
    y = x @ p[name + ".weight"]
    return y + p[name + ".bias"] if name + ".bias" in p else y


def _mha(q, k, v, mask, p, name):
    """q [B,T,H,K], k/v [B,S,H,*], mask [B,T,S] -> proj(merged heads)"""
    s = np.einsum("bthk,bshk->bhts", q, k) / math.sqrt(q.shape[-1])
    s = np.where(mask[:, None], s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = np.where(mask[:, None], w, 0.0)
    w /= w.sum(-1, keepdims=True)
    att = np.einsum("bhts,bshv->bthv", w, v)
    return _lin(att.reshape(att.shape[:2] + (-1,)), p, name + ".proj")


def _self_att(x, p, name, mask):
    b, t, _ = x.shape
    qkv = _lin(x, p, name + ".qkv").reshape(b, t, HEADS, -1)
    kd = MODEL // HEADS
    return _mha(qkv[..., :kd], qkv[..., kd:2 * kd], qkv[..., 2 * kd:], mask, p, name)


def _cross_att(x, enc, enc_lens, p, name):
    kv = _lin(enc, p, name + ".kv").reshape(enc.shape[0], enc.shape[1], HEADS, -1)
    q = _lin(x, p, name + ".q").reshape(x.shape[0], x.shape[1], HEADS, -1)
    kd = MODEL // HEADS
    mask = np.arange(enc.shape[1])[None, None, :] < enc_lens[:, None, None]
    mask = np.broadcast_to(mask, (x.shape[0], x.shape[1], enc.shape[1]))
    return _mha(q, kv[..., :kd], kv[..., kd:], mask, p, name)


def _ff(x, p, name):
    return _lin(np.maximum(_lin(x, p, name + ".linear_ff"), 0.0), p, name + ".linear_out")


def _sinusoidal(t, feat):
    w = np.exp(-np.arange(feat // 2) * math.log(1e4) / (feat // 2 - 1))
    arg = np.arange(t)[:, None] * w[None, :]
    return np.concatenate([np.sin(arg), np.cos(arg)], -1)


def _np_decoder(labels, enc, p, num_layers, scale):
    b, t = labels.shape
    x = p["input_embedding.weight"][labels] * scale + _sinusoidal(t, MODEL)
    causal = np.broadcast_to(np.tril(np.ones((t, t), bool)), (b, t, t))
    for i in range(num_layers):
        n = "layers.%i" % i
        x = x + _self_att(_ln(x, p, n + ".self_att_layer_norm"), p, n + ".self_att", causal)
        x = x + _cross_att(_ln(x, p, n + ".cross_att_layer_norm"), enc, ENC_LENS, p, n + ".cross_att")
        x = x + _ff(_ln(x, p, n + ".ff_layer_norm"), p, n + ".ff")
    x = _ln(x, p, "final_layer_norm")
    return x @ p["input_embedding.weight"].T  # shared embedding


def _np_encoder(labels, lens, p, num_layers):
    b, t = labels.shape
    x = p["input_embedding.weight"][labels] * math.sqrt(MODEL) + _sinusoidal(t, MODEL)
    mask = np.broadcast_to((np.arange(t)[None, None, :] < lens[:, None, None]), (b, t, t))
    for i in range(num_layers):
        n = "layers.%i" % i
        x = x + _self_att(_ln(x, p, n + ".self_att_layer_norm"), p, n + ".self_att", mask)
        x = x + _ff(_ln(x, p, n + ".ff_layer_norm"), p, n + ".ff")
    return _ln(x, p, "final_layer_norm")


def _decoder(model_dim, vocab_dim, enc_feat, num_layers=2):
    return TransformerDecoder(enc_feat, vocab_dim, model_dim, num_layers=num_layers, ff_dim=FF, num_heads=HEADS,
                              dropout=0.0, att_dropout=0.0, share_embedding=True, input_embedding_scale=2.0,
                              input_dropout=0.0)


def test_transformer_decoder_param_names_and_shapes():
    _setup()
    model_dim, vocab_dim, enc_feat = Dim(MODEL, name="model"), Dim(VOCAB, name="vocab"), Dim(ENC, name="enc_feat")
    dec = _decoder(model_dim, vocab_dim, enc_feat, num_layers=2)
    shapes = {n: [d.dimension for d in p.dims] for n, p in dec.named_parameters()}
    layer0 = {
        "self_att.qkv.weight": [8, 24], "self_att.qkv.bias": [24], "self_att.proj.weight": [8, 8],
        "self_att.proj.bias": [8], "self_att_layer_norm.scale": [8], "self_att_layer_norm.bias": [8],
        "cross_att.kv.weight": [5, 16], "cross_att.kv.bias": [16], "cross_att.q.weight": [8, 8],
        "cross_att.q.bias": [8], "cross_att.proj.weight": [8, 8], "cross_att.proj.bias": [8],
        "cross_att_layer_norm.scale": [8], "cross_att_layer_norm.bias": [8],
        "ff.linear_ff.weight": [8, 12], "ff.linear_ff.bias": [12], "ff.linear_out.weight": [12, 8],
        "ff.linear_out.bias": [8], "ff_layer_norm.scale": [8], "ff_layer_norm.bias": [8]}
    expected = {"input_embedding.weight": [7, 8], "final_layer_norm.scale": [8], "final_layer_norm.bias": [8]}
    for i in range(2):
        expected.update({"layers.%i.%s" % (i, k): v for k, v in layer0.items()})
    assert shapes == expected
    assert dec.logits.weight is dec.input_embedding.weight
    # the layers are copies: own params, same dims
    assert dec.layers[0].ff.linear_ff.weight is not dec.layers[1].ff.linear_ff.weight
    assert dec.layers[1].self_att.in_dim is model_dim


def test_transformer_decoder_full_sequence_equals_steps_and_numpy():
    _setup()
    model_dim, vocab_dim, enc_feat = Dim(MODEL, name="model"), Dim(VOCAB, name="vocab"), Dim(ENC, name="enc_feat")
    time_dim, enc_dim = _dyn_dim("time", DEC_LENS), _dyn_dim("enc", ENC_LENS)
    dec = _decoder(model_dim, vocab_dim, enc_feat)
    p = _set_random_params(dec)
    rng = np.random.RandomState(1)
    labels = rng.randint(0, VOCAB, (2, 5)).astype("int32")
    enc = rng.randn(2, 6, ENC).astype("float32")
    enc_state = dec.transform_encoder(Tensor("enc", dims=[batch_dim, enc_dim, enc_feat], dtype="float32",
                                             raw_tensor=torch.tensor(enc)), axis=enc_dim)
    logits, _ = dec(Tensor("labels", dims=[batch_dim, time_dim], dtype="int32", raw_tensor=torch.tensor(labels),
                           sparse_dim=vocab_dim),
                    spatial_dim=time_dim, state=dec.default_initial_state(batch_dims=[batch_dim]), encoder=enc_state)
    full = _np_out(logits, [batch_dim, time_dim, vocab_dim])
    ref = _np_decoder(labels, enc.astype("float64"), p, 2, 2.0)
    for b, n in enumerate(DEC_LENS):
        np.testing.assert_allclose(full[b, :n], ref[b, :n], rtol=RTOL, atol=ATOL)
    state = dec.default_initial_state(batch_dims=[batch_dim])
    for t in range(5):
        step_logits, state = dec(Tensor("label", dims=[batch_dim], dtype="int32", sparse_dim=vocab_dim,
                                        raw_tensor=torch.tensor(labels[:, t])),
                                 spatial_dim=single_step_dim, state=state, encoder=enc_state)
        step = _np_out(step_logits, [batch_dim, vocab_dim])
        np.testing.assert_allclose(step, ref[:, t], rtol=RTOL, atol=ATOL)
    assert int(state.pos.raw_tensor) == 5
    # output_only_last_frame: the logits of the last frame within each length
    last, _ = dec(Tensor("labels", dims=[batch_dim, time_dim], dtype="int32", raw_tensor=torch.tensor(labels),
                         sparse_dim=vocab_dim), spatial_dim=time_dim,
                  state=dec.default_initial_state(batch_dims=[batch_dim]), encoder=enc_state,
                  output_only_last_frame=True)
    np.testing.assert_allclose(_np_out(last, [batch_dim, vocab_dim]), ref[[0, 1], DEC_LENS - 1], rtol=RTOL,
                               atol=ATOL)


def test_transformer_encoder_matches_numpy():
    _setup()
    model_dim, vocab_dim = Dim(MODEL, name="model"), Dim(VOCAB, name="vocab")
    time_dim = _dyn_dim("time", DEC_LENS)
    encoder = TransformerEncoder(vocab_dim, model_dim, num_layers=2, num_heads=HEADS, dropout=0.0, att_dropout=0.0,
                                 ff=rf.build_dict(FeedForward, ff_dim=FF))
    names = sorted(n for n, _ in encoder.named_parameters())
    assert "layers.1.self_att.qkv.weight" in names and "layers.0.ff.linear_ff.weight" in names
    assert "final_layer_norm.scale" in names and not any("cross_att" in n for n in names)
    p = _set_random_params(encoder)
    labels = np.random.RandomState(2).randint(0, VOCAB, (2, 5)).astype("int32")
    collected = {}
    out = encoder(Tensor("labels", dims=[batch_dim, time_dim], dtype="int32", raw_tensor=torch.tensor(labels),
                         sparse_dim=vocab_dim), spatial_dim=time_dim, collected_outputs=collected)
    assert sorted(collected) == ["0", "1"]
    got = _np_out(out, [batch_dim, time_dim, model_dim])
    ref = _np_encoder(labels, DEC_LENS, p, 2)
    for b, n in enumerate(DEC_LENS):
        np.testing.assert_allclose(got[b, :n], ref[b, :n], rtol=RTOL, atol=ATOL)


def test_feed_forward_gated_and_make_norm():
    _setup()
    d = Dim(MODEL, name="model")
    ff = FeedForwardGated(d, dropout=0.0)
    assert ff.linear_ff.out_dim.dimension == 2 * 256 and ff.linear_out.in_dim.dimension == 256
    assert sorted(n for n, _ in ff.named_parameters()) == ["linear_ff.weight", "linear_out.weight"]
    p = _set_random_params(ff)
    x = np.random.RandomState(0).randn(3, MODEL).astype("float32")
    y = ff(Tensor("x", dims=[batch_dim, d], dtype="float32", raw_tensor=torch.tensor(x[:2])))
    h = x[:2] @ p["linear_ff.weight"]
    a, b = h[:, :256], h[:, 256:]
    ref = (a / (1 + np.exp(-a)) * b) @ p["linear_out.weight"]
    np.testing.assert_allclose(_np_out(y, [batch_dim, d]), ref, rtol=RTOL, atol=ATOL)
    assert isinstance(make_norm(rf.LayerNorm, d), rf.LayerNorm)
    assert make_norm({"class": "rf.LayerNorm", "eps": 1e-3}, d).eps == 1e-3
    with pytest.raises(TypeError, match="make_norm"):
        make_norm(3, d)


def test_decoder_layer_options_are_honoured_or_refused():
    _setup()
    d, enc_feat = Dim(MODEL, name="model"), Dim(ENC, name="enc_feat")
    layer = TransformerDecoderLayer(None, d, num_heads=HEADS, self_att=rf.RelPosCausalSelfAttention,
                                    ff=FeedForwardGated)
    assert isinstance(layer.self_att, rf.RelPosCausalSelfAttention) and layer.cross_att is None
    assert isinstance(layer.ff, FeedForwardGated)
    with pytest.raises(TypeError, match="unexpected options"):
        TransformerDecoder(enc_feat, Dim(VOCAB, name="vocab"), d, num_layers=1, bad_option=1)
    with pytest.raises(ValueError, match="share_embedding"):
        TransformerDecoder(enc_feat, Dim(VOCAB, name="vocab"), d, num_layers=1, share_embedding=True,
                           logits_with_bias=True)


@pytest.mark.parametrize("mode", ["full", "steps"])
def test_transformer_decoder_on_layers_backend_matches_numpy(mode):
    """The layers backend: the whole sequence, and step by step in rf.Loop with the decoder state."""
    import tensorflow as tf

    from returnn_lite.config import Config, global_config_ctx
    from returnn_lite.frontend_layers import get_net_dict
    from returnn_lite.network import TFNetwork

    model_dim, vocab_dim, enc_feat = Dim(MODEL, name="model"), Dim(VOCAB, name="vocab"), Dim(ENC, name="enc_feat")
    time_dim, enc_dim = Dim(None, name="time"), Dim(None, name="enc")
    extern_data = {"labels": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": vocab_dim},
                   "enc": {"dims": (batch_dim, enc_dim, enc_feat), "dtype": "float32"}}

    def train_step(*, model, extern_data, **_):
        enc = model.transform_encoder(extern_data["enc"], axis=enc_dim)
        state = model.default_initial_state(batch_dims=[batch_dim])
        if mode == "full":
            logits, _ = model(extern_data["labels"], spatial_dim=time_dim, state=state, encoder=enc)
        else:
            loop = rf.Loop(axis=time_dim)
            loop.state.dec = state
            with loop:
                logits_t, loop.state.dec = model(loop.unstack(extern_data["labels"]), spatial_dim=single_step_dim,
                                                 state=loop.state.dec, encoder=enc)
                logits = loop.stack(logits_t)
        logits.mark_as_output("logits", shape=[batch_dim, time_dim, vocab_dim])
        rf.reduce_sum(logits, axis=[batch_dim, time_dim, vocab_dim]).mark_as_loss("sum")

    _setup()
    p = _set_random_params(_decoder(model_dim, vocab_dim, enc_feat))
    rng = np.random.RandomState(1)
    labels, enc = rng.randint(0, VOCAB, (2, 5)).astype("int32"), rng.randn(2, 6, ENC).astype("float32")
    config = Config({"extern_data": extern_data, "get_model": lambda **_: _decoder(model_dim, vocab_dim, enc_feat),
                     "task": "train", "train_step": train_step})
    rf.select_backend_returnn_layers_tf()
    try:
        with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session, \
                global_config_ctx(config):
            net_dict, _ = get_net_dict(epoch=1, step=0)
            out = rf.get_run_ctx().outputs.data["logits"]
            net = TFNetwork(config=config, train_flag=False, eval_flag=True)
            net.construct_from_dict(net_dict)
            fetch = net.get_layer(out.raw_tensor.get_abs_name()).output.placeholder
            param_vars = {v.op.name[:-len("/param")].replace("/", "."): v for v in net.get_params_list()}
            assert set(param_vars) == set(p)
            session.run(tf.compat.v1.global_variables_initializer())
            for name, v in param_vars.items():
                v.load(p[name].astype("float32"), session)
            ed = net.extern_data.data
            got = session.run(fetch, feed_dict={
                ed["labels"].placeholder: labels, ed["labels"].dims[1].dyn_size_ext.raw_tensor: DEC_LENS,
                ed["enc"].placeholder: enc, ed["enc"].dims[1].dyn_size_ext.raw_tensor: ENC_LENS})
    finally:
        for d in (time_dim, enc_dim):
            d.reset_eager()
        rf.select_backend_torch()
    ref = _np_decoder(labels, enc.astype("float64"), p, 2, 2.0)
    for b, n in enumerate(DEC_LENS):
        np.testing.assert_allclose(got[b, :n], ref[b, :n], rtol=RTOL, atol=ATOL)
