"""
:class:`ForwardCallbackIface`, the original's interface for ``forward_callback`` (``task = "forward"`` on the torch
engine): ``forward_step`` marks outputs; the engine hands them over one sequence at a time.
"""

from __future__ import annotations

__all__ = ["ForwardCallbackIface"]


class ForwardCallbackIface:
    """Subclass and set ``forward_callback = MyCallback()`` (or the class) in the config."""

    def init(self, *, model):
        """Before the first batch."""

    def process_seq(self, *, seq_tag, outputs):
        """
        :param str seq_tag:
        :param returnn_lite.tensor.TensorDict outputs: the marked outputs of this sequence, without the batch dim,
            dynamic dims cut to the sequence's length, raw tensors as numpy arrays
        """

    def finish(self):
        """After the last sequence."""
