"""
Loss base class and registry.

Normalization as in the original (behavior version 0): ``get_value()`` is the SUM over all frames
(or sequences, without a time axis); ``get_normalization_factor()`` is 1 / number of frames. The
objective uses the plain sum times ``loss_scale`` unless ``use_normalized_loss`` is set.
"""

from __future__ import annotations

import tensorflow as tf

from ..data import graph_cached
from ..registry import Registry

def _load_all_losses():
    from . import _load_all  # noqa: F401 (registers every family on first use)


loss_registry = Registry("loss", lazy_load=_load_all_losses)


def get_loss_class(name):
    """:rtype: type[Loss]"""
    return loss_registry.get(name)


def get_loss_class_names():
    return loss_registry.names()


def _seq_lens(data):
    """[B] lengths of the time axis of data (the static size for a static time axis)."""
    lens = data.get_sequence_lengths()
    if lens is None:
        lens = tf.fill([tf.shape(data.placeholder)[data.batch_dim_axis]], data.get_dim(data.time_dim_axis))
    return lens


# losses on scores / regression values: a sparse or integer output is a mistake (e.g. the loss on a choice/argmax)
FLOAT_OUTPUT_LOSSES = ("ce", "bin_ce", "sse_sigmoid", "generic_ce", "ctc", "mse", "l1", "mean_l1", "deep_clustering",
                       "triplet_loss")


class Loss:
    """A loss on a layer's output against a target. Subclasses set class_name and implement get_value."""

    class_name = None
    recurrent = False  # True: works on whole sequences (e.g. CTC), not on flattened frames
    need_target = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("class_name"):
            loss_registry.register(cls.class_name, cls)

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
        self._output_flat = None
        self._output_flat_fn = None
        self.output_before_softmax_flat = None
        self.target_flat = None
        self.output_seq_lens = None
        self.target_seq_lens = None
        self.loss_norm_factor = None
        self.num_frames = None
        self._flat_mask = None
        self._flat_done = False

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        if isinstance(d.get("custom_inv_norm_factor"), str):  # a layer name (e.g. from rf mark_as_loss)
            d["custom_inv_norm_factor"] = get_layer(d["custom_inv_norm_factor"])

    @classmethod
    def get_auto_output_layer_dim(cls, target_dim):
        """Output dim a layer gets when n_out is missing and this loss is set (the target's dim)."""
        return target_dim

    def check_dims(self, layer, target):
        """Template-level check of output against target, so that mismatches fail at construction."""
        out = layer.output
        if self.class_name in FLOAT_OUTPUT_LOSSES and (out.sparse or not str(out.dtype).startswith(("float", "bfloat"))):
            raise ValueError("loss %r needs dense float scores, but the output of layer %r is %s%s" % (
                self.class_name, layer.name, "sparse " if out.sparse else "", out.short_repr()))
        if self.class_name == "ctc" and (not out.have_time_axis() or out.feature_dim_axis is None):
            raise ValueError("loss 'ctc' needs an output with a time and a feature axis, got %s (layer %r)" % (
                out.short_repr(), layer.name))
        if self.class_name == "ctc" and target is not None and not target.sparse:
            raise ValueError("loss 'ctc' needs sparse target labels, got the dense target %s" % target.short_repr())
        if target is None or not self.need_target:
            return
        if out.have_time_axis() and out.have_batch_axis() and not target.have_time_axis():
            # the original flattens output and target over (batch, time) together (it asserts this)
            raise ValueError("loss %r: the output %s of layer %r has a time axis, the target %r %s has none" % (
                self.class_name, out.short_repr(), layer.name, target.name, target.short_repr()))
        if self.class_name in FLOAT_OUTPUT_LOSSES and self.class_name not in ("ctc", "triplet_loss"):
            if target.dim is not None and out.dim is None:
                raise ValueError("loss %r: the output %s of layer %r has no feature axis, the target %s has %s %i" % (
                    self.class_name, out.short_repr(), layer.name, target.short_repr(),
                    "classes" if target.sparse else "dim", target.dim))
            if target.have_batch_axis() and not out.have_batch_axis():
                raise ValueError("loss %r: the output %s of layer %r has no batch axis (the target %s has)" % (
                    self.class_name, out.short_repr(), layer.name, target.short_repr()))
        if target.sparse and not out.sparse and out.dim is not None and target.dim is not None:
            if self.get_auto_output_layer_dim(target.sparse_dim).dimension != out.dim:
                raise ValueError("loss %r: the output dim %r of layer %r does not match the %i classes of the "
                                 "target %r" % (self.class_name, out.dim, layer.name, target.dim, target.name))
        if not target.sparse and not out.sparse and out.dim is not None and target.dim is not None:
            if out.dim != target.dim:
                raise ValueError("loss %r: output dim %r of layer %r != target %r dim %r" % (
                    self.class_name, out.dim, layer.name, target.name, target.dim))

    def init_by_layer(self, layer, layer_output_template=None):
        output = layer.output
        if (layer_output_template is not None and layer_output_template.placeholder is not None
                and layer_output_template.have_time_axis() and not output.have_time_axis()):
            output = layer_output_template  # e.g. a layer inside a rec loop: the accumulated frames
        if layer is self.layer and output is self.output:
            return
        target = layer._get_target_value() if layer.target else None
        self.init(output=output, output_with_activation=getattr(layer, "output_before_activation", None),
                  target=target, layer=layer)

    @classmethod
    def get_default_target(cls, extern_data):
        """The target used when the layer sets none: the default target if this loss needs one."""
        return extern_data.default_target if cls.need_target else None

    @property
    def output_flat(self):
        """[frames,...] output (computed on first use when the loss got the logits of a softmax)."""
        if self._output_flat is None and self._output_flat_fn is not None:
            self._output_flat = self._output_flat_fn()
        return self._output_flat

    @output_flat.setter
    def output_flat(self, value):
        self._output_flat = value
        self._output_flat_fn = None

    def init(self, output, output_with_activation=None, target=None, layer=None):
        """
        Flattens output and target over (batch, time) frames and sets the normalization factor:
        1 / sum of the target lengths (output lengths without target), 1 / batch without time axis.
        With the softmax activation, ``output_before_softmax_flat`` holds the flat logits.
        """
        self.layer = layer
        with tf.name_scope("loss_init"):
            if output.feature_dim_axis is not None and output.feature_dim_axis != output.batch_ndim - 1:
                if output_with_activation is not None:
                    output_with_activation = output_with_activation.__class__(
                        output_with_activation.data.copy_with_feature_last(), output_with_activation.act_name)
                output = output.copy_with_feature_last()
            self.output = output
            self.output_with_activation = output_with_activation
            self.target = target
            self.output_flat = None
            self.output_before_softmax_flat = None
            self.target_flat = None
            self.output_seq_lens = None
            self.target_seq_lens = None
            if output.have_time_axis() and output.have_batch_axis():
                self.output_seq_lens = _seq_lens(output)
                self.num_frames = tf.reduce_sum(self.output_seq_lens)
                if target is not None and target.have_time_axis():
                    self.target_seq_lens = _seq_lens(target)
                    self.num_frames = tf.reduce_sum(self.target_seq_lens)
            elif output.have_batch_axis():
                self.num_frames = tf.shape(output.placeholder)[output.batch_dim_axis]
            else:
                self.num_frames = 1
            self._len_check = None
            if (self.target_seq_lens is not None and not self.recurrent
                    and output.get_time_dim_tag() is not target.get_time_dim_tag()):
                # frame-wise loss, the lengths come from different sources (e.g. two data keys): a clear run-time
                # error where they differ (instead of TF's shape error in the loss op)
                self._len_check = tf.debugging.assert_equal(
                    self.output_seq_lens, self.target_seq_lens, summarize=4, message=(
                        "loss %r of layer %r: the sequence lengths of the output and of the target %r differ" % (
                            self.class_name, getattr(layer, "name", None), target.name)))
            self._flat_done = False
            if not self.recurrent or not self.use_flatten_frames:
                self._init_flat()
            self.loss_norm_factor = self._norm_factor()
            self._check_init()

    def _init_flat(self):
        """Sets output_flat (or output_before_softmax_flat for a softmax output) and target_flat."""
        if self._flat_done:
            return
        self._flat_done = True
        output, owa, target = self.output, self.output_with_activation, self.target
        if owa is not None and owa.act_name == "softmax":
            self.output_before_softmax_flat = logits = self._flatten(owa.data)
            self._output_flat = None
            self._output_flat_fn = lambda: tf.nn.softmax(logits)
        else:
            self.output_flat = self._flatten(output)
        if target is not None:
            with tf.control_dependencies([self._len_check] if getattr(self, "_len_check", None) is not None else []):
                self.target_flat = self._flatten(target)

    def _check_init(self):
        """Checks after init (overwritten by losses with other requirements)."""

    def _norm_factor(self):
        if self.custom_norm_factor is not None:
            v = self.custom_norm_factor
            if callable(v):
                return v(self=self, output=self.output, layer=self.layer)
            return v
        if self.custom_inv_norm_factor is not None:
            inv = self.custom_inv_norm_factor
            return 1.0 / tf.cast(tf.reduce_sum(inv.output.placeholder) if hasattr(inv, "output") else inv, tf.float32)
        if isinstance(self.num_frames, int):
            return 1.0 / self.num_frames
        return 1.0 / tf.cast(self.num_frames, tf.float32)

    def _flatten(self, data):
        """
        [B,T,...] -> [frames,...]. With use_flatten_frames: only the frames within the sequence lengths, in
        batch-major order. Without: all B*T frames merged in the order of self.output (batch- or time-major).
        """
        if not data.have_batch_axis() or not data.have_time_axis():
            return data.placeholder
        if not self.use_flatten_frames:
            if self.output.is_time_major():
                data = data.copy_as_batch_major().copy_as_time_major()
            else:
                data = data.copy_as_batch_major().copy_with_time_dim_axis(1)
            x = data.placeholder
            shape = [data.get_dim(i) for i in range(data.batch_ndim)]
            if all(isinstance(d, int) for d in shape[2:]):
                rest = shape[2:]
            else:
                rest = [tf.shape(x)[i] for i in range(2, data.batch_ndim)]
            return tf.reshape(x, [-1] + rest)
        data = data.copy_as_batch_major().copy_with_time_dim_axis(1)
        if data.dims[1].dyn_size is None:  # static time axis: all frames
            x = data.placeholder
            rest = [data.get_dim(i) for i in range(2, data.batch_ndim)]
            if not all(isinstance(d, int) for d in rest):
                rest = [tf.shape(x)[i] for i in range(2, data.batch_ndim)]
            return tf.reshape(x, [-1] + rest)
        x = data.placeholder
        rest = [data.get_dim(i) for i in range(2, data.batch_ndim)]
        if not all(isinstance(d, int) for d in rest):
            return tf.boolean_mask(x, data.get_sequence_mask())
        # as tf.boolean_mask (the same frames, order and gradient), the frame indices once per mask for all inputs
        mask = data.get_sequence_mask()
        indices = graph_cached(("flat_frame_indices", mask.ref()),
                               lambda: tf.reshape(tf.where(tf.reshape(mask, [-1])), [-1]))
        return tf.gather(tf.reshape(x, [-1] + rest), indices)

    def _reduce_batch_time(self):
        """Whether the loss frames are the merged (not masked) B*T frames, so reduce_func has to mask them."""
        return (not self.use_flatten_frames and not self.recurrent and self.output is not None
                and self.output.have_time_axis() and self.output.have_batch_axis())

    def _merged_frames_mask(self):
        """[B*T] (or [T*B] for time-major output) bool mask of the merged frames."""
        out = self.output.copy_as_batch_major()
        out = out.copy_as_time_major() if self.output.is_time_major() else out.copy_with_time_dim_axis(1)
        if out.dims[out.time_dim_axis].dyn_size is None:  # static time axis: all frames
            return tf.ones([tf.shape(out.placeholder)[0] * tf.shape(out.placeholder)[1]], dtype=tf.bool)
        return tf.reshape(out.get_sequence_mask(), [-1])

    def reduce_func(self, loss):
        """Sum over all frames (padded frames masked out first when the frames were merged, not flattened)."""
        if self._reduce_batch_time():
            if loss.shape.rank > 1:
                loss = tf.reduce_sum(loss, axis=list(range(1, loss.shape.rank)))
            loss = tf.where(self._merged_frames_mask(), loss, tf.zeros_like(loss))
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
        self._init_flat()
        if output_flat is None:
            output_flat = self.output_before_softmax_flat
            if output_flat is None:
                output_flat = self.output_flat
        if self.target is None or not self.target.sparse:
            target_idx = tf.argmax(self.target_flat, axis=-1, output_type=tf.int32)
        else:
            target_idx = tf.cast(self.target_flat, tf.int32)
        if self.output.sparse:
            out_idx = tf.cast(output_flat, tf.int32)
        else:
            out_idx = tf.argmax(output_flat, axis=-1, output_type=tf.int32)
        return self.reduce_func(tf.cast(tf.not_equal(out_idx, target_idx), tf.float32))
