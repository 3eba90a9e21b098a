"""Cross-entropy family: ce."""

from __future__ import annotations

import tensorflow as tf

from .base import Loss


def safe_log(x, eps=1e-20):
    return tf.math.log(tf.maximum(x, eps))


class CrossEntropyLoss(Loss):
    """Cross entropy against sparse (class index) or dense (distribution) targets."""

    class_name = "ce"

    def __init__(self, focal_loss_factor=0.0, label_smoothing=0.0, label_smoothing_gaussian=False,
                 debug_dump=False, safe_log_opts=None, use_fused=True, fake_upper_bound=None, **kwargs):
        super().__init__(**kwargs)
        self.focal_loss_factor = focal_loss_factor
        self.label_smoothing = label_smoothing
        self.label_smoothing_gaussian = label_smoothing_gaussian
        self.safe_log_opts = safe_log_opts or {}
        self.use_fused = use_fused
        self.fake_upper_bound = fake_upper_bound

    def _target_probs(self, num_classes):
        if self.target.sparse:
            t = tf.one_hot(tf.cast(self.target_flat, tf.int32), num_classes, dtype=tf.float32)
        else:
            t = self.target_flat
        if self.label_smoothing:
            t = t * (1.0 - self.label_smoothing) + self.label_smoothing / num_classes
        return t

    def get_value(self):
        with tf.name_scope("loss_ce"):
            logits = self.output_before_softmax_flat
            act = self.output_with_activation.act_name if self.output_with_activation is not None else None
            if logits is not None and act not in ("softmax", "log_softmax"):
                logits = None
            if (logits is not None and self.target.sparse and not self.label_smoothing and not self.focal_loss_factor
                    and self.fake_upper_bound is None):
                out = tf.nn.sparse_softmax_cross_entropy_with_logits(
                    logits=logits, labels=tf.cast(self.target_flat, tf.int32))
                return self.reduce_func(out)
            if logits is not None:
                log_probs = tf.nn.log_softmax(logits)
            else:
                log_probs = safe_log(self.output_flat, **self.safe_log_opts)
            probs = tf.exp(log_probs) if logits is not None else self.output_flat
            t = self._target_probs(tf.shape(log_probs)[-1] if self.output.dim is None else self.output.dim)
            out = -tf.reduce_sum(t * log_probs, axis=-1)
            if self.focal_loss_factor:
                p_t = tf.reduce_sum(t * probs, axis=-1)
                out *= tf.pow(1.0 - p_t, self.focal_loss_factor)
            return self.reduce_func(out)

    def get_error(self):
        with tf.name_scope("loss_frame_error"):
            return self._frame_error()
