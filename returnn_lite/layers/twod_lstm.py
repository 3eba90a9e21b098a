"""
``twod_lstm``: the 2D LSTM of the original (Bahar et al. 2018, 2D sequence-to-sequence models), in TF.

Two sources: ``from: [source, target]``, e.g. the encoder [S,B,Fs] and the (shifted) target embedding [T,B,Ft].
The LSTM runs over the grid target x source: cell (t, s) reads the input ``concat(source[s], target[t])``, the
output and cell state of its left neighbour (t, s-1) (weights ``Vh_re``) and of the one above (t-1, s) (``Vv_re``):

    z = [x_s, y_t] W_re + h(t,s-1) Vh_re + h(t-1,s) Vv_re          (no bias, as the original)
    i, f, lambda, o = sigmoid(z[0:4n]) ; g = tanh(z[4n:5n])
    c(t,s) = i g + f lambda c(t-1,s) + f (1 - lambda) c(t,s-1) ;  h(t,s) = o tanh(c(t,s))

Cells past a sequence's source length are zero (all target positions count, as in the original). ``pooling``
reduces the source axis: "last" (h at the last source frame), "max", "average" (over the source frames), or
"weighted" (softmax over s of ``target[t] W_att h(t,s)``, param ``W_att``). Output: the target's layout with
feature dim n_out. Params (``<layer>/rec-twod/``): ``W_re`` [Fs+Ft, 5n], ``Vh_re`` [n, 5n], ``Vv_re`` [n, 5n].

The grid is computed as a loop over its anti-diagonals t + s = d: all cells of a diagonal depend only on the
previous diagonal, so each step is one [L*B, 2n] x [2n, 5n] matmul for the L cells of the diagonal (T + S - 1
steps instead of T * S; benchmarks/twod_lstm.py). Inside a rec loop (the target without time axis, one target step
per loop step) the layer keeps the previous row (c, h) [B,S,n] as its rec state and runs along the source axis.
"""

from __future__ import annotations

import tensorflow as tf

from ..data import Dim
from .base import LayerBase

__all__ = ["TwoDLSTMLayer", "twod_lstm_grid", "pool_source_axis"]

_POOLINGS = ("last", "max", "average", "weighted")


def _cell(z, c_up, c_left, n):
    """One step of the 2D LSTM cell on [..., 5n] gate inputs -> (c, h)."""
    i, f, lam, o = [tf.sigmoid(z[..., k * n:(k + 1) * n]) for k in range(4)]
    c = i * tf.tanh(z[..., 4 * n:]) + f * lam * c_up + f * (1.0 - lam) * c_left
    return c, o * tf.tanh(c)


def twod_lstm_grid(x_w, src_mask, v_h, v_v):
    """
    :param tf.Tensor x_w: [T,S,B,5n] input projection of every cell
    :param tf.Tensor src_mask: [S,B] bool, the source frames
    :param v_h: [n,5n] weights from the left neighbour's output
    :param v_v: [n,5n] weights from the upper neighbour's output
    :return: h of every cell, [T,S,B,n] (zero past the source lengths)
    """
    n = v_h.shape[0]
    shape = tf.shape(x_w)
    n_t, n_s, n_b = shape[0], shape[1], shape[2]
    n_diag = n_t + n_s - 1
    # skewed once, outside the loop (a gather per step would cost a full-grid scatter per step in the gradient):
    # diagonal d, row t holds the cell (t, d - t)
    t_idx, d_idx = tf.meshgrid(tf.range(n_t), tf.range(n_diag), indexing="xy")  # [D,T] each
    s_idx = d_idx - t_idx
    inside = (s_idx >= 0) & (s_idx < n_s)
    s_idx = tf.clip_by_value(s_idx, 0, n_s - 1)
    x_diag = tf.gather_nd(x_w, tf.stack([t_idx, s_idx], axis=-1))  # [D,T,B,5n]
    valid_diag = tf.cast(inside[:, :, None] & tf.gather(src_mask, s_idx), x_w.dtype)[..., None]  # [D,T,B,1]
    v_hv = tf.concat([v_h, v_v], axis=0)  # [2n,5n]: left and upper neighbour in one matmul
    zeros = tf.zeros([n_t, n_b, n], dtype=x_w.dtype)
    x_ta = tf.TensorArray(x_w.dtype, size=n_diag).unstack(x_diag)
    valid_ta = tf.TensorArray(x_w.dtype, size=n_diag).unstack(valid_diag)

    def step(d, c_prev, h_prev, outputs):
        # only the rows lo..hi have a cell on this diagonal; the others stay zero (no wasted matmul rows)
        lo, hi = tf.maximum(0, d - n_s + 1), tf.minimum(d, n_t - 1) + 1
        # on the previous diagonal, row t holds the left neighbour (t, s-1), row t-1 the upper one (t-1, s)
        h_pad, c_pad = tf.concat([zeros[:1], h_prev], axis=0), tf.concat([zeros[:1], c_prev], axis=0)
        h_left, c_left = h_pad[lo + 1:hi + 1], c_pad[lo + 1:hi + 1]
        h_up, c_up = h_pad[lo:hi], c_pad[lo:hi]
        recurrent = tf.matmul(tf.reshape(tf.concat([h_left, h_up], axis=-1), [-1, 2 * n]), v_hv)
        z = x_ta.read(d)[lo:hi] + tf.reshape(recurrent, [hi - lo, n_b, 5 * n])
        c, h = _cell(z, c_up, c_left, n)
        valid = valid_ta.read(d)[lo:hi]
        padding = [[lo, n_t - hi], [0, 0], [0, 0]]
        c, h = tf.pad(c * valid, padding), tf.pad(h * valid, padding)
        return d + 1, c, h, outputs.write(d, h)

    outputs = tf.TensorArray(x_w.dtype, size=n_diag, element_shape=tf.TensorShape([None, None, n]))
    _, _, _, outputs = tf.while_loop(lambda d, *_: d < n_diag, step, (tf.constant(0), zeros, zeros, outputs),
                                     name="twod_lstm_diagonals")
    diagonals = outputs.stack()  # [D,T,B,n]
    t_grid, s_grid = tf.meshgrid(tf.range(n_t), tf.range(n_s), indexing="ij")
    return tf.gather_nd(diagonals, tf.stack([t_grid + s_grid, t_grid], axis=-1))  # [T,S,B,n]


def _row_step(x_w, src_mask, v_h, v_v, c_up, h_up):
    """
    One target step (one grid row) inside a rec loop.
    :param x_w: [S,B,5n]; src_mask: [S,B]; c_up, h_up: [S,B,n] the previous row
    :return: c, h of this row, [S,B,n]
    """
    n = v_h.shape[0]
    z_up = x_w + tf.reshape(tf.matmul(tf.reshape(h_up, [-1, n]), v_v), tf.shape(x_w))
    valid = tf.cast(src_mask, x_w.dtype)[:, :, None]

    def step(carry, elems):
        c_left, h_left = carry
        z, c_above, valid_s = elems
        c, h = _cell(z + tf.matmul(h_left, v_h), c_above, c_left, n)
        return c * valid_s, h * valid_s

    init = (tf.zeros_like(c_up[0]), tf.zeros_like(h_up[0]))
    return tf.scan(step, (z_up, c_up, valid), initializer=init)


def pool_source_axis(h, src_mask, pooling, target=None, w_att=None):
    """h [T,S,B,n] -> [T,B,n] (see the module doc for the pooling kinds); target [T,B,Ft] for "weighted"."""
    mask = tf.cast(src_mask, h.dtype)[None, :, :, None]  # [1,S,B,1]
    if pooling == "max":
        return tf.reduce_max(h, axis=1)
    if pooling == "average":
        return tf.reduce_sum(h * mask, axis=1) / tf.reduce_sum(mask, axis=1)
    if pooling == "weighted":
        energies = tf.einsum("tbf,fn,tsbn->tsb", target, w_att, h)
        weights = tf.nn.softmax(energies, axis=1)[..., None]
        return tf.reduce_sum(weights * h, axis=1)
    # last: h at the last source frame of each sequence
    src_mask_i = tf.cast(src_mask, tf.int32)
    is_last = src_mask_i - tf.concat([src_mask_i[1:], tf.zeros_like(src_mask_i[:1])], axis=0)  # [S,B]
    return tf.reduce_sum(h * tf.cast(is_last, h.dtype)[None, :, :, None], axis=1)


class TwoDLSTMLayer(LayerBase):
    """2D LSTM over (target, source), see the module doc."""

    layer_class = "twod_lstm"
    recurrent = True
    options_without_effect = {"bias_init": "the original's 2D LSTM has no bias param (its bias is fixed at 0)"}

    def __init__(self, pooling="last", unit_opts=None, forward_weights_init=None, recurrent_weights_init=None,
                 bias_init=None, **kwargs):
        super().__init__(**kwargs)
        self.pooling = pooling
        src, trg = [s.output for s in self.sources]
        n = self.output.dim
        init = recurrent_weights_init or forward_weights_init  # the original's default for all three params
        self.rec_vars_outputs = {}
        v_h = self.create_param("rec-twod/Vh_re", (n, 5 * n), initializer=init)
        v_v = self.create_param("rec-twod/Vv_re", (n, 5 * n), initializer=init)
        w = self.create_param("rec-twod/W_re", (src.dim + trg.dim, 5 * n), initializer=init)
        w_att = None
        if pooling == "weighted":
            w_att = self.create_param("rec-twod/W_att", (trg.dim, n), initializer=init)
        src_tm = src.copy_as_time_major()
        x_src = src_tm.placeholder  # [S,B,Fs]
        src_mask = src_tm.get_sequence_mask()  # [S,B]
        proj_src = tf.einsum("sbf,fk->sbk", x_src, w[:src.dim])  # [S,B,5n]
        in_loop = not trg.have_time_axis()
        if in_loop:
            x_trg = trg.copy_as_batch_major().placeholder  # [B,Ft]
            x_w = proj_src + tf.matmul(x_trg, w[src.dim:])[None]  # [S,B,5n]
            c_up, h_up = self._prev_row(tf.shape(x_w))
            c, h = _row_step(x_w, src_mask, v_h, v_v, c_up, h_up)
            self.rec_vars_outputs = {"state": tf.transpose(c, [1, 0, 2]), "output": tf.transpose(h, [1, 0, 2])}
            y = pool_source_axis(h[None], src_mask, pooling, x_trg[None], w_att)[0]  # [B,n]
        else:
            trg_tm = trg.copy_as_time_major()
            x_trg = trg_tm.placeholder  # [T,B,Ft]
            x_w = proj_src[None] + tf.einsum("tbf,fk->tbk", x_trg, w[src.dim:])[:, None]  # [T,S,B,5n]
            h = twod_lstm_grid(x_w, src_mask, v_h, v_v)
            y = pool_source_axis(h, src_mask, pooling, x_trg, w_att)  # [T,B,n]
            if not self.output.is_time_major():
                y = tf.transpose(y, [1, 0, 2])
        self.output.placeholder = y

    def _prev_row(self, shape):
        """(c, h) of the previous target step, [S,B,n] (zeros in the first step)."""
        prev = getattr(self.rec_previous_layer, "rec_vars_outputs", None) or {}
        if "state" not in prev:
            zeros = tf.zeros([shape[0], shape[1], self.output.dim])
            return zeros, zeros
        return tf.transpose(prev["state"], [1, 0, 2]), tf.transpose(prev["output"], [1, 0, 2])

    @classmethod
    def get_rec_initial_extra_outputs(cls, batch_dim=None, rec_layer=None, sources=(), n_out=None, **kwargs):
        if len(sources) != 2 or sources[1].output.have_time_axis():
            return {}
        src = sources[0].output.copy_as_time_major()
        zeros = tf.zeros([batch_dim, tf.shape(src.placeholder)[0], n_out])  # [B,S,n]
        return {"state": zeros, "output": zeros}

    @classmethod
    def get_rec_initial_extra_outputs_shape_invariants(cls, sources=(), n_out=None, **kwargs):
        if len(sources) != 2 or sources[1].output.have_time_axis():
            return {}
        return {"state": tf.TensorShape([None, None, n_out]), "output": tf.TensorShape([None, None, n_out])}

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if d.get("pooling", "last") not in _POOLINGS:
            raise ValueError("twod_lstm: pooling must be one of %s, got %r"
                             % (", ".join(map(repr, _POOLINGS)), d.get("pooling")))
        if d.get("unit_opts"):
            raise ValueError("twod_lstm: unit_opts %r: the 2D LSTM cell takes no options here" % (d["unit_opts"],))

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=None, **kwargs):
        if len(sources) != 2:
            raise ValueError("twod_lstm: needs exactly 2 sources (the source and the target axis), got %i"
                             % len(sources))
        src, trg = [s.output for s in sources]
        for what, data in (("source", src), ("target", trg)):
            if data.sparse or data.feature_dim_axis is None or data.dim is None:
                raise ValueError("twod_lstm: the %s %s must be dense with a feature dim" % (what, data.short_repr()))
        if not src.have_time_axis():
            raise ValueError("twod_lstm: the source %s has no time axis" % src.short_repr())
        if n_out is None:
            raise ValueError("twod_lstm: n_out is required")
        feat = Dim(kind=Dim.Types.Feature, description="%s:feature" % name, dimension=n_out)
        out = trg.copy_template_replace_dim_tag(trg.feature_dim_axis, feat, name="%s_output" % name)
        out.dtype = "float32"
        if src.beam is not None and out.beam is None:
            out.beam = src.beam
        return out
