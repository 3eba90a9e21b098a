"""
Layer classes of the original that real configs use but that need something returnn_lite does not have: they
fail at once with one line naming what is missing (instead of "unknown layer class").

- ``kenlm``: the KenLM library and its TF op (the original compiles it from the KenLM sources).
- ``neural_transducer``: the original's neural transducer layer and loss (an extra module of the original, built on
  ``tf.contrib.seq2seq`` / ``tf.contrib.rnn``, which TF 2 removed: the original cannot build it on TF 2 either).
"""

from __future__ import annotations

from .base import LayerBase


class _UnavailableLayer(LayerBase):
    _why = ""
    accepts_any_options = True  # refused as a whole (transform_config_dict), whatever the options

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        raise NotImplementedError("layer class %r is not available in returnn_lite: %s" % (cls.layer_class, cls._why))

    @classmethod
    def get_out_data_from_opts(cls, **kwargs):
        return cls.transform_config_dict({}, None, None)


class KenLmStateLayer(_UnavailableLayer):
    """KenLM n-gram LM scores: not available (needs the KenLM library)."""

    layer_class = "kenlm"
    _why = "it needs the KenLM library and its compiled TF op (use an LM as a network layer instead)."


class NeuralTransducerLayer(_UnavailableLayer):
    """Neural transducer: not available."""

    layer_class = "neural_transducer"
    _why = ("the original's neural transducer layer and loss (an extra module) are built on tf.contrib.seq2seq, "
            "which TF 2 removed, so the original cannot build them on TF 2 either; returnn_lite does not "
            "reimplement them (an RNN-T style rec layer with a 'rnnt' loss expresses a similar model).")
