"""Cross-entropy family: ce, bin_ce (alias sse_sigmoid), generic_ce; and the TF helpers they share."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from .base import Loss


def safe_log(x, eps=1e-20, use_fake_grad=True):
    """log(max(x, eps)); with use_fake_grad, the gradient passes as if there was no clipping."""
    if eps is None:
        eps = np.finfo(x.dtype.as_numpy_dtype).tiny
    if use_fake_grad:
        x = maximum_with_identity_grad(x, eps)
    else:
        x = tf.maximum(x, eps)
    return tf.math.log(x)


def _with_identity_grad(func, x, y):
    """func(x, y) exactly in the forward pass (no x + (f - x) rounding), the identity w.r.t. x backward."""

    @tf.custom_gradient
    def _f(x_):
        def grad(dy):
            return dy

        return func(x_, tf.cast(y, x_.dtype)), grad

    return _f(x)


def maximum_with_identity_grad(x, y):
    """max(x, y) in the forward pass, the identity w.r.t. x in the backward pass."""
    return _with_identity_grad(tf.maximum, x, y)


def minimum_with_identity_grad(x, y):
    """min(x, y) in the forward pass, the identity w.r.t. x in the backward pass."""
    return _with_identity_grad(tf.minimum, x, y)


def smoothing_cross_entropy(logits, labels, label_smoothing, gaussian=False, vocab_size=None,
                            logits_are_normalized=False):
    """
    Cross entropy against smoothed one-hot targets: the true class gets 1 - label_smoothing, every other class
    label_smoothing / (vocab_size - 1); with gaussian, a normal density around the label (scale 1 - label_smoothing)
    over the class indices. The entropy of the smoothed targets (the best reachable value) is subtracted.

    :param tf.Tensor logits: [..., vocab_size]
    :param tf.Tensor labels: [...] int
    :return: [...]
    """
    if vocab_size is None:
        vocab_size = logits.shape[-1]
    confidence = 1.0 - label_smoothing
    low_confidence = (1.0 - confidence) / float(vocab_size - 1)
    normalizing = -(confidence * np.log(confidence) + float(vocab_size - 1) * low_confidence
                    * np.log(low_confidence + 1e-20)) if confidence > 0 else -(
        float(vocab_size - 1) * low_confidence * np.log(low_confidence + 1e-20))
    if gaussian and confidence > 0.0:
        loc = tf.cast(labels, tf.float32)[..., None]
        pos = tf.range(vocab_size, dtype=tf.float32)
        soft_targets = tf.exp(-0.5 * tf.square((pos - loc) / confidence)) / (confidence * np.sqrt(2.0 * np.pi))
    else:
        soft_targets = tf.one_hot(tf.cast(labels, tf.int32), depth=vocab_size, on_value=confidence,
                                  off_value=low_confidence)
    if logits_are_normalized:
        xentropy = -tf.reduce_sum(soft_targets * logits, axis=-1)
    else:
        xentropy = tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=soft_targets)
    return xentropy - tf.cast(normalizing, xentropy.dtype)


class CrossEntropyLoss(Loss):
    """Cross entropy against sparse (class index) or dense (distribution) targets."""

    class_name = "ce"
    options_without_effect = {"debug_dump": "a debug output of the original; no effect on the values"}

    def __init__(self, focal_loss_factor=0.0, label_smoothing=0.0, label_smoothing_gaussian=False,
                 debug_dump=False, safe_log_opts=None, use_fused=True, fake_upper_bound=None, **kwargs):
        super().__init__(**kwargs)
        self.focal_loss_factor = focal_loss_factor
        self.label_smoothing = label_smoothing
        self.label_smoothing_gaussian = label_smoothing_gaussian
        self.debug_dump = debug_dump
        self.safe_log_opts = safe_log_opts or {}
        self.use_fused = use_fused
        self.fake_upper_bound = fake_upper_bound

    def get_output_target_scores(self):
        """The output probability of the target class per frame: [frames]."""
        target = tf.cast(self.target_flat, tf.int32)
        return tf.gather(self.output_flat, target[..., None], batch_dims=target.shape.rank, axis=-1)[..., 0]

    def get_value(self):
        with tf.name_scope("loss_ce"):
            if self.target.sparse:
                logits = self.output_before_softmax_flat
                if self.use_fused and logits is not None:
                    if self.label_smoothing:
                        out = smoothing_cross_entropy(
                            logits, self.target_flat, self.label_smoothing, gaussian=self.label_smoothing_gaussian,
                            vocab_size=self.target.dim)
                    else:
                        out = tf.nn.sparse_softmax_cross_entropy_with_logits(
                            logits=logits, labels=tf.cast(self.target_flat, tf.int32))
                else:
                    if self.label_smoothing:
                        out = smoothing_cross_entropy(
                            safe_log(self.output_flat), self.target_flat, self.label_smoothing,
                            gaussian=self.label_smoothing_gaussian, vocab_size=self.target.dim,
                            logits_are_normalized=True)
                    else:
                        out = -safe_log(self.get_output_target_scores(), **self.safe_log_opts)
                if self.focal_loss_factor:
                    out *= (1.0 - self.get_output_target_scores()) ** self.focal_loss_factor
                if self.fake_upper_bound is not None:
                    out = minimum_with_identity_grad(out, self.fake_upper_bound)
                return self.reduce_func(out)
            if self.focal_loss_factor:
                raise NotImplementedError("ce: focal_loss_factor is not implemented for dense targets")
            if self.label_smoothing:
                raise NotImplementedError("ce: label_smoothing is not implemented for dense targets")
            target = tf.cast(self.target_flat, tf.float32)
            if self.use_fused and self.output_before_softmax_flat is not None:
                out = tf.nn.softmax_cross_entropy_with_logits(logits=self.output_before_softmax_flat, labels=target)
                if self.fake_upper_bound is not None:
                    out = minimum_with_identity_grad(out, self.fake_upper_bound)
                return self.reduce_func(out)
            out = target * safe_log(self.output_flat, **self.safe_log_opts)
            if self.fake_upper_bound is not None:
                out = minimum_with_identity_grad(out, self.fake_upper_bound)
            return -self.reduce_func(out)

    def get_error(self):
        with tf.name_scope("loss_frame_error"):
            return self._frame_error()


class BinaryCrossEntropyLoss(Loss):
    """Binary cross entropy on logits (the output is expected before the sigmoid), averaged over the feature dim."""

    class_name = "bin_ce"

    def __init__(self, pos_weight=None, **kwargs):
        super().__init__(**kwargs)
        self.pos_weight = pos_weight

    def get_value(self):
        with tf.name_scope("loss_bin_ce"):
            logits = self.output_flat
            target = tf.cast(self.target_flat, logits.dtype)
            if self.pos_weight is None:
                out = tf.nn.sigmoid_cross_entropy_with_logits(logits=logits, labels=target)
            else:
                out = tf.nn.weighted_cross_entropy_with_logits(labels=target, logits=logits,
                                                               pos_weight=self.pos_weight)
            return self.reduce_func(out) * (1.0 / (self.output.dim or 1))

    def get_error(self):
        with tf.name_scope("loss_frame_error"):
            target_bool = tf.cast(self.target_flat, tf.float32) > 0.5
            output_bool = self.output_flat > 0.0
            not_equal = tf.cast(tf.not_equal(output_bool, target_bool), tf.float32)
            return self.reduce_func(not_equal) * (1.0 / (self.output.dim or 1))


class SseSigmoidLoss(BinaryCrossEntropyLoss):
    """Alias of bin_ce."""

    class_name = "sse_sigmoid"


class GenericCELoss(Loss):
    """
    Cross entropy for any elementwise activation y = f(z): the value is -log(y_target) with y normalized to sum 1,
    the gradient w.r.t. z is f'(z)/f(z) * (y - onehot(target)) (as in the original, not scaled by loss_scale).
    """

    class_name = "generic_ce"

    def get_value(self):
        owa = self.output_with_activation
        if owa is None:
            raise ValueError("generic_ce: layer %r has no activation (output before activation unknown)" % (
                self.layer.name if self.layer is not None else self.output))
        if not self.target.sparse:
            raise ValueError("generic_ce: needs a sparse target")
        with tf.name_scope("loss_generic_ce"):
            out = self.output
            x_data = owa.data
            x_full = x_data.placeholder
            y_full = out.placeholder
            grad_f = tf.gradients(tf.math.log(y_full), x_full)[0]
            x = self._flatten(x_data)
            y = self._flatten(out)
            grad_f = self._flatten(out.copy(placeholder=grad_f))
            y = y / tf.reduce_sum(y, axis=-1, keepdims=True)
            target = tf.cast(self.target_flat, tf.int32)

            @tf.custom_gradient
            def _loss(x_, y_):
                nlog = -tf.math.log(tf.clip_by_value(y_, 1e-20, 1e20))
                value = self.reduce_func(tf.gather(nlog, target[:, None], batch_dims=1, axis=-1)[:, 0])

                def grad(dy):
                    # as the original: the incoming gradient (e.g. a loss scale) is not applied
                    del dy
                    onehot = tf.one_hot(target, depth=tf.shape(x_)[-1], dtype=x_.dtype)
                    return tf.stop_gradient(grad_f) * (y_ - onehot), tf.zeros_like(y_)

                return value, grad

            return _loss(x, tf.stop_gradient(y))

    def get_error(self):
        with tf.name_scope("loss_frame_error"):
            return self._frame_error()
