"""
What the epoch loop (:class:`returnn_lite.engine.engine.Engine`) asks of an engine backend.

The loop owns datasets, batching, learning-rate control, progress lines, scores, the checkpoint/resume protocol
(which epoch to load, when to save, the learning-rate file next to the checkpoint), eval and forward to HDF. A
backend owns the model and everything that touches the framework: building the model for an epoch, one step on a
batch of numpy arrays, checkpoint files, and (optionally) several processes. Two backends implement it:

* ``backend = "tensorflow"`` (default): :class:`returnn_lite.engine.tf_backend.TFBackend`, the layer-dict network
  on one TF graph and session;
* ``backend = "torch"``: :class:`returnn_lite.engine.torch_engine.TorchBackend`, the config's ``get_model`` on
  PyTorch (rf on its torch backend, or a plain ``torch.nn.Module``).

This module imports neither framework; each backend module imports only its own.

A step returns a dict of floats with the keys ``cost:<loss>``, ``error:<loss>`` (summed over the frames of the
batch) and ``loss_norm_factor:<loss>`` (1 / frames), from which the loop builds the epoch scores.
"""

from __future__ import annotations

import importlib

__all__ = ["EngineError", "EngineBackend", "DistributedContext", "ForwardOutput", "get_backend_class", "BACKENDS"]


class EngineError(Exception):
    """A problem with the setup (missing dataset/model/loss, non-finite loss, ...), with a clear message."""


# config ``backend`` -> "module:class", imported only when chosen (so the TF path never imports torch and back)
BACKENDS = {
    "tensorflow": "returnn_lite.engine.tf_backend:TFBackend",
    "tf": "returnn_lite.engine.tf_backend:TFBackend",
    "torch": "returnn_lite.engine.torch_engine:TorchBackend",
    "pytorch": "returnn_lite.engine.torch_engine:TorchBackend",
}


def get_backend_class(name):
    """The backend class of the config value ``backend`` (one clear error for an unknown one)."""
    if name not in BACKENDS:
        raise EngineError("backend %r: unknown; supported: %s" % (name, ", ".join(sorted(BACKENDS))))
    module_name, _, class_name = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


class ForwardOutput:
    """What ``task = "forward"`` writes: the output's name, its feature dim and its rank without the batch dim."""

    def __init__(self, name, dim, ndim):
        self.name, self.dim, self.ndim = name, dim, ndim


class DistributedContext:
    """
    What the loop asks of a multi-process run (one instance per run; every method is called on every rank in the
    same order, so the collectives match):
    """

    rank = 0
    size = 1

    @property
    def is_chief(self):
        """Rank 0: the only rank that writes checkpoints, the learning-rate file and the log lines."""
        return self.rank == 0

    def init_seq_order(self, dataset, epoch):
        """Start the epoch of ``dataset`` with this rank's part of the seqs."""
        raise NotImplementedError

    def all_have_batch(self, have):
        """Collective: do all ranks have a (first) batch? (The step itself reports whether all have a next one.)"""
        raise NotImplementedError

    def after_step(self):
        """After each train step (e.g. parameter averaging every ``param_sync_step`` steps)."""

    def end_of_epoch(self):
        """After the last train step of an epoch (with a timeout: a dead rank ends the run with an error)."""

    def sum_accumulator(self, acc):
        """Collective: the epoch's cost/error/frame/seq/step sums over all ranks, in place."""
        raise NotImplementedError

    def broadcast_params(self):
        """Collective: every rank takes rank 0's params (at start, after resume, after a rebuild)."""
        raise NotImplementedError

    def barrier(self, what):
        """Collective with a timeout: wait for all ranks (``what`` names the place in the error)."""
        raise NotImplementedError

    def close(self):
        """Leave the process group."""


class EngineBackend:
    """
    The interface. ``__init__(config, log, task)``; then :meth:`build` (again when :meth:`needs_rebuild` says so);
    steps; checkpoint files; :meth:`close`.
    """

    name = "?"
    checkpoint_suffix = ""  # the file that marks a complete checkpoint ``<model>.<epoch %03d><suffix>``
    supports_search = False

    def __init__(self, config, log, task):
        self.config = config
        self.log = log
        self.task = task
        self.data_keys = []  # the dataset keys a step reads
        self.dist = None  # a DistributedContext in a multi-process training

    # ---- setup

    def setup_distributed(self):
        """Before anything is built: a :class:`DistributedContext` when this process is one of several, else None."""
        return None

    def build(self, epoch, dataset, train):
        """The model of ``epoch`` (and, with ``train``, the optimizer); ``dataset`` may describe the data."""
        raise NotImplementedError

    def needs_rebuild(self, epoch):
        """True when the model of ``epoch`` differs from the built one (pretraining, ``get_network``)."""
        return False

    def rebuild(self, epoch, dataset):
        """Build the model of ``epoch``, keeping the params of matching names."""
        raise NotImplementedError

    def has_loss(self):
        raise NotImplementedError

    def check_dataset(self, dataset):
        """One clear error when ``dataset`` lacks a key or does not match the model's data (before the first step)."""
        missing = [k for k in self.data_keys if k not in set(dataset.get_data_keys())]
        if missing:
            raise EngineError("dataset %r has no data key(s) %s needed by the model (it has: %s)"
                              % (dataset.name, missing, sorted(dataset.get_data_keys())))

    def learning_rate_override(self, epoch):
        """The learning rate the model of ``epoch`` sets (a net dict's ``#config``), else None."""
        return None

    def pretrain_num_epochs(self):
        """The number of pretraining epochs, or None without pretraining."""
        return None

    # ---- steps

    def train_step(self, arrays, *, dataset_name, step, epoch, epoch_step, learning_rate, have_next=None):
        """
        One update on a batch (:class:`returnn_lite.datasets.BatchArrays`); returns the step's results (see the
        module doc). In a distributed run, ``have_next`` is this rank's "I have another batch", and the results
        get ``"all_have_next"``: whether every rank has one.
        """
        raise NotImplementedError

    def eval_step(self, arrays, *, dataset_name, step, epoch):
        """The losses of a batch without an update."""
        raise NotImplementedError

    def forward_output(self):
        """The :class:`ForwardOutput` of task forward (after :meth:`build`)."""
        raise NotImplementedError

    def forward_batch(self, arrays, *, dataset_name, step, epoch):
        """(values [B, T, ...] numpy, seq_lens [B]) of the forward output for a batch."""
        raise NotImplementedError

    def set_global_train_step(self, step):
        raise NotImplementedError

    def write_summaries(self, values, step):
        """Per-step / per-epoch scalars (``tf_log_dir``); backends without summaries refuse the option at build."""

    # ---- checkpoint files

    def existing_models(self, model_prefix):
        """epoch -> checkpoint name of the complete epoch checkpoints."""
        raise NotImplementedError

    def checkpoint_exists(self, filename):
        raise NotImplementedError

    def save_checkpoint(self, filename):
        """Write the checkpoint atomically (a failed or killed save leaves no partial checkpoint)."""
        raise NotImplementedError

    def load_checkpoint(self, filename, load_extra):
        """Load the params (``load_extra``: also optimizer state and global step); EngineError naming the file."""
        raise NotImplementedError

    def remove_stale_temp_files(self, model_prefix):
        """Temp files of a save that was killed."""

    def preload_from_files(self, training, fresh_train):
        """The config's ``preload_from_files``."""

    def close(self):
        """Release the session / process group."""
