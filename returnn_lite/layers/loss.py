"""
Loss-related layers: loss (a Loss computed as a layer, with sub-layers loss/error), edit_distance,
ctc_loss, sparse_softmax_cross_entropy_with_logits.
"""

from __future__ import annotations

import tensorflow as tf

from ..data import Data
from ..layer_ref import LayerOption
from .base import InternalLayer, LayerBase

def _identity(x):
    return x


class LossLayer(LayerBase):
    """
    Computes the Loss ``loss_`` (with options ``loss_opts_``) of its single source against ``target_`` as a layer:
    per frame (no reduction, frames not flattened), the source's shape without its feature axis. With
    ``use_error``, the output is the loss error instead of the value. Sub-layers ``NAME/loss`` and ``NAME/error``.
    It does not count as a training loss itself (use e.g. ``"loss": "as_is"`` on it for that).
    :param loss_: the loss: name or dict of the loss ("ce", "mse", ...) applied to the source (required)
    :param target_: the target of that loss (default: the layer's target)
    :param use_error: output the loss's error (frame error rate) instead of its value
    """

    layer_class = "loss"
    recurrent = True
    layer_options = (LayerOption("target_", "target"),)  # an extern data key or "layer:NAME"

    def __init__(self, loss_, target_=None, use_error=False, **kwargs):
        super().__init__(**kwargs)
        if len(self.sources) != 1:
            raise ValueError("loss layer %r: needs exactly one source, got %i" % (self.name, len(self.sources)))
        source = self.sources[0]
        self.loss_ = loss_
        self.target_ = target_
        self.use_error = use_error
        loss_.reduce_func = _identity
        loss_.use_flatten_frames = False
        with tf.name_scope("loss"):
            loss_.init(output=source.output, output_with_activation=getattr(source, "output_before_activation", None),
                       target=target_.output if target_ is not None else None, layer=source)
            self.loss_value = self._make_output_value(loss_.get_value())
            self.error_value = self._make_output_value(loss_.get_error())
        if use_error:
            if self.error_value is None:
                raise ValueError("loss layer %r: loss %r defines no error (use_error=True)" % (
                    self.name, loss_.class_name))
            self.output.placeholder = self.error_value
        else:
            if self.loss_value is None:
                raise ValueError("loss layer %r: loss %r defines no value (use use_error=True)" % (
                    self.name, loss_.class_name))
            self.output.placeholder = self.loss_value

    def _make_output_value(self, value):
        """Per-frame value [B*T] (merged in the source's order) or [B] -> the source's shape without feature axis."""
        if value is None:
            return None
        value = tf.cast(value, tf.float32)
        if value.shape.rank is None:
            value = tf.reshape(value, [-1])
        if value.shape.rank != 1:
            raise ValueError("loss layer %r: loss %r gives a value of rank %r, expected one value per frame" % (
                self.name, self.loss_.class_name, value.shape.rank))
        src = self.sources[0].output
        shape = [src.get_dim(i) for i in range(src.batch_ndim) if i != src.feature_dim_axis]
        return tf.reshape(value, shape)

    def get_sub_layer(self, layer_name):
        if layer_name not in ("loss", "error"):
            raise ValueError("loss layer %r: invalid sub layer %r (only 'loss' or 'error')" % (self.name, layer_name))
        value = self.loss_value if layer_name == "loss" else self.error_value
        if value is None:
            raise ValueError("loss layer %r: %s not defined for loss %r" % (self.name, layer_name,
                                                                            self.loss_.class_name))
        sub_name = "%s/%s" % (self.name, layer_name)
        out = self.output.copy_template(name="%s_output" % sub_name)
        out.placeholder = value
        return InternalLayer(name=sub_name, network=self.network, output=out)

    @classmethod
    def get_sub_layer_out_data_from_opts(cls, layer_name, parent_layer_kwargs):
        if layer_name not in ("loss", "error"):
            return None
        return cls.get_out_data_from_opts(**parent_layer_kwargs), parent_layer_kwargs["network"], InternalLayer

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        from ..losses import get_loss_class

        loss_name = d.pop("loss_", None)
        if not loss_name:
            raise ValueError("loss layer: option 'loss_' (the loss class name, e.g. 'ce') is required")
        loss_class = get_loss_class(loss_name)
        if "target_" not in d:
            d["target_"] = loss_class.get_default_target(network.extern_data)
        d["target_"] = d["target_"] or None
        super().transform_config_dict(d, network=network, get_layer=get_layer)  # target_ -> its layer
        opts = dict(d.pop("loss_opts_", None) or {})
        loss_class.transform_config_dict(opts, network=network, get_layer=get_layer)
        d["loss_"] = loss_class(base_network=network, **opts)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), target_=None, **kwargs):
        if len(sources) != 1:
            raise ValueError("loss layer %r: needs exactly one source, got %i" % (name, len(sources)))
        out = sources[0].output.copy_template(name="%s_output" % name)
        if out.sparse:
            out.sparse_dim = None
        elif out.have_feature_axis():
            out = out.copy_template_excluding_axis(out.feature_dim_axis)
        out.dtype = "float32"
        return out


def _sparse_from_dense(data):
    """Batch-major [B,T] labels of data as SparseTensor (int32) using its sequence lengths."""
    from ..losses.ctc import sparse_labels

    data = data.copy_as_batch_major()
    return sparse_labels(data.placeholder, data.get_sequence_lengths())


class EditDistanceLayer(LayerBase):
    """Levenshtein distance per sequence between the label sequences ``a`` and ``b``: [B] int32.
    :param a: layer with the first sparse sequence (the hypothesis)
    :param b: layer with the second sparse sequence (the reference)
    """

    layer_class = "edit_distance"
    layer_options = ("a", "b")
    required_options = ("a", "b")
    default_from = ()
    recurrent = True

    def __init__(self, a, b, **kwargs):
        super().__init__(**kwargs)
        self.a, self.b = a, b
        dist = tf.edit_distance(_sparse_from_dense(a.output), _sparse_from_dense(b.output), normalize=False)
        self.output.placeholder = tf.cast(tf.round(dist), tf.int32)

    @classmethod
    def get_out_data_from_opts(cls, name, a, b, **kwargs):
        for layer in (a, b):
            out = layer.output
            if not out.sparse or not out.have_time_axis() or out.batch_ndim != 2:
                raise ValueError("edit_distance layer %r: %r must be sparse labels [B,T], got %s" % (
                    name, layer.name, out.short_repr()))
        batch = a.output.dims[a.output.batch_dim_axis]
        return Data(name="%s_output" % name, dims=[batch], dtype="int32")


class _LogitsTargetsLayer(LayerBase):
    """Base of layers with ``logits`` and ``targets`` layer options (instead of ``from``)."""

    layer_options = ("logits", "targets")
    required_options = ("logits", "targets")
    default_from = ()


class CtcLossLayer(_LogitsTargetsLayer):
    """CTC loss per sequence ([B] float32) of ``logits`` [B,T,N] (unnormalized) against sparse ``targets``.
    :param logits: layer with the (unnormalized) logits (required)
    :param targets: layer with the sparse target labels (required)
    :param blank_index: index of the blank label (-1: the last one; then the targets have one class less than the
        logits, else at most as many)
    :param max_approx: use the Viterbi (max) approximation instead of the sum
    :param logits_normalized: the logits are already log-probabilities
    :param input_spatial_dim: the time dim of the logits (default: their time axis); the logits are then
        [B, input_spatial_dim, classes] in any order
    :param targets_spatial_dim: the time dim of the targets (default: their time axis)
    """

    layer_class = "ctc_loss"
    options_without_effect = {"logits_normalized": "the CTC loss normalizes its logits with log_softmax, which leaves "
                                                   "normalized log-probabilities unchanged"}
    recurrent = True

    def __init__(self, logits, targets, blank_index=-1, max_approx=False, logits_normalized=False,
                 input_spatial_dim=None, targets_spatial_dim=None, **kwargs):
        super().__init__(**kwargs)
        self.logits, self.targets = logits, targets
        lg, tg = self._logits_targets(logits.output, targets.output, input_spatial_dim, targets_spatial_dim)
        num_classes = lg.dims[2].dimension
        if blank_index < 0:
            blank_index += num_classes
        logit_length, label_length = _lengths(lg.dims[1]), _lengths(tg.dims[1])
        if max_approx:  # only the best (Viterbi) alignment
            from ..losses.ctc import ctc_loss_viterbi

            self.output.placeholder = ctc_loss_viterbi(
                logits=lg.copy_as_time_major().placeholder, logits_seq_lens=logit_length,
                targets=tg.placeholder, targets_seq_lens=label_length, blank_index=blank_index)
            return
        self.output.placeholder = tf.nn.ctc_loss(
            labels=tf.cast(tg.placeholder, tf.int32), logits=lg.placeholder,
            label_length=label_length, logit_length=logit_length,
            logits_time_major=False, blank_index=blank_index)

    @staticmethod
    def _logits_targets(lg, tg, input_spatial_dim=None, targets_spatial_dim=None):
        """logits as [B,T,N], targets as [B,T'] (batch-major, time axis 1)."""
        lg = lg.copy_as_batch_major()
        if input_spatial_dim is None:
            lg = lg.copy_with_time_dim_axis(1).copy_with_feature_last()
        else:
            lg = lg.copy_move_axis(lg.dims.index(input_spatial_dim), 1)
        tg = tg.copy_as_batch_major()
        if targets_spatial_dim is not None:
            tg = tg.copy_move_axis(tg.dims.index(targets_spatial_dim), 1)
        return lg, tg

    @classmethod
    def get_out_data_from_opts(cls, name, logits, targets, blank_index=-1, input_spatial_dim=None,
                               targets_spatial_dim=None, **kwargs):
        if not targets.output.sparse:
            raise ValueError("ctc_loss layer %r: targets %r must be sparse" % (name, targets.name))
        for opt, dim, layer in (("input_spatial_dim", input_spatial_dim, logits),
                                ("targets_spatial_dim", targets_spatial_dim, targets)):
            if dim is not None and (dim not in layer.output.dims or dim.dimension is not None):
                raise ValueError("ctc_loss layer %r: option %r %s is not a dynamic dim of %r %s" % (
                    name, opt, dim, layer.name, layer.output.short_repr()))
        lg = logits.output
        if input_spatial_dim is not None:
            if lg.batch_dim_axis is None or lg.batch_ndim != 3:
                raise ValueError("ctc_loss layer %r: logits %r must be [B, input_spatial_dim, classes], got %s" % (
                    name, logits.name, lg.short_repr()))
            num_classes = [d for i, d in enumerate(lg.dims) if i != lg.batch_dim_axis and d != input_spatial_dim][
                0].dimension
        else:
            num_classes = lg.dim
        if targets.output.dim is None or num_classes is None:
            raise ValueError("ctc_loss layer %r: options 'logits' (dim %r) and 'targets' (%r classes) need known dims" % (
                name, num_classes, targets.output.dim))
        if blank_index == -1 and targets.output.dim + 1 != num_classes:
            raise ValueError("ctc_loss layer %r: logits dim %r must be the targets' %r classes + 1 (blank)" % (
                name, num_classes, targets.output.dim))
        if blank_index != -1 and not (-num_classes <= blank_index < num_classes and targets.output.dim <= num_classes):
            raise ValueError("ctc_loss layer %r: blank_index %r must be in [0, %i) (the logits dim) and the targets' "
                             "%r classes at most that many" % (name, blank_index, num_classes, targets.output.dim))
        return Data(name="%s_output" % name, dims=[lg.dims[lg.batch_dim_axis]], dtype="float32")


def _lengths(dim):
    return dim.dyn_size if dim.dyn_size is not None else dim.complete_dyn_size()


class SparseSoftmaxCrossEntropyWithLogitsLayer(_LogitsTargetsLayer):
    """tf.nn.sparse_softmax_cross_entropy_with_logits of ``logits`` over the class axis against sparse ``targets``.
    :param logits: layer with the logits (required)
    :param targets: layer with the sparse targets (required)
    :param axis: the class axis of the logits (default: the feature axis)
    """

    layer_class = "sparse_softmax_cross_entropy_with_logits"

    def __init__(self, logits, targets, axis=None, **kwargs):
        super().__init__(**kwargs)
        self.logits, self.targets = logits, targets
        lg = logits.output
        class_axis = lg.feature_dim_axis if axis is None else lg.get_axis_from_description(axis)
        lg = lg.copy_move_axis(class_axis, -1)
        frames = lg.copy_template_excluding_axis(lg.batch_ndim - 1)
        tg = self._targets_matching_time(targets.output, frames).copy_compatible_to(frames)
        labels = tg.placeholder
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32), logits=lg.placeholder)
        frames.placeholder = ce
        self.output.placeholder = frames.copy_compatible_to(self.output).placeholder

    @staticmethod
    def _targets_matching_time(tg, frames):
        """
        Targets whose time axis has another tag than the logits' time axis (e.g. data:classes vs. data:data,
        equal lengths): as the original, the two (dynamic spatial) time axes are taken as the same axis.
        """
        if tg.time_dim_axis is None or frames.time_dim_axis is None:
            return tg
        t_tag, f_tag = tg.dims[tg.time_dim_axis], frames.dims[frames.time_dim_axis]
        if t_tag in frames.dims or f_tag in tg.dims or (t_tag.dimension != f_tag.dimension):
            return tg
        new = tg.copy_template_replace_dim_tag(tg.time_dim_axis, f_tag)
        new.placeholder = tg.placeholder
        return new

    @classmethod
    def get_out_data_from_opts(cls, name, logits, targets, axis=None, **kwargs):
        lg = logits.output
        class_axis = lg.feature_dim_axis if axis is None else lg.get_axis_from_description(axis)
        if class_axis is None:
            raise ValueError("sparse_softmax_cross_entropy_with_logits layer %r: logits have no class axis" % name)
        if not targets.output.sparse:
            raise ValueError("sparse_softmax_cross_entropy_with_logits layer %r: targets %r must be sparse" % (
                name, targets.name))
        out = lg.copy_template_excluding_axis(class_axis)
        out.name = "%s_output" % name
        out.dtype = "float32"
        return out
