"""
Layers of the original that compute with RASR (Sprint) or with native kernels returnn_lite lacks: ``fast_bw``
(the Baum-Welch soft alignment, e.g. for a full-sum hybrid loss via ``via_layer``) and ``forced_align`` (the
Viterbi alignment).

They construct with the original's output templates and no params, so hybrid configs build, their checkpoints
load and their other layers run (forward, recognition). Their outputs fail only when computed, with one line
naming what is missing (see :func:`returnn_lite.losses.sprint.unavailable_tensor`).
"""

from __future__ import annotations

import tensorflow as tf

from ..data import Data
from ..losses.sprint import sprint_exec_description, unavailable_tensor
from .base import ConcatInputLayer, InternalLayer, concat_sources_template

__all__ = ["FastBaumWelchLayer", "ForcedAlignmentLayer"]


class FastBaumWelchLayer(ConcatInputLayer):
    """
    Fast Baum-Welch: the state posteriors [T,B,dim] (time-major, as the original) of the input scores over the
    automata of ``align_target`` ("sprint": built by RASR; "ctc", "staircase": by the original's native FSA code),
    and as ``output_loss`` the full-sum scores (for the ``via_layer`` loss with ``align_layer``).
    Constructs; computing it fails naming what is missing.
    """

    layer_class = "fast_bw"
    recurrent = True
    layer_options = ("staircase_seq_len_source",)
    _ALIGN_TARGETS = ("sprint", "ctc", "staircase")
    _INPUT_TYPES = ("log_prob", "prob")

    def __init__(self, align_target, align_target_key=None, ctc_opts=None, sprint_opts=None, input_type="log_prob",
                 tdp_scale=1.0, am_scale=1.0, min_prob=0.0, staircase_seq_len_source=None, **kwargs):
        super().__init__(**kwargs)
        self.align_target = align_target
        self.sprint_opts = sprint_opts
        self.tdp_scale, self.am_scale, self.min_prob = tdp_scale, am_scale, min_prob
        if align_target == "sprint":
            missing = "%s to build the HMM automata (returnn_lite does not run RASR)" % sprint_exec_description(
                sprint_opts)
        else:
            automata = {"ctc": "CTC automata of %r (ctc_opts %r)" % (align_target_key, ctc_opts),
                        "staircase": "staircase automata (seq lens of %r)" % getattr(
                            staircase_seq_len_source, "name", None)}[align_target]
            missing = "the original's native FastBaumWelch op and its %s, which returnn_lite lacks" % automata
        message = "layer %r (fast_bw, align_target %r) cannot be computed: it needs %s" % (
            self.name, align_target, missing)
        source = self.input_data.copy_as_time_major().placeholder
        self.output.placeholder = unavailable_tensor(message, source, dtype=tf.float32)
        batch = tf.shape(source)[1]
        self.output_loss = tf.reduce_sum(unavailable_tensor(message, source, dtype=tf.float32, shape=[batch]))

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if d.get("align_target") not in cls._ALIGN_TARGETS:
            raise ValueError("fast_bw: align_target must be one of %s, got %r"
                             % (", ".join(map(repr, cls._ALIGN_TARGETS)), d.get("align_target")))
        if d.get("input_type", "log_prob") not in cls._INPUT_TYPES:
            raise ValueError("fast_bw: input_type must be 'log_prob' or 'prob', got %r" % (d.get("input_type"),))
        if d["align_target"] == "sprint" and not isinstance(d.get("sprint_opts"), dict):
            # (in the original, the engine's config can also give them: the layer then needs RASR just as well)
            d.setdefault("sprint_opts", None)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        out = concat_sources_template(sources, name="%s_output" % name).copy_as_time_major()
        if out.sparse or not str(out.dtype).startswith("float"):
            raise ValueError("fast_bw: expects dense float scores as input, got %s" % out.short_repr())
        return out


class ForcedAlignmentLayer(ConcatInputLayer):
    """
    Viterbi forced alignment of the input scores to ``align_target`` over the ``topology`` ("ctc", "rna"):
    sparse labels [T,B] of the input's dim (time-major), and the sub-layer ``scores`` [B].
    Constructs; computing it fails naming the missing kernel.
    """

    layer_class = "forced_align"
    layer_options = ("align_target",)
    _TOPOLOGIES = ("ctc", "rna")
    _INPUT_TYPES = ("log_prob", "prob")

    def __init__(self, align_target, topology, input_type, **kwargs):
        super().__init__(**kwargs)
        self.align_target = align_target
        self.topology = topology
        self.input_type = input_type
        message = ("layer %r (forced_align, topology %r) cannot be computed: it needs the original's native "
                   "Viterbi alignment op, which returnn_lite lacks" % (self.name, topology))
        source = self.input_data.copy_as_time_major().placeholder
        self.output.placeholder = unavailable_tensor(message, source, dtype=tf.int32, shape=tf.shape(source)[:2])
        self.scores = unavailable_tensor(message, source, dtype=tf.float32, shape=tf.shape(source)[1:2])

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if d.get("topology") not in cls._TOPOLOGIES:
            raise ValueError("forced_align: topology must be 'ctc' or 'rna', got %r" % (d.get("topology"),))
        if d.get("input_type") not in cls._INPUT_TYPES:
            raise ValueError("forced_align: input_type must be 'log_prob' or 'prob', got %r" % (d.get("input_type"),))

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        src = concat_sources_template(sources, name="%s_output" % name).copy_as_time_major()
        if src.dim is None:
            raise ValueError("forced_align: the input %s has no feature dim" % src.short_repr())
        return Data(name="%s_output" % name, sparse_dim=src.feature_dim,
                    dims=[src.get_time_dim_tag(), src.dim_tags[src.batch_dim_axis]], dtype="int32")

    def get_sub_layer(self, layer_name):
        if layer_name != "scores":
            return None
        out = self._scores_template(self.name)
        out.placeholder = self.scores
        return InternalLayer(name="%s/scores" % self.name, network=self.network, output=out)

    @classmethod
    def _scores_template(cls, name):
        return Data(name="%s/scores_output" % name, shape=(), dtype="float32", time_dim_axis=None)

    @classmethod
    def get_sub_layer_out_data_from_opts(cls, layer_name, parent_layer_kwargs):
        if layer_name != "scores":
            return None
        return cls._scores_template(parent_layer_kwargs["name"]), parent_layer_kwargs["network"], InternalLayer
