"""
Beam search layers: choice (with and without search), decide, decide_keep_beam, choice_get_beam_scores,
choice_get_src_beams, split_batch_beam; and the helpers the network uses to bring sources of different search
beams together (:func:`beam_adapted_layer`).

Beam layout (as the original): data on a beam of size K has batch*K rows, batch entry b's hypotheses in rows
b*K ... b*K+K-1. A choice with search makes a new :class:`SearchBeam` whose ``src_beams`` ([B, K]) say from which
hypothesis of the input beam each new hypothesis comes and whose ``beam_scores`` ([B, K]) are the accumulated
(length-normalized, where enabled) scores.
"""

from __future__ import annotations

import tensorflow as tf

from ..data import Data, Dim, SearchBeam, batch_dim, flat_beam_indices
from ..layer_ref import LayerOption, is_layer_target, target_ref
from ..util import NotSpecified
from .base import InternalLayer, LayerBase, last_hidden_state


# ---- beams of sources (used by the network, once for all layers) ----
_SCALARS = frozenset((str, int, float, bool))  # option values that are no layer (skipped fast: twice per layer)


def layers_in_options(desc):
    """The layers named in a layer's (transformed) options, in order, without duplicates."""
    res, seen = [], set()

    def visit(v):
        if v is None or type(v) in _SCALARS:
            return
        if isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif isinstance(v, LayerBase) and id(v) not in seen:
            seen.add(id(v))
            res.append(v)

    for v in desc.values():
        visit(v)
    return res


def beam_of_options(desc):
    """The combined search beam of the layers named in desc (None if none is on a beam)."""
    beams = [layer.output.beam for layer in layers_in_options(desc) if layer.output.beam is not None]
    return SearchBeam.get_combined_beam(*beams) if beams else None


class _BeamAdaptedLayer(InternalLayer):
    """A layer as seen on another (newer) search beam: its output and rec state selected/repeated for it."""

    def __init__(self, layer, beam, network):
        out = layer.output.copy_select_beam(beam)
        super().__init__(name=layer.name, network=network, output=out)
        self.base_layer = layer
        self.layer_class = layer.layer_class
        states = getattr(layer, "rec_vars_outputs", None) or {}
        self.rec_vars_outputs = {k: select_beam_tensor(v, layer.output.beam, beam) for k, v in states.items()}
        self.params = {}

    def get_last_hidden_state(self, key):
        if self.rec_vars_outputs:
            return last_hidden_state(self.rec_vars_outputs, key)
        h = self.base_layer.get_last_hidden_state(key)
        return None if h is None else select_beam_tensor(h, self.base_layer.output.beam, self.output.beam)

    def get_sub_layer(self, layer_name):
        return self.base_layer.get_sub_layer(layer_name)


def beam_adapted_layer(layer, beam, network):
    return _BeamAdaptedLayer(layer, beam, network)


def select_beam_tensor(x, from_beam, to_beam):
    """A batch-major tensor [B*K_from, ...] (or [B, ...] without beam) brought to to_beam."""
    if x is None or from_beam is to_beam:
        return x
    data = Data(name="state", dims=(batch_dim,) + tuple(
        Dim(d, kind=Dim.Types.Feature) for d in x.shape.as_list()[1:]), dtype=x.dtype.name, placeholder=x,
                beam=from_beam)
    return data.copy_select_beam(to_beam).placeholder


def tile_batch(x, k):
    """[B, ...] -> [B*k, ...], each entry repeated k times in a row."""
    if k == 1:
        return x
    x = tf.expand_dims(x, 1)
    x = tf.tile(x, [1, k] + [1] * (x.shape.rank - 2))
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([[shape[0] * k], shape[2:]], 0))


def get_search_choices(layer):
    """The search beam (with beam_scores) the output of layer is on, or None."""
    beam = layer.output.beam
    return beam if beam is not None and beam.beam_scores is not None else None


# ---- choice ----
class ChoiceLayer(LayerBase):
    """
    The next label. With search (the network's search_flag, or ``search=True``): the ``beam_size`` best extensions
    of the input beam by the scores of the source (``input_type``), a new search beam. Without search: the target
    label (teacher forcing); ``input_type="regression"``: the source itself.
    :param beam_size: the beam size of the search (required with search)
    :param keep_beams: keep each input beam entry in the output; refused
    :param search: search (True) or use the target (False); default: the network's search flag
    :param input_type: the source's kind: "prob", "log_prob", "logits" or "regression"
    :param prob_scale: factor of the source's log-probs in the scores
    :param base_beam_score_scale: factor of the previous beam scores in the new scores
    :param random_sample_scale: factor of Gumbel noise added to the scores (sampling)
    :param length_normalization: normalize the scores by the sequence length when ending sequences
    :param length_normalization_exponent: the exponent of the length in that normalization
    :param custom_score_combine: function(layer, scores_in, scores_base, t, end_flags, batch_dim, scores_beam_in,
        base_beam_in) -> scores [batch, beam_in, dim], instead of scores_base + scores_in
    :param source_beam_sizes: per-source beam sizes (several sources); refused
    :param scheduled_sampling: sample instead of the target in training; refused in training
    :param cheating: keep the target label in the beam (True, or "exclusive")
    :param explicit_search_sources: layers that define the search beam explicitly (instead of the sources)
    :param explicit_search_source: single-layer form of explicit_search_sources
    :param _target_layer: internal: the target layer (set by the network)
    """

    layer_class = "choice"
    option_types = {"cheating": (bool, str), "scheduled_sampling": (bool, dict)}  # cheating="exclusive"
    layer_options = (LayerOption("explicit_search_sources", "layers"),)  # a layer name or a list of them

    def __init__(self, beam_size=NotSpecified, keep_beams=False, search=NotSpecified, input_type="prob",
                 prob_scale=1.0, base_beam_score_scale=1.0, random_sample_scale=0.0, length_normalization=True,
                 length_normalization_exponent=1.0, custom_score_combine=None, source_beam_sizes=None,
                 scheduled_sampling=False, cheating=False, explicit_search_sources=None, explicit_search_source=None,
                 _target_layer=None, **kwargs):
        super().__init__(**kwargs)
        for opt, value in (("keep_beams", keep_beams), ("source_beam_sizes", source_beam_sizes)):
            if value:
                raise NotImplementedError("choice layer %r: option %s is not supported" % (self.name, opt))
        if scheduled_sampling and self.network.train_flag is not False:
            raise NotImplementedError("choice layer %r: option scheduled_sampling is not supported" % self.name)
        if input_type not in ("prob", "log_prob", "logits", "regression"):
            raise ValueError("choice layer %r: input_type must be 'prob', 'log_prob', 'logits' or 'regression', "
                             "got %r" % (self.name, input_type))
        self.search_choices = None
        self.explicit_search_sources = list(explicit_search_sources or [])
        self.custom_score_combine = custom_score_combine
        if input_type == "regression":
            self.output.placeholder = self.sources[0].output.copy_compatible_to(self.output).placeholder
            return
        if not self.use_search(self.network, search):
            self.output.placeholder = _target_layer.output.copy_compatible_to(self.output).placeholder
            return
        self._search(beam_size, input_type, prob_scale, base_beam_score_scale, random_sample_scale,
                     length_normalization, length_normalization_exponent, cheating, _target_layer)

    @staticmethod
    def use_search(network, search, input_type="prob"):
        if input_type == "regression":
            return False
        if search is NotSpecified or search is None:
            return bool(network.search_flag)
        return bool(search)

    @classmethod
    def teacher_forced(cls, network, d):
        """Whether the choice of layer dict ``d`` outputs its target without looking at its sources: no search
        (and no search in the network, where a non-searching choice still adds its scores), no sampling."""
        input_type = d.get("input_type", "prob")
        return (input_type != "regression" and not network.search_flag and not d.get("scheduled_sampling")
                and not cls.use_search(network, d.get("search", NotSpecified), input_type))

    def _scores_in(self, input_type):
        src_layer = self.sources[0]
        src = src_layer.output.copy_as_batch_major()
        x = src.placeholder
        if input_type == "log_prob":
            return x
        if input_type == "logits":
            return tf.nn.log_softmax(x, axis=-1)
        oba = getattr(src_layer, "output_before_activation", None)
        if oba is not None and getattr(oba, "act_name", None) == "softmax" and src_layer.output.beam is \
                self.sources[0].output.beam and oba.data.batch_ndim == src.batch_ndim:
            logits = oba.data.copy_as_batch_major().placeholder
            return tf.nn.log_softmax(logits, axis=-1)
        return tf.math.log(tf.maximum(x, 1e-30))

    def _search(self, beam_size, input_type, prob_scale, base_beam_score_scale, random_sample_scale,
                length_normalization, exponent, cheating, target_layer):
        src = self.sources[0].output
        if src.batch_ndim != 2:
            raise NotImplementedError("choice layer %r: search on %s: the input must be [B, dim] (one frame, inside a "
                                      "rec loop)" % (self.name, src.short_repr()))
        beam_in = src.beam
        k_in = beam_in.beam_size if beam_in is not None else 1
        batch = self.network.get_data_batch_dim()
        scores_in = self._scores_in(input_type)  # [B*k_in, dim]
        dim = scores_in.shape[-1] if scores_in.shape[-1] is not None else tf.shape(scores_in)[-1]
        if prob_scale != 1:
            scores_in = scores_in * prob_scale
        scores_in = tf.reshape(scores_in, [batch, k_in, dim])
        if beam_in is not None and beam_in.beam_scores is not None:
            base = beam_in.beam_scores
        else:
            base = tf.zeros([batch, k_in])
        if base_beam_score_scale != 1:
            base = base * base_beam_score_scale
        info = getattr(self.network, "rec_step_info", None)
        ended = getattr(info, "prev_end_flag", None) if info is not None else None
        step_beam = getattr(info, "prev_beam", None)  # the beam the loop step started from
        # a second choice in the step, on the beam of the first one: its hypotheses' end flags
        later_in_step = step_beam is not None and beam_in is not None and beam_in is not step_beam
        if ended is not None and later_in_step:
            ended = select_beam_tensor(ended, step_beam, beam_in)
        if ended is not None:  # finished hypotheses: label 0 with score 0 (they keep their score), nothing else
            ended = tf.reshape(ended, [batch, k_in, 1])
            only_zero = tf.concat([tf.zeros([1]), tf.fill([dim - 1], -1e30)], axis=0)
            scores_in = tf.where(ended, only_zero[None, None, :], scores_in)
        if length_normalization and info is not None:
            t = tf.cast(info.step, tf.float32)
            # the scores are kept as the running mean (score sum / (t+1)^exponent); the original keeps the sum
            # (same ranking) and exposes it in the loop (choice_get_beam_scores)
            self.beam_scores_sum_scale = (t + 1.) ** exponent
            f_base = (t / (t + 1.)) ** exponent if not later_in_step else 1.  # (the base is of this step already)
            f_in = 1. / (t + 1.) ** exponent
            if ended is not None:
                base = tf.where(tf.reshape(ended, [batch, k_in]), base, base * f_base)
                scores_in = scores_in * tf.where(ended, 1., f_in)
            else:
                base = base * f_base
                scores_in = scores_in * f_in
        if self.custom_score_combine:  # the config's function combines the scores (as the original calls it)
            scores = self.custom_score_combine(
                layer=self, scores_in=scores_in, scores_base=base[:, :, None],
                t=info.step if info is not None else None,
                end_flags=tf.reshape(ended, [batch, k_in]) if ended is not None else None,
                batch_dim=batch, scores_beam_in=k_in, base_beam_in=k_in)
            if not isinstance(scores, tf.Tensor) or scores.shape.rank != 3:
                raise TypeError("choice layer %r: custom_score_combine must return a tensor [batch, beam_in, dim], "
                                "got %r" % (self.name, scores))
        else:
            scores = base[:, :, None] + scores_in  # [B, k_in, dim]
        active = getattr(beam_in, "active_size", None) if beam_in is not None else None
        if active is not None:  # the first step of a loop: all hypotheses are the same, search from the first only
            scores = scores[:, :active]
        k_cur = tf.shape(scores)[1]
        flat = tf.reshape(scores, [batch, -1])
        if random_sample_scale:
            u = tf.random.uniform(tf.shape(flat), minval=1e-20, maxval=1.)
            flat = flat + random_sample_scale * -tf.math.log(-tf.math.log(u))
        gold = None
        k = beam_size
        if cheating:
            gold = tf.clip_by_value(tf.reshape(target_layer.output.copy_as_batch_major().placeholder,
                                               [batch, k_in])[:, 0], 0, dim - 1)
            gold_src = k_cur - 1
            gold_flat = gold_src * dim + gold  # [B]
            if cheating == "exclusive":
                hit = tf.one_hot(gold_flat, tf.shape(flat)[1], on_value=True, off_value=False)
                flat = tf.where(hit, tf.fill(tf.shape(flat), float("-inf")), flat)
            k -= 1
        top_scores, idx = tf.nn.top_k(flat, k=k)  # ties: the lower index first
        if gold is not None:
            gold_score = tf.gather(tf.reshape(scores, [batch, -1]), gold_flat, batch_dims=1)
            top_scores = tf.concat([top_scores, gold_score[:, None]], axis=1)
            idx = tf.concat([idx, gold_flat[:, None]], axis=1)
        src_beams = idx // dim
        labels = idx % dim
        beam = self.output.beam
        beam.src_beams = src_beams
        beam.beam_scores = top_scores
        self.search_choices = beam
        self.output.placeholder = tf.reshape(labels, [-1])

    def get_search_choices(self):
        return self.search_choices

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        if d.get("explicit_search_source") is not None:
            if d.get("explicit_search_sources") is not None:
                raise ValueError("give explicit_search_source or explicit_search_sources, not both")
            d["explicit_search_sources"] = [d.pop("explicit_search_source")]
        input_type = d.get("input_type", "prob")
        search = cls.use_search(network, d.get("search", NotSpecified), input_type)
        if cls.teacher_forced(network, d):
            # as in the original: the target is the output, the scores are not needed (so a rec unit neither
            # builds them nor creates their params, e.g. a fused LM that only feeds this choice)
            d["from"] = []
            d.pop("explicit_search_sources", None)
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if search and not d.get("beam_size"):
            raise ValueError("option 'beam_size' is required with search (search_flag of the network "
                             "or search=True)")
        target = d.get("target")
        if isinstance(target, (list, tuple)):
            if len(target) != 1:
                raise NotImplementedError("several targets %r" % (target,))
            target = target[0]
        if not target and input_type != "regression" and (not search or d.get("cheating")):
            raise ValueError("option 'target' is required")
        if target and (not search or d.get("cheating")) and input_type != "regression":
            d["_target_layer"] = get_layer(target_ref(target))

    @classmethod
    def get_out_data_from_opts(cls, name, network, sources=(), target=None, beam_size=NotSpecified,
                               search=NotSpecified, input_type="prob", _target_layer=None, **kwargs):
        if input_type == "regression":
            return sources[0].output.copy_template(name="%s_output" % name)
        if not cls.use_search(network, search):
            return _target_layer.output.copy_template(name="%s_output" % name)
        src = sources[0].output
        if _target_layer is not None:
            dim = _target_layer.output.dim
        elif target and not is_layer_target(target):
            dim = network.get_extern_data(target[0] if isinstance(target, (list, tuple)) else target).dim
        else:
            dim = src.dim
        if dim is not None and src.dim is not None and dim != src.dim:
            raise ValueError("option 'target' %r has %i classes, but the scores of the source (option 'from') %r have "
                             "dim %i" % (target, dim, sources[0].name, src.dim))
        out = Data(name="%s_output" % name, dims=tuple(d for i, d in enumerate(src.dims) if i != src.feature_dim_axis),
                   sparse_dim=Dim(dim, kind=Dim.Types.Feature, description="%s:choice" % name), dtype="int32")
        template_beams = getattr(network, "template_beams", None)
        full_name = network.get_absolute_name_prefix() + name
        if template_beams is not None:  # the template of a rec unit: one beam per choice, whatever the pass
            if full_name not in template_beams:
                template_beams[full_name] = SearchBeam(beam_size, name=full_name)
            beam = template_beams[full_name]
            if beam.dependency is None and src.beam is not None and src.beam is not beam \
                    and not src.beam.depends_on(beam):  # chosen from another choice's beam (not via prev: of it)
                beam.dependency = src.beam
            out.beam = beam
        else:
            out.beam = SearchBeam(beam_size, dependency=src.beam, name=full_name)
        return out


# ---- after the search ----
def _beam_scores(layer, owner):
    beam = get_search_choices(layer)
    if beam is None:
        raise ValueError("%s: source %r is not on a search beam with scores (no choice with search before it)" % (
            owner, layer.name))
    return beam


def _decided_dims(src, name, removes_beam=True):
    """src's dims (batch-major where the beam is removed), each dynamic axis replaced by a new tag (lengths set at
    runtime)."""
    out = src.copy_as_batch_major() if removes_beam else src.copy_template()
    dims = [Dim(None, kind=d.kind, description="%s:%s" % (name, d.description)) if d.is_dynamic() else d
            for d in out.dims]
    out = out.copy_template_new_dim_tags(dims, name="%s_output" % name, keep_special_axes=True)
    if removes_beam:
        out.beam = None
    return out


class DecideLayer(LayerBase):
    """
    The best hypothesis of each sequence (highest beam score, optionally divided by the hypothesis length), [B, ...]
    with its length. Data without a beam is passed through (batch-major).
    :param length_normalization: normalize the beam scores by the sequence lengths before taking the best
    """

    layer_class = "decide"
    removes_beam = True

    def __init__(self, length_normalization=False, **kwargs):
        super().__init__(**kwargs)
        src_layer = self.sources[0]
        src = src_layer.output.copy_as_batch_major()
        if src.beam is None:
            self.output.placeholder = src.placeholder
            for d_out, d_in in zip(self.output.dims, src.dims):
                if d_out.is_dynamic():
                    d_out.dyn_size = d_in.dyn_size
            return
        beam = _beam_scores(src_layer, "decide layer %r" % self.name)
        k = src.beam.beam_size
        batch = self.network.get_data_batch_dim()
        scores = beam.beam_scores
        if length_normalization:
            if not src.have_time_axis():
                raise ValueError("decide layer %r: length_normalization needs a time axis in %s" % (
                    self.name, src.short_repr()))
            lens = tf.reshape(src.get_time_dim_tag().dyn_size, [batch, k])
            scores = scores / tf.cast(lens, scores.dtype)
        best = tf.argmax(scores, axis=1, output_type=tf.int32)  # [B]
        idx = tf.range(batch) * k + best
        self.output.placeholder = tf.gather(src.placeholder, idx, axis=0)
        for d_out, d_in in zip(self.output.dims, src.dims):
            if d_out.is_dynamic():
                d_out.dyn_size = tf.gather(d_in.dyn_size, idx)
        self.best_idx = best

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        src = sources[0].output
        if src.beam is None:
            out = src.copy_as_batch_major()
            dims = [Dim(None, kind=d.kind, description="%s:%s" % (name, d.description)) if d.is_dynamic() else d
                    for d in out.dims]
            return out.copy_template_new_dim_tags(dims, name="%s_output" % name, keep_special_axes=True)
        return _decided_dims(src, name)


class DecideKeepBeamLayer(LayerBase):
    """The hypotheses of the beam as they are; each one's lengths are those of the decided (best) one."""

    layer_class = "decide_keep_beam"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        src_layer = self.sources[0]
        src = src_layer.output
        if src.beam is None:
            raise ValueError("decide_keep_beam layer %r: source %r has no search beam" % (self.name, src_layer.name))
        beam = _beam_scores(src_layer, "decide_keep_beam layer %r" % self.name)
        k = src.beam.beam_size
        batch = self.network.get_data_batch_dim()
        best = tf.argmax(beam.beam_scores, axis=1, output_type=tf.int32)
        idx = tf.range(batch) * k + best
        self.output.placeholder = src.placeholder
        for d_out, d_in in zip(self.output.dims, src.dims):
            if d_out.is_dynamic():
                d_out.dyn_size = tile_batch(tf.gather(d_in.dyn_size, idx), k)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        return _decided_dims(sources[0].output, name, removes_beam=False)


class ChoiceGetBeamScoresLayer(LayerBase):
    """The beam scores of the search choice of the source: [B*beam]."""

    layer_class = "choice_get_beam_scores"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        beam = _beam_scores(self.sources[0], "choice_get_beam_scores layer %r" % self.name)
        scores = beam.beam_scores
        sum_scale = getattr(self.sources[0], "beam_scores_sum_scale", None)  # a choice in this loop step
        if sum_scale is not None:
            scores = scores * sum_scale
        self.output.placeholder = tf.reshape(scores, [-1])

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        return Data(name="%s_output" % name, dims=(batch_dim,), dtype="float32", beam=sources[0].output.beam)


class ChoiceGetSrcBeamsLayer(LayerBase):
    """The source beam index of each hypothesis of the search choice of the source (last step): [B*beam]."""

    layer_class = "choice_get_src_beams"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        beam = _beam_scores(self.sources[0], "choice_get_src_beams layer %r" % self.name)
        self.output.placeholder = tf.reshape(beam.src_beams, [-1])

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        return Data(name="%s_output" % name, dims=(batch_dim,), dtype="int32", beam=sources[0].output.beam)


class SplitBatchBeamLayer(LayerBase):
    """[B*beam, ...] -> [B, beam, ...]: the beam as an axis.
    :param beam_dim: the Dim of the new beam axis (default: a new dim of the beam size)
    """

    layer_class = "split_batch_beam"
    removes_beam = True

    def __init__(self, beam_dim=None, **kwargs):
        super().__init__(**kwargs)
        src = self.sources[0].output.copy_as_batch_major()
        k = src.beam.beam_size
        x = src.placeholder
        shape = tf.shape(x)
        self.output.placeholder = tf.reshape(x, tf.concat([[shape[0] // k, k], shape[1:]], 0))

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), beam_dim=None, **kwargs):
        src = sources[0].output
        if src.beam is None:
            raise ValueError("split_batch_beam layer %r: source %r has no search beam" % (name, sources[0].name))
        src = src.copy_as_batch_major()
        tag = beam_dim or Dim(src.beam.beam_size, kind=Dim.Types.Spatial, description="%s:beam" % name)
        out = src.copy_template_new_dim_tags((src.dims[0], tag) + tuple(src.dims[1:]), name="%s_output" % name)
        out.beam = None
        return out
