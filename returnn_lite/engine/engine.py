"""
The engine: builds the datasets, ONE graph (train flag as a placeholder, so train steps and dev evaluation
share it), the train op, and runs the tasks ``train``, ``eval`` and ``forward`` as the original RETURNN does.

Per epoch in training::

    epoch 3 score: 0.123 error: 0.05 elapsed: 0:00:03 dev: score 0.1 error 0.02

Scores are per loss ``sum(cost) / sum(frames)`` over the epoch (frames = 1 / loss_norm_factor per step).
After an epoch: the learning-rate file is written (atomically), then the checkpoint ``<model>.<epoch %03d>``
(atomically, ``.index`` last). Rerunning the same command resumes after the last complete checkpoint.
"""

from __future__ import annotations

import importlib
import math
import time

import numpy
import tensorflow as tf

from ..compat import returnn_import_hook
from ..config import global_config_ctx
from ..datasets import (DatasetError, SimpleHDFWriter, batch_to_arrays, check_dataset_opts, generate_batches,
                        init_dataset)
from ..datasets.prefetch import prefetch
from ..extern_data import ExternData
from ..network import TFNetwork
from .checks import (check_dataset_matches_extern_data, check_feed_value, check_writable_dir,
                     describe_run_error)
from .checkpoints import (CheckpointSaver, checkpoint_exists, epoch_model_filename, get_existing_models,
                          model_epoch_from_filename, normalize_checkpoint_name, remove_stale_temp_files)
from .checks import first_line
from .learning_rate_control import (commit_pending_file, discard_pending_file, load_learning_rate_control_from_config,
                                    recover_pending_file)
from .progress import Log, ProgressLine, hms
from .resume_notices import print_notice, superseded_override_notices
from .updater import Updater

tf1 = tf.compat.v1

__all__ = ["Engine", "EngineError"]


_NOT_SET = object()


class EngineError(Exception):
    """A problem with the setup (missing dataset/model/loss, non-finite loss, ...), with a clear message."""


def _format_score(score):
    """One loss: its value; several: ``output 0.1 ctc 0.3``."""
    if not score:
        return "None"
    if len(score) == 1:
        return _fmt(next(iter(score.values())))
    return " ".join("%s %s" % (key.split(":", 1)[-1], _fmt(value)) for key, value in sorted(score.items()))


def _fmt(value):
    return "%.6g" % value if isinstance(value, float) else str(value)


class _Accumulator:
    """Sums cost, error and frames (1 / loss_norm_factor) per loss over the steps of an epoch."""

    def __init__(self):
        self.cost, self.error, self.frames = {}, {}, {}
        self.num_steps = 0
        self.num_seqs = 0

    def add(self, results):
        self.num_steps += 1
        for key, value in results.items():
            if not key.startswith("loss_norm_factor:"):
                continue
            name = key[len("loss_norm_factor:"):]
            norm = float(value)
            frames = 1.0 / norm if norm else 0.0
            self.frames[name] = self.frames.get(name, 0.0) + frames
            if "cost:" + name in results:
                self.cost[name] = self.cost.get(name, 0.0) + float(results["cost:" + name])
            if "error:" + name in results:
                self.error[name] = self.error.get(name, 0.0) + float(results["error:" + name])

    @staticmethod
    def step_scores(results):
        """Normalized values of one step: cost:NAME -> cost * norm_factor."""
        out = {}
        for key, value in results.items():
            if key.startswith(("cost:", "error:")):
                name = key.split(":", 1)[1]
                out[key] = float(value) * float(results.get("loss_norm_factor:" + name, 1.0))
        return out

    def scores(self):
        score = {"cost:" + n: v / self.frames[n] if self.frames.get(n) else v for n, v in self.cost.items()}
        error = {"error:" + n: v / self.frames[n] if self.frames.get(n) else v for n, v in self.error.items()}
        return score, error


# backend name -> the Engine subclass for it, loaded on demand (it subclasses Engine; torch is an optional extra)
BACKEND_ENGINES = {"torch": "returnn_lite.engine.torch_backend:TorchEngine"}


class Engine:
    """Runs the config's task. ``Engine(config).run()``."""

    def __new__(cls, config=None, log=None):
        # backend = "torch": the same engine (epoch loop, datasets, LR control, checkpoints) on PyTorch; the
        # backend-specific part (model, step, checkpoint files) is in returnn_lite.engine.torch_backend
        backend = config.value("backend", "tensorflow") if config is not None else None
        if cls is Engine and backend in BACKEND_ENGINES:
            module_name, _, class_name = BACKEND_ENGINES[backend].partition(":")
            cls = getattr(importlib.import_module(module_name), class_name)
        return super().__new__(cls)

    def __init__(self, config, log=None):
        self.config = config
        self.log = log or Log.from_config(config)
        self.task = config.value("task", "train")
        self.model_prefix = config.value("model", None)
        self.num_epochs = config.int("num_epochs", 5)
        self.save_interval = config.int("save_interval", 1) or 1
        self.batch_size = config.typed_value("batch_size", 1)
        self.max_seqs = config.int("max_seqs", -1)
        self.max_seq_length = config.typed_value("max_seq_length", None)
        self.stop_on_nonfinite_train_score = config.bool("stop_on_nonfinite_train_score", True)
        self.train_data = None
        self.eval_datasets = {}
        self.graph = None
        self.session = None
        self.network = None
        self.updater = None
        self.saver = None
        self.train_flag = None
        self.data_keys = []
        self.epoch = None
        self.net_dict = None
        self.learning_rate_control = None
        self.summary_writer = None
        self._summary_step = 0
        self._last_eval = {}
        self.fetches = {}
        self.dist = None  # distributed training (returnn_lite.engine.distributed_train), set up in train()

    # ---- entry

    def run(self):
        tasks = {"train": self.train, "eval": self.eval_task, "forward": self.forward_task,
                 "search": self.search_task, "hyper_param_tuning": self.hyper_param_tuning_task}
        if self.task not in tasks:
            raise EngineError("unknown task %r; supported: %s" % (self.task, ", ".join(sorted(tasks))))
        for key in ("train", "dev", "eval", "eval_datasets"):  # e.g. Sprint datasets: refused before anything is built
            if self.config.has(key):
                opts = self.config.typed_value(key) if self.config.is_typed(key) else self.config.value(key)
                for name, sub in (opts.items() if key == "eval_datasets" and isinstance(opts, dict) else [(key, opts)]):
                    check_dataset_opts(sub, what="config option %r" % name)
        try:
            with global_config_ctx(self.config):
                tasks[self.task]()
        finally:
            self.close()

    def close(self):
        if self.summary_writer is not None:
            self.summary_writer.close()
            self.summary_writer = None
        if self.session is not None:
            self.session.close()
            self.session = None
        self.log.close()

    # ---- datasets

    def _load_dataset(self, key, **defaults):
        if not self.config.has(key):
            return None
        opts = self.config.typed_value(key) if self.config.is_typed(key) else self.config.value(key)
        if opts is None or opts == "":
            return None
        defaults.setdefault("name", key)  # options the dataset's own dict gives win over these defaults
        try:
            with returnn_import_hook():
                dataset = init_dataset(opts, default_kwargs=defaults)
        except DatasetError as exc:
            raise DatasetError("dataset %r: %s" % (key, exc)) from None
        return dataset

    def _init_train_datasets(self):
        defaults = {}
        chunking = self.config.typed_value("chunking", None)
        if chunking not in (None, "", "0", 0):
            defaults["chunking"] = chunking
        batching = self.config.value("batching", None)
        if batching:
            defaults["seq_ordering"] = batching
        self.train_data = self._load_dataset("train", **defaults)
        if self.train_data is None:
            raise EngineError("task train needs a 'train' dataset in the config (e.g. "
                              "train = {\"class\": \"Task12AXDataset\", \"num_seqs\": 1000})")
        self._init_eval_datasets()

    def _init_eval_datasets(self):
        for key in ("dev", "eval"):
            dataset = self._load_dataset(key)
            if dataset is not None:
                self.eval_datasets[key] = dataset
        extra = self.config.typed_value("eval_datasets", None) or {}
        for name, opts in extra.items():
            with returnn_import_hook():
                self.eval_datasets[name] = init_dataset(opts, default_kwargs={"name": name})

    # ---- graph

    def _extern_data(self, dataset):
        extern_data = ExternData()
        config = self.config
        if config.has("extern_data") or config.has("num_outputs") or config.has("num_inputs"):
            extern_data.init_from_config(config)
            if config.has("extern_data") or dataset is None:
                return extern_data
        elif dataset is None:
            raise EngineError("no extern_data / num_inputs / num_outputs in the config and no dataset to take them from")
        extern_data.default_input = config.value("default_input", "data")
        extern_data.default_target = config.value("target", "classes")
        opts = {}
        for key in dataset.get_data_keys():  # what the config does not describe comes from the dataset
            if extern_data.has_data(key) or str(dataset.get_data_dtype(key)) == "string":  # e.g. OggZip "raw"
                continue
            shape = list(dataset.get_data_shape(key))
            sparse = dataset.is_data_sparse(key)
            opts[key] = {"shape": tuple([None] + shape), "dim": dataset.get_data_dim(key), "sparse": sparse,
                         "dtype": str(dataset.get_data_dtype(key))}
        extern_data.register_data_from_dict(opts)
        return extern_data

    def _get_net_dict(self, epoch):
        """The epoch's net dict (pretraining, get_network, WrapEpochValue: see returnn_lite.pretrain)."""
        from ..pretrain import PretrainError, get_net_dict_for_epoch, pretrain_from_config

        config = self.config
        if callable(config.typed_value("get_model", None)) and not config.has("network") and \
                not callable(config.typed_value("get_network", None)):
            from ..frontend_layers.config_entry_points import get_net_dict_for_engine  # rf config (issue 16)

            return get_net_dict_for_engine(config, epoch=epoch, task=self.task)
        try:
            with returnn_import_hook(), global_config_ctx(config):
                if not hasattr(self, "_pretrain"):
                    self._pretrain = pretrain_from_config(config)
                net_dict = get_net_dict_for_epoch(config, epoch, pretrain=self._pretrain)
        except PretrainError as exc:
            raise EngineError(str(exc)) from None
        if not isinstance(net_dict, dict) or not net_dict:
            raise EngineError("the config needs a 'network' dict (or a function get_network(epoch)); got %r"
                              % (type(net_dict).__name__ if net_dict is not None else None,))
        self._apply_net_dict_config(net_dict.get("#config"), epoch)
        return net_dict

    def init_network_from_config(self, config=None, epoch=None):
        """
        As the original's: build the config's network for ``epoch`` (default 1; pretraining and ``get_network``
        apply) in the mode of the task (train: with losses and the update op). The data description comes from
        ``extern_data``/``num_outputs``, else from the ``train`` dataset. Returns the network.
        """
        if config is not None:
            self.config = config
        config = self.config
        dataset = None
        if not (config.has("extern_data") or config.has("num_outputs") or config.has("num_inputs")):
            dataset = self._load_dataset("train")
        self.epoch = epoch or 1
        with global_config_ctx(config):
            self._build_graph(self._get_net_dict(self.epoch), dataset, train=self.task == "train")
        return self.network

    def _apply_net_dict_config(self, overrides, epoch=None):
        """
        A net dict's "#config" entries override config values while that network is used (as the original);
        ``learning_rate`` there is the learning rate of that epoch (see :meth:`_learning_rate_for_epoch`).
        """
        overrides = dict(overrides or {})
        lr = overrides.pop("learning_rate", None)
        self.__dict__.setdefault("_net_dict_learning_rates", {})
        if lr is not None and epoch is not None:
            self._net_dict_learning_rates[epoch] = float(lr)
        saved = self.__dict__.setdefault("_net_dict_config_saved", {})
        for key, value in list(saved.items()):  # undo the previous network's overrides
            if value is _NOT_SET:
                self.config.typed_dict.pop(key, None)
            else:
                self.config.typed_dict[key] = value
        changed = set(saved) | set(overrides)
        saved.clear()
        for key, value in (overrides or {}).items():
            saved[key] = self.config.typed_dict.get(key, _NOT_SET)
            self.config.set(key, value)
        # the engine's batching settings follow (the updater's settings, e.g. accum_grad_multiple_step, are read
        # when the graph of that network is built)
        config = self.config
        if "batch_size" in changed:
            self.batch_size = config.typed_value("batch_size", 1)
        if "max_seqs" in changed:
            self.max_seqs = config.int("max_seqs", -1)
        if "max_seq_length" in changed:
            self.max_seq_length = config.typed_value("max_seq_length", None)
        if "chunking" in changed and getattr(self, "train_data", None) is not None:
            chunking = config.typed_value("chunking", None)
            self.train_data.chunking = chunking if chunking not in ("", "0", 0) else None

    def _build_graph(self, net_dict, dataset, train):
        """New graph + session: network, (train op), saver. Variables get initialized."""
        config = self.config
        self.close_session()
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf1.set_random_seed(config.int("random_seed", 42))
            extern_data = self._extern_data(dataset)
            if self.task in ("forward", "search"):
                self.train_flag, eval_flag = False, False
            elif train:
                with tf.name_scope("globals/"):
                    self.train_flag = tf1.placeholder_with_default(False, shape=(), name="train_flag")
                self.graph._returnn_lite_train_flag = self.train_flag
                eval_flag = True
            else:
                self.train_flag, eval_flag = False, True
            self.network = TFNetwork(config=config, extern_data=extern_data, train_flag=self.train_flag,
                                     eval_flag=eval_flag, rnd_seed=config.int("random_seed", 42),
                                     search_flag=self.task == "search")
            with returnn_import_hook(), global_config_ctx(config):
                self.network.construct_from_dict(net_dict)
                if train and self.task not in ("forward", "search") and config.list("search_train_network_layers"):
                    from ..extra_net import construct_search_train_net

                    names = config.list("search_train_network_layers")
                    unknown = [name for name in names if name not in net_dict]
                    if unknown:
                        raise EngineError("search_train_network_layers %r: no layer(s) %s in the network" % (
                            names, ", ".join(repr(name) for name in unknown)))
                    layers = construct_search_train_net(self.network, net_dict, names)
                    self.log.v3("search train network layers: %s" % ", ".join(
                        "%s %r #: %s" % (x.layer_class, x.name, x.output.dim) for x in layers))
            self.network.get_global_train_step_var()
            extra_vars = []
            if self.dist is not None:
                self.dist.new_graph()
            if train:
                if not self.network.losses_dict:
                    raise EngineError("the network has no loss: task train needs at least one layer with 'loss' "
                                      "(e.g. \"output\": {\"class\": \"softmax\", \"loss\": \"ce\", \"from\": ...})")
                self.updater = Updater(config, self.network)
                if self.dist is not None:
                    self.updater.grad_reducer = self.dist.grad_reducer()
                self.updater.create_optim_op()
                extra_vars = self.updater.optim_vars
            self.saver = CheckpointSaver(self.network, extra_vars=extra_vars)
            self.data_keys = sorted(self.network.get_used_data_keys())
            self.fetches = self.network.get_fetches_dict() if eval_flag else {}
            if self.dist is not None:
                self.dist.build()
                target, session_config = self.dist.session_args(self._session_config())
                self.session = tf1.Session(target, graph=self.graph, config=session_config)
            else:
                self.session = tf1.Session(graph=self.graph, config=self._session_config())
            self.session.run(tf1.global_variables_initializer())
        self.net_dict = net_dict
        if train and self.config.value("tf_log_dir", None) and self.summary_writer is None and \
                (self.dist is None or self.dist.is_chief):
            with self.graph.as_default():
                self.summary_writer = tf1.summary.FileWriter(self.config.value("tf_log_dir"), graph=self.graph)
        self.log.v4("Network: %s layers, %i params, data keys %s" % (
            len(self.network.layers), self.network.get_num_params(), self.data_keys))

    def _session_config(self):
        opts = dict(self.config.typed_value("tf_session_opts", None) or {})
        session_config = tf1.ConfigProto(**opts)
        if "graph_options" not in opts and not self.config.bool("tf_grappler", False):
            # Grappler's rewrite of a big graph at the first session.run costs more than it saves (issue 19,
            # benchmarks/startup.py: big_construct first step 25-38 s -> 6-10 s, later steps not slower);
            # config tf_grappler=True (or tf_session_opts graph_options) keeps TF's default
            session_config.graph_options.rewrite_options.disable_meta_optimizer = True
        return session_config

    def close_session(self):
        if self.session is not None:
            self.session.close()
            self.session = None

    def _check_dataset_keys(self, dataset):
        have = set(dataset.get_data_keys())
        missing = [k for k in self.data_keys if k not in have]
        if missing:
            raise EngineError("dataset %r has no data key(s) %s needed by the network (it has: %s)"
                              % (dataset.name, missing, sorted(have)))
        check_dataset_matches_extern_data(dataset, self.network, self.data_keys, EngineError)

    # ---- feeding and running

    def _feed_dict(self, arrays, dataset_name=None):
        feed = {}
        extern_data = self.network.extern_data
        for key in self.data_keys:
            data = extern_data.get_data(key)
            value = arrays.data[key]
            lens = arrays.seq_lens[key]
            if not data.have_time_axis() and value.ndim == data.batch_ndim + 1:
                value = value[:, 0]
            elif data.have_batch_axis() and data.batch_dim_axis != 0 and value.ndim >= 2:
                value = numpy.swapaxes(value, 0, 1)
            value = value.astype(data.dtype, copy=False)
            check_feed_value(data, value, lens if data.have_time_axis() else None, key, dataset_name, self.network,
                             arrays.seq_tags, EngineError)
            feed[data.placeholder] = value
            first = True
            for axis, dim in enumerate(data.dims):
                if dim.is_batch_dim() or not dim.is_dynamic() or dim.dyn_size is None:
                    continue
                if first:
                    feed[dim.dyn_size] = lens
                    first = False
                else:
                    feed[dim.dyn_size] = numpy.full(lens.shape, value.shape[axis], dtype=numpy.int32)
        return feed

    def _batches(self, dataset, epoch, train):
        if self.dist is not None:  # this worker's part of the epoch
            self.dist.init_seq_order(dataset, epoch)
        else:
            dataset.init_seq_order(epoch=epoch)
        batch_size = self.batch_size
        if not train:
            batch_size = self.config.typed_value("batch_size_eval", None) or batch_size
        return generate_batches(
            dataset, batch_size=batch_size, max_seqs=self.max_seqs,
            max_seq_length=self.max_seq_length if train else None,
            shuffle_batches=train and self.config.bool("shuffle_batches", False), used_data_keys=self.data_keys)

    def _prefetched_batches(self, dataset, epoch, train):
        """(batch, arrays) pairs, made by a background thread ``prefetch_batches`` batches ahead (0: inline)."""
        batches = self._batches(dataset, epoch, train)
        pairs = ((batch, batch_to_arrays(dataset, batch, self.data_keys)) for batch in batches)
        return prefetch(pairs, size=self.config.int("prefetch_batches", 2))

    def _run_epoch(self, dataset, epoch, train, learning_rate=None, prefix=""):
        self._check_dataset_keys(dataset)
        acc = _Accumulator()
        fetches = dict(self.fetches)
        feed_extra = {}
        if train:
            fetches["_train_op"] = self.updater.train_op
            feed_extra[self.updater.learning_rate] = learning_rate
            feed_extra[self.train_flag] = True
        else:
            post = self.network.get_post_control_dependencies()  # e.g. batch norm statistics (behavior v0)
            if post:
                fetches["_post_deps"] = post
        progress = ProgressLine(self.log, prefix)
        start = time.time()
        step_start = start
        pairs = self._prefetched_batches(dataset, epoch, train)
        if self.dist is not None and train:  # all workers run the same number of steps
            pairs = self._dist_synced_batches(pairs)
            fetches["_dist_more"] = self.dist.more_sum
        epoch_step = getattr(self.graph, "_returnn_lite_epoch_step", None)  # network.get_epoch_step() was used
        for batch, arrays in pairs:
            feed = self._feed_dict(arrays, dataset.name)
            feed.update(feed_extra)
            if epoch_step is not None:  # the step within this epoch (e.g. initial_state "keep_over_epoch" resets at 0)
                feed[epoch_step] = acc.num_steps
            if self.dist is not None and train:
                feed[self.dist.more_ph] = float(self._dist_have_next)
            results = self._session_run(fetches, feed, dataset.name, acc.num_steps)
            if self.dist is not None and train:
                self._dist_all_more = results.pop("_dist_more") >= self.dist.setup.size - 0.5
                self.dist.after_step(self.session)
            results.pop("_train_op", None)
            results.pop("_post_deps", None)
            step = acc.num_steps
            acc.add(results)
            acc.num_seqs += arrays.num_seqs
            step_scores = _Accumulator.step_scores(results)
            if train and self.stop_on_nonfinite_train_score:
                bad = {k: v for k, v in step_scores.items() if k.startswith("cost:") and not math.isfinite(v)}
                if bad:
                    progress.finish()
                    raise EngineError(
                        "non-finite training loss in epoch %i, step %i: %s (stop_on_nonfinite_train_score). "
                        "Nothing was saved for this epoch; lower the learning rate or check the data." % (
                            epoch, step, ", ".join("%s=%s" % kv for kv in sorted(bad.items()))))
            frac = dataset.get_complete_frac(batch.end_seq - 1)
            costs = [v for k, v in step_scores.items() if k.startswith("cost:")]
            progress.update(step + 1, acc.num_seqs, loss=sum(costs) if costs else None, complete_frac=frac)
            now = time.time()
            if self.log.verbosity >= 5 or (self.log.file is not None and self.log.file_verbosity >= 5):
                elapsed = now - start
                info = ", ".join("%s %s" % (k, _fmt(v)) for k, v in sorted(step_scores.items()))
                remaining = (" exp. remaining %s, complete %.1f%%," % (hms(elapsed / frac - elapsed), frac * 100)
                             if frac else "")
                self.log.v5("%s, step %i, %s, num_seqs %i, %.3f sec/step, elapsed %s,%s" % (
                    prefix, step, info, arrays.num_seqs, now - step_start, hms(elapsed), remaining.rstrip(",")))
            step_start = now
            if train and self.summary_writer is not None:
                self._summary_step += 1
                self._write_summaries(dict(step_scores, learning_rate=learning_rate), step=self._summary_step)
        progress.finish()
        dataset.finish_epoch()
        if self.dist is not None:  # scores over all workers (the same on every worker: newbob decides the same)
            if train:
                self.dist.end_of_epoch(self.session)
            self.dist.sum_accumulator(self.session, acc)
        if acc.num_steps == 0:
            raise EngineError("dataset %r gave no batches in epoch %i (empty dataset, or all seqs longer than "
                              "max_seq_length?)" % (dataset.name, epoch))
        score, error = acc.scores()
        return score, error, time.time() - start

    def _dist_synced_batches(self, pairs):
        """The worker's batches while every worker has one (checked with the step's all-reduce)."""
        pairs = iter(pairs)
        try:
            current = next(pairs, None)
            if not self.dist.all_have_batch(self.session, current is not None):
                return
            while current is not None:
                following = next(pairs, None)
                self._dist_have_next = following is not None
                yield current
                if not self._dist_all_more:
                    return
                current = following
        finally:
            if hasattr(pairs, "close"):
                pairs.close()  # e.g. stops the prefetch thread

    def _session_run(self, fetches, feed, dataset_name, step):
        """session.run; TF errors (feeds, label ranges, ...) end as one line naming the dataset and the layer."""
        try:
            return self.session.run(fetches, feed_dict=feed)
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            if isinstance(exc, (ValueError, TypeError)) and "feed" not in str(exc).lower():
                raise
            if self.dist is not None and self.dist.lost_contact_error(exc) is not None:
                raise self.dist.lost_contact_error(exc, "step %i of dataset %r" % (step, dataset_name)) from None
            raise EngineError(describe_run_error(exc, self.network, dataset_name, step)) from exc

    def _write_summaries(self, values, step):
        summary = tf1.Summary(value=[tf1.Summary.Value(tag=k.replace(":", "/"), simple_value=float(v))
                                     for k, v in sorted(values.items()) if v is not None])
        self.summary_writer.add_summary(summary, step)

    # ---- model files

    def _existing_models(self):
        """epoch -> checkpoint name of the complete epoch checkpoints (backend-specific files)."""
        return get_existing_models(self.model_prefix)

    def _checkpoint_exists(self, filename):
        return checkpoint_exists(filename)

    def get_epoch_model(self):
        """(epoch or None, checkpoint name or None), as the original: existing epoch checkpoints first."""
        config = self.config
        start_epoch_mode = config.value("start_epoch", "auto")
        start_epoch = None if start_epoch_mode == "auto" else int(start_epoch_mode)
        load = config.value("load", "") or ""
        load = normalize_checkpoint_name(load) if load else ""
        if load and not self._checkpoint_exists(load):
            raise EngineError("load: checkpoint %r not found (no file %r)" % (load, load + ".index"))
        import_epoch1 = config.value("import_model_train_epoch1", "") or ""
        import_epoch1 = normalize_checkpoint_name(import_epoch1) if import_epoch1 else ""
        if import_epoch1 and not self._checkpoint_exists(import_epoch1):
            raise EngineError("import_model_train_epoch1: checkpoint %r not found (no file %r)"
                              % (import_epoch1, import_epoch1 + ".index"))
        existing = self._existing_models()
        load_epoch = config.int("load_epoch", -1)
        if load:
            if load_epoch <= 0:
                load_epoch = model_epoch_from_filename(load) or 0
        elif load_epoch > 0:
            if load_epoch not in existing:
                raise EngineError("load_epoch %i: no checkpoint %r" % (
                    load_epoch, epoch_model_filename(self.model_prefix, load_epoch) + ".index"))
            load = existing[load_epoch]
        is_train = self.task == "train"
        if load and (not is_train or start_epoch is not None):
            epoch_model = (None if is_train else load_epoch, load)
        elif existing and not (load_epoch > 0 and not is_train):
            epoch_model = sorted(existing.items())[-1]
            if load and "load" not in getattr(config, "cmd_line_args", ()):  # else: resume_notices.py
                self.log.v4("note: ignoring 'load' %r because of the existing model %r" % (load, epoch_model[1]))
        elif is_train and import_epoch1 and start_epoch in (None, 1):
            epoch_model = (0, import_epoch1)
        elif load:
            epoch_model = (load_epoch, load)
        else:
            epoch_model = (None, None)
        if start_epoch == 1 and epoch_model[0]:
            self.log.v4("warning: start_epoch 1 but there is the existing model %r; starting anew" % (epoch_model[1],))
            epoch_model = (None, None)
        elif (start_epoch or 0) > 1 and (start_epoch - 1) in existing:
            epoch_model = (start_epoch - 1, existing[start_epoch - 1])
        return epoch_model

    def _load_model(self, epoch_model, train):
        epoch, filename = epoch_model
        if filename:
            self.log.v4("Load model %s" % filename)
            try:
                self.saver.load(self.session, filename, load_extra=bool(epoch))
            except (IOError, KeyError, ValueError) as exc:
                raise EngineError("cannot load model %r: %s" % (filename, exc)) from None
            except Exception as exc:  # e.g. IndexError/DataLossError of TF's reader on a truncated data file
                raise EngineError("cannot load model %r: checkpoint data file truncated or corrupt (%s: %s)" % (
                    filename, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")) from None
        with self.graph.as_default():
            self._preload_from_files(training=train, fresh_train=train and not epoch)

    def _preload_from_files(self, training, fresh_train):
        """As the original: ``init_for_train`` entries initialize a fresh training (first epoch, after
        ``import_model_train_epoch1``), the others (default) apply to eval/forward only."""
        from ..checkpoint_loader import CustomCheckpointLoader

        preload = self.config.typed_value("preload_from_files", None) or {}
        known = {"filename", "prefix", "init_for_train", "ignore_missing", "ignore_params", "ignore_params_prefixes",
                 "var_name_mapping"}
        for name, opts in sorted(preload.items()):
            unknown = sorted(set(opts) - known)
            if unknown:
                raise EngineError("preload_from_files %r: unknown option(s) %s; known: %s" % (
                    name, unknown, sorted(known)))
            if opts.get("init_for_train", False):
                if not fresh_train:
                    continue
            elif training:
                continue
            filename = normalize_checkpoint_name(opts["filename"])
            try:
                # prefix: our params named <prefix><name> are loaded from <name> in the file (as the original)
                loader = CustomCheckpointLoader(
                    filename, saveable_params=self.network.get_params_list(), load_if_prefix=opts.get("prefix", ""),
                    ignore_missing=opts.get("ignore_missing", False), ignore_params=opts.get("ignore_params", ()),
                    ignore_params_prefixes=opts.get("ignore_params_prefixes", ()),
                    var_name_mapping=opts.get("var_name_mapping"), network=self.network)
                loader.load_global_step = False
                n = len(loader.get_variable_value_map())
                self.log.v4("preload_from_files %r: %i params from %s" % (name, n, filename))
                loader.load_now(self.session)
            except (IOError, KeyError, ValueError) as exc:
                raise EngineError("preload_from_files %r: %s" % (name, exc)) from None

    # ---- train

    def train(self):
        self._check_output_dirs_writable()
        from .distributed_train import setup_distributed_training

        self.dist = setup_distributed_training(self, EngineError)
        self._init_train_datasets()
        if not self.model_prefix:
            self.log.v4("warning: no 'model' in the config: no checkpoints will be written, no resume possible")
        if self.dist is None or self.dist.is_chief:
            remove_stale_temp_files(self.model_prefix)
        epoch_model = self.get_epoch_model()
        start_epoch = (epoch_model[0] or 0) + 1
        final_epoch = self.num_epochs
        if start_epoch > final_epoch:
            self.log.v1("No epochs to train, start_epoch: %i, final_epoch: %i (model %s)" % (
                start_epoch, final_epoch, epoch_model[1]))
            return
        if epoch_model[1] and epoch_model[0]:
            self.log.v3("Resume training after epoch %i from %s" % (epoch_model[0], epoch_model[1]))
        if not self.config.value("learning_rate_file", None) and self.model_prefix:
            # keep the learning-rate state next to the checkpoints, so that a resume continues it
            self.config.set("learning_rate_file", self.model_prefix + ".learning_rates")
        if recover_pending_file(self.config.value("learning_rate_file", None), self._existing_models()):
            self.log.v4("note: completed the learning-rate file of the last checkpoint (the run was killed after "
                        "saving it)")
        self.learning_rate_control = load_learning_rate_control_from_config(self.config)
        self._notice_superseded_overrides(start_epoch, epoch_model)
        self._build_graph(self._get_net_dict(start_epoch), self.train_data, train=True)
        self._load_model(epoch_model, train=True)
        for dataset in [self.train_data] + list(self.eval_datasets.values()):  # before the first step
            self._check_dataset_keys(dataset)
        if epoch_model[0] == 0:  # import_model_train_epoch1: start training fresh from these params
            with self.graph.as_default():
                self.network.set_global_train_step(0, self.session)
        if self.dist is not None:  # every worker starts from rank 0's params (also after resume)
            self.dist.broadcast(self.session)
        for epoch in range(start_epoch, final_epoch + 1):
            self.epoch = epoch
            self._maybe_update_network(epoch)
            self.train_epoch(epoch, final_epoch)
        if self.dist is not None:  # the worker that finishes first waits for the others
            self.dist.barrier(self.session)
        self.log.v3("Finished training in epoch %i." % final_epoch)

    def _check_output_dirs_writable(self):
        """Before anything is trained: the model and learning-rate file directories must be writable."""
        files = [("model", self.model_prefix)] if self.model_prefix else []
        lr_file = self.config.value("learning_rate_file", None)
        if lr_file:
            files.append(("learning_rate_file", lr_file))
        for what, filename in files:
            problem = check_writable_dir(filename, what)
            if problem:
                raise EngineError(problem + "; nothing was trained")

    def _notice_superseded_overrides(self, start_epoch, epoch_model):
        """On resume: one notice per ++key value that the saved state overrides (resume_notices.py)."""
        for text in superseded_override_notices(self, start_epoch, epoch_model):
            print_notice(self.log, text)

    def _maybe_update_network(self, epoch):
        if not callable(self.config.typed_value("get_network", None)) and not getattr(self, "_pretrain", None):
            return
        net_dict = self._get_net_dict(epoch)
        if repr(net_dict) == repr(self.net_dict):
            return
        self.log.v3("Network changed in epoch %i: rebuilding, keeping the params of matching names" % epoch)
        with self.graph.as_default():
            old = {v.op.name: (tuple(v.shape.as_list()), value) for v, value in zip(
                tf1.global_variables(), self.session.run(tf1.global_variables()))}
        self._build_graph(net_dict, self.train_data, train=True)
        with self.graph.as_default():
            for v in tf1.global_variables():
                if v.op.name in old and old[v.op.name][0] == tuple(v.shape.as_list()):
                    v.load(old[v.op.name][1], self.session)
        if self.dist is not None:
            self.dist.broadcast(self.session)

    def _learning_rate_for_epoch(self, epoch):
        """
        As the original: a net dict's ``"#config": {"learning_rate": ...}`` (e.g. from pretraining or get_network)
        sets the learning rate of that epoch (also in the learning-rate file); else, with pretraining and without
        ``use_learning_rate_control_always``, the pretrain epochs use the constant ``pretrain_learning_rate``
        (default: the initial learning rate) and the first epoch after them the initial learning rate; else the
        learning-rate control decides.
        """
        lrc = self.learning_rate_control
        override = self.__dict__.get("_net_dict_learning_rates", {}).get(epoch)
        if override is not None:
            old = lrc.get_learning_rate_for_epoch(epoch)
            if old != override:
                self.log.v3("Overwrite learning rate for epoch %i: %r -> %r (net dict #config)" % (epoch, old, override))
            lrc.epoch_data[epoch].learning_rate = override
            return override
        pretrain = getattr(self, "_pretrain", None)
        if pretrain is not None and not self.config.bool("use_learning_rate_control_always", False):
            num = pretrain.get_train_num_epochs()
            if epoch <= num + 1:
                lr = lrc.default_learning_rate
                if epoch <= num:
                    lr = self.config.float("pretrain_learning_rate", lr)
                lrc.set_default_learning_rate_for_epoch(epoch, lr)
                return lr
        return lrc.get_learning_rate_for_epoch(epoch)

    def train_epoch(self, epoch, final_epoch):
        lrc = self.learning_rate_control
        lr = self._learning_rate_for_epoch(epoch)
        self.log.v3("start epoch %i with learning rate %s ..." % (epoch, lr))
        score, error, elapsed = self._run_epoch(self.train_data, epoch, train=True, learning_rate=lr,
                                                prefix="train epoch %i" % epoch)
        if any(not math.isfinite(v) for v in score.values()) and self.stop_on_nonfinite_train_score:
            raise EngineError("non-finite train score in epoch %i: %s" % (epoch, score))
        lrc.set_epoch_error(epoch, {"train_score": score, "train_error": error})
        line = "epoch %i score: %s" % (epoch, _format_score(score))
        if error:
            line += " error: %s" % _format_score(error)
        line += " elapsed: %s" % hms(elapsed)
        results = self.eval_model(epoch)
        lrc.set_epoch_error(epoch, results)
        for name, res in self._last_eval.items():
            line += " %s: score %s" % (name, _format_score(res[0]))
            if res[1]:
                line += " error %s" % _format_score(res[1])
        if self.dist is None or self.dist.is_chief:
            self.log.v1(line)
        if self.summary_writer is not None:
            values = {"epoch/train_score": _scalar(score), "epoch/learning_rate": lr}
            for k, v in results.items():
                values["epoch/%s" % k] = _scalar(v)
            self._write_summaries(values, epoch)
            self.summary_writer.flush()
        if self.dist is not None and not self.dist.is_chief:  # only rank 0 writes files
            return
        if self.model_prefix and (epoch % self.save_interval == 0 or epoch == final_epoch):
            self._save_epoch(epoch)
        else:
            self._save_learning_rate_file(epoch)

    def _save_learning_rate_file(self, epoch, pending=False):
        try:
            return self.learning_rate_control.save(pending=pending) if pending else self.learning_rate_control.save()
        except OSError as exc:
            raise EngineError("epoch %i: cannot write the learning-rate file %r (%s); the previous learning-rate "
                              "file is unchanged" % (epoch, self.learning_rate_control.filename, exc)) from None

    def _save_epoch(self, epoch):
        """Checkpoint, then the learning-rate file that refers to it: the learning-rate state is written to a
        pending file first, moved into place after the checkpoint's ``.index`` (a kill in between is completed
        on resume). A failed save (e.g. disk full) leaves the previous checkpoint and learning-rate file."""
        filename = epoch_model_filename(self.model_prefix, epoch)
        pending = self._save_learning_rate_file(epoch, pending=True)
        try:
            self.saver.save(self.session, filename)
        except Exception as exc:
            if pending:
                discard_pending_file(pending)
            remove_stale_temp_files(self.model_prefix)
            text = getattr(exc, "strerror", None) or first_line(getattr(exc, "message", None) or exc)
            last = self._existing_models()
            raise EngineError("epoch %i: saving checkpoint %r failed (%s: %s); kept the previous checkpoint %s and "
                              "learning-rate file unchanged" % (
                                  epoch, filename, type(exc).__name__, text,
                                  repr(sorted(last.items())[-1][1]) if last else "(none)")) from None
        if pending:
            commit_pending_file(pending)
        self.log.v4("Saved model %s" % filename)

    def eval_model(self, epoch):
        """Evaluate all eval datasets: {"dev_score": {...}, "dev_error": {...}, ...}."""
        results = {}
        self._last_eval = {}
        for name, dataset in self.eval_datasets.items():
            score, error, _ = self._run_epoch(dataset, epoch, train=False, prefix="eval %s" % name)
            results["%s_score" % name] = score
            if error:
                results["%s_error" % name] = error
            self._last_eval[name] = (score, error)
        return results

    # ---- eval / forward

    def _init_for_inference(self, dataset):
        epoch_model = self.get_epoch_model()
        if not epoch_model[1]:
            raise EngineError("task %s needs a trained model: set 'load' or 'model' (with existing checkpoints "
                              "%s.NNN.index)" % (self.task, self.model_prefix or "<model>"))
        self.epoch = epoch_model[0] or model_epoch_from_filename(epoch_model[1]) or 1
        self._build_graph(self._get_net_dict(self.epoch), dataset, train=False)
        self._load_model(epoch_model, train=False)

    def eval_task(self):
        self._init_eval_datasets()
        if not self.eval_datasets:
            raise EngineError("task eval needs a 'dev' or 'eval' dataset in the config")
        self._init_for_inference(next(iter(self.eval_datasets.values())))
        if not self.network.losses_dict:
            raise EngineError("task eval: the network has no loss to evaluate")
        self.eval_model(self.epoch)
        line = "epoch %i" % self.epoch
        for name, (score, error) in self._last_eval.items():
            line += " %s: score %s" % (name, _format_score(score))
            if error:
                line += " error %s" % _format_score(error)
        self.log.v1(line)

    def forward_task(self):
        dataset = self._load_dataset("eval")
        if dataset is None:
            raise EngineError("task forward needs an 'eval' dataset in the config (the data to forward)")
        output_file = self.config.value("output_file", None)
        if not output_file:
            raise EngineError("task forward needs 'output_file' (the HDF file to write)")
        self._init_for_inference(dataset)
        self.forward_to_hdf(dataset, output_file)

    def hyper_param_tuning_task(self):
        """Evolutionary search over the config's HyperParam placeholders (see hyper_param_tuning.py)."""
        from .hyper_param_tuning import HyperParamTuning

        self._init_train_datasets()
        try:
            tuning = HyperParamTuning(self.config, self.train_data, type(self), self.log)
        except ValueError as exc:
            raise EngineError(str(exc)) from None
        tuning.work()

    def search_task(self):
        from .search import search_task

        return search_task(self, EngineError)

    def forward_to_hdf(self, dataset, output_file):
        layer_name = self.config.value("forward_output_layer", None)
        if layer_name:
            layer = self.network.get_layer(layer_name)
        else:
            layer = self.network.get_default_output_layer()
        self.data_keys = sorted(self.network.get_used_data_keys())
        self._check_dataset_keys(dataset)
        with self.graph.as_default():  # the layout copies add ops (e.g. the transpose of time-major outputs)
            out = layer.output.copy_as_batch_major()
            if out.have_time_axis():
                out = out.copy_with_time_dim_axis(1) if out.time_dim_axis != 1 else out
                x = out.placeholder
                seq_lens = out.get_sequence_lengths()
            else:  # one frame per seq
                x = tf.expand_dims(out.placeholder, 1)
                seq_lens = tf.ones([tf.shape(x)[0]], dtype=tf.int32)
        ndim = x.shape.rank - 1
        dim = out.dim
        writer = SimpleHDFWriter(output_file, dim=dim, ndim=ndim)
        try:
            self.batch_size = self.config.typed_value("forward_batch_size", None) or self.batch_size
            n = 0
            progress = ProgressLine(self.log, "forward")
            for batch in self._batches(dataset, self.epoch, train=False):
                arrays = batch_to_arrays(dataset, batch, self.data_keys)
                values, lens = self._session_run([x, seq_lens], self._feed_dict(arrays, dataset.name), dataset.name, n)
                writer.insert_batch(values, lens, arrays.seq_tags)
                n += arrays.num_seqs
                progress.update(n, n, complete_frac=dataset.get_complete_frac(batch.end_seq - 1))
            progress.finish()
        except BaseException:
            writer.abort()
            raise
        writer.close()
        self.log.v1("forward: wrote %i seqs of layer %r to %s" % (n, layer.name, output_file))


def _scalar(score):
    if isinstance(score, dict):
        return float(sum(score.values())) if score else 0.0
    return float(score)

