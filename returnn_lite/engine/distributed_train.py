"""
The engine's side of multi-worker data-parallel training (see :mod:`returnn_lite.distributed`).

Per graph (built the same on every worker, so the collective instance keys match):

* ``"grad"``: the gradients are summed over the workers before clipping and the optimizer (in the updater), in
  one fused all-reduce per step (one flat buffer; models over ``grad_bucket_bytes`` of gradients get a few buckets,
  filled from the last layer back, so the first buckets are reduced while the backward pass goes on);
* ``"param"``: an op that averages all float variables, run every ``param_sync_step`` steps and at epoch end;
* a flag fused into every train step: "do all workers have another batch?" — all workers stop at the same
  step, so no collective waits for a worker that is done. In ``"grad"`` mode the flag is one more element of the
  gradient buffer (no collective of its own); in ``"param"`` mode it is a small all-reduce;
* a vector sum (epoch score sums: cost, error, frames), so train and dev scores are the same on every worker;
* a broadcast of all variables from rank 0 (at start, after resume, after a network rebuild), a final barrier.
"""

from __future__ import annotations

import numpy
import tensorflow as tf

from ..distributed import Collectives, DistributedError, get_distributed_setup
from .backend import DistributedContext
from .data_sharding import init_seq_order_for_rank

tf1 = tf.compat.v1

__all__ = ["DistributedTraining", "setup_distributed_training"]


def setup_distributed_training(config, log, task, session_config, error_cls, session):
    """The TF backend's DistributedTraining (``session``: returns the current session), or None for one process."""
    try:
        setup = get_distributed_setup(config, log)
    except DistributedError as exc:
        raise error_cls(str(exc)) from None
    if setup is None:
        return None
    if task != "train":
        raise error_cls("distributed (use_horovod / TF_CONFIG with %i workers): only task train is supported, "
                        "got task %r; run it with one process" % (setup.size, task))
    try:
        setup.start(session_config)
    except Exception as exc:  # e.g. the port is taken
        raise error_cls("distributed: cannot start the server of worker %i at %s: %s" % (
            setup.rank, setup.workers[setup.rank], str(exc).splitlines()[0] if str(exc) else exc)) from None
    log.v3("distributed: worker %i of %i (%s), reduce_type %r, dataset_distribution %r" % (
        setup.rank, setup.size, setup.workers[setup.rank], setup.reduce_type, setup.dataset_distribution))
    return DistributedTraining(setup, log, error_cls, session=session)


class DistributedTraining(DistributedContext):
    """Graph pieces and per-step logic; one instance per engine (the graph pieces are rebuilt per graph)."""

    _LOST = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError,
             tf.errors.CancelledError)

    def __init__(self, setup, log, error_cls=DistributedError, session=None):
        self.setup = setup
        self.rank, self.size = setup.rank, setup.size
        self._session = session
        self.log = log
        self.error_cls = error_cls
        self.collectives = None
        self.steps = 0  # train steps over all epochs (param sync counting)
        self.more_ph = self.more_sum = None  # the train step's flag "have another batch" (summed)
        self.have_batch_ph = self.have_batch_sum = None  # the same check on its own (epoch start)
        self.vec_ph = self.vec_sum = None
        self.broadcast_op = self.average_op = self.barrier_op = None

    @property
    def is_chief(self):
        return self.setup.is_chief

    # ---- graph

    def grad_reducer(self):
        """For the updater: grads -> grads summed over the workers (``"grad"`` mode), else None. The step's flag
        "have another batch" rides along as the first-reduced element (see the module doc)."""
        if self.setup.reduce_type != "grad":
            return None

        def reduce(grads):
            dtype = grads[0].dtype.base_dtype
            with tf.name_scope("distributed/"):
                self.more_ph = tf1.placeholder_with_default(0.0, shape=(), name="have_more")
                flag = tf.reshape(tf.cast(self.more_ph, dtype), [1])
            reduced = self.reduce_grads_and_flag(grads, flag)
            self.more_sum = tf.cast(reduced[-1][0], tf.float32)
            return reduced[:-1]

        return reduce

    def reduce_grads_and_flag(self, grads, flag):
        """The fused all-reduce of ``grads + [flag]`` (summed), in buckets when the grads are big."""
        limit = self.setup.grad_bucket_bytes
        total = sum((g.shape.num_elements() or 0) * g.dtype.base_dtype.size for g in grads)
        bucket_bytes = limit if 0 < limit < total else None
        return self.collectives.all_reduce_list(list(grads) + [flag], "sum", bucket_bytes=bucket_bytes)

    def new_graph(self):
        """Call at the start of a graph construction (before the updater). Instance keys continue over graphs
        (e.g. a network rebuilt for pretraining), so no key is used by two different collectives."""
        self.collectives = Collectives(self.setup, self.collectives.next_instance_key if self.collectives else 1)
        self.more_ph = self.more_sum = None

    def build(self):
        """Call in the graph after the updater: the remaining collective ops."""
        c = self.collectives
        with tf.name_scope("distributed/"):
            if self.more_ph is None:  # "param" mode, or a graph without updater: the flag on its own
                self.more_ph = tf1.placeholder_with_default(0.0, shape=(), name="have_more")
                self.more_sum = c.all_reduce(self.more_ph, "sum")
            self.have_batch_ph = tf1.placeholder_with_default(0.0, shape=(), name="have_batch")
            self.have_batch_sum = c.all_reduce(self.have_batch_ph, "sum")
            self.vec_ph = tf1.placeholder(tf.float64, shape=(None,), name="sums")
            self.vec_sum = c.all_reduce(self.vec_ph, "sum")
            variables = tf1.global_variables()
            self.broadcast_op = c.broadcast_variables_op(variables)
            self.average_op = c.average_variables_op(
                [v for v in variables if v.dtype.base_dtype.is_floating]) if self.setup.reduce_type == "param" else None
            self.barrier_op = c.barrier_op()

    def session_args(self, config_proto):
        """(target, ConfigProto) for the worker's session."""
        return self.setup.target, self.setup.session_config(config_proto)

    # ---- running

    def lost_contact_error(self, exc, what="a collective op"):
        """The engine's error for a TF error from a worker that died or hangs, else None."""
        if not isinstance(exc, self._LOST):
            return None
        text = " ".join(str(getattr(exc, "message", exc)).split())[:300]
        return self.error_cls(
            "distributed: worker %i of %i lost contact with the other workers in %s (another worker died or "
            "stopped answering within %g s): %s: %s" % (
                self.setup.rank, self.setup.size, what, self.setup.timeout, type(exc).__name__, text))

    def _run(self, session, fetches, feed=None, what="a collective op"):
        try:
            return session.run(fetches, feed)
        except tf.errors.OpError as exc:
            err = self.lost_contact_error(exc, what)
            if err is None:
                raise
            raise err from None

    def broadcast_params(self):
        self._run(self._session(), self.broadcast_op, what="the params broadcast from rank 0")
        self.log.v4("distributed: params broadcast from rank 0")

    def all_have_batch(self, have):
        """Separate check (at epoch start): do all workers have a (first) batch?"""
        summed = self._run(self._session(), self.have_batch_sum, {self.have_batch_ph: float(have)})
        return summed >= self.setup.size - 0.5

    def after_step(self):
        """``"param"`` mode: average the params every ``param_sync_step`` steps."""
        self.steps += 1
        if self.average_op is not None and self.steps % self.setup.param_sync_step == 0:
            self._run(self._session(), self.average_op, what="the params averaging")
            self.log.v5("distributed: params averaged after step %i" % self.steps)

    def end_of_epoch(self):
        if self.average_op is not None:
            self._run(self._session(), self.average_op, what="the params averaging")

    def sum_accumulator(self, acc):
        """Sums of the epoch's cost/error/frames/seqs over all workers (in place)."""
        keys = [("cost", k) for k in sorted(acc.cost)] + [("error", k) for k in sorted(acc.error)] + \
            [("frames", k) for k in sorted(acc.frames)]
        values = numpy.array([getattr(acc, part)[k] for part, k in keys] + [acc.num_seqs, acc.num_steps],
                             dtype=numpy.float64)
        summed = self._run(self._session(), self.vec_sum, {self.vec_ph: values}, what="the epoch score sum")
        for (part, k), value in zip(keys, summed):
            getattr(acc, part)[k] = float(value)
        acc.num_seqs, acc.num_steps = int(summed[-2]), int(summed[-1])

    def barrier(self, what="the final barrier"):
        self._run(self._session(), self.barrier_op, what=what)

    # ---- datasets

    def init_seq_order(self, dataset, epoch):
        """The worker's part of the epoch: every N-th seq (``"shard"``) or its own shuffling seed."""
        init_seq_order_for_rank(dataset, epoch, self.setup.rank, self.setup.size, self.setup.dataset_distribution,
                                DistributedError)
