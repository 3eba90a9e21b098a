"""
Multi-worker data-parallel training on TensorFlow's own collectives (no Horovod, no home-made transport).

Every worker is one process with a ``tf.distribute.Server`` (gRPC, ``job "worker"``); its session runs on that
server and collective ops (all-reduce, broadcast) inside the graph exchange tensors between the workers. All
workers form ONE collective group; instance keys are handed out here, in graph-construction order, which is
the same on every worker because every worker builds the same graph.

Where the cluster comes from:

* ``TF_CONFIG`` (the standard form)::

      {"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 0}}

* or config keys: ``distributed = {"workers": ["host0:2222", ...], "rank": 0}`` (``rank`` may also come from
  the environment variable ``RETURNN_LITE_RANK``).

Training options (the original's Horovod keys, or neutral names inside ``distributed = {...}``):

* ``horovod_reduce_type`` / ``reduce_type``: ``"grad"`` (all-reduce the gradients every step, summed) or
  ``"param"`` (local steps; params averaged every ``horovod_param_sync_step`` / ``param_sync_step`` steps)
* ``horovod_dataset_distribution`` / ``dataset_distribution``: ``"shard"`` (worker r reads every N-th sequence,
  starting at r) or ``"random_seed_offset"`` (each worker shuffles with its own seed)
* ``distributed_timeout`` / ``timeout``: seconds a collective waits for the others (default 60)
* ``grad_bucket_bytes`` (inside ``distributed = {...}``): ``"grad"`` mode sends all gradients in one fused
  all-reduce; above this many bytes (default 4 MiB) it is cut into buckets of at least this size, filled from the
  last layer back, so the first buckets are reduced while the backward pass goes on; 0: always one buffer
* ``use_horovod = True`` maps to this (one notice).
"""

from __future__ import annotations

import json
import os

import tensorflow as tf
from tensorflow.python.ops import collective_ops

tf1 = tf.compat.v1

__all__ = ["DistributedError", "DistributedSetup", "Collectives", "get_distributed_setup"]

_REDUCE_TYPES = ("grad", "param")
_DATASET_DISTRIBUTIONS = ("shard", "random_seed_offset")
_NEUTRAL_KEYS = {"reduce_type", "param_sync_step", "dataset_distribution", "workers", "rank", "timeout",
                 "grad_bucket_bytes"}
DEFAULT_GRAD_BUCKET_BYTES = 4 << 20


class DistributedError(Exception):
    """Bad distributed settings (TF_CONFIG, config keys), with a clear message."""


class DistributedSetup:
    """Rank, size, worker addresses and training options; ``start()`` starts this worker's server."""

    def __init__(self, workers, rank, reduce_type="grad", param_sync_step=1, dataset_distribution="shard",
                 timeout=60.0, grad_bucket_bytes=DEFAULT_GRAD_BUCKET_BYTES):
        if not workers:
            raise DistributedError("distributed: no worker addresses")
        if not 0 <= rank < len(workers):
            raise DistributedError("distributed: rank %r out of range for %i workers" % (rank, len(workers)))
        if reduce_type not in _REDUCE_TYPES:
            raise DistributedError("horovod_reduce_type / distributed reduce_type %r: supported: %s" % (
                reduce_type, ", ".join(_REDUCE_TYPES)))
        if dataset_distribution not in _DATASET_DISTRIBUTIONS:
            raise DistributedError("horovod_dataset_distribution / distributed dataset_distribution %r: supported: "
                                   "%s" % (dataset_distribution, ", ".join(_DATASET_DISTRIBUTIONS)))
        if not isinstance(grad_bucket_bytes, int) or grad_bucket_bytes < 0:
            raise DistributedError("distributed grad_bucket_bytes must be an int >= 0 (0: one buffer), got %r" % (
                grad_bucket_bytes,))
        if int(param_sync_step) < 1:
            raise DistributedError("horovod_param_sync_step must be >= 1, got %r" % (param_sync_step,))
        self.workers = list(workers)
        self.rank = int(rank)
        self.size = len(self.workers)
        self.reduce_type = reduce_type
        self.param_sync_step = int(param_sync_step)
        self.dataset_distribution = dataset_distribution
        self.timeout = float(timeout)
        self.grad_bucket_bytes = grad_bucket_bytes
        self.server = None

    @property
    def is_chief(self):
        return self.rank == 0

    @property
    def device(self):
        return "/job:worker/replica:0/task:%i/device:CPU:0" % self.rank

    def session_config(self, base=None):
        """ConfigProto for this worker's sessions: only its own devices, one collective group led by rank 0."""
        config = tf1.ConfigProto()
        if base is not None:
            config.CopyFrom(base)
        config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
        del config.device_filters[:]
        config.device_filters.append("/job:worker/task:%i" % self.rank)
        config.isolate_session_state = False
        return config

    def start(self, base_session_config=None):
        """Start this worker's gRPC server (once)."""
        if self.server is None:
            cluster = tf.train.ClusterSpec({"worker": self.workers})
            self.server = tf.distribute.Server(cluster, job_name="worker", task_index=self.rank,
                                               config=self.session_config(base_session_config), start=True)
        return self.server

    @property
    def target(self):
        return self.start().target

    def __repr__(self):
        return "DistributedSetup(rank=%i, size=%i, reduce_type=%r, dataset_distribution=%r)" % (
            self.rank, self.size, self.reduce_type, self.dataset_distribution)


def _parse_tf_config(text):
    try:
        tf_config = json.loads(text)
        workers = tf_config["cluster"]["worker"]
        task = tf_config.get("task", {})
        if task.get("type", "worker") != "worker":
            raise DistributedError("TF_CONFIG: task type %r; only 'worker' tasks are supported" % task.get("type"))
        return list(workers), int(task.get("index", 0))
    except (ValueError, KeyError, TypeError) as exc:
        raise DistributedError("TF_CONFIG is not of the form {\"cluster\": {\"worker\": [\"host:port\", ...]}, "
                               "\"task\": {\"type\": \"worker\", \"index\": i}}: %s" % exc) from None


def get_distributed_setup(config, log=None):
    """
    The config's distributed setup, or None for a single-process run. Distributed when ``distributed = {...}``,
    ``use_horovod = True`` or horovod keys are set, or ``TF_CONFIG`` lists more than one worker.
    """
    opts = config.typed_value("distributed", None) if config.has("distributed") else None
    if opts is not None and not isinstance(opts, dict):
        raise DistributedError("config option 'distributed' must be a dict like {\"reduce_type\": \"grad\"}, "
                               "got %r" % (opts,))
    opts = dict(opts or {})
    unknown = sorted(set(opts) - _NEUTRAL_KEYS)
    if unknown:
        raise DistributedError("config option 'distributed': unknown key(s) %s; known: %s" % (
            unknown, sorted(_NEUTRAL_KEYS)))
    use_horovod = config.bool("use_horovod", False)
    tf_config = os.environ.get("TF_CONFIG", "")
    workers, rank = None, None
    if "workers" in opts:
        workers = list(opts["workers"])
        rank = opts.get("rank", os.environ.get("RETURNN_LITE_RANK"))
        if rank is None:
            raise DistributedError("config option 'distributed': 'workers' given but no 'rank' (or env "
                                   "RETURNN_LITE_RANK)")
        rank = int(rank)
    elif tf_config:
        workers, rank = _parse_tf_config(tf_config)
    if workers is None:
        if use_horovod or opts:
            raise DistributedError("distributed training (use_horovod / distributed) needs the workers: set "
                                   "TF_CONFIG, or start the run with `python -m returnn_lite.launch --workers N "
                                   "CONFIG`")
        return None
    if len(workers) < 2 and not (use_horovod or opts):
        return None
    if use_horovod and log is not None and rank == 0:
        log.v1("notice: use_horovod = True: using TensorFlow collectives over %i workers (no Horovod)" % len(workers))

    def get(neutral, horovod_key, default):
        if neutral in opts:
            return opts[neutral]
        if config.has(horovod_key):
            return config.typed_value(horovod_key) if config.is_typed(horovod_key) else config.value(horovod_key)
        return default

    return DistributedSetup(
        workers, rank, reduce_type=get("reduce_type", "horovod_reduce_type", "grad"),
        param_sync_step=int(get("param_sync_step", "horovod_param_sync_step", 1)),
        dataset_distribution=get("dataset_distribution", "horovod_dataset_distribution", "shard"),
        timeout=float(get("timeout", "distributed_timeout", 60.0)),
        grad_bucket_bytes=opts.get("grad_bucket_bytes", DEFAULT_GRAD_BUCKET_BYTES))


def _num_elements(tensor):
    num = tensor.shape.num_elements()
    return num if num is not None else tf.size(tensor)


class Collectives:
    """
    Collective ops for one graph. Group key 1 (all workers); every op gets the next instance key, so the i-th
    collective built on one worker matches the i-th built on the others (same graph construction order).
    """

    GROUP_KEY = 1

    def __init__(self, setup, first_instance_key=1):
        self.setup = setup
        self._next_instance_key = first_instance_key

    @property
    def next_instance_key(self):
        """The key the next collective gets (a later graph continues from here: keys are never reused)."""
        return self._next_instance_key

    def _instance_key(self):
        key = self._next_instance_key
        self._next_instance_key += 1
        return key

    def all_reduce(self, tensor, op="sum"):
        """Sum (``op="sum"``) or mean (``"mean"``) of ``tensor`` over all workers."""
        if op not in ("sum", "mean"):
            raise DistributedError("all_reduce: op %r; supported: sum, mean" % (op,))
        tensor = tf.convert_to_tensor(tensor)
        if self.setup.size == 1:
            return tf.identity(tensor)
        with tf.device(self.setup.device):
            return collective_ops.all_reduce(
                tensor, self.setup.size, self.GROUP_KEY, self._instance_key(), merge_op="Add",
                final_op="Div" if op == "mean" else "Id", timeout=self.setup.timeout)

    def all_reduce_list(self, tensors, op="sum", bucket_bytes=None):
        """
        ``all_reduce`` of several tensors, fused: flattened and concatenated into one buffer per dtype, one
        collective per buffer, then split (one round trip per step instead of one per tensor).

        ``bucket_bytes``: cut the buffers into buckets of at least that many bytes, filled from the END of the
        list (gradients of the last layers are ready first in the backward pass), so that a bucket's all-reduce
        runs while the backward pass still computes the earlier gradients. None: one buffer per dtype.
        """
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        out = [None] * len(tensors)
        for idxs in self._buckets(tensors, bucket_bytes):
            if len(idxs) == 1:
                out[idxs[0]] = self.all_reduce(tensors[idxs[0]], op)
                continue
            with tf.device(self.setup.device):
                flat = tf.concat([tf.reshape(tensors[i], [-1]) for i in idxs], axis=0)
                reduced = self.all_reduce(flat, op)
                parts = tf.split(reduced, [_num_elements(tensors[i]) for i in idxs])
                for i, part in zip(idxs, parts):
                    out[i] = tf.reshape(part, tf.shape(tensors[i]) if tensors[i].shape.num_elements() is None
                                        else tensors[i].shape.as_list())
                    out[i].set_shape(tensors[i].shape)
        return out

    @staticmethod
    def _buckets(tensors, bucket_bytes):
        """Lists of indices into ``tensors``, one per collective: per dtype; filled from the end of the list."""
        open_bucket, buckets = {}, []
        for i in reversed(range(len(tensors))):
            dtype = tensors[i].dtype.base_dtype
            bucket = open_bucket.setdefault(dtype, [0, []])
            bucket[1].insert(0, i)
            bucket[0] += (tensors[i].shape.num_elements() or 0) * dtype.size
            if bucket_bytes is not None and bucket[0] >= bucket_bytes:
                buckets.append(open_bucket.pop(dtype)[1])
        buckets.extend(bucket for _, bucket in open_bucket.values())
        return buckets

    def broadcast(self, tensor):
        """Rank 0's value of ``tensor`` (static shape) on every worker."""
        tensor = tf.convert_to_tensor(tensor)
        if self.setup.size == 1:
            return tf.identity(tensor)
        key = self._instance_key()
        with tf.device(self.setup.device):
            if self.setup.is_chief:
                send = collective_ops.broadcast_send(tensor, tensor.shape, tensor.dtype, self.setup.size,
                                                     self.GROUP_KEY, key, timeout=self.setup.timeout)
                with tf.control_dependencies([send]):
                    return tf.identity(tensor)
            return collective_ops.broadcast_recv(tensor.shape, tensor.dtype, self.setup.size, self.GROUP_KEY, key,
                                                 timeout=self.setup.timeout)

    def broadcast_variables_op(self, variables):
        """One op that sets every variable to rank 0's value."""
        ops = [v.assign(self.broadcast(v.read_value()), read_value=False) for v in variables]
        return tf.group(*ops, name="broadcast_from_rank0")

    def average_variables_op(self, variables):
        """One op that sets every (float) variable to the mean over the workers."""
        variables = [v for v in variables if v.dtype.base_dtype.is_floating]
        means = self.all_reduce_list([v.read_value() for v in variables], "mean")
        return tf.group(*[v.assign(m, read_value=False) for v, m in zip(variables, means)], name="average_params")

    def barrier_op(self):
        """Completes only when every worker has run it."""
        with tf.device(self.setup.device):
            return tf.group(self.all_reduce(tf.constant(0.0)), name="barrier")

