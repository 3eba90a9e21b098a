"""fast_grads: the overridden matmul gradients equal TF's general ones (values), with fewer gradient ops."""

import numpy as np
import tensorflow as tf

from returnn_lite.fast_grads import matmul_by_weights, matmul_same_batch

tf1 = tf.compat.v1


def _grads(build):
    graph = tf.Graph()
    with graph.as_default():
        rng = np.random.RandomState(1)
        a = tf.constant(rng.randn(3, 4, 5, 6).astype("float32"))
        b = tf.constant(rng.randn(3, 4, 6, 5).astype("float32"))
        w = tf.constant(rng.randn(6, 7).astype("float32"))
        a_dyn = tf1.placeholder_with_default(a, [None, 4, None, 6])  # dynamic batch dims: TF's broadcast path
        b_dyn = tf1.placeholder_with_default(b, [None, 4, None, 5])
        outs = build(a_dyn, b_dyn, w)
        loss = sum(tf.reduce_sum(tf.sin(y)) for y in outs)
        n_before = len(graph.get_operations())
        grads = tf.gradients(loss, [a_dyn, b_dyn, w])
        n_grad_ops = len(graph.get_operations()) - n_before
        with tf1.Session(graph=graph) as session:
            return session.run(grads), n_grad_ops


def test_fast_matmul_grads_equal_tf_grads():
    def plain(a, b, w):
        return [tf.matmul(a, w), tf.matmul(a, b), tf.matmul(a, a, transpose_b=True),
                tf.matmul(b, b, transpose_a=True), tf.matmul(b, a, transpose_a=True, transpose_b=True)]

    def fast(a, b, w):
        return [matmul_by_weights(a, w), matmul_same_batch(a, b), matmul_same_batch(a, a, transpose_b=True),
                matmul_same_batch(b, b, transpose_a=True), matmul_same_batch(b, a, transpose_a=True, transpose_b=True)]

    expected, n_plain = _grads(plain)
    got, n_fast = _grads(fast)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    assert n_fast < n_plain * 0.6, (n_fast, n_plain)


def test_mul_by_mask_grad_equals_tf_grad_without_mask_reduction():
    from returnn_lite.fast_grads import mul_by_mask

    def grads(fast):
        graph = tf.Graph()
        with graph.as_default():
            rng = np.random.RandomState(2)
            x = tf1.placeholder_with_default(rng.randn(3, 4, 5).astype("float32"), [None, None, 5])
            mask = tf.constant((rng.rand(1, 1, 5) > 0.5).astype("float32") * 2.0)
            y = mul_by_mask(x, mask) if fast else x * mask
            loss = tf.reduce_sum(tf.sin(y))
            n_before = len(graph.get_operations())
            grad = tf.gradients(loss, x)[0]
            n_grad_ops = len(graph.get_operations()) - n_before
            with tf1.Session(graph=graph) as session:
                return session.run([y, grad]), n_grad_ops

    (y_fast, g_fast), n_fast = grads(True)
    (y_plain, g_plain), n_plain = grads(False)
    np.testing.assert_array_equal(y_fast, y_plain)
    np.testing.assert_allclose(g_fast, g_plain, rtol=1e-6)
    assert n_fast < n_plain, (n_fast, n_plain)
