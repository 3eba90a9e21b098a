"""LossHolder: collects one loss of one layer lazily and applies scale and normalization."""

from __future__ import annotations

import re

import tensorflow as tf

from ..errors import NetworkError, NetworkLayerException


class LossHolder:
    """
    Keeps a loss with its layer. All ops are created on demand (first getter call), so that losses
    can be collected first and computed in the right context.
    """

    def __init__(self, name, loss, layer_output, reduce_func=None, layer=None, loss_value=None, error_value=None,
                 norm_factor=None, only_on_eval=None, network=None):
        self.name = name
        self.loss = loss
        self._layer_output = layer_output
        self._reduce_func = reduce_func
        self._layer = None
        self._network = network
        self._is_prepared = False
        self._loss_value = loss_value
        self._error_value = error_value
        self._norm_factor = norm_factor
        self._only_on_eval = only_on_eval
        self._loss_value_for_objective = None
        self._per_seq = {}
        if layer is not None:
            self.init(layer)

    def __repr__(self):
        return "<LossHolder %r %r>" % (self.name, self.loss.class_name)

    def init(self, layer):
        self._layer = layer
        if self._only_on_eval is None:
            self._only_on_eval = bool(layer.only_on_eval)
        if self._network is None:
            self._network = layer.network
        return self

    def get_layer(self):
        return self._layer

    def get_only_on_eval(self):
        return bool(self._only_on_eval)

    def get_tf_name(self):
        return re.sub(r"[^A-Za-z0-9_.\-]", "_", self.name)

    def _prepare(self):
        """Builds the loss ops; an error names the layer of the loss (as construction errors do)."""
        if self._is_prepared:
            return
        try:
            self._prepare_ops()
        except Exception as exc:
            if isinstance(exc, NetworkError) or self._layer is None:
                raise
            raise NetworkLayerException(
                "loss %r: %s: %s" % (self.loss.class_name, type(exc).__name__, exc), self._layer.name,
                self._layer.network, layer_class=getattr(self._layer, "layer_class", None)) from exc

    def _prepare_ops(self):
        loss = self.loss
        with tf.name_scope("loss/%s/" % self.get_tf_name()):
            loss.init_by_layer(self._layer, self._layer_output)
            if self._reduce_func is not None:
                loss.reduce_func = self._reduce_func
            if self._loss_value is None:
                self._loss_value = self._only_on_eval_opt(loss.get_value)
            if self._error_value is None:
                self._error_value = self._only_on_eval_opt(loss.get_error)
            if self._norm_factor is None:
                self._norm_factor = loss.get_normalization_factor()
            value = self._loss_value
            if value is not None:
                if loss.use_normalized_loss:
                    value = value * tf.cast(self._norm_factor, value.dtype)
                if loss.scale != 1:
                    value = value * loss.scale
            self._loss_value_for_objective = value
        self._is_prepared = True

    def _only_on_eval_opt(self, value_func):
        """As the original: with only_on_eval, the value (and error) is 0 in training (via cond_on_train)."""
        if not self._only_on_eval or self._network is None:
            return value_func()
        have_value = []

        def on_eval():
            value = value_func()
            have_value.append(value is not None)
            return value if value is not None else tf.constant(0.0)

        res = self._network.cond_on_train(lambda: tf.constant(0.0), on_eval)
        if have_value and not have_value[0]:
            return None
        return res

    def get_loss_value(self):
        self._prepare()
        return self._loss_value

    def get_loss_value_for_fetch(self):
        return self.get_loss_value()

    def get_loss_value_for_objective(self):
        self._prepare()
        return self._loss_value_for_objective

    def get_error_value(self):
        self._prepare()
        return self._error_value

    def get_norm_factor(self):
        self._prepare()
        return self._norm_factor

    def _get_reduced(self, key, value_func, reduce):
        """Recompute the loss/error with another reduce function (per sequence or per position)."""
        if key not in self._per_seq:
            self._prepare()
            loss = self.loss
            orig = loss.reduce_func
            loss.reduce_func = reduce
            try:
                self._per_seq[key] = value_func()
            finally:
                loss.reduce_func = orig
        return self._per_seq[key]

    def get_normalized_loss_value_per_seq(self):
        if self.get_loss_value() is None:
            return None
        return self._get_reduced("loss_seq", self.loss.get_value, lambda x: self.loss.reduce_to_batch(x, True))

    def get_normalized_error_value_per_seq(self):
        if self.get_error_value() is None:
            return None
        return self._get_reduced("error_seq", self.loss.get_error, lambda x: self.loss.reduce_to_batch(x, True))

    def get_loss_value_per_pos(self):
        if self.get_loss_value() is None:
            return None
        return self._get_reduced("loss_pos", self.loss.get_value, self.loss.flat_to_batch_time)

    def get_error_value_per_pos(self):
        if self.get_error_value() is None:
            return None
        return self._get_reduced("error_pos", self.loss.get_error, self.loss.flat_to_batch_time)

    def copy_new_base(self, name=None, layer=None, network=None, reduce_func=None):
        """A new holder of a fresh copy of the same loss (e.g. for a per-sequence reduction)."""
        import copy

        return LossHolder(name=name or self.name, loss=copy.copy(self.loss), layer_output=self._layer_output,
                          layer=layer or self._layer, network=network or self._network,
                          reduce_func=reduce_func or self._reduce_func, only_on_eval=self._only_on_eval)
