"""
Normalization layers: batch_norm (with running statistics), layer_norm, norm.
"""

from __future__ import annotations

import tensorflow as tf

from ..compat.util_basic import BehaviorVersion
from ..util import NotSpecified
from .base import CopyLayer, LayerBase

tf1 = tf.compat.v1


def _bc_shape(data):
    """Shape that broadcasts a per-feature vector against data: 1 everywhere except the feature axis."""
    return [data.dim if i == data.feature_dim_axis else 1 for i in range(data.batch_ndim)]


def moments(x, axes, keepdims=False):
    """
    Mean and (biased) variance like tf.nn.moments, but built without SquaredDifference: TF's grappler
    (oneDNN remapper) would otherwise fuse the mean/variance/rsqrt pattern into a layer-norm kernel that
    ignores our epsilon and param shapes.
    """
    mean = tf.reduce_mean(x, axis=axes, keepdims=True)
    variance = tf.reduce_mean(tf.square(x - tf.stop_gradient(mean)), axis=axes, keepdims=keepdims)
    if not keepdims:
        mean = tf.squeeze(mean, axis=axes)
    return mean, variance


def _moments_cur_batch(data, masked_time, mask_all_dynamic=False):
    """
    Mean and variance over all axes except the feature axis (only the valid frames with masked_time: of the time
    axis, or with mask_all_dynamic of every dynamic axis).
    """
    x = data.placeholder
    if masked_time and mask_all_dynamic:
        return _masked_moments(data)
    f = data.feature_dim_axis
    t = data.time_dim_axis
    if masked_time and t is not None and data.have_batch_axis() and data.dims[t].dyn_size is not None:
        d = data.copy_as_batch_major()
        d = d.copy_move_axis(d.time_dim_axis, 1)
        mask = d.dims[1].get_mask(d.get_dim(1))  # [B,T]
        x = tf.boolean_mask(d.placeholder, mask)  # [N, ...]
        f = d.feature_dim_axis - 1
        axes = [i for i in range(d.batch_ndim - 1) if i != f]
    else:
        axes = [i for i in range(data.batch_ndim) if i != f]
    return moments(x, axes)


def _masked_moments(data):
    """Mean and (biased) variance over all axes except the feature axis, weighting out the padding of each axis."""
    x = data.placeholder
    f = data.feature_dim_axis
    axes = [i for i in range(data.batch_ndim) if i != f]
    weight = tf.ones_like(x)
    for i in data.get_dynamic_axes():
        if i != f and data.dims[i].dyn_size is not None:
            weight = tf.where(data.get_sequence_mask_broadcast(i), weight, tf.zeros_like(weight))
    n = tf.reduce_sum(weight, axis=axes)
    mean = tf.reduce_sum(x * weight, axis=axes) / n
    centered = x - tf.stop_gradient(tf.reshape(mean, _bc_shape(data)))
    return mean, tf.reduce_sum(tf.square(centered) * weight, axis=axes) / n


def batch_norm_defaults(layer_name, momentum=NotSpecified, update_sample_only_in_training=NotSpecified,
                        delay_sample_update=NotSpecified, param_version=NotSpecified, masked_time=NotSpecified):
    """
    The original's defaults of the unspecified options, by behavior version (global, see BehaviorVersion):
    up to 11: momentum 0.99, running stats updated also in eval, updated values used at once, param_version 0,
    masked_time True; from 12 on: momentum 0.1, update only in training, delayed update, param_version 2, and
    masked_time must be given.
    :return: (momentum, update_sample_only_in_training, delay_sample_update, param_version, masked_time)
    """
    new = BehaviorVersion.get() >= 12
    if momentum is NotSpecified:
        momentum = 0.1 if new else 0.99
    if update_sample_only_in_training is NotSpecified:
        update_sample_only_in_training = new
    if delay_sample_update is NotSpecified:
        delay_sample_update = new
    if param_version is NotSpecified:
        param_version = 2 if new else 0
    if masked_time is NotSpecified:
        if new:
            raise ValueError("batch_norm on layer %r: option 'masked_time' must be given explicitly with "
                             "behavior_version %i (>= 12)" % (layer_name, BehaviorVersion.get()))
        masked_time = True
    return momentum, update_sample_only_in_training, delay_sample_update, param_version, masked_time


def apply_batch_norm(layer, data, use_shift=True, use_std=True, use_sample=0.0, force_sample=False,
                     momentum=NotSpecified, epsilon=1e-3, update_sample_only_in_training=NotSpecified,
                     delay_sample_update=NotSpecified, param_version=NotSpecified, gamma_init=1.0, beta_init=0.0,
                     masked_time=NotSpecified, in_dim=None, **unknown):
    """
    Batch normalization of data (a Data with placeholder) with params under ``<layer>/batch_norm/``.
    Unspecified options get the original's defaults of the behavior version (:func:`batch_norm_defaults`).
    momentum is the weight of the current batch in the running average: ``new = old + (batch - old) * momentum``.
    Training uses the current batch statistics (biased variance), eval the running ones (use_sample=1); with the
    update not delayed, eval normalizes with the running statistics after this batch's update.
    param_version 0 names the params ``<layer>_<data name>_mean`` etc., 1 ``mean`` etc. (both broadcast shapes),
    2 ``v2_mean`` etc. (shape [dim]). The update ops are registered via network.register_post_control_dependencies.
    in_dim: the normalized axis (a Dim of data) instead of the feature axis; then masked_time masks every dynamic
    axis (as rf.BatchNorm's use_mask), not only the time axis.
    :rtype: tf.Tensor
    """
    if unknown:
        raise ValueError("batch_norm on layer %r: unknown option(s) %s (known: %s)" % (
            layer.name, sorted(unknown), ", ".join(_BN_OPTS)))
    momentum, update_sample_only_in_training, delay_sample_update, param_version, masked_time = \
        batch_norm_defaults(layer.name, momentum, update_sample_only_in_training, delay_sample_update,
                            param_version, masked_time)
    if in_dim is not None:
        if in_dim not in data.dims:
            raise ValueError("batch_norm on layer %r: option 'in_dim' %s is not a dim of the input %s" % (
                layer.name, in_dim, data.short_repr()))
        data = data.copy()
        data.feature_dim_axis = data.dims.index(in_dim)
    if data.feature_dim_axis is None or data.sparse:
        raise ValueError("batch_norm on layer %r: input %s needs a dense feature axis" % (layer.name, data.short_repr()))
    if param_version == 0:
        prefix = "%s_%s_" % (layer.name, data.name)
    elif param_version == 1:
        prefix = ""
    elif param_version == 2:
        prefix = "v2_"
    else:
        raise ValueError("batch_norm on layer %r: invalid param_version %r" % (layer.name, param_version))
    bc_shape = _bc_shape(data)
    stats_shape = tuple(bc_shape) if param_version <= 1 else (data.dim,)
    sample_mean = layer.create_param("batch_norm/%smean" % prefix, stats_shape, 0.0, trainable=False)
    sample_variance = layer.create_param("batch_norm/%svariance" % prefix, stats_shape, 1.0, trainable=False)
    # gamma and beta are trainable as the layer is (the original drops them from the trainables with trainable False)
    gamma = layer.create_param("batch_norm/%sgamma" % prefix, stats_shape, gamma_init) \
        if use_std else None
    beta = layer.create_param("batch_norm/%sbeta" % prefix, stats_shape, beta_init) \
        if use_shift else None
    x = data.placeholder
    # the original takes TF's fused kernel for param_version 2 without masking, shift/scale and sample mixing: in
    # training it normalizes with the batch statistics and updates the running ones (variance with Bessel's
    # correction) after the output; in eval it only reads the running statistics (no update, whatever
    # update_sample_only_in_training says); also with in_dim (the original's rf.BatchNorm without masking)
    use_fused = (param_version >= 2 and not masked_time and gamma is not None and beta is not None
                 and use_sample == 0 and not force_sample)

    def calc_fused(train):
        shape = tf.shape(x)
        f = data.feature_dim_axis
        if f == data.batch_ndim - 1:
            data_format, x4 = "NHWC", tf.reshape(x, [-1, 1, 1, data.dim])
        else:
            data_format = "NCHW"
            x4 = tf.reshape(x, [tf.reduce_prod(shape[:f]), data.dim, tf.reduce_prod(shape[f + 1:]), 1])
        y, new_mean, new_var = tf1.nn.fused_batch_norm(
            x4, scale=gamma, offset=beta, mean=sample_mean, variance=sample_variance, epsilon=epsilon,
            exponential_avg_factor=momentum, data_format=data_format, is_training=train)
        y = tf.reshape(y, shape)
        updates = []
        if train:
            with tf.control_dependencies([y]):  # update after the output is computed
                updates = [tf1.assign(sample_mean, new_mean), tf1.assign(sample_variance, new_var)]
        return y, updates

    def calc(train):
        update_sample = (not update_sample_only_in_training) or train
        need_cur = update_sample or (use_sample != 1 and (force_sample or train))
        mean_cur = var_cur = None
        if need_cur:
            mean_cur, var_cur = _moments_cur_batch(data, masked_time, mask_all_dynamic=in_dim is not None)
            mean_cur = tf.reshape(mean_cur, stats_shape)
            var_cur = tf.reshape(var_cur, stats_shape)
        sm, sv = sample_mean, sample_variance
        update_fn = None
        if update_sample:
            def update_fn():
                um = tf1.assign_add(sample_mean, (mean_cur - sample_mean) * momentum)
                uv = tf1.assign_add(sample_variance, (var_cur - sample_variance) * momentum)
                return um, uv

            if not delay_sample_update:
                sm, sv = update_fn()
                update_fn = None
                updates = [sm, sv]
            else:
                updates = None
        else:
            updates = []
        if force_sample or train:
            if use_sample == 1:
                mean, var = sm, sv
            elif use_sample == 0:
                mean, var = mean_cur, var_cur
            else:
                mean = (1.0 - use_sample) * mean_cur + use_sample * sm
                var = (1.0 - use_sample) * var_cur + use_sample * sv
        else:
            mean, var = sm, sv
        mean = tf.reshape(mean, bc_shape)
        var = tf.reshape(var, bc_shape)
        bn = (x - mean) * tf.math.rsqrt(var + epsilon) if epsilon else (x - mean) * tf.math.rsqrt(var)
        if update_fn is not None:  # delayed: update after the output is computed
            with tf.control_dependencies([bn]):
                updates = list(update_fn())
        return bn, updates

    compute = calc_fused if use_fused else calc
    flag = layer.network.train_flag
    if isinstance(flag, bool):
        bn, updates = compute(flag)
        ops = [u if isinstance(u, tf.Operation) else u.op for u in updates]  # (resource var assigns: no Tensor)
    else:
        def branch(train):
            bn_, ups = compute(train)
            with tf.control_dependencies(ups):
                dummy = tf.constant(0)
            return bn_, dummy

        bn, dummy = tf.cond(flag, lambda: branch(True), lambda: branch(False))
        ops = [dummy.op]
    graph = tf1.get_default_graph()
    if ops and (graph.building_function or graph._get_control_flow_context() is not None):  # noqa (no public API)
        with tf.control_dependencies(ops):  # inside a loop: no op can be fetched from outside, the output runs them
            bn = tf.identity(bn)
    elif ops:
        layer.network.register_post_control_dependencies(ops)
    if use_fused:
        return bn  # gamma and beta applied by the fused kernel
    if gamma is not None:
        bn = bn * tf.reshape(gamma, bc_shape)
    if beta is not None:
        bn = bn + tf.reshape(beta, bc_shape)
    return bn


_BN_OPTS = ("use_shift", "use_std", "use_sample", "force_sample", "momentum", "epsilon",
            "update_sample_only_in_training", "delay_sample_update", "param_version", "gamma_init", "beta_init",
            "masked_time", "in_dim")


class BatchNormLayer(CopyLayer):
    """Batch normalization of the input (see :func:`apply_batch_norm`; unspecified options default by
    behavior version, see :func:`batch_norm_defaults`).
    :param use_shift: learn a bias (beta) after normalizing
    :param use_std: learn a scale (gamma) after normalizing
    :param use_sample: in training (or with force_sample), weight of the running statistics against the current
        batch ones (default 0.0: batch statistics only); otherwise the running statistics are used
    :param force_sample: use the use_sample mix also outside training
    :param momentum: weight of the current batch in the running mean/variance update
    :param epsilon: added to the variance for numerical stability
    :param update_sample_only_in_training: update the running statistics only in training
    :param delay_sample_update: normalize with the running statistics before this batch's update
    :param param_version: param naming/shape (0: ``<layer>_<data>_mean``, 1: ``mean``, both broadcast shapes;
        2: ``v2_mean``, shape [dim])
    :param gamma_init: initializer of the scale gamma
    :param beta_init: initializer of the shift beta
    :param masked_time: compute the statistics only over the non-padded frames of the time axis
    :param in_dim: the normalized dim (default: the feature axis); statistics over all other axes, and with
        masked_time without the padding of every dynamic axis (rf.BatchNorm on the layers backend)
    """

    layer_class = "batch_norm"
    apply_batch_norm = staticmethod(apply_batch_norm)  # also used by LayerBase for the ``batch_norm`` option

    def __init__(self, use_shift=NotSpecified, use_std=NotSpecified, use_sample=NotSpecified,
                 force_sample=NotSpecified, momentum=NotSpecified, epsilon=NotSpecified,
                 update_sample_only_in_training=NotSpecified, delay_sample_update=NotSpecified,
                 param_version=NotSpecified, gamma_init=NotSpecified, beta_init=NotSpecified,
                 masked_time=NotSpecified, in_dim=NotSpecified, **kwargs):
        local = dict(locals())
        super().__init__(**kwargs)
        opts = {k: local[k] for k in _BN_OPTS if local[k] is not NotSpecified}
        data = self.output.copy()
        self.output.placeholder = apply_batch_norm(self, data, **opts)


class LayerNormLayer(CopyLayer):
    """Layer normalization over the feature axis, with params scale (ones) and bias (zeros).
    :param epsilon: added to the variance for numerical stability
    :param in_dim: the feature Dim to normalize over: must be the input's feature dim (checked by LayerBase)
    :param out_dim: the output feature Dim, of the input's size (the template takes this Dim; see LayerBase)
    """

    layer_class = "layer_norm"

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        data = self.input_data
        if data.sparse or data.feature_dim_axis is None:
            raise ValueError("layer_norm layer %r: input %s needs a dense feature axis" % (self.name, data.short_repr()))
        f = data.feature_dim_axis
        dim = data.dim
        scale = self.create_param("scale", (dim,), 1.0)
        bias = self.create_param("bias", (dim,), 0.0)
        x = data.placeholder
        mean, variance = moments(x, [f], keepdims=True)
        y = (x - mean) * tf.math.rsqrt(variance + epsilon)
        if f != data.batch_ndim - 1:
            bc = _bc_shape(data)
            scale, bias = tf.reshape(scale, bc), tf.reshape(bias, bc)
        self.output.placeholder = y * scale + bias


class NormLayer(CopyLayer):
    """Normalize over axes (mean/variance of the input, no running statistics), then scale and bias params.
    :param axes: axes to normalize over (mean and variance), e.g. "F" or "T" (required)
    :param axis: alias for axes; give only one of both
    :param param_shape: axes the scale/bias params span (default: the feature axis)
    :param scale: learn a scale after normalizing; or a layer whose output is the scale (instead of a param;
        broadcast by its dims)
    :param bias: learn a bias after normalizing; or a layer whose output is the bias (instead of a param)
    :param epsilon: added to the variance for numerical stability
    """

    layer_class = "norm"
    layer_options = ("scale", "bias")  # a layer name instead of True/False
    option_types = dict(CopyLayer.option_types, scale=(bool, str, LayerBase), bias=(bool, str, LayerBase))

    def __init__(self, axes=NotSpecified, axis=NotSpecified, param_shape=NotSpecified, scale=True, bias=True,
                 epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        if axes is NotSpecified:
            axes = axis
        if axes is NotSpecified:
            raise ValueError("norm layer %r: 'axes' must be given" % self.name)
        if param_shape is NotSpecified:
            param_shape = "F"
        data = self.input_data
        x = data.placeholder
        axes_ = data.get_axes_from_description(axes)
        if not axes_:
            raise ValueError("norm layer %r: axes %r match no axis of %s" % (self.name, axes, data.short_repr()))
        if isinstance(param_shape, (list, tuple)):
            param_axes = []
            for a in param_shape:
                for i in data.get_axes_from_description(a, allow_int=False):
                    if i not in param_axes:
                        param_axes.append(i)
        else:
            param_axes = data.get_axes_from_description(param_shape, allow_int=False) if param_shape else []
        # the params have the axes in the given order; they broadcast in the input's order
        p_shape = tuple(data.dims[a].dimension for a in param_axes)
        if any(s is None for s in p_shape):
            raise ValueError("norm layer %r: param_shape %r refers to dynamic axes of %s" % (
                self.name, param_shape, data.short_repr()))
        p_perm = sorted(range(len(param_axes)), key=lambda k: param_axes[k])
        bc = [data.dims[i].dimension if i in param_axes else 1 for i in range(data.batch_ndim)]

        def bc_param(param):
            if p_perm != list(range(len(p_perm))):
                param = tf.transpose(param, p_perm)
            return tf.reshape(param, bc)

        mean, variance = moments(x, axes_, keepdims=True)
        y = (x - mean) * tf.math.rsqrt(variance + epsilon)
        if isinstance(scale, LayerBase):
            y = y * _broadcast_to(scale.output, data)
        elif scale:
            y = y * bc_param(self.create_param("scale", p_shape, 1.0))
        if isinstance(bias, LayerBase):
            y = y + _broadcast_to(bias.output, data)
        elif bias:
            y = y + bc_param(self.create_param("bias", p_shape, 0.0))
        self.output.placeholder = y


def _broadcast_to(param, data):
    """param's tensor broadcasting against data (its dims the trailing ones in order: as it is)."""
    if list(param.dims) == list(data.dims[data.batch_ndim - param.batch_ndim:]):
        return param.placeholder
    return param.copy_compatible_to(data).placeholder


__all__ = ["apply_batch_norm", "batch_norm_defaults", "BatchNormLayer", "LayerNormLayer", "NormLayer"]
