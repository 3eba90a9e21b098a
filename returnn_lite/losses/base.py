"""
Loss base class and registry.

Normalization as in the original (behavior version 0): ``get_value()`` is the SUM over all frames
(or sequences, without a time axis); ``get_normalization_factor()`` is 1 / number of frames. The
objective uses the plain sum times ``loss_scale`` unless ``use_normalized_loss`` is set.
"""

from __future__ import annotations

import tensorflow as tf

from ..util import did_you_mean

_loss_registry = {}


def get_loss_class(name):
    from . import _load_all  # noqa: F401

    if name not in _loss_registry:
        raise ValueError("unknown loss %r.%s Known losses: %s" % (
            name, did_you_mean(name, _loss_registry), ", ".join(sorted(_loss_registry))))
    return _loss_registry[name]


def get_loss_class_names():
    from . import _load_all  # noqa: F401

    return sorted(_loss_registry)


class Loss:
    """A loss on a layer's output against a target. Subclasses set class_name and implement get_value."""

    class_name = None
    recurrent = False  # True: works on whole sequences (e.g. CTC), not on flattened frames
    need_target = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("class_name"):
            _loss_registry[cls.class_name] = cls

    def __init__(self, base_network, use_flatten_frames=True, use_normalized_loss=False, custom_norm_factor=None,
                 custom_inv_norm_factor=None, scale=1.0, _check_output_before_softmax=None):
        self.base_network = base_network
        self.use_flatten_frames = use_flatten_frames
        self.use_normalized_loss = use_normalized_loss
        self.custom_norm_factor = custom_norm_factor
        self.custom_inv_norm_factor = custom_inv_norm_factor
        self.scale = scale
        self.layer = None
        self.output = None
        self.output_with_activation = None
        self.target = None
        self.output_flat = None
        self.output_before_softmax_flat = None
        self.target_flat = None
        self.output_seq_lens = None
        self.target_seq_lens = None
        self.loss_norm_factor = None
        self.num_frames = None
        self._flat_mask = None

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        pass

    @classmethod
    def get_auto_output_layer_dim(cls, target_dim):
        """Output dim a layer gets when n_out is missing and this loss is set (the target's dim)."""
        return target_dim

    def check_dims(self, layer, target):
        """Template-level check of output against target, so that mismatches fail at construction."""
        if target is None or not self.need_target:
            return
        out = layer.output
        if target.sparse and not out.sparse and out.dim is not None and target.dim is not None:
            if self.get_auto_output_layer_dim(target.sparse_dim).dimension != out.dim:
                raise ValueError("loss %r: the output dim %r of layer %r does not match the %i classes of the "
                                 "target %r" % (self.class_name, out.dim, layer.name, target.dim, target.name))
        if not target.sparse and not out.sparse and out.dim is not None and target.dim is not None:
            if out.dim != target.dim:
                raise ValueError("loss %r: output dim %r of layer %r != target %r dim %r" % (
                    self.class_name, out.dim, layer.name, target.name, target.dim))

    def init_by_layer(self, layer, layer_output_template=None):
        output = layer.output if layer_output_template is None else layer_output_template
        if layer_output_template is not None and layer_output_template.placeholder is None:
            output = layer.output
        target = layer._get_target_value() if self.need_target and layer.target else None
        self.init(output=output, output_with_activation=getattr(layer, "output_before_activation", None),
                  target=target, layer=layer)

    def init(self, output, output_with_activation=None, target=None, layer=None):
        """Flattens output and target over (batch, time) frames and sets the normalization factor."""
        self.layer = layer
        self.output = output
        self.output_with_activation = output_with_activation
        self.target = target
        with tf.name_scope("loss_init"):
            if output.have_time_axis():
                self.output_seq_lens = output.get_sequence_lengths()
                self.num_frames = tf.reduce_sum(self.output_seq_lens)
            else:
                self.num_frames = self.base_network.get_data_batch_dim() if output.have_batch_axis() else 1
            if target is not None and target.have_time_axis():
                self.target_seq_lens = target.get_sequence_lengths()
            if self.use_flatten_frames and not self.recurrent:
                self.output_flat = self._flatten(output)
                if output_with_activation is not None:
                    self.output_before_softmax_flat = self._flatten(output_with_activation.data)
                if target is not None:
                    self.target_flat = self._flatten(target, like=output)
            self.loss_norm_factor = self._norm_factor()

    def _norm_factor(self):
        if self.custom_norm_factor is not None:
            v = self.custom_norm_factor
            return v(self) if callable(v) else v
        if self.custom_inv_norm_factor is not None:
            inv = self.custom_inv_norm_factor
            return 1.0 / tf.cast(tf.reduce_sum(inv.output.placeholder) if hasattr(inv, "output") else inv, tf.float32)
        if isinstance(self.num_frames, int):
            return 1.0 / self.num_frames
        return 1.0 / tf.cast(self.num_frames, tf.float32)

    def _flatten(self, data, like=None):
        """[B,T,...] -> [frames,...] keeping only frames within the sequence lengths (batch-major order)."""
        data = data.copy_as_batch_major() if data.have_batch_axis() else data
        if not data.have_time_axis() or not data.have_batch_axis():
            return data.placeholder
        data = data.copy_with_time_dim_axis(1)
        mask = data.get_sequence_mask()
        return tf.boolean_mask(data.placeholder, mask)

    def reduce_func(self, loss):
        return tf.reduce_sum(loss)

    def reduce_to_batch(self, loss, normalize):
        """Per-frame loss [frames] -> per sequence [B] (mean over the frames if normalize)."""
        if not self.output.have_time_axis():
            return loss
        out = self.output.copy_as_batch_major().copy_with_time_dim_axis(1)
        mask = out.get_sequence_mask()
        batch_idx = tf.where(mask)[:, 0]
        per_seq = tf.math.unsorted_segment_sum(loss, batch_idx, tf.shape(mask)[0])
        if normalize:
            per_seq /= tf.cast(tf.maximum(self.output_seq_lens, 1), per_seq.dtype)
        return per_seq

    def flat_to_batch_time(self, loss):
        """Per-frame loss [frames] -> [B,T] with zeros in padded frames."""
        out = self.output.copy_as_batch_major().copy_with_time_dim_axis(1)
        mask = out.get_sequence_mask()
        return tf.scatter_nd(tf.where(mask), loss, tf.shape(mask, out_type=tf.int64))

    def get_value(self):
        raise NotImplementedError

    def get_error(self):
        return None

    def get_normalization_factor(self):
        return self.loss_norm_factor

    def _frame_error(self, output_flat=None):
        """Sum of frames where argmax(output) != sparse target."""
        output_flat = self.output_flat if output_flat is None else output_flat
        if self.target is None or not self.target.sparse:
            target_idx = tf.argmax(self.target_flat, axis=-1, output_type=tf.int32)
        else:
            target_idx = tf.cast(self.target_flat, tf.int32)
        if self.output.sparse:
            out_idx = tf.cast(output_flat, tf.int32)
        else:
            out_idx = tf.argmax(output_flat, axis=-1, output_type=tf.int32)
        return self.reduce_func(tf.cast(tf.not_equal(out_idx, target_idx), tf.float32))
