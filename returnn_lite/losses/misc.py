"""Other losses: as_is, via_layer, search_score, expected_loss, deep_clustering, sampling_loss, triplet_loss
(the RASR-based sprint / fast_bw: see :mod:`.sprint`)."""

from __future__ import annotations

import tensorflow as tf

from .base import Loss, get_loss_class


class AsIsLoss(Loss):
    """The output itself (summed over frames) is the loss."""

    class_name = "as_is"
    need_target = False

    def get_value(self):
        out = self.output_flat
        if out is None:
            raise ValueError("as_is loss: no output")
        return self.reduce_func(out)

    def get_error(self):
        return None


class SearchScoreLoss(Loss):
    """The negative beam scores of the search choices of the layer."""

    class_name = "search_score"
    need_target = False

    def reduce_to_batch(self, loss, normalize):
        return loss

    def get_value(self):
        layer = self.layer
        choices = layer.get_search_choices() if layer is not None and hasattr(layer, "get_search_choices") else None
        if choices is None or not layer.network.search_flag:
            raise ValueError("search_score loss: layer %r has no search choices (no search?)" % (
                layer.name if layer is not None else None))
        return self.reduce_func(-choices.beam_scores)

    def get_error(self):
        return None


class ViaLayerLoss(Loss):
    """Loss value and error signal (gradient) defined by another layer's output."""

    class_name = "via_layer"
    recurrent = True
    need_target = False

    def __init__(self, error_signal_layer=None, align_layer=None, loss_wrt_to_act_in=False, **kwargs):
        super().__init__(**kwargs)
        if bool(error_signal_layer) == bool(align_layer):
            raise ValueError("via_layer loss: give exactly one of error_signal_layer, align_layer")
        self.error_signal_layer = error_signal_layer
        self.align_layer = align_layer
        self.loss_wrt_to_act_in = loss_wrt_to_act_in
        layer = error_signal_layer or align_layer
        self._loss_value = getattr(layer, "output_loss", None)
        if self._loss_value is None:
            raise ValueError("via_layer loss: layer %r provides no loss value (output_loss)" % layer.name)

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        for key in ("error_signal_layer", "align_layer"):
            if d.get(key):
                d[key] = get_layer(d[key])

    def get_value(self):
        with tf.name_scope("ViaLayerLoss"):
            out = self.output
            if self.error_signal_layer:
                error_signal = self.error_signal_layer.output.copy_compatible_to(out).placeholder
            else:
                error_signal = out.placeholder - self.align_layer.output.copy_compatible_to(out).placeholder
            if out.have_time_axis() and out.get_sequence_lengths() is not None:
                error_signal = tf.where(out.get_sequence_mask_broadcast(), error_signal, tf.zeros_like(error_signal))
            if self.loss_wrt_to_act_in:
                owa = self.output_with_activation
                if owa is None:
                    raise ValueError("via_layer loss: loss_wrt_to_act_in but the activation is unknown")
                if isinstance(self.loss_wrt_to_act_in, str) and owa.act_name != self.loss_wrt_to_act_in:
                    raise ValueError("via_layer loss: activation %r != %r" % (owa.act_name, self.loss_wrt_to_act_in))
                x = owa.data.copy_compatible_to(out).placeholder
            else:
                x = out.placeholder
            loss = tf.convert_to_tensor(self._loss_value)
            grad_x = tf.cast(error_signal, x.dtype)

            @tf.custom_gradient
            def _generic(loss_, x_):
                def grad(dy):
                    dy_ = tf.reduce_sum(dy) if dy.shape.rank else dy
                    return tf.zeros_like(loss_), grad_x * dy_

                return tf.identity(loss_), grad

            return self.reduce_func(_generic(loss, x))

    def get_error(self):
        if self.target is None:
            return None
        return self._frame_error()


class ExpectedLoss(Loss):
    """Expected value of another loss (value or error) under the normalized beam scores (minimum Bayes risk)."""

    class_name = "expected_loss"
    recurrent = True

    def __init__(self, loss, loss_kind, norm_scores=True, norm_scores_stop_gradient=True, divide_beam_size=True,
                 subtract_average_loss=True, loss_correction_grad_only=False, **kwargs):
        super().__init__(**kwargs)
        self.losses = loss
        self.losses.reduce_func = lambda x: x
        self.loss_kind = loss_kind
        self.norm_scores = norm_scores
        self.norm_scores_stop_gradient = norm_scores_stop_gradient
        self.divide_beam_size = divide_beam_size
        self.subtract_average_loss = subtract_average_loss
        self.loss_correction_grad_only = loss_correction_grad_only
        self.search_choices = None

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        if not isinstance(d.get("loss"), dict):
            raise ValueError("expected_loss: give 'loss' in loss_opts as a dict with 'class'")
        opts = dict(d["loss"])
        loss_class = get_loss_class(opts.pop("class"))
        loss_class.transform_config_dict(opts, network=network, get_layer=get_layer)
        d["loss"] = loss_class(base_network=network, **opts)

    def init(self, output, output_with_activation=None, target=None, layer=None):
        super().init(output=output, output_with_activation=output_with_activation, target=target, layer=layer)
        self.losses.init(output=output, output_with_activation=output_with_activation, target=target, layer=layer)
        choices = layer.get_search_choices() if layer is not None and hasattr(layer, "get_search_choices") else None
        if choices is None:
            raise ValueError("expected_loss: no search choices from layer %r" % (layer.name if layer else None))
        self.search_choices = choices

    def get_value(self):
        with tf.name_scope("expected_loss"):
            if self.loss_kind == "value":
                losses = self.losses.get_value()
            elif self.loss_kind == "error":
                losses = tf.cast(self.losses.get_error(), tf.float32)
            else:
                raise ValueError("expected_loss: invalid loss_kind %r" % self.loss_kind)
            beam_scores = self.search_choices.beam_scores  # [B,beam]
            losses = tf.reshape(losses, tf.shape(beam_scores))
            corrected = losses
            if self.norm_scores:
                shift = tf.reduce_logsumexp(beam_scores, axis=1, keepdims=True)
                if self.norm_scores_stop_gradient:
                    shift = tf.stop_gradient(shift)
                weights = tf.exp(beam_scores - shift)
            else:
                weights = tf.exp(beam_scores)
            if self.subtract_average_loss:
                corrected = corrected - tf.stop_gradient(tf.reduce_mean(losses, axis=1, keepdims=True))
            weighted = tf.reduce_sum(corrected * weights, axis=1)
            if self.loss_correction_grad_only and corrected is not losses:
                weighted += tf.stop_gradient(tf.reduce_sum((losses - corrected) * weights, axis=1))
            if self.divide_beam_size:
                weighted /= tf.cast(tf.shape(beam_scores)[-1], tf.float32)
            return self.reduce_func(weighted)

    def get_error(self):
        return None


class DeepClusteringLoss(Loss):
    """Deep clustering cost |V^T V|^2 - 2 |V^T Y|^2 + |Y^T Y|^2 per sequence (Hershey & Chen+, 2016)."""

    class_name = "deep_clustering"

    def __init__(self, embedding_dimension, nr_of_sources, **kwargs):
        super().__init__(**kwargs)
        self.embedding_dimension = embedding_dimension
        self.nr_of_sources = nr_of_sources

    def check_dims(self, layer, target):
        pass  # see _check_init

    def _check_init(self):
        if self.target is None or self.target.sparse:
            raise ValueError("deep_clustering loss needs a dense target")
        expected = self.embedding_dimension * (self.target.dim // self.nr_of_sources)
        if expected != self.output.dim:
            raise ValueError("deep_clustering loss: expected output dim %i, got %r" % (expected, self.output.dim))

    def get_error(self):
        return None

    def get_value(self):
        with tf.name_scope("loss_deep_clustering"):
            out = self.output.copy_as_batch_major()
            tgt = self.target.copy_as_batch_major()
            if out.have_time_axis():
                mask = tf.cast(out.get_sequence_mask_broadcast(), out.placeholder.dtype)
                v_all = out.placeholder * mask
                y_all = tf.cast(tgt.placeholder, out.placeholder.dtype) * mask
            else:
                v_all = out.placeholder[:, None]
                y_all = tf.cast(tgt.placeholder, out.placeholder.dtype)[:, None]
            emb, srcs = self.embedding_dimension, self.nr_of_sources
            v = tf.reshape(v_all, [tf.shape(v_all)[0], -1, emb])  # [B, T*F/emb, emb]
            y = tf.reshape(y_all, [tf.shape(y_all)[0], -1, srcs])

            def fro2(a, b):
                return tf.reduce_sum(tf.square(tf.matmul(a, b, transpose_a=True)), axis=[1, 2])

            cost = fro2(v, v) - 2.0 * fro2(v, y) + fro2(y, y)  # [B]
            return self.reduce_func(cost)


class SamplingBasedLoss(Loss):
    """Sampled softmax (default) or NCE on the W [num_classes, dim] and b of the layer (a linear layer)."""

    class_name = "sampling_loss"

    def __init__(self, num_sampled=128, num_splits=1, sampler="log_uniform", nce_loss=False, use_full_softmax=False,
                 remove_accidental_hits=None, sampler_args=None, nce_log_norm_term=0.0, **kwargs):
        super().__init__(**kwargs)
        if num_sampled < 1:
            raise ValueError("sampling_loss: num_sampled must be >= 1")
        if sampler not in ("uniform", "log_uniform", "learned_unigram", "fixed_unigram"):
            raise ValueError("sampling_loss: sampler must be one of uniform, log_uniform, learned_unigram, "
                             "fixed_unigram, got %r" % sampler)
        self.num_sampled = num_sampled
        self.num_splits = num_splits
        self.sampler = sampler
        self.nce_loss = nce_loss
        self.use_full_softmax = use_full_softmax
        self.remove_accidental_hits = (not nce_loss) if remove_accidental_hits is None else remove_accidental_hits
        self.sampler_args = dict(sampler_args or {})
        self.nce_log_norm_term = nce_log_norm_term

    def get_value(self):
        if not self.target.sparse:
            raise ValueError("sampling_loss needs a sparse target")
        with tf.name_scope("loss_with_sampling"):
            weights, biases, inputs = self._linear_params()
            labels = tf.reshape(tf.cast(self.target_flat, tf.int64), [-1, 1])
            if not self.use_full_softmax:
                return self.reduce_func(self._sampled(weights, biases, inputs, labels))
            # use_full_softmax: the sampled loss in training, the full softmax otherwise (evaluation)
            flag = self.layer.network.train_flag
            if flag is True:
                return self.reduce_func(self._sampled(weights, biases, inputs, labels))
            full = self._full_softmax(weights, biases, inputs)
            if flag is False:
                return self.reduce_func(full)
            return self.reduce_func(tf.cond(flag, lambda: self._sampled(weights, biases, inputs, labels),
                                            lambda: full))

    def _linear_params(self):
        """W [num_classes, dim], b [num_classes] and the flat input [N, dim] of the layer (linear or softmax)."""
        layer = self.layer
        step = getattr(layer, "step_layer", None)
        if step is not None and getattr(step, "input_data", None) is not None and step.input_data.have_time_axis():
            layer = step  # a rec sub-layer moved out of the loop: its params and its input over the whole sequence
        params = getattr(layer, "params", {})
        weights, biases = params.get("W"), params.get("b")
        inp = getattr(layer, "input_data", None)
        if weights is None or biases is None or inp is None:
            raise ValueError("sampling_loss on layer %r: must be used on a linear/softmax layer with params W and b "
                             "(it has %s)" % (layer.name, sorted(params)))
        if weights.shape[0] != self.target.dim:
            raise ValueError("sampling_loss on layer %r: expects W of shape [num_classes, dim] "
                             "(use_transposed_weights), got %s" % (layer.name, weights.shape.as_list()))
        return weights, biases, self._flatten(inp) if inp.have_time_axis() else inp.placeholder

    def _full_softmax(self, weights, biases, inputs):
        logits = tf.matmul(inputs, weights, transpose_b=True) + biases
        return tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=tf.cast(self.target_flat, tf.int32))

    def _sampled(self, weights, biases, inputs, labels):
        samplers = {"log_uniform": tf.random.log_uniform_candidate_sampler,
                    "uniform": tf.random.uniform_candidate_sampler,
                    "learned_unigram": tf.random.learned_unigram_candidate_sampler,
                    "fixed_unigram": tf.random.fixed_unigram_candidate_sampler}
        n = tf.shape(labels)[0]
        part = n // self.num_splits
        outs = []
        for i in range(self.num_splits):
            if self.num_splits > 1:
                end = n if i == self.num_splits - 1 else (i + 1) * part
                labels_, inputs_ = labels[i * part:end], inputs[i * part:end]
            else:
                labels_, inputs_ = labels, inputs
            sampled = samplers[self.sampler](true_classes=labels_, num_true=1, num_sampled=self.num_sampled,
                                             unique=True, range_max=self.target.dim, **self.sampler_args)
            if self.nce_loss:
                logits, lbls = _compute_sampled_logits(weights, biases, labels_, inputs_, self.num_sampled,
                                                       self.target.dim, sampled, self.remove_accidental_hits)
                logits -= self.nce_log_norm_term
                out = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=lbls, logits=logits), axis=1)
            else:
                out = tf.nn.sampled_softmax_loss(
                    weights=weights, biases=biases, labels=labels_, inputs=inputs_, num_sampled=self.num_sampled,
                    num_classes=self.target.dim, num_true=1, sampled_values=sampled,
                    remove_accidental_hits=self.remove_accidental_hits)
            outs.append(out)
        return outs[0] if len(outs) == 1 else tf.concat(outs, axis=0)


def _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, sampled_values,
                            remove_accidental_hits):
    """Logits [N, 1+num_sampled] of the true and the sampled classes (minus log Q) and their 0/1 labels."""
    sampled, true_expected, sampled_expected = sampled_values
    labels_flat = tf.reshape(labels, [-1])
    all_ids = tf.concat([labels_flat, sampled], 0)
    all_w = tf.gather(weights, all_ids)
    all_b = tf.gather(biases, all_ids)
    n = tf.shape(labels_flat)[0]
    true_w, sampled_w = all_w[:n], all_w[n:]
    true_b, sampled_b = all_b[:n], all_b[n:]
    true_logits = tf.reduce_sum(inputs * true_w, axis=1, keepdims=True) + true_b[:, None]
    sampled_logits = tf.matmul(inputs, sampled_w, transpose_b=True) + sampled_b
    if remove_accidental_hits:
        hits = tf.nn.compute_accidental_hits(labels, sampled, num_true=1)
        idx, ids, w = hits
        sparse_idx = tf.stack([tf.cast(idx, tf.int64), ids], axis=1)
        sampled_logits += tf.scatter_nd(sparse_idx, w, tf.cast(tf.shape(sampled_logits), tf.int64))
    true_logits -= tf.math.log(true_expected)
    sampled_logits -= tf.math.log(sampled_expected)
    logits = tf.concat([true_logits, sampled_logits], 1)
    lbls = tf.concat([tf.ones_like(true_logits), tf.zeros_like(sampled_logits)], 1)
    return logits, lbls


class TripletLoss(Loss):
    """
    Triplet loss over all same/different pairs in the batch: the output holds (anchor, same, different)
    embeddings concatenated in the feature dim (twice, for two views, with multi_view_training); the target
    their three class labels. Cosine distance; same pairs add 0.5*d, different pairs 0.5*max(margin - d, 0).
    Normalized by 1 / (9 * batch) (18 with two views).
    """

    class_name = "triplet_loss"

    def __init__(self, margin, multi_view_training=False, **kwargs):
        super().__init__(**kwargs)
        self.margin = margin
        self.multi_view = multi_view_training

    def init(self, output, output_with_activation=None, target=None, layer=None):
        super().init(output=output, output_with_activation=output_with_activation, target=target, layer=layer)
        batch = tf.cast(tf.shape(self.output.placeholder)[self.output.batch_dim_axis], tf.float32)
        self.loss_norm_factor = 1.0 / ((2.0 if self.multi_view else 1.0) * 9.0 * batch)

    def check_dims(self, layer, target):
        if target is not None and not target.sparse:
            raise ValueError("triplet_loss on layer %r: target %r must be sparse" % (layer.name, target.name))
        out = layer.output
        if target is not None:
            # per triplet (frame) the labels of anchor, same, different: the target is [B,K] (or [B,T,K]) with
            # K >= 3 (the first 3 are used), and has a time axis exactly where the output has one
            if out.have_time_axis() != target.have_time_axis():
                raise ValueError("triplet_loss on layer %r: output %s and target %r %s must both have a time axis or "
                                 "both none (one triplet per frame or per sequence)" % (
                                     layer.name, out.short_repr(), target.name, target.short_repr()))
            label_axes = [d for i, d in enumerate(target.dims)
                          if not d.is_batch_dim() and i != target.time_dim_axis]
            if len(label_axes) != 1 or label_axes[0].dimension is None or label_axes[0].dimension < 3:
                raise ValueError("triplet_loss on layer %r: target %r %s must hold the labels of (anchor, same, "
                                 "different) in one static axis of size >= 3 ([B,3] or [B,T,3])" % (
                                     layer.name, target.name, target.short_repr()))
        dim = out.dim
        if dim is not None and dim % (6 if self.multi_view else 3):
            raise ValueError("triplet_loss on layer %r: output dim %r must be a multiple of %i" % (
                layer.name, dim, 6 if self.multi_view else 3))

    def _check_init(self):
        if self.target is None or not self.target.sparse:
            raise ValueError("triplet_loss needs a sparse target")
        if self.output.dim % (6 if self.multi_view else 3):
            raise ValueError("triplet_loss: output dim %r must be a multiple of %i" % (
                self.output.dim, 6 if self.multi_view else 3))

    def _triplet_loss(self, embeds, labels):
        emb_norm = tf.nn.l2_normalize(embeds, axis=1, epsilon=1e-15)
        dist = 1.0 - tf.matmul(emb_norm, emb_norm, transpose_b=True)
        labels = tf.cast(labels, tf.int32)[None, :]
        same = tf.equal(tf.square(labels), tf.matmul(labels, labels, transpose_a=True))
        same_loss = 0.5 * tf.reduce_sum(tf.where(same, dist, tf.zeros_like(dist)))
        diff = tf.maximum(self.margin - dist, 0.0)
        diff_loss = 0.5 * tf.reduce_sum(tf.where(same, tf.zeros_like(diff), diff))
        return same_loss + diff_loss

    def get_value(self):
        out = self.output_flat
        targets = self.target_flat
        labels = tf.concat([targets[:, 0], targets[:, 1], targets[:, 2]], axis=0)
        if self.multi_view:
            with tf.name_scope("multi_view_loss"):
                a_anchor, a_pair, a_diff, _c_anchor, c_pair, c_diff = tf.split(out, 6, axis=1)
                embeds_1 = tf.concat([a_anchor, c_pair, c_diff], axis=0)
                embeds_2 = tf.concat([a_pair, c_pair, a_diff], axis=0)
                return self._triplet_loss(embeds_1, labels) + self._triplet_loss(embeds_2, labels)
        with tf.name_scope("single_view_loss"):
            anchor, pair, diff = tf.split(out, 3, axis=1)
            return self._triplet_loss(tf.concat([anchor, pair, diff], axis=0), labels)

    def get_error(self):
        return None
