"""
The pure-TF cell loop (returnn_lite.layers.rec.cells.run_cell_loop): outputs, final states and gradients (input
projection, all params, initial state) against a plain unrolled reference (per frame cell.step on the projection,
sequences reversed with reverse_sequence, copy-through past the length, autodiff through everything), for the TF-cell
units, both directions, unequal lengths (one empty sequence). The loop reverses by visiting frames backwards and
takes W_rec's gradient outside the loop: this checks that both give the same numbers.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.layers.rec import cells as cells_mod

tf1 = tf.compat.v1


class _Layer:
    """What a cell needs of its layer: create_param (random params, so that every gradient is non-trivial)."""

    name = "test"
    network = None

    def __init__(self, rng):
        self.rng = rng
        self.params = []

    def create_param(self, name, shape, init=None):
        v = tf1.get_variable(name.replace("/", "_"), initializer=tf.constant(
            self.rng.randn(*shape) * 0.4, tf.float64))
        self.params.append(v)
        return v


def _reference(cell, z, lens, init, reverse):
    """Unrolled: [T, B, k] -> (y [T, B, n_out] zero past the length, final state)."""
    n_time = z.shape[0]
    if reverse:
        z = tf.reverse_sequence(z, lens, seq_axis=0, batch_axis=1)
    state, ys = dict(init), []
    for t in range(n_time):
        y, new = cell.step(z[t], state)
        mask = tf.expand_dims(t < lens, 1)
        state = {k: tf.where(mask, new[k], state[k]) for k in cell.state_names}
        ys.append(tf.where(mask, y, tf.zeros_like(y)))
    y = tf.stack(ys)
    if reverse:
        y = tf.reverse_sequence(y, lens, seq_axis=0, batch_axis=1)
    return y, state


UNITS = [("standardlstm", {}), ("standardlstm", {"num_proj": 3, "use_peepholes": True, "forget_bias": 0.5}),
         ("standardlstm", {"cell_clip": 0.5}), ("basiclstm", {}), ("basiclstm", {"activation": "relu"}), ("rnn", {}), ("gru", {}), ("nativelstm2", {"forget_bias": 0.7}),
         ("zoneoutlstm", {})]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unit,opts", UNITS)
def test_cell_loop_vs_unrolled_reference(unit, opts, reverse):
    rng = np.random.RandomState(3)
    n_time, n_batch, n_in, n = 6, 4, 3, 5
    lens = np.array([6, 3, 0, 5], "int32")
    with tf.Graph().as_default():
        layer = _Layer(rng)
        cell = cells_mod.get_cell_class(unit)(layer, n_in, n, **opts)
        x = tf.constant(rng.randn(n_time, n_batch, n_in))
        z = cell.project(x)
        init = {k: tf.constant(rng.randn(n_batch, d)) for k, d in cell.state_dims.items()}
        lens_t = tf.constant(lens)
        res = {}
        for key in ("loop", "ref"):
            if key == "loop":
                y, final = cells_mod.run_cell_loop(cell, z, lens_t, init, reverse=reverse, native=False)
            else:
                y, final = _reference(cell, z, lens_t, init, reverse)
            weights = tf.sin(tf.reshape(tf.range(tf.size(y), dtype=y.dtype), tf.shape(y)))
            loss = tf.reduce_sum(y * weights) + sum(tf.reduce_sum(final[k] * (1.3 + i))
                                                    for i, k in enumerate(cell.state_names))
            wrt = [x] + layer.params + [init[k] for k in cell.state_names]
            res[key] = [y] + [final[k] for k in cell.state_names] + tf.gradients(loss, wrt)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            got, want = session.run([res["loop"], res["ref"]])
    assert np.all(got[0][lens[1]:, 1] == 0) and np.all(got[0][:, 2] == 0)  # zero past the length
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10, err_msg="output %i of %s %s" % (i, unit, opts))


def test_rec_weight_gradient_outside_the_loop():
    """With rec_weight, the loop body has no gradient accumulation of W_rec: its gradient is one MatMul outside."""
    rng = np.random.RandomState(0)
    with tf.Graph().as_default() as graph:
        layer = _Layer(rng)
        cell = cells_mod.get_cell_class("standardlstm")(layer, 3, 4)
        z = cell.project(tf.constant(rng.randn(5, 2, 3)))
        init = {k: tf.zeros([2, d], tf.float64) for k, d in cell.state_dims.items()}
        y, _ = cells_mod.run_cell_loop(cell, z, tf.constant([5, 2]), init, native=False)
        before = {op.name for op in graph.get_operations()}
        tf.gradients(tf.reduce_sum(y), layer.params)
        grad_ops = [op for op in graph.get_operations() if op.name not in before]
        in_loop_matmuls = [op for op in grad_ops if op.type == "MatMul" and "while" in op.name]
        # per frame only dh = dz @ W_rec^T; dW_rec = h_prev^T dz is computed once, outside
        assert len(in_loop_matmuls) == 1, [op.name for op in in_loop_matmuls]


@pytest.mark.parametrize("order", ["ijfo", "jifo"])
def test_lstm_update_gradient_vs_autodiff(order):
    """lstm_update's hand-written gradient against autodiff of the same formulas."""
    rng = np.random.RandomState(5)
    n_batch, n = 3, 4
    with tf.Graph().as_default():
        z, rec = tf.constant(rng.randn(n_batch, 4 * n)), tf.constant(rng.randn(n_batch, 4 * n))
        c_prev = tf.constant(rng.randn(n_batch, n))
        w_c, w_h = tf.constant(rng.randn(n_batch, n)), tf.constant(rng.randn(n_batch, n))
        c, h = cells_mod.lstm_update(z, rec, c_prev, order)
        parts = dict(zip(order, tf.split(z + rec, 4, axis=-1)))
        c_ref = tf.sigmoid(parts["f"]) * c_prev + tf.sigmoid(parts["i"]) * tf.tanh(parts["j"])
        h_ref = tf.sigmoid(parts["o"]) * tf.tanh(c_ref)
        outs = []
        for cc, hh in ((c, h), (c_ref, h_ref)):
            loss = tf.reduce_sum(cc * w_c) + tf.reduce_sum(hh * w_h)
            outs.append([cc, hh] + tf.gradients(loss, [z, rec, c_prev]))
            outs.append(tf.gradients(tf.reduce_sum(hh * w_h), [z, c_prev]))  # no gradient into c
        with tf1.Session() as session:
            got, got_h_only, want, want_h_only = session.run(outs)
    for a, b in zip(got + got_h_only, want + want_h_only):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
