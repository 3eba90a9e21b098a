"""
The extra rf cases of tools/make_frontend_cases.py: per case the model source (written against ``returnn_lite.frontend``
as the conformance cases are), its inputs/params, and an independent float64 numpy reference of what the original
computes (masked reductions over dynamic dims, unmasked convs, LSTM gates i, f, g, o, the loss normalization).
"""

from __future__ import annotations

import numpy as np

SIZES = [7, 5, 4]
B, T = 3, 7


def mask_bt(sizes=SIZES, t=T):
    return np.arange(t)[None, :] < np.asarray(sizes)[:, None]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis, mask=None):
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis, mask=None):
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def lstm_step(x, h, c, p, prefix):
    """x [B,in], h/c [B,out]; ff_weight [4*out,in], rec_weight [4*out,out], bias [4*out]; gates i, f, g, o"""
    gates = x @ p[prefix + "ff_weight"].T + h @ p[prefix + "rec_weight"].T + p[prefix + "bias"]
    i, f, g, o = np.split(gates, 4, axis=-1)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    return h, c


def lstm_seq(x, h, c, p, prefix, sizes=SIZES):
    """x [B,T,in] -> ys [B,T,out], final (h, c) at each sequence's end"""
    ys = []
    for t in range(x.shape[1]):
        h2, c2 = lstm_step(x[:, t], h, c, p, prefix)
        valid = (t < np.asarray(sizes))[:, None]
        h, c = np.where(valid, h2, h), np.where(valid, c2, c)
        ys.append(h2)
    return np.stack(ys, 1), h, c


def gelu(x):
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def sizes_out(name, axis, sizes=SIZES):
    return {"out:%s:size%i" % (name, axis): np.asarray(sizes, "int32")}


def out_meta(dims, dtype="float32"):
    meta = {"dims": dims, "dtype": dtype}
    sd = {str(i): "B" for i, d in enumerate(dims) if d == "D"}
    if sd:
        meta["size_dims"] = sd
    return meta


# ---------------------------------------------------------------------------------------------------------------
LSTM_STEP = '''
"""rf.LSTM one step at a time (single_step_dim, rf.LstmState from a Linear), and over time from the same state;
rf.gather with int indices takes the first frames."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
hid_dim = Dim(4, name="hid")

extern_data = {"x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.init = rf.Linear(in_dim, hid_dim)
        self.lstm = rf.LSTM(in_dim, hid_dim)


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"]
    x0 = rf.gather(x, axis=time_dim, indices=0)
    x1 = rf.gather(x, axis=time_dim, indices=1)
    state = rf.LstmState(h=rf.tanh(model.init(x0)), c=rf.zeros([batch_dim, hid_dim]))
    y1, s1 = model.lstm(x0, state=state, spatial_dim=single_step_dim)
    y2, s2 = model.lstm(x1, state=s1, spatial_dim=single_step_dim)
    ys, s_last = model.lstm(x, state=state, spatial_dim=time_dim)
    y2.mark_as_output("y2", shape=(batch_dim, hid_dim))
    s2.c.mark_as_output("c2", shape=(batch_dim, hid_dim))
    ys.mark_as_output("ys", shape=(batch_dim, time_dim, hid_dim))
    s_last.h.mark_as_output("h_last", shape=(batch_dim, hid_dim))
    s_last.c.mark_as_output("c_last", shape=(batch_dim, hid_dim))
'''


def ref_lstm_step(i, p):
    x = i["x"]
    h0 = np.tanh(x[:, 0] @ p["init.weight"] + p["init.bias"])
    c0 = np.zeros_like(h0)
    h1, c1 = lstm_step(x[:, 0], h0, c0, p, "lstm.")
    h2, c2 = lstm_step(x[:, 1], h1, c1, p, "lstm.")
    ys, hl, cl = lstm_seq(x, h0, c0, p, "lstm.")
    return {"outputs": {"y2": h2, "c2": c2, "ys": ys, "h_last": hl, "c_last": cl}, "sizes": sizes_out("ys", 1)}


# ---------------------------------------------------------------------------------------------------------------
COND_WHERE = '''
"""rf.cond on scalar tensor predicates (from Dim.get_dim_value_tensor) and on a Python bool; rf.where with tensor
and scalar branches; rf.clip_by_value; a param broadcast in both."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")

extern_data = {"x": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.scale = rf.Parameter([feat_dim])
        self.use_relu = False


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"]
    long_seqs = time_dim.get_dim_value_tensor() > 5
    y = rf.cond(long_seqs, lambda: x * model.scale, lambda: x - model.scale)
    short_seqs = time_dim.get_dim_value_tensor() < 3
    z = rf.cond(short_seqs, lambda: rf.relu(x), lambda: rf.tanh(x) * 2.0)
    w = rf.cond(model.use_relu, lambda: rf.relu(x), lambda: rf.abs(x))
    v = rf.where(x > 0.0, x, x * 0.1)
    u = rf.where(x > 0.5, 1.0, model.scale)
    c = rf.clip_by_value(x * model.scale, -0.3, 0.4)
    for name, t in [("y", y), ("z", z), ("w", w), ("v", v), ("u", u), ("c", c)]:
        t.mark_as_output(name, shape=(batch_dim, time_dim, feat_dim))
'''


def ref_cond_where(i, p):
    x, s = i["x"], p["scale"]
    out = {"y": x * s, "z": np.tanh(x) * 2.0, "w": np.abs(x), "v": np.where(x > 0, x, x * 0.1),
           "u": np.where(x > 0.5, 1.0, np.broadcast_to(s, x.shape)), "c": np.clip(x * s, -0.3, 0.4)}
    sizes = {}
    for k in out:
        sizes.update(sizes_out(k, 1))
    return {"outputs": out, "sizes": sizes}


# ---------------------------------------------------------------------------------------------------------------
GATHER_RANGE = '''
"""rf.gather with an int index, with per-sequence indices from Dim.get_size_tensor(), with [B,T] indices (reversal)
and clip_to_valid (negative and too large indices); rf.range_over_dim; rf.Embedding next to a gather from a param."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")
vocab_dim = Dim(6, name="vocab")
emb_dim = Dim(2, name="emb")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"},
    "tokens": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": vocab_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.emb = rf.Embedding(vocab_dim, emb_dim)
        self.table = rf.Parameter([vocab_dim, feat_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x, tokens = extern_data["x"], extern_data["tokens"]
    rf.gather(x, axis=time_dim, indices=2).mark_as_output("third", shape=(batch_dim, feat_dim))
    last = rf.gather(x, axis=time_dim, indices=time_dim.get_size_tensor() - 1)
    last.mark_as_output("last", shape=(batch_dim, feat_dim))
    pos = rf.range_over_dim(time_dim)
    rev_idx = rf.combine(time_dim.get_size_tensor() - 1, "-", pos, allow_broadcast_all_sources=True)
    rev = rf.gather(x, axis=time_dim, indices=rev_idx, clip_to_valid=True)
    rev.mark_as_output("rev", shape=(batch_dim, time_dim, feat_dim))
    shift_idx = rf.combine(pos * 2 - 3, "+", rf.zeros([batch_dim], dtype="int32"), allow_broadcast_all_sources=True)
    shifted = rf.gather(x, axis=time_dim, indices=shift_idx, clip_to_valid=True)
    shifted.mark_as_output("shifted", shape=(batch_dim, time_dim, feat_dim))
    rel = rf.combine(rf.cast(pos, "float32"), "/", rf.cast(time_dim.get_size_tensor(), "float32"),
                     allow_broadcast_all_sources=True)
    rel.mark_as_output("rel", shape=(batch_dim, time_dim))
    rf.cast(pos, "float32").mark_as_output("pos", shape=(time_dim,))
    e = model.emb(tokens)
    e.mark_as_output("emb", shape=(batch_dim, time_dim, emb_dim))
    rows = rf.gather(model.table, indices=tokens)
    (rows + x).mark_as_output("rows", shape=(batch_dim, time_dim, feat_dim))
'''


def ref_gather_range(i, p):
    x, tok = i["x"], i["tokens"]
    sizes = np.asarray(SIZES)
    pos = np.arange(T)
    rev_idx = np.clip(sizes[:, None] - 1 - pos[None, :], 0, (sizes - 1)[:, None])
    shift_idx = np.clip(np.broadcast_to(pos[None, :] * 2 - 3, (B, T)), 0, (sizes - 1)[:, None])
    take = lambda idx: np.stack([x[b, idx[b]] for b in range(B)])  # noqa: E731
    out = {"third": x[:, 2], "last": x[np.arange(B), sizes - 1], "rev": take(rev_idx), "shifted": take(shift_idx),
           "rel": pos[None, :] / sizes[:, None], "pos": pos.astype("float64"), "emb": p["emb.weight"][tok],
           "rows": p["table"][tok] + x}
    s = {}
    for k in ("rev", "shifted", "rel", "emb", "rows"):
        s.update(sizes_out(k, 1))
    s.update({"out:pos:size0": np.asarray(SIZES, "int32")})
    return {"outputs": out, "sizes": s}


# ---------------------------------------------------------------------------------------------------------------
REDUCE_MASKED = '''
"""Reductions over the dynamic time dim must ignore the padded frames: logsumexp, argmax, min, mean over two dims,
log_softmax over time and over features, a sum over all dims to a scalar, argmax over features."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
feat_dim = Dim(4, name="feat")

extern_data = {"x": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.offset = rf.Parameter([feat_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"] + model.offset
    rf.reduce_logsumexp(x, axis=time_dim).mark_as_output("lse", shape=(batch_dim, feat_dim))
    rf.reduce_argmax(x, axis=time_dim).mark_as_output("argmax_t", shape=(batch_dim, feat_dim))
    rf.reduce_min(x, axis=time_dim).mark_as_output("min_t", shape=(batch_dim, feat_dim))
    rf.reduce_mean(x, axis=(time_dim, feat_dim)).mark_as_output("mean_tf", shape=(batch_dim,))
    rf.log_softmax(x, axis=time_dim).mark_as_output("lsm_t", shape=(batch_dim, time_dim, feat_dim))
    rf.log_softmax(x, axis=feat_dim).mark_as_output("lsm_f", shape=(batch_dim, time_dim, feat_dim))
    rf.reduce_sum(x, axis=(batch_dim, time_dim, feat_dim)).mark_as_output("total", shape=())
    rf.reduce_argmax(x, axis=feat_dim).mark_as_output("argmax_f", shape=(batch_dim, time_dim))
    rf.reduce_max(rf.reduce_min(x, axis=feat_dim), axis=time_dim).mark_as_output("maxmin", shape=(batch_dim,))
'''


def ref_reduce_masked(i, p):
    x = i["x"] + p["offset"]
    m = mask_bt()[:, :, None]
    xm_inf = np.where(m, x, -np.inf)
    out = {
        "lse": np.log(np.sum(np.exp(xm_inf), axis=1)),
        "argmax_t": np.argmax(xm_inf, axis=1).astype("int32"),
        "min_t": np.min(np.where(m, x, np.inf), axis=1),
        "mean_tf": np.sum(np.where(m, x, 0), axis=(1, 2)) / (np.asarray(SIZES) * x.shape[2]),
        "lsm_t": log_softmax(x, 1, np.broadcast_to(m, x.shape)),
        "lsm_f": log_softmax(x, 2),
        "total": np.sum(np.where(m, x, 0)),
        "argmax_f": np.argmax(x, axis=2).astype("int32"),
        "maxmin": np.max(np.where(m[:, :, 0], np.min(x, axis=2), -np.inf), axis=1),
    }
    s = {}
    for k in ("lsm_t", "lsm_f", "argmax_f"):
        s.update(sizes_out(k, 1))
    return {"outputs": out, "sizes": s}


# ---------------------------------------------------------------------------------------------------------------
LOSS_OPTIONS = '''
"""mark_as_loss options: log-probs CE normalized and scaled, dense-target CE with custom_inv_norm_factor from
Dim.get_size_tensor(), a sequence-level loss (summed, scaled), a loss marked as_error; param gradients."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
classes_dim = Dim(4, name="classes")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "soft": {"dims": (batch_dim, time_dim, classes_dim), "dtype": "float32"},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(in_dim, classes_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    logits = model.lin(extern_data["x"])
    log_probs = rf.log_softmax(logits, axis=classes_dim)
    ce = rf.cross_entropy(estimated=log_probs, estimated_type="log-probs", target=extern_data["classes"],
                          axis=classes_dim)
    ce.mark_as_loss("ce", scale=0.5, use_normalized_loss=True)
    target = rf.softmax(extern_data["soft"], axis=classes_dim)
    dense = rf.cross_entropy(estimated=logits, estimated_type="logits", target=target, axis=classes_dim)
    dense.mark_as_loss("dense", custom_inv_norm_factor=time_dim.get_size_tensor(), use_normalized_loss=True)
    seq = rf.reduce_sum(ce, axis=time_dim)
    seq.mark_as_loss("seq", scale=0.1)
    err = rf.cast(rf.compare(rf.reduce_argmax(logits, axis=classes_dim), "!=", extern_data["classes"]), "float32")
    err.mark_as_loss("fer", as_error=True)
'''


def ref_loss_options(i, p):
    m = mask_bt()
    logits = i["x"] @ p["lin.weight"] + p["lin.bias"]
    lp = log_softmax(logits, -1)
    ce = -np.take_along_axis(lp, i["classes"][..., None], -1)[..., 0]
    n = float(np.sum(SIZES))
    ce_sum = np.sum(np.where(m, ce, 0))
    tgt = softmax(i["soft"], -1)
    dense = -np.sum(tgt * lp, -1)
    dense_sum = np.sum(np.where(m, dense, 0))
    err = (np.argmax(logits, -1) != i["classes"]).astype("float64")
    err_sum = np.sum(np.where(m, err, 0))
    losses = {"ce": (ce_sum, n), "dense": (dense_sum, n), "seq": (ce_sum, float(B)), "fer": (err_sum, n)}
    total = 0.5 * ce_sum / n + dense_sum / n + 0.1 * ce_sum
    return {"outputs": {}, "losses": losses, "total_loss": total}


# ---------------------------------------------------------------------------------------------------------------
CONV2D_NORM = '''
"""rf.Conv2d over two static spatial dims (same, then valid with strides), rf.LayerNorm, gelu, rf.split of the
channels, rf.merge_dims of the spatial dims; outputs with static dims only."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

h_dim = Dim(5, name="h")
w_dim = Dim(4, name="w")
in_dim = Dim(2, name="in")
mid_dim = Dim(4, name="mid")
out_dim = Dim(3, name="out")
part1_dim = Dim(1, name="part1")
part2_dim = Dim(3, name="part2")

extern_data = {"img": {"dims": (batch_dim, h_dim, w_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = rf.Conv2d(in_dim, mid_dim, (3, 3), padding="same")
        self.norm = rf.LayerNorm(mid_dim)
        self.conv2 = rf.Conv2d(mid_dim, out_dim, (2, 2), padding="valid", strides=(2, 1))


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["img"]
    y, (h1, w1) = model.conv1(x, in_spatial_dims=[h_dim, w_dim])
    y = rf.gelu(model.norm(y))
    a, b = rf.split(y, axis=mid_dim, out_dims=[part1_dim, part2_dim])
    a.mark_as_output("part1", shape=(batch_dim, h1, w1, part1_dim))
    b.mark_as_output("part2", shape=(batch_dim, h1, w1, part2_dim))
    z, (h2, w2) = model.conv2(y, in_spatial_dims=[h1, w1])
    flat, flat_dim = rf.merge_dims(z, dims=[h2, w2])
    flat.mark_as_output("flat", shape=(batch_dim, flat_dim, out_dim))
'''


def conv2d(x, w, b, padding, strides=(1, 1)):
    """x [B,H,W,C], w [O,C,kh,kw]"""
    kh, kw = w.shape[2:]
    if padding == "same":
        ph, pw = kh - 1, kw - 1
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    hh = (x.shape[1] - kh) // strides[0] + 1
    ww = (x.shape[2] - kw) // strides[1] + 1
    out = np.zeros((x.shape[0], hh, ww, w.shape[0]))
    for i in range(hh):
        for j in range(ww):
            patch = x[:, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
            out[:, i, j] = np.einsum("bhwc,ochw->bo", patch, w) + b
    return out


def ref_conv2d_norm(i, p):
    y = conv2d(i["img"], p["conv1.filter"], p["conv1.bias"], "same")
    y = gelu(layer_norm(y, p["norm.scale"], p["norm.bias"]))
    z = conv2d(y, p["conv2.filter"], p["conv2.bias"], "valid", (2, 1))
    return {"outputs": {"part1": y[..., :1], "part2": y[..., 1:], "flat": z.reshape(B, -1, z.shape[-1])}}


# ---------------------------------------------------------------------------------------------------------------
DYN_CONCAT = '''
"""Dim arithmetic over dynamic dims: rf.concat of two sequences (a + b, packed), rf.pad of a dynamic dim (left only,
with handle_dynamic_dims=True, and by default with given out_dims: the padding after the padded end), a static
prefix concatenated before a dynamic dim, lengths used in computations via get_size_tensor / get_dim_value_tensor."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

a_time = Dim(None, name="a_time")
b_time = Dim(None, name="b_time")
feat_dim = Dim(2, name="feat")
one_dim = Dim(1, name="one")

extern_data = {
    "a": {"dims": (batch_dim, a_time, feat_dim), "dtype": "float32"},
    "b": {"dims": (batch_dim, b_time, feat_dim), "dtype": "float32"},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.w = rf.Parameter([feat_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    a, b = extern_data["a"], extern_data["b"]
    ab, ab_time = rf.concat((a, a_time), (b * model.w, b_time))
    ab.mark_as_output("ab", shape=(batch_dim, ab_time, feat_dim))
    left, (left_time,) = rf.pad(a, axes=[a_time], padding=[(2, 0)], value=-1.0)
    left.mark_as_output("left", shape=(batch_dim, left_time, feat_dim))
    both, (both_time,) = rf.pad(b, axes=[b_time], padding=[(1, 2)], value=0.5, handle_dynamic_dims=True)
    both.mark_as_output("both", shape=(batch_dim, both_time, feat_dim))
    n = rf.cast(a_time.get_size_tensor() + b_time.get_size_tensor(), "float32")
    mean = rf.reduce_sum(ab, axis=ab_time) / n
    mean.mark_as_output("mean", shape=(batch_dim, feat_dim))
    raw, (raw_time,) = rf.pad(a, axes=[a_time], padding=[(1, 1)], out_dims=[1 + a_time + 1], value=2.0)
    raw.mark_as_output("raw", shape=(batch_dim, raw_time, feat_dim))
    bos = rf.zeros([batch_dim, one_dim, feat_dim])
    with_bos, bos_time = rf.concat((bos, one_dim), (a, a_time))
    with_bos.mark_as_output("with_bos", shape=(batch_dim, bos_time, feat_dim))
    frac = rf.cast(b_time.get_size_tensor(), "float32") / rf.cast(b_time.get_dim_value_tensor(), "float32")
    frac.mark_as_output("frac", shape=(batch_dim,))
    rf.reduce_max(both, axis=both_time).mark_as_output("both_max", shape=(batch_dim, feat_dim))
'''

A_SIZES = [7, 5, 4]
B_SIZES = [2, 5, 3]


def ref_dyn_concat(i, p):
    a, b = i["a"], i["b"] * p["w"]
    sa, sb = np.asarray(A_SIZES), np.asarray(B_SIZES)
    tab = int(np.max(sa + sb))
    ab = np.zeros((B, tab, 2))
    for k in range(B):
        ab[k, :sa[k]] = a[k, :sa[k]]
        ab[k, sa[k]:sa[k] + sb[k]] = b[k, :sb[k]]
    left = np.concatenate([np.full((B, 2, 2), -1.0), i["a"]], 1)
    tb = b.shape[1]
    both = np.full((B, tb + 3, 2), 0.5)
    for k in range(B):
        both[k, 1:1 + sb[k]] = i["b"][k, :sb[k]]
    mb = np.arange(tb + 3)[None, :] < (sb + 3)[:, None]
    s = {}
    s.update(sizes_out("ab", 1, sa + sb))
    s.update(sizes_out("left", 1, sa + 2))
    s.update(sizes_out("both", 1, sb + 3))
    raw = np.concatenate([np.full((B, 1, 2), 2.0), i["a"], np.full((B, 1, 2), 2.0)], 1)
    s.update(sizes_out("raw", 1, sa + 2))
    with_bos = np.concatenate([np.zeros((B, 1, 2)), i["a"]], 1)
    s.update(sizes_out("with_bos", 1, sa + 1))
    out = {"raw": raw, "with_bos": with_bos, "ab": ab, "left": left, "both": both, "mean": ab.sum(1) / (sa + sb)[:, None],
           "frac": sb / float(tb), "both_max": np.max(np.where(mb[:, :, None], both, -np.inf), 1)}
    return {"outputs": out, "sizes": s}


# ---------------------------------------------------------------------------------------------------------------
EMB_TRAIN = '''
"""Train: Embedding, rf.split + expand_dim + rf.concat of static dims, elementwise math (gelu, exp, sqrt, abs),
a param with .initial kept (keep_initial), LayerNorm, framewise CE on logits; param gradients."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
vocab_dim = Dim(7, name="vocab")
emb_dim = Dim(4, name="emb")
half1_dim = Dim(2, name="half1")
half2_dim = Dim(2, name="half2")
rep_dim = Dim(2, name="rep")
classes_dim = Dim(5, name="classes")

extern_data = {
    "tokens": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": vocab_dim},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}
keep_initial = ["gain"]


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.emb = rf.Embedding(vocab_dim, emb_dim)
        self.gain = rf.Parameter([half2_dim])
        self.gain.initial = 0.75
        self.norm = rf.LayerNorm(emb_dim)
        self.out = rf.Linear(emb_dim, classes_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    e = model.emb(extern_data["tokens"])
    a, b = rf.split(e, axis=emb_dim, out_dims=[half1_dim, half2_dim])
    a = rf.gelu(a) + rf.sqrt(rf.abs(a) + 1.0)
    b = rf.exp(-rf.abs(b)) * model.gain
    h, _ = rf.concat((a, half1_dim), (b, half2_dim), out_dim=emb_dim)
    h = model.norm(h)
    h2 = rf.reduce_sum(rf.expand_dim(h, rep_dim), axis=rep_dim) * 0.5
    logits = model.out(h2)
    loss = rf.cross_entropy(estimated=logits, estimated_type="logits", target=extern_data["classes"],
                            axis=classes_dim)
    loss.mark_as_loss("ce")
'''


def ref_emb_train(i, p):
    e = p["emb.weight"][i["tokens"]]
    a, b = e[..., :2], e[..., 2:]
    a = gelu(a) + np.sqrt(np.abs(a) + 1.0)
    b = np.exp(-np.abs(b)) * p["gain"]
    h = layer_norm(np.concatenate([a, b], -1), p["norm.scale"], p["norm.bias"])
    logits = h @ p["out.weight"] + p["out.bias"]
    ce = -np.take_along_axis(log_softmax(logits, -1), i["classes"][..., None], -1)[..., 0]
    s = np.sum(np.where(mask_bt(), ce, 0))
    return {"outputs": {}, "losses": {"ce": (s, float(np.sum(SIZES)))}, "total_loss": s}


# ---------------------------------------------------------------------------------------------------------------
LSTM_TRAIN = '''
"""Train: rf.LSTM over time from an rf.LstmState made of params (broadcast over batch via rf.expand_dim), the final
state in a sequence-level loss next to a framewise normalized CE; param gradients."""
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
hid_dim = Dim(3, name="hid")
classes_dim = Dim(4, name="classes")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.h0 = rf.Parameter([hid_dim])
        self.lstm = rf.LSTM(in_dim, hid_dim)
        self.out = rf.Linear(hid_dim, classes_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    h0 = rf.expand_dim(model.h0, batch_dim)
    state = rf.LstmState(h=h0, c=rf.zeros([batch_dim, hid_dim]))
    y, final = model.lstm(extern_data["x"], state=state, spatial_dim=time_dim)
    logits = model.out(y)
    ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=extern_data["classes"], axis=classes_dim)
    ce.mark_as_loss("ce", use_normalized_loss=True)
    rf.reduce_sum(final.c * final.c, axis=hid_dim).mark_as_loss("final", scale=0.3)
'''


def ref_lstm_train(i, p):
    h0 = np.broadcast_to(p["h0"], (B, 3))
    ys, hl, cl = lstm_seq(i["x"], h0, np.zeros((B, 3)), p, "lstm.")
    logits = ys @ p["out.weight"] + p["out.bias"]
    ce = -np.take_along_axis(log_softmax(logits, -1), i["classes"][..., None], -1)[..., 0]
    n = float(np.sum(SIZES))
    s = np.sum(np.where(mask_bt(), ce, 0))
    f = np.sum(cl * cl)
    return {"outputs": {}, "losses": {"ce": (s, n), "final": (f, float(B))}, "total_loss": s / n + 0.3 * f}


# ---------------------------------------------------------------------------------------------------------------
OPS_MISC = """
\"\"\"Operators (unary minus, **, //, %, reversed operands, == / != with scalars, >=, <, logical ops), int math on
sparse indices and their reduction, a reduction over the batch dim (no masking), Dim values in computations,
expand_dim of a dynamic dim, float -> int cast, range_over_dim of a static dim, rf.maximum/minimum broadcasting all
sources, rf.ones/rf.full, a param as output, cond with a tuple and with module calls in the branches.\"\"\"
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "t": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": in_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(in_dim, out_dim)
        self.lin_nb = rf.Linear(in_dim, out_dim, with_bias=False)
        self.bias = rf.Parameter([out_dim])


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x, t = extern_data["x"], extern_data["t"]
    shape = (batch_dim, time_dim, in_dim)
    ((-x) ** 2 + 1.0 - x * 0.5 + 2.0 / (rf.abs(x) + 1.0) - x // 0.5 + x % 0.7).mark_as_output("arith", shape=shape)
    cmp = rf.cast(x >= 0.0, "float32") + rf.cast(x < -0.5, "float32") * 2.0 + rf.cast(t != 1, "float32") * 4.0
    (cmp + rf.cast(t == 2, "float32") * 8.0).mark_as_output("cmp", shape=shape)
    rf.cast(rf.logical_not(rf.logical_and(x > 0.0, x < 1.0)), "int32").mark_as_output("logic", shape=shape)
    (t * 2 + 1 - t // 2).mark_as_output("int_ops", shape=(batch_dim, time_dim))
    rf.reduce_sum(t, axis=time_dim).mark_as_output("t_sum", shape=(batch_dim,))
    rf.reduce_max(t, axis=time_dim).mark_as_output("t_max", shape=(batch_dim,))
    rf.reduce_mean(x, axis=batch_dim).mark_as_output("batch_mean", shape=(time_dim, in_dim))
    scale = rf.cast(time_dim.get_dim_value_tensor(), "float32") + rf.cast(batch_dim.get_dim_value_tensor(), "float32")
    (x / scale).mark_as_output("dimval", shape=shape)
    (time_dim.get_size_tensor() * 2).mark_as_output("sizes2", shape=(batch_dim,))
    rf.cast(time_dim.get_dim_value_tensor(), "float32").mark_as_output("max_len", shape=())
    rf.expand_dim(rf.reduce_sum(x, axis=time_dim), time_dim).mark_as_output("expanded", shape=shape)
    rf.cast(x * 3.0, "int32").mark_as_output("trunc", shape=shape)
    (x + rf.range_over_dim(in_dim, dtype="float32")).mark_as_output("ranged", shape=shape)
    mn = rf.minimum(x, model.bias, allow_broadcast_all_sources=True)
    mn.mark_as_output("min_bc", shape=(batch_dim, time_dim, in_dim, out_dim))
    rf.maximum(x, 0.25).mark_as_output("max_s", shape=shape)
    (rf.ones([batch_dim, in_dim]) + rf.full(dims=[in_dim], fill_value=2.5)).mark_as_output("ones", shape=(batch_dim, in_dim))
    (model.lin.weight * 2.0).mark_as_output("weight2", shape=(in_dim, out_dim))
    a, b = rf.cond(time_dim.get_dim_value_tensor() > 3, lambda: (x, x * 2.0), lambda: (x * 3.0, x))
    (a + b).mark_as_output("cond_tuple", shape=shape)
    y = rf.cond(time_dim.get_dim_value_tensor() > 9, lambda: model.lin(x), lambda: model.lin_nb(x))
    y.mark_as_output("cond_module", shape=(batch_dim, time_dim, out_dim))
    act = rf.sigmoid(x) + rf.log(rf.abs(x) + 1.0) + rf.silu(x) + rf.softplus(x) + rf.log_sigmoid(x)
    (act + rf.rsqrt(rf.abs(x) + 1.0) + rf.square(x) + rf.tanh(x) + rf.relu(x)).mark_as_output("acts", shape=shape)
"""


def ref_ops_misc(i, p):
    x, t = i["x"], i["t"]
    m = mask_bt()
    out = {
        "arith": (-x) ** 2 + 1.0 - x * 0.5 + 2.0 / (np.abs(x) + 1.0) - np.floor_divide(x, 0.5) + np.mod(x, 0.7),
        "cmp": (x >= 0) * 1.0 + (x < -0.5) * 2.0 + (t != 1)[..., None] * 4.0 + (t == 2)[..., None] * 8.0,
        "logic": np.logical_not((x > 0) & (x < 1)).astype("int32"),
        "int_ops": t * 2 + 1 - t // 2,
        "t_sum": np.sum(np.where(m, t, 0), 1), "t_max": np.max(np.where(m, t, -2 ** 31), 1),
        "batch_mean": x.mean(0),
        "dimval": x / (T + B), "sizes2": np.asarray(SIZES) * 2, "max_len": np.float64(T),
        "expanded": np.broadcast_to(np.sum(np.where(m[..., None], x, 0), 1)[:, None], x.shape),
        "trunc": (x.astype("float32") * np.float32(3.0)).astype("int32"),
        "ranged": x + np.arange(3), "min_bc": np.minimum(x[..., None], p["bias"]), "max_s": np.maximum(x, 0.25),
        "ones": np.ones((B, 3)) + 2.5, "weight2": p["lin.weight"] * 2.0, "cond_tuple": x * 3.0,
        "cond_module": x @ p["lin_nb.weight"],
        "acts": sigmoid(x) + np.log(np.abs(x) + 1.0) + x * sigmoid(x) + np.log1p(np.exp(x)) + np.log(sigmoid(x))
        + 1.0 / np.sqrt(np.abs(x) + 1.0) + x ** 2 + np.tanh(x) + np.maximum(x, 0),
    }
    s = {}
    for k in ("arith", "cmp", "logic", "int_ops", "dimval", "expanded", "trunc", "ranged", "min_bc", "max_s",
              "cond_tuple", "cond_module", "acts"):
        s.update(sizes_out(k, 1))
    s["out:batch_mean:size0"] = np.asarray(SIZES, "int32")
    return {"outputs": out, "sizes": s}


# ---------------------------------------------------------------------------------------------------------------
CONV_POOL = """
\"\"\"Conv1d over the dynamic time dim with padding valid and stride 2, rf.max_pool (valid, stride 2),
rf.max_pool1d (default stride = pool size), matmul reducing over time (masked), softmax over time, a CE on probs,
LayerNorm with its own eps and Linear without bias, the LSTM run step by step in a Python loop.\"\"\"
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "t": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": in_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.conv = rf.Conv1d(in_dim, out_dim, 3, padding="valid", strides=2)
        self.norm = rf.LayerNorm(in_dim, eps=1e-3)
        self.proj = rf.Linear(in_dim, out_dim, with_bias=False)
        self.lstm = rf.LSTM(in_dim, out_dim)


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x, t = extern_data["x"], extern_data["t"]
    c, c_time = model.conv(x, in_spatial_dim=time_dim)
    c.mark_as_output("conv", shape=(batch_dim, c_time, out_dim))
    p, (p_time,) = rf.max_pool(x, pool_size=3, strides=2, padding="valid", in_spatial_dims=[time_dim])
    p.mark_as_output("pool", shape=(batch_dim, p_time, in_dim))
    p1, p1_time = rf.max_pool1d(x, pool_size=2, in_spatial_dim=time_dim)
    p1.mark_as_output("pool1d", shape=(batch_dim, p1_time, in_dim))
    h = model.proj(model.norm(x))
    h.mark_as_output("proj", shape=(batch_dim, time_dim, out_dim))
    rf.matmul(x, h, reduce=time_dim).mark_as_output("xtx", shape=(batch_dim, in_dim, out_dim))
    rf.softmax(x, axis=time_dim).mark_as_output("sm_t", shape=(batch_dim, time_dim, in_dim))
    ce = rf.cross_entropy(estimated=rf.softmax(x, axis=in_dim), estimated_type="probs", target=t, axis=in_dim)
    ce.mark_as_output("ce_probs", shape=(batch_dim, time_dim))
    state = model.lstm.default_initial_state(batch_dims=[batch_dim])
    for step_i in range(3):
        y, state = model.lstm(rf.gather(x, axis=time_dim, indices=step_i), state=state, spatial_dim=single_step_dim)
    y.mark_as_output("lstm3", shape=(batch_dim, out_dim))
"""


def ref_conv_pool(i, p):
    x, t = i["x"], i["t"]
    sizes = np.asarray(SIZES)
    w, b = p["conv.filter"], p["conv.bias"]  # [out, in, 3]
    conv = np.stack([np.einsum("bki,oik->bo", x[:, 2 * j:2 * j + 3], w) + b for j in range(3)], 1)
    pool = np.stack([x[:, 2 * j:2 * j + 3].max(1) for j in range(3)], 1)
    pool1d = np.stack([x[:, 2 * j:2 * j + 2].max(1) for j in range(3)], 1)
    h = layer_norm(x, p["norm.scale"], p["norm.bias"], eps=1e-3) @ p["proj.weight"]
    m = mask_bt()[..., None]
    xtx = np.einsum("bti,bto->bio", np.where(m, x, 0), h)
    ce = -np.log(np.take_along_axis(softmax(x, -1), t[..., None], -1)[..., 0])
    hs, cs = np.zeros((B, 2)), np.zeros((B, 2))
    for k in range(3):
        hs, cs = lstm_step(x[:, k], hs, cs, p, "lstm.")
    s = {}
    s.update(sizes_out("conv", 1, -(-(sizes - 2) // 2)))
    s.update(sizes_out("pool", 1, -(-(sizes - 2) // 2)))
    s.update(sizes_out("pool1d", 1, sizes // 2))
    for k in ("proj", "sm_t", "ce_probs"):
        s.update(sizes_out(k, 1))
    return {"outputs": {"conv": conv, "pool": pool, "pool1d": pool1d, "proj": h, "xtx": xtx,
                        "sm_t": softmax(x, 1, np.broadcast_to(m, x.shape)), "ce_probs": ce, "lstm3": hs},
            "sizes": s}


# ---------------------------------------------------------------------------------------------------------------
LOSS_SHAPES = """
\"\"\"Losses of other shapes: [B,F] (normalized by B*F, scaled), [B,T,F] (by the frames times F), a param-only loss
[in,out], a scalar, a custom scalar inverse norm from Dim.get_dim_value_tensor(), a normalized error and a loss with
scale 0; gradients through cond, where, clip_by_value, gather (clip_to_valid) and a dynamic concat.\"\"\"
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")

extern_data = {"x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lin = rf.Linear(in_dim, out_dim)
        self.gate = rf.Parameter([in_dim])


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    x = extern_data["x"]
    h = rf.cond(time_dim.get_dim_value_tensor() > 4, lambda: x * model.gate, lambda: x + model.gate)
    h = rf.where(h > 0.0, h, rf.clip_by_value(h * model.gate, -0.2, 0.2))
    y = model.lin(h)
    pos = rf.range_over_dim(time_dim)
    prev_idx = rf.combine(pos - 1, "+", rf.zeros([batch_dim], dtype="int32"), allow_broadcast_all_sources=True)
    prev = rf.gather(y, axis=time_dim, indices=prev_idx, clip_to_valid=True)
    both, both_time = rf.concat((y, time_dim), (prev * 0.5, time_dim))
    rf.reduce_sum(y * y, axis=time_dim).mark_as_loss("bf", use_normalized_loss=True, scale=2.0)
    (prev * y).mark_as_loss("btf", use_normalized_loss=True)
    (model.lin.weight * model.lin.weight).mark_as_loss("l2", use_normalized_loss=True, scale=0.5)
    rf.reduce_sum(rf.tanh(both), axis=(batch_dim, both_time, out_dim)).mark_as_loss("scalar", scale=0.01)
    rf.reduce_sum(y, axis=out_dim).mark_as_loss(
        "custom", custom_inv_norm_factor=time_dim.get_dim_value_tensor(), use_normalized_loss=True)
    rf.reduce_sum(h, axis=in_dim).mark_as_loss("err", as_error=True, use_normalized_loss=True)
    rf.reduce_sum(x, axis=in_dim).mark_as_loss("zero", scale=0.0)
"""


def ref_loss_shapes(i, p):
    x = i["x"]
    sizes = np.asarray(SIZES)
    m = mask_bt()
    h = x * p["gate"]
    h = np.where(h > 0, h, np.clip(h * p["gate"], -0.2, 0.2))
    y = h @ p["lin.weight"] + p["lin.bias"]
    prev_idx = np.clip(np.arange(T)[None, :] - 1, 0, (sizes - 1)[:, None])
    prev = np.stack([y[b, prev_idx[b]] for b in range(B)])
    n = float(sizes.sum())
    bf = np.sum(np.where(m[..., None], y * y, 0))
    btf = np.sum(np.where(m[..., None], prev * y, 0))
    l2 = np.sum(p["lin.weight"] ** 2)
    scalar = sum(np.sum(np.tanh(y[b, :sizes[b]])) + np.sum(np.tanh(prev[b, :sizes[b]] * 0.5)) for b in range(B))
    custom = np.sum(np.where(m[..., None], y, 0))
    err = np.sum(np.where(m[..., None], h, 0))
    zero = np.sum(np.where(m[..., None], x, 0))
    losses = {"bf": (bf, B * 2.0), "btf": (btf, n * 2), "l2": (l2, 6.0), "scalar": (scalar, 1.0),
              "custom": (custom, float(T)), "err": (err, n), "zero": (zero, n)}
    total = 2.0 * bf / (B * 2.0) + btf / (n * 2) + 0.5 * l2 / 6.0 + 0.01 * scalar + custom / T
    return {"outputs": {}, "losses": losses, "total_loss": total}


# ---------------------------------------------------------------------------------------------------------------
DIMS_RESHAPE = """
\"\"\"Conv2d over the dynamic time and a feature dim used as spatial dim (same padding, even filter), split_dims of
the dynamic time (padded to a multiple), merge_dims of time and features (a dynamic merged dim), outputs in other
dim orders than computed (time-major, batch in the middle).\"\"\"
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim

time_dim = Dim(None, name="time")
in_dim = Dim(3, name="in")
out_dim = Dim(2, name="out")
one_dim = Dim(1, name="one")
win_dim = Dim(2, name="win")

extern_data = {"x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"}}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.conv = rf.Conv2d(one_dim, out_dim, (3, 2), padding="same")
        self.lin = rf.Linear(in_dim, out_dim)


def get_model(*, epoch, step, **_):
    return Model()


def forward_step(*, model, extern_data, **_):
    x = extern_data["x"]
    y, (t1, f1) = model.conv(rf.expand_dim(x, one_dim), in_spatial_dims=[time_dim, in_dim])
    y.mark_as_output("conv", shape=(batch_dim, t1, f1, out_dim))
    chunk_dim = Dim(None, name="chunks")
    chunks = rf.split_dims(x, axis=time_dim, dims=[chunk_dim, win_dim])
    chunks.mark_as_output("chunks", shape=(batch_dim, chunk_dim, win_dim, in_dim))
    flat, flat_dim = rf.merge_dims(x, dims=[time_dim, in_dim])
    (flat * 2.0).mark_as_output("flat", shape=(batch_dim, flat_dim))
    h = model.lin(x)
    h.mark_as_output("time_major", shape=(time_dim, out_dim, batch_dim))
    h.mark_as_output("batch_mid", shape=(out_dim, batch_dim, time_dim))
"""


def ref_dims_reshape(i, p):
    x = i["x"]
    sizes = np.asarray(SIZES)
    w, b = p["conv.filter"], p["conv.bias"]  # [out, one, 3, 2]
    xp = np.pad(x, ((0, 0), (1, 1), (0, 1)))
    conv = np.zeros((B, T, 3, 2))
    for t in range(T):
        for f in range(3):
            conv[:, t, f] = np.einsum("bhw,ohw->bo", xp[:, t:t + 3, f:f + 2], w[:, 0]) + b
    chunks = np.concatenate([x, np.zeros((B, 1, 3))], 1).reshape(B, 4, 2, 3)
    h = x @ p["lin.weight"] + p["lin.bias"]
    s = {}
    s.update(sizes_out("conv", 1))
    s.update(sizes_out("chunks", 1, -(-sizes // 2)))
    s.update(sizes_out("flat", 1, sizes * 3))
    s.update(sizes_out("time_major", 0))
    s.update(sizes_out("batch_mid", 2))
    return {"outputs": {"conv": conv, "chunks": chunks, "flat": x.reshape(B, -1) * 2.0,
                        "time_major": h.transpose(1, 2, 0), "batch_mid": h.transpose(2, 0, 1)}, "sizes": s}


# ---------------------------------------------------------------------------------------------------------------
DECODER_STEP = """
\"\"\"Train: a two-step attention decoder written with single steps: Embedding of target tokens (gather at int
positions of the target time), rf.LSTM with single_step_dim, rf.dot_attention over the encoder time, concat of the
static state and context dims, per-step CE losses; param gradients.\"\"\"
import returnn_lite.frontend as rf
from returnn_lite.tensor import Tensor, Dim, batch_dim, single_step_dim

time_dim = Dim(None, name="time")
out_time_dim = Dim(None, name="out_time")
in_dim = Dim(3, name="in")
key_dim = Dim(2, name="key")
vocab_dim = Dim(5, name="vocab")
emb_dim = Dim(2, name="emb")
hid_dim = Dim(2, name="hid")

extern_data = {
    "x": {"dims": (batch_dim, time_dim, in_dim), "dtype": "float32"},
    "y": {"dims": (batch_dim, out_time_dim), "dtype": "int32", "sparse_dim": vocab_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.keys = rf.Linear(in_dim, key_dim)
        self.query = rf.Linear(hid_dim, key_dim, with_bias=False)
        self.emb = rf.Embedding(vocab_dim, emb_dim)
        self.lstm = rf.LSTM(emb_dim, hid_dim)
        self.out = rf.Linear(hid_dim + in_dim, vocab_dim)


def get_model(*, epoch, step, **_):
    return Model()


def train_step(*, model, extern_data, **_):
    x, y = extern_data["x"], extern_data["y"]
    keys = model.keys(x)
    state = model.lstm.default_initial_state(batch_dims=[batch_dim])
    for i in range(2):
        prev = rf.gather(y, axis=out_time_dim, indices=i)
        h, state = model.lstm(model.emb(prev), state=state, spatial_dim=single_step_dim)
        att = rf.dot_attention(model.query(h), keys, x, key_dim=key_dim, axis=time_dim)
        both, _ = rf.concat((h, hid_dim), (att, in_dim), out_dim=model.out.in_dim)
        logits = model.out(both)
        target = rf.gather(y, axis=out_time_dim, indices=i + 1)
        ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=target, axis=vocab_dim)
        ce.mark_as_loss("ce%i" % i, use_normalized_loss=True)
"""


def ref_decoder_step(i, p):
    x, y = i["x"], i["y"]
    m = mask_bt()
    keys = x @ p["keys.weight"] + p["keys.bias"]
    h, c = np.zeros((B, 2)), np.zeros((B, 2))
    losses, total = {}, 0.0
    for k in range(2):
        h, c = lstm_step(p["emb.weight"][y[:, k]], h, c, p, "lstm.")
        q = h @ p["query.weight"]
        energy = np.einsum("bk,btk->bt", q, keys) / np.sqrt(2.0)
        w = softmax(energy, 1, m)
        att = np.einsum("bt,bti->bi", w, x)
        logits = np.concatenate([h, att], -1) @ p["out.weight"] + p["out.bias"]
        ce = -np.take_along_axis(log_softmax(logits, -1), y[:, k + 1][:, None], -1)[:, 0]
        losses["ce%i" % k] = (np.sum(ce), float(B))
        total += np.sum(ce) / B
    return {"outputs": {}, "losses": losses, "total_loss": total}


def _inputs(data, sizes=None, dim_len=None):
    return {"data": data, "sizes": sizes or {"time": SIZES}, "dim_len": dim_len or {"T": T}}


CASES = [
    {"name": "x_lstm_single_step", "task": "forward", "model": LSTM_STEP, "ref": ref_lstm_step,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None)}),
     "params": {"init.weight": (3, 4), "init.bias": (4,), "lstm.ff_weight": (16, 3), "lstm.rec_weight": (16, 4),
                "lstm.bias": (16,)},
     "outputs": {"y2": out_meta(["B", "S4"]), "c2": out_meta(["B", "S4"]), "ys": out_meta(["B", "D", "S4"]),
                 "h_last": out_meta(["B", "S4"]), "c_last": out_meta(["B", "S4"])}},
    {"name": "x_cond_where_clip", "task": "forward", "model": COND_WHERE, "ref": ref_cond_where,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None)}), "params": {"scale": (3,)},
     "outputs": {k: out_meta(["B", "D", "S3"]) for k in "yzwvuc"}},
    {"name": "x_gather_range", "task": "forward", "model": GATHER_RANGE, "ref": ref_gather_range,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None), "tokens": ((B, "T"), "int32", 6)}),
     "params": {"emb.weight": (6, 2), "table": (6, 3)},
     "outputs": {"third": out_meta(["B", "S3"]), "last": out_meta(["B", "S3"]), "rev": out_meta(["B", "D", "S3"]),
                 "shifted": out_meta(["B", "D", "S3"]), "rel": out_meta(["B", "D"]),
                 "pos": {"dims": ["D"], "dtype": "float32", "size_dims": {"0": "B"}},
                 "emb": out_meta(["B", "D", "S2"]), "rows": out_meta(["B", "D", "S3"])}},
    {"name": "x_reduce_masked", "task": "forward", "model": REDUCE_MASKED, "ref": ref_reduce_masked,
     "inputs": _inputs({"x": ((B, "T", 4), "float32", None)}), "params": {"offset": (4,)},
     "outputs": {"lse": out_meta(["B", "S4"]), "argmax_t": out_meta(["B", "S4"], "int32"),
                 "min_t": out_meta(["B", "S4"]), "mean_tf": out_meta(["B"]), "lsm_t": out_meta(["B", "D", "S4"]),
                 "lsm_f": out_meta(["B", "D", "S4"]), "total": out_meta([]),
                 "argmax_f": out_meta(["B", "D"], "int32"), "maxmin": out_meta(["B"])}},
    {"name": "x_loss_options_train", "task": "train", "grads": True, "model": LOSS_OPTIONS, "ref": ref_loss_options,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None), "soft": ((B, "T", 4), "float32", None),
                        "classes": ((B, "T"), "int32", 4)}),
     "params": {"lin.weight": (3, 4), "lin.bias": (4,)}, "outputs": {}},
    {"name": "x_conv2d_layernorm", "task": "forward", "model": CONV2D_NORM, "ref": ref_conv2d_norm,
     "inputs": _inputs({"img": ((B, 5, 4, 2), "float32", None)}, sizes={}),
     "params": {"conv1.filter": (4, 2, 3, 3), "conv1.bias": (4,), "norm.scale": (4,), "norm.bias": (4,),
                "conv2.filter": (3, 4, 2, 2), "conv2.bias": (3,)},
     "outputs": {"part1": out_meta(["B", "S5", "S4", "S1"]), "part2": out_meta(["B", "S5", "S4", "S3"]),
                 "flat": out_meta(["B", "S6", "S3"])}},
    {"name": "x_dyn_concat_pad", "task": "forward", "model": DYN_CONCAT, "ref": ref_dyn_concat,
     "inputs": {"data": {"a": ((B, 7, 2), "float32", None), "b": ((B, 5, 2), "float32", None)},
                "sizes": {"a_time": A_SIZES, "b_time": B_SIZES}, "dim_len": {}},
     "params": {"w": (2,)},
     "outputs": {"ab": out_meta(["B", "D", "S2"]), "left": out_meta(["B", "D", "S2"]),
                 "raw": out_meta(["B", "D", "S2"]), "with_bos": out_meta(["B", "D", "S2"]),
                 "both": out_meta(["B", "D", "S2"]), "mean": out_meta(["B", "S2"]), "frac": out_meta(["B"]),
                 "both_max": out_meta(["B", "S2"])}},
    {"name": "x_embed_split_train", "task": "train", "grads": True, "model": EMB_TRAIN, "ref": ref_emb_train,
     "inputs": _inputs({"tokens": ((B, "T"), "int32", 7), "classes": ((B, "T"), "int32", 5)}),
     "params": {"emb.weight": (7, 4), "gain": (2,), "norm.scale": (4,), "norm.bias": (4,), "out.weight": (4, 5),
                "out.bias": (5,)},
     "keep_initial": ["gain"], "initial": {"gain": 0.75}, "outputs": {}},
    {"name": "x_lstm_state_train", "task": "train", "grads": True, "model": LSTM_TRAIN, "ref": ref_lstm_train,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None), "classes": ((B, "T"), "int32", 4)}),
     "params": {"h0": (3,), "lstm.ff_weight": (12, 3), "lstm.rec_weight": (12, 3), "lstm.bias": (12,),
                "out.weight": (3, 4), "out.bias": (4,)}, "outputs": {}},
]

CASES += [
    {"name": "x_ops_misc", "task": "forward", "model": OPS_MISC, "ref": ref_ops_misc,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None), "t": ((B, "T"), "int32", 3)}),
     "params": {"lin.weight": (3, 2), "lin.bias": (2,), "lin_nb.weight": (3, 2), "bias": (2,)},
     "outputs": {"arith": out_meta(["B", "D", "S3"]), "cmp": out_meta(["B", "D", "S3"]),
                 "logic": out_meta(["B", "D", "S3"], "int32"), "int_ops": out_meta(["B", "D"], "int32"),
                 "t_sum": out_meta(["B"], "int32"), "t_max": out_meta(["B"], "int32"),
                 "batch_mean": {"dims": ["D", "S3"], "dtype": "float32", "size_dims": {"0": "B"}},
                 "dimval": out_meta(["B", "D", "S3"]), "sizes2": out_meta(["B"], "int32"), "max_len": out_meta([]),
                 "expanded": out_meta(["B", "D", "S3"]), "trunc": out_meta(["B", "D", "S3"], "int32"),
                 "ranged": out_meta(["B", "D", "S3"]), "min_bc": out_meta(["B", "D", "S3", "S2"]),
                 "max_s": out_meta(["B", "D", "S3"]), "ones": out_meta(["B", "S3"]), "weight2": out_meta(["S3", "S2"]),
                 "cond_tuple": out_meta(["B", "D", "S3"]), "cond_module": out_meta(["B", "D", "S2"]),
                 "acts": out_meta(["B", "D", "S3"])}},
    {"name": "x_conv_pool_strided", "task": "forward", "model": CONV_POOL, "ref": ref_conv_pool,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None), "t": ((B, "T"), "int32", 3)}),
     "params": {"conv.filter": (2, 3, 3), "conv.bias": (2,), "norm.scale": (3,), "norm.bias": (3,),
                "proj.weight": (3, 2), "lstm.ff_weight": (8, 3), "lstm.rec_weight": (8, 2), "lstm.bias": (8,)},
     "outputs": {"conv": out_meta(["B", "D", "S2"]), "pool": out_meta(["B", "D", "S3"]),
                 "pool1d": out_meta(["B", "D", "S3"]), "proj": out_meta(["B", "D", "S2"]),
                 "xtx": out_meta(["B", "S3", "S2"]), "sm_t": out_meta(["B", "D", "S3"]),
                 "ce_probs": out_meta(["B", "D"]), "lstm3": out_meta(["B", "S2"])}},
]

CASES += [
    {"name": "x_loss_shapes_train", "task": "train", "grads": True, "model": LOSS_SHAPES, "ref": ref_loss_shapes,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None)}),
     "params": {"lin.weight": (3, 2), "lin.bias": (2,), "gate": (3,)}, "outputs": {}},
]

CASES += [
    {"name": "x_dims_reshape", "task": "forward", "model": DIMS_RESHAPE, "ref": ref_dims_reshape,
     "inputs": _inputs({"x": ((B, "T", 3), "float32", None)}),
     "params": {"conv.filter": (2, 1, 3, 2), "conv.bias": (2,), "lin.weight": (3, 2), "lin.bias": (2,)},
     "outputs": {"conv": out_meta(["B", "D", "S3", "S2"]), "chunks": out_meta(["B", "D", "S2", "S3"]),
                 "flat": out_meta(["B", "D"]), "time_major": out_meta(["D", "S2", "B"]),
                 "batch_mid": out_meta(["S2", "B", "D"])}},
]

CASES += [
    {"name": "x_decoder_step_train", "task": "train", "grads": True, "model": DECODER_STEP, "ref": ref_decoder_step,
     "inputs": {"data": {"x": ((B, 7, 3), "float32", None), "y": ((B, 4), "int32", 5)},
                "sizes": {"time": SIZES, "out_time": [4, 3, 2]}, "dim_len": {}},
     "params": {"keys.weight": (3, 2), "keys.bias": (2,), "query.weight": (2, 2), "emb.weight": (5, 2),
                "lstm.ff_weight": (8, 2), "lstm.rec_weight": (8, 2), "lstm.bias": (8,), "out.weight": (5, 5),
                "out.bias": (5,)}, "outputs": {}},
]
