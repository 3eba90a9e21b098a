"""
The RASR (Sprint) losses of the original: ``sprint`` (loss and error signal computed by an external RASR
process) and ``fast_bw`` (full-sum Baum-Welch over automata RASR builds).

Hybrid configs trained with them are reused for forward and recognition with a checkpoint, so the losses
construct (their layers and params as in the original); their value fails only when computed, with one line
naming the RASR executable of ``sprint_opts`` that the original would run.
"""

from __future__ import annotations

import tensorflow as tf

from .base import Loss

__all__ = ["ExternSprintLoss", "FastBaumWelchLoss", "unavailable_tensor", "sprint_exec_description"]


def unavailable_tensor(message, like, dtype=None, shape=None):
    """
    A tensor (zeros of ``shape``, default: of ``like``'s shape) whose evaluation fails with ``message``: the graph
    builds, and only running this part of it stops, with an InvalidArgumentError "assertion failed: [message]".
    """
    check = tf.debugging.Assert(tf.constant(False), [tf.constant(message)], name="unavailable")
    with tf.control_dependencies([check]):
        if shape is None:
            shape = tf.shape(like)
        return tf.zeros(shape, dtype=dtype or like.dtype)


def sprint_exec_description(sprint_opts):
    """What the original would run for these sprint_opts, for error messages."""
    exe = (sprint_opts or {}).get("sprintExecPath") if isinstance(sprint_opts, dict) else None
    return "the RASR (Sprint) executable %s" % ("%r (sprint_opts sprintExecPath)" % str(exe) if exe else
                                                "given by sprint_opts sprintExecPath")


class _RasrLoss(Loss):
    recurrent = True
    need_target = False
    _what = ""

    def __init__(self, sprint_opts=None, **kwargs):
        super().__init__(**kwargs)
        self.sprint_opts = sprint_opts

    def get_value(self):
        message = "loss %r of layer %r cannot be computed: it needs %s (%s; returnn_lite does not run RASR)" % (
            self.class_name, getattr(self.layer, "name", None), sprint_exec_description(self.sprint_opts),
            self._what)
        return unavailable_tensor(message, self.output.placeholder, dtype="float32", shape=[])

    def get_error(self):
        return None


class ExternSprintLoss(_RasrLoss):
    """Loss and error signal computed by an external RASR (Sprint) process."""

    class_name = "sprint"
    _what = "it computes the loss and its error signal"


class FastBaumWelchLoss(_RasrLoss):
    """Full-sum loss via Baum-Welch over the automata an external RASR (Sprint) process builds."""

    class_name = "fast_bw"

    def __init__(self, sprint_opts=None, tdp_scale=1.0, **kwargs):
        super().__init__(sprint_opts=sprint_opts, **kwargs)
        self._what = "it builds the HMM automata for the Baum-Welch full sum, tdp_scale %r" % tdp_scale
