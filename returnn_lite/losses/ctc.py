"""Sequence losses: ctc, edit_distance, bleu (and the sparse-label helpers they share)."""

from __future__ import annotations

import collections
import math

import numpy as np
import tensorflow as tf

from ..data import Dim
from .base import Loss
from .cross_entropy import safe_log

tf1 = tf.compat.v1


def sparse_labels(x, seq_lens, collapse_repeated=False):
    """
    :param tf.Tensor x: [B,T] int labels, batch-major
    :param tf.Tensor seq_lens: [B]
    :param bool collapse_repeated: merge consecutive equal labels into one
    :rtype: tf.SparseTensor  (int32 values, indices renumbered densely within each sequence)
    """
    with tf.name_scope("sparse_labels"):
        x = tf.convert_to_tensor(x)
        mask = tf.sequence_mask(seq_lens, maxlen=tf.shape(x)[1])
        if collapse_repeated:
            changed = tf.concat([tf.ones_like(x[:, :1], dtype=tf.bool), tf.not_equal(x[:, 1:], x[:, :-1])], axis=1)
            mask = tf.logical_and(mask, changed)
        idx = tf.where(mask)  # [N,2] int64
        values = tf.cast(tf.gather_nd(x, idx), tf.int32)
        if collapse_repeated:
            pos = tf.cumsum(tf.cast(mask, tf.int64), axis=1) - 1
            idx = tf.stack([idx[:, 0], tf.gather_nd(pos, idx)], axis=1)
        dense_shape = tf.cast(tf.shape(x), tf.int64)
        return tf.SparseTensor(indices=idx, values=values, dense_shape=dense_shape)


def map_labels(labels, label_map):
    """Applies the dict label_map to the values of a SparseTensor (labels not in the map stay)."""
    size = max(label_map.keys()) + 1
    table = np.arange(size, dtype=np.int32)
    for k, v in label_map.items():
        table[k] = v
    table = tf.constant(table)
    values = labels.values
    in_range = values < size
    mapped = tf.where(in_range, tf.gather(table, tf.minimum(values, size - 1)), values)
    return tf.SparseTensor(indices=labels.indices, values=mapped, dense_shape=labels.dense_shape)


def _get_logits(loss, output_in_log_space):
    """Output in log space (time-major [T,B,N]): the output itself, the logits of a softmax, or safe_log(output)."""
    out = loss.output.copy_as_batch_major().copy_as_time_major()
    if output_in_log_space:
        return out.placeholder
    owa = loss.output_with_activation
    if owa is not None and owa.act_name in ("softmax", "exp"):
        return owa.data.copy_as_batch_major().copy_as_time_major().placeholder
    # as the original: any other activation (also log_softmax) is taken as probabilities: safe_log(output)
    return safe_log(out.placeholder)


def ctc_loss_viterbi(logits, logits_seq_lens, targets, targets_seq_lens, blank_index=-1):
    """
    CTC loss of only the best (Viterbi) alignment (blank_index, default the last class; label loops, blank optional between
    different labels): -max_alignment sum_t log_softmax(logits)[t, label_t] per sequence. The gradient (through the
    max) is the cross entropy gradient on the best alignment, softmax - onehot(alignment).

    :param tf.Tensor logits: [T,B,D] time-major, unnormalized
    :param tf.Tensor logits_seq_lens: [B]
    :param tf.Tensor targets: [B,L] int labels (< D-1)
    :param tf.Tensor targets_seq_lens: [B]
    :param int blank_index: negative counts from the end
    :return: [B] float32
    """
    with tf.name_scope("ctc_loss_viterbi"):
        log_probs = tf.nn.log_softmax(logits)  # (T,B,D)
        blank = blank_index if blank_index >= 0 else tf.shape(logits)[-1] + blank_index
        targets = tf.cast(targets, tf.int32)
        n_batch, n_labels = tf.shape(targets)[0], tf.shape(targets)[1]
        # extended label sequence: blank, l_1, blank, l_2, ..., l_L, blank: (B,S), S = 2L+1
        ext = tf.reshape(tf.stack([tf.fill([n_batch, n_labels], blank), targets], axis=2), [n_batch, 2 * n_labels])
        ext = tf.concat([ext, tf.fill([n_batch, 1], blank)], axis=1)
        n_states = 2 * n_labels + 1
        states = tf.range(n_states)
        prev2 = tf.concat([tf.fill([n_batch, 2], -1), ext[:, :-2]], axis=1)
        allow_skip = tf.logical_and(tf.not_equal(ext, blank), tf.not_equal(ext, prev2))  # (B,S)
        neg_inf = tf.constant(float("-inf"))

        def emissions(t):
            return tf.gather(log_probs[t], ext, batch_dims=1)  # (B,S)

        init = tf.where(tf.less(states, 2)[None, :], emissions(0), neg_inf)

        def step(alpha, t):
            shift1 = tf.concat([tf.fill([n_batch, 1], neg_inf), alpha[:, :-1]], axis=1)
            shift2 = tf.concat([tf.fill([n_batch, 2], neg_inf), alpha[:, :-2]], axis=1)
            shift2 = tf.where(allow_skip, shift2, neg_inf)
            new = tf.maximum(tf.maximum(alpha, shift1), shift2) + emissions(t)
            return tf.where(tf.less(t, logits_seq_lens)[:, None], new, alpha)

        alpha = tf.foldl(step, tf.range(1, tf.shape(logits)[0]), initializer=init)
        end = 2 * tf.cast(targets_seq_lens, tf.int32)  # final blank; the last label is end - 1
        last_blank = tf.gather(alpha, end[:, None], batch_dims=1)[:, 0]
        last_label = tf.gather(alpha, tf.maximum(end - 1, 0)[:, None], batch_dims=1)[:, 0]
        last_label = tf.where(end > 0, last_label, neg_inf)
        return -tf.maximum(last_blank, last_label)


class CtcLoss(Loss):
    """Connectionist temporal classification via tf.nn.ctc_loss; the blank is the last output class."""

    class_name = "ctc"
    options_without_effect = {"use_native": "the original's own op for the same CTC loss; here TF's CTC loss (its "
                                            "ctc_opts are honoured, see _native_opts)"}
    recurrent = True

    def __init__(self, target_collapse_repeated=False, auto_clip_target_len=False, output_in_log_space=False,
                 beam_width=100, ctc_opts=None, use_native=False, use_viterbi=False, **kwargs):
        super().__init__(**kwargs)
        self.target_collapse_repeated = target_collapse_repeated
        self.auto_clip_target_len = auto_clip_target_len
        self.output_in_log_space = output_in_log_space
        self.beam_width = beam_width
        self.ctc_opts = dict(ctc_opts or {})
        self.use_native = use_native
        self.use_viterbi = use_viterbi
        self._target_sparse_labels = None
        self._ctc_loss = None

    def init(self, *args, **kwargs):
        self._target_sparse_labels = None
        super().init(*args, **kwargs)

    @classmethod
    def get_auto_output_layer_dim(cls, target_dim):
        return Dim(target_dim.dimension + 1, kind=Dim.Types.Feature,
                   description="%s+blank" % target_dim.description)

    def _check_init(self):
        if self.target is None:
            raise ValueError("ctc loss needs a target")
        if not self.target.sparse:
            raise ValueError("ctc loss: target %r must be sparse (label indices)" % self.target.name)

    def _get_target_sparse_labels(self):
        if self._target_sparse_labels is None:
            seq_lens = self.target_seq_lens
            if self.auto_clip_target_len:
                # leave room for at least one blank: not more labels than output frames - 1
                seq_lens = tf.minimum(seq_lens, tf.maximum(self.output_seq_lens - 1, 0))
            self._target_sparse_labels = sparse_labels(
                self.target.copy_as_batch_major().placeholder, seq_lens,
                collapse_repeated=self.target_collapse_repeated)
        return self._target_sparse_labels

    def get_output_logits(self):
        return _get_logits(self, self.output_in_log_space)

    def get_value(self):
        with tf.name_scope("loss_ctc"):
            logits = self.get_output_logits()
            if self.use_viterbi:
                if self.ctc_opts:
                    raise ValueError("ctc loss: ctc_opts %r are not supported with use_viterbi" % (self.ctc_opts,))
                self._ctc_loss = ctc_loss_viterbi(
                    logits=logits, logits_seq_lens=self.output_seq_lens,
                    targets=self.target.copy_as_batch_major().placeholder, targets_seq_lens=self.target_seq_lens)
                return self.reduce_func(self._ctc_loss)
            labels = self._get_target_sparse_labels()
            opts = dict(self.ctc_opts)
            native = self._native_opts(opts, logits) if self.use_native else None
            self._ctc_loss = tf1.nn.ctc_loss(
                labels=labels, inputs=logits, sequence_length=self.output_seq_lens, time_major=True, **opts)
            if native is not None:
                self._ctc_loss += native
            return self.reduce_func(self._ctc_loss)

    _NATIVE_OPTS = ("ctc_merge_repeated", "logits_normalize", "grad_wrt_softmax_in", "blank_index")

    def _native_opts(self, opts, logits):
        """
        ctc_opts of the original's own CTC op (use_native): ctc_merge_repeated as TF's; with logits_normalize=False the
        scores are taken as they are (TF normalizes them: subtract sum_t logsumexp); grad_wrt_softmax_in (default)
        keeps TF's gradient (softmax - alignment), else the exact gradient. :return: the term to add, or None
        """
        unknown = sorted(set(opts) - set(self._NATIVE_OPTS))
        if unknown:
            raise ValueError("ctc loss with use_native: unknown ctc_opts %s (the native op takes %s)" % (
                unknown, ", ".join(self._NATIVE_OPTS)))
        blank = opts.pop("blank_index", -1)
        if blank not in (-1, self.output.dim - 1):
            raise ValueError("ctc loss: ctc_opts blank_index=%r: only the last class (-1) is supported" % (blank,))
        normalize = opts.pop("logits_normalize", True)
        grad_wrt_softmax_in = opts.pop("grad_wrt_softmax_in", True)
        if normalize:
            return None
        mask = tf.sequence_mask(self.output_seq_lens, maxlen=tf.shape(logits)[0], dtype=logits.dtype)  # [B,T]
        norm = tf.reduce_sum(tf.transpose(tf.reduce_logsumexp(logits, axis=-1)) * mask, axis=1)  # [B]
        return -(tf.stop_gradient(norm) if grad_wrt_softmax_in else norm)

    def get_error(self):
        with tf.name_scope("loss_ctc_error"):
            logits = self.get_output_logits()
            seq_lens = self.output_seq_lens

            def greedy():
                return tf.nn.ctc_greedy_decoder(inputs=logits, sequence_length=seq_lens)[0][0]

            if self.beam_width > 1:
                decoded = self.base_network.cond_on_train(
                    greedy, lambda: tf.nn.ctc_beam_search_decoder(
                        inputs=logits, sequence_length=seq_lens, beam_width=self.beam_width)[0][0])
            else:
                decoded = greedy()
            labels = self._get_target_sparse_labels()
            error = tf.edit_distance(hypothesis=tf.cast(decoded, labels.dtype), truth=labels, normalize=False)
            return self.reduce_func(error)


class EditDistanceLoss(Loss):
    """Edit distance of the output labels (or the CTC-decoded dense output) to the target; no loss value."""

    class_name = "edit_distance"
    options_without_effect = {"debug_print": "a debug print of the original; no effect on the values"}
    recurrent = True

    def __init__(self, debug_print=False, label_map=None, ctc_decode=False, output_in_log_space=False, **kwargs):
        super().__init__(**kwargs)
        self.debug_print = debug_print
        self.label_map = label_map
        self.ctc_decode = ctc_decode
        self.output_in_log_space = output_in_log_space
        if ctc_decode:
            self.get_auto_output_layer_dim = CtcLoss.get_auto_output_layer_dim

    def _check_init(self):
        if self.target is None or not self.target.sparse:
            raise ValueError("edit_distance loss needs a sparse target")
        if self.output.sparse:
            if self.ctc_decode:
                raise ValueError("edit_distance loss: ctc_decode needs a dense output")
            if self.output.dim != self.target.dim:
                raise ValueError("edit_distance loss: output dim %r != target dim %r" % (
                    self.output.dim, self.target.dim))
        elif not self.ctc_decode:
            raise ValueError("edit_distance loss: dense output %r needs ctc_decode=True" % self.output.name)

    def _map(self, labels):
        return map_labels(labels, self.label_map) if self.label_map else labels

    def get_output_logits(self):
        return _get_logits(self, self.output_in_log_space)

    def _get_output_sparse_labels(self):
        if self.ctc_decode:
            logits = self.get_output_logits()
            decoded = tf.nn.ctc_beam_search_decoder(inputs=logits, sequence_length=self.output_seq_lens)[0][0]
            labels = tf.SparseTensor(decoded.indices, tf.cast(decoded.values, tf.int32), decoded.dense_shape)
        else:
            labels = sparse_labels(self.output.copy_as_batch_major().placeholder, self.output_seq_lens)
        return self._map(labels)

    def _get_target_sparse_labels(self):
        return self._map(sparse_labels(self.target.copy_as_batch_major().placeholder, self.target_seq_lens))

    def get_error(self):
        with tf.name_scope("loss_edit_distance"):
            error = tf.edit_distance(hypothesis=self._get_output_sparse_labels(),
                                     truth=self._get_target_sparse_labels(), normalize=False)
            return self.reduce_func(error)

    def get_value(self):
        return None


def _ngram_counts(seq, max_order):
    counts = collections.Counter()
    for order in range(1, max_order + 1):
        for i in range(len(seq) - order + 1):
            counts[tuple(seq[i:i + order])] += 1
    return counts


def compute_bleu(reference_corpus, translation_corpus, max_order=4, use_bp=True):
    """Corpus BLEU of label sequences (geometric mean of the smoothed n-gram precisions, brevity penalty)."""
    matches = [0] * max_order
    possible = [0] * max_order
    ref_len = trans_len = 0
    for ref, trans in zip(reference_corpus, translation_corpus):
        ref_len += len(ref)
        trans_len += len(trans)
        ref_counts = _ngram_counts(ref, max_order)
        trans_counts = _ngram_counts(trans, max_order)
        for ngram, count in ref_counts.items():
            matches[len(ngram) - 1] += min(count, trans_counts[ngram])
        for ngram, count in trans_counts.items():
            possible[len(ngram) - 1] += count
    # an order with no matches gets 1 / (2^k * possible), k counting such orders (smoothing)
    precisions = [0.0] * max_order
    smooth = 1.0
    for i in range(max_order):
        if possible[i] > 0:
            if matches[i] > 0:
                precisions[i] = matches[i] / possible[i]
            else:
                smooth *= 2
                precisions[i] = 1.0 / (smooth * possible[i])
    geo_mean = 0.0
    if max(precisions) > 0:
        geo_mean = math.exp(sum(math.log(p) for p in precisions if p) / max_order)
    bp = 1.0
    if use_bp:
        if ref_len == 0 or trans_len == 0:
            bp = 0.0 if trans_len == 0 else 1.0
        else:
            ratio = trans_len / ref_len
            bp = math.exp(1.0 - 1.0 / ratio) if ratio < 1.0 else 1.0
    return geo_mean * bp


def bleu_score(hypothesis, truth, hyp_seq_lens, truth_seq_lens):
    """Per-sequence BLEU [B] (float32) of batch-major label sequences (computed in Python)."""

    def _py(hyp, ref, hyp_lens, ref_lens):
        return np.array([compute_bleu([ref[n, :ref_lens[n]].tolist()], [hyp[n, :hyp_lens[n]].tolist()])
                         for n in range(hyp.shape[0])], dtype=np.float32)

    out = tf.numpy_function(_py, [hypothesis, truth, hyp_seq_lens, truth_seq_lens], tf.float32, stateful=False)
    out.set_shape((None,))
    return out


class BleuLoss(Loss):
    """Negative BLEU score of the output labels against the target (statistics only, no loss value)."""

    class_name = "bleu"
    recurrent = True

    def _check_init(self):
        if self.target is None or not self.target.sparse or not self.output.sparse:
            raise ValueError("bleu loss needs sparse output and target")
        if self.output.dim != self.target.dim:
            raise ValueError("bleu loss: output dim %r != target dim %r" % (self.output.dim, self.target.dim))

    def get_error(self):
        with tf.name_scope("loss_bleu"):
            score = bleu_score(
                hypothesis=self.output.copy_as_batch_major().placeholder, hyp_seq_lens=self.output_seq_lens,
                truth=self.target.copy_as_batch_major().placeholder, truth_seq_lens=self.target_seq_lens)
            return -self.reduce_func(score)

    def get_value(self):
        return None
