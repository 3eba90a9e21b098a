"""Regression losses: l1, mse, mean_l1."""

from __future__ import annotations

import tensorflow as tf

from .base import Loss


class L1Loss(Loss):
    """L1 distance: sum |target - output| over frames and features."""

    class_name = "l1"

    def get_value(self):
        if self.target.sparse:
            raise ValueError("l1 loss: sparse targets are not supported")
        with tf.name_scope("loss_l1"):
            return self.reduce_func(tf.abs(tf.cast(self.target_flat, self.output_flat.dtype) - self.output_flat))

    def get_error(self):
        with tf.name_scope("loss_frame_error"):
            return self._frame_error()


class MeanSquaredError(Loss):
    """Squared difference, mean over the feature dim, sum over frames; sparse targets as one-hot."""

    class_name = "mse"

    def get_value(self):
        with tf.name_scope("loss_mse"):
            if self.output_before_softmax_flat is not None:
                x = tf.nn.softmax(self.output_before_softmax_flat)
            else:
                x = self.output_flat
            if self.target.sparse:
                y = tf.one_hot(tf.cast(self.target_flat, tf.int32), self.target.dim, dtype=x.dtype)
            else:
                y = tf.cast(self.target_flat, x.dtype)
            out = tf.math.squared_difference(x, y)
            return self.reduce_func(tf.reduce_mean(out, axis=-1))

    def get_error(self):
        with tf.name_scope("loss_frame_error"):
            return self._frame_error()


class MeanL1Loss(Loss):
    """Absolute difference, mean over the feature dim, sum over frames."""

    class_name = "mean_l1"

    def get_value(self):
        if self.target.sparse:
            raise ValueError("mean_l1 loss: sparse targets are not supported")
        with tf.name_scope("loss_mean_l1"):
            diff = tf.abs(tf.cast(self.target_flat, self.output_flat.dtype) - self.output_flat)
            return self.reduce_func(tf.reduce_mean(diff, axis=-1))

    def get_error(self):
        with tf.name_scope("loss_frame_error"):
            return self._frame_error()
