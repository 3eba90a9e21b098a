"""
The TensorFlow engine backend (``backend = "tensorflow"``, the default): the config's layer-dict network on ONE
graph (the train flag is a placeholder, so train steps and dev evaluation share it), the train op of the
:class:`~returnn_lite.engine.updater.Updater`, a session, and TF checkpoints (``<model>.NNN.index`` / ``.data-*``).

Implements :class:`returnn_lite.engine.backend.EngineBackend` for the epoch loop; also public for the tools that
need the graph (``network``, ``graph``, ``session``: the checkpoint tool, export, search).
"""

from __future__ import annotations

import numpy
import tensorflow as tf

from ..compat import returnn_import_hook
from ..config import global_config_ctx
from ..extern_data import ExternData
from ..network import TFNetwork
from .backend import EngineBackend, EngineError, ForwardOutput
from .checks import check_dataset_matches_extern_data, check_feed_value, describe_run_error
from .checkpoints import CheckpointSaver, checkpoint_exists, get_existing_models, normalize_checkpoint_name, \
    remove_stale_temp_files
from .updater import Updater

tf1 = tf.compat.v1

__all__ = ["TFBackend"]

_NOT_SET = object()


class TFBackend(EngineBackend):
    """Graph, session, network, updater and saver of one network (rebuilt per pretrain/get_network change)."""

    name = "tf"
    checkpoint_suffix = ".index"
    supports_search = True

    def __init__(self, config, log, task):
        super().__init__(config, log, task)
        if config.has("torch_distributed"):
            raise EngineError("torch_distributed: only with backend = \"torch\" (the TF backend's multi-worker "
                              "training is use_horovod / distributed / TF_CONFIG)")
        for key in ("torch_amp", "torch_compile", "torch_dataloader_opts", "torch_intra_op_threads", "grad_scaler"):
            if config.has(key) and config.typed_value(key, None) not in (None, False, "", {}):
                raise EngineError("%s: only with backend = \"torch\"" % key)
        self.graph = None
        self.session = None
        self.network = None
        self.updater = None
        self.saver = None
        self.train_flag = None
        self.net_dict = None
        self.fetches = {}
        self.summary_writer = None
        self._pretrain = None
        self._pretrain_loaded = False
        self._net_dict_learning_rates = {}
        self._net_dict_config_saved = {}
        self._out = None  # forward: (layer name, out Data, values tensor, seq lens tensor)
        self._feed_plan_cache = None  # per graph (see _feed_plan)
        self._step_callables = {}  # per session: (step kind, feed tensors) -> _StepCallable or None

    # ---- setup

    def setup_distributed(self):
        from .distributed_train import setup_distributed_training

        self.dist = setup_distributed_training(self.config, self.log, self.task, self._session_config(),
                                               EngineError, session=lambda: self.session)
        return self.dist

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

    def get_net_dict(self, epoch):
        """The epoch's net dict (pretraining, get_network, WrapEpochValue: see returnn_lite.pretrain)."""
        from ..pretrain import PretrainError, get_net_dict_for_epoch, pretrain_from_config

        config = self.config
        if callable(config.typed_value("get_model", None)) and not config.has("network") and \
                not callable(config.typed_value("get_network", None)):
            from ..frontend_layers.config_entry_points import get_net_dict_for_engine  # rf config (issue 16)

            return get_net_dict_for_engine(config, epoch=epoch, task=self.task)
        try:
            with returnn_import_hook(), global_config_ctx(config):
                if not self._pretrain_loaded:
                    self._pretrain = pretrain_from_config(config)
                    self._pretrain_loaded = True
                net_dict = get_net_dict_for_epoch(config, epoch, pretrain=self._pretrain)
        except PretrainError as exc:
            raise EngineError(str(exc)) from None
        if not isinstance(net_dict, dict) or not net_dict:
            raise EngineError("the config needs a 'network' dict (or a function get_network(epoch)); got %r"
                              % (type(net_dict).__name__ if net_dict is not None else None,))
        self._apply_net_dict_config(net_dict.get("#config"), epoch)
        return net_dict

    def _apply_net_dict_config(self, overrides, epoch=None):
        """
        A net dict's "#config" entries override config values while that network is used (as the original; the
        loop re-reads its batching options after a build); ``learning_rate`` there is the learning rate of that
        epoch (:meth:`learning_rate_override`).
        """
        overrides = dict(overrides or {})
        lr = overrides.pop("learning_rate", None)
        if lr is not None and epoch is not None:
            self._net_dict_learning_rates[epoch] = float(lr)
        saved = self._net_dict_config_saved
        for key, value in list(saved.items()):  # undo the previous network's overrides
            if value is _NOT_SET:
                self.config.typed_dict.pop(key, None)
            else:
                self.config.typed_dict[key] = value
        saved.clear()
        for key, value in overrides.items():
            saved[key] = self.config.typed_dict.get(key, _NOT_SET)
            self.config.set(key, value)

    def learning_rate_override(self, epoch):
        return self._net_dict_learning_rates.get(epoch)

    def pretrain_num_epochs(self):
        return self._pretrain.get_train_num_epochs() if self._pretrain is not None else None

    def build(self, epoch, dataset, train):
        self._build_graph(self.get_net_dict(epoch), dataset, train)

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
        self._feed_plan_cache = None
        self._step_callables = {}
        if self.session is not None:
            self.session.close()
            self.session = None

    def close(self):
        if self.summary_writer is not None:
            self.summary_writer.close()
            self.summary_writer = None
        self.close_session()

    def has_loss(self):
        return bool(self.network.losses_dict)

    def check_dataset(self, dataset):
        have = set(dataset.get_data_keys())
        missing = [k for k in self.data_keys if k not in have]
        if missing:
            raise EngineError("dataset %r has no data key(s) %s needed by the network (it has: %s)"
                              % (dataset.name, missing, sorted(have)))
        check_dataset_matches_extern_data(dataset, self.network, self.data_keys, EngineError)

    def needs_rebuild(self, epoch):
        if not callable(self.config.typed_value("get_network", None)) and not self._pretrain:
            return False
        self._next_net_dict = self.get_net_dict(epoch)
        return repr(self._next_net_dict) != repr(self.net_dict)

    def rebuild(self, epoch, dataset):
        with self.graph.as_default():
            old = {v.op.name: (tuple(v.shape.as_list()), value) for v, value in zip(
                tf1.global_variables(), self.session.run(tf1.global_variables()))}
        self._build_graph(self._next_net_dict, dataset, train=True)
        with self.graph.as_default():
            for v in tf1.global_variables():
                if v.op.name in old and old[v.op.name][0] == tuple(v.shape.as_list()):
                    v.load(old[v.op.name][1], self.session)

    # ---- feeding and running

    def _feed_plan(self):
        """Per data key, once per graph: (key, Data, its placeholder, [(dyn_size tensor, axis or None for the
        batch's seq lens)])."""
        if self._feed_plan_cache is None:
            plan = []
            for key in self.data_keys:
                data = self.network.extern_data.get_data(key)
                sizes = []
                for axis, dim in enumerate(data.dims):
                    if dim.is_batch_dim() or not dim.is_dynamic() or dim.dyn_size is None:
                        continue
                    sizes.append((dim.dyn_size, None if not sizes else axis))  # later dyn axes: the padded length
                plan.append((key, data, data.placeholder, sizes))
            self._feed_plan_cache = plan
        return self._feed_plan_cache

    def feed_dict(self, arrays, dataset_name=None):
        """The placeholders of the network's data keys (and their sequence lengths) -> the batch's arrays."""
        feed = {}
        for key, data, placeholder, sizes in self._feed_plan():
            value = arrays.data[key]
            lens = arrays.seq_lens[key]
            if not data.have_time_axis() and value.ndim == data.batch_ndim + 1:
                value = value[:, 0]
            elif data.have_batch_axis() and data.batch_dim_axis != 0 and value.ndim >= 2:
                value = numpy.swapaxes(value, 0, 1)
            value = value.astype(data.dtype, copy=False)
            check_feed_value(data, value, lens if data.have_time_axis() else None, key, dataset_name, self.network,
                             arrays.seq_tags, EngineError)
            feed[placeholder] = value
            for size, axis in sizes:
                feed[size] = lens if axis is None else numpy.full(lens.shape, value.shape[axis], dtype=numpy.int32)
        return feed

    def run_fetches(self, fetches, arrays, dataset_name, step, extra_feed=None, runner_key=None):
        """session.run of ``fetches`` on a batch; TF errors (feeds, label ranges, ...) end as one line naming the
        dataset and the layer. ``runner_key``: the fetches are the same on every call with this key (the train and
        eval steps): they run as one TF callable (:class:`_StepCallable`)."""
        feed = self.feed_dict(arrays, dataset_name)
        feed.update(extra_feed or {})
        try:
            if runner_key is not None:
                runner = self._step_callable(runner_key, fetches, feed)
                if runner is not None:
                    return runner(feed)
            return self.session.run(fetches, feed_dict=feed)
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            if isinstance(exc, (ValueError, TypeError)) and "feed" not in str(exc).lower():
                raise
            if self.dist is not None and self.dist.lost_contact_error(exc) is not None:
                raise self.dist.lost_contact_error(exc, "step %i of dataset %r" % (step, dataset_name)) from None
            raise EngineError(describe_run_error(exc, self.network, dataset_name, step)) from exc

    def _step_callable(self, runner_key, fetches, feed):
        """The cached :class:`_StepCallable` of these fetches and feed keys (None: session.run does it)."""
        key = (runner_key, tuple(feed))
        runner = self._step_callables.get(key, _NOT_SET)
        if runner is _NOT_SET:
            runner = self._step_callables[key] = _StepCallable.make(self.session, fetches, list(feed))
        return runner

    def train_step(self, arrays, *, dataset_name, step, epoch, epoch_step, learning_rate, have_next=None):
        fetches = dict(self.fetches)
        fetches["_train_op"] = self.updater.train_op
        feed = {self.updater.learning_rate: learning_rate, self.train_flag: True}
        epoch_step_ph = getattr(self.graph, "_returnn_lite_epoch_step", None)  # network.get_epoch_step() was used
        if epoch_step_ph is not None:  # e.g. initial_state "keep_over_epoch" resets at 0
            feed[epoch_step_ph] = epoch_step
        if have_next is not None:  # "do all workers have another batch?", fused into the step
            fetches["_dist_more"] = self.dist.more_sum
            feed[self.dist.more_ph] = float(have_next)
        results = self.run_fetches(fetches, arrays, dataset_name, step, feed, runner_key="train")
        results.pop("_train_op", None)
        if have_next is not None:
            results["all_have_next"] = results.pop("_dist_more") >= self.dist.setup.size - 0.5
        return results

    def eval_step(self, arrays, *, dataset_name, step, epoch):
        fetches = dict(self.fetches)
        feed = {}
        epoch_step_ph = getattr(self.graph, "_returnn_lite_epoch_step", None)
        if epoch_step_ph is not None:
            feed[epoch_step_ph] = step
        post = self.network.get_post_control_dependencies()  # e.g. batch norm statistics (behavior v0)
        if post:
            fetches["_post_deps"] = post
        results = self.run_fetches(fetches, arrays, dataset_name, step, feed, runner_key="eval")
        results.pop("_post_deps", None)
        return results

    def set_global_train_step(self, step):
        with self.graph.as_default():
            self.network.set_global_train_step(step, self.session)

    def write_summaries(self, values, step):
        if self.summary_writer is None:
            return
        summary = tf1.Summary(value=[tf1.Summary.Value(tag=k.replace(":", "/"), simple_value=float(v))
                                     for k, v in sorted(values.items()) if v is not None])
        self.summary_writer.add_summary(summary, step)
        if any(k.startswith("epoch/") for k in values):
            self.summary_writer.flush()

    # ---- forward

    def forward_output(self):
        if self._out is None:
            layer_name = self.config.value("forward_output_layer", None)
            if layer_name:
                layer = self.network.get_layer(layer_name)
            else:
                layer = self.network.get_default_output_layer()
            self.data_keys = sorted(self.network.get_used_data_keys())
            with self.graph.as_default():
                out = layer.output.copy_as_batch_major()
                if out.have_time_axis():
                    out = out.copy_with_time_dim_axis(1) if out.time_dim_axis != 1 else out
                    x = out.placeholder
                    seq_lens = out.get_sequence_lengths()
                else:  # one frame per seq
                    x = tf.expand_dims(out.placeholder, 1)
                    seq_lens = tf.ones([tf.shape(x)[0]], dtype=tf.int32)
            self._out = (ForwardOutput(layer.name, out.dim, x.shape.rank - 1), x, seq_lens)
        return self._out[0]

    def forward_batch(self, arrays, *, dataset_name, step, epoch):
        self.forward_output()
        _, x, seq_lens = self._out
        values, lens = self.run_fetches([x, seq_lens], arrays, dataset_name, step)
        return values, lens

    # ---- model files

    def existing_models(self, model_prefix):
        return get_existing_models(model_prefix)

    def checkpoint_exists(self, filename):
        return checkpoint_exists(filename)

    def remove_stale_temp_files(self, model_prefix):
        remove_stale_temp_files(model_prefix)

    def save_checkpoint(self, filename):
        self.saver.save(self.session, filename)

    def load_checkpoint(self, filename, load_extra):
        try:
            self.saver.load(self.session, filename, load_extra=load_extra)
        except (IOError, KeyError, ValueError) as exc:
            raise EngineError("cannot load model %r: %s" % (filename, exc)) from None
        except Exception as exc:  # e.g. IndexError/DataLossError of TF's reader on a truncated data file
            raise EngineError("cannot load model %r: checkpoint data file truncated or corrupt (%s: %s)" % (
                filename, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")) from None

    def preload_from_files(self, training, fresh_train):
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
                with self.graph.as_default():
                    # prefix: our params named <prefix><name> are loaded from <name> in the file (as the original)
                    loader = CustomCheckpointLoader(
                        filename, saveable_params=self.network.get_params_list(),
                        load_if_prefix=opts.get("prefix", ""), ignore_missing=opts.get("ignore_missing", False),
                        ignore_params=opts.get("ignore_params", ()),
                        ignore_params_prefixes=opts.get("ignore_params_prefixes", ()),
                        var_name_mapping=opts.get("var_name_mapping"), network=self.network)
                    loader.load_global_step = False
                    n = len(loader.get_variable_value_map())
                    self.log.v4("preload_from_files %r: %i params from %s" % (name, n, filename))
                    loader.load_now(self.session)
            except (IOError, KeyError, ValueError) as exc:
                raise EngineError("preload_from_files %r: %s" % (name, exc)) from None


class _StepCallable:
    """
    A step of fixed fetches and feed tensors as one TF callable (C++ ``Session::MakeCallable``): per step, no
    feed conversion and shape checks in Python, no fetch handler, no graph-extension check (about 0.3 ms of the
    12AX step, benchmarks/engine_step.py). The feeds are cast to the tensors' dtypes as ``session.run`` would; the
    data arrays were checked against their placeholders' shapes before (``check_feed_value``).
    """

    def __init__(self, session, call, feed_dtypes, results_of):
        self._session = session
        self._call = call
        self._feed_dtypes = feed_dtypes  # [(tensor, numpy dtype)]
        self._results_of = results_of  # [(fetch key, index into the callable's outputs or None for ops)]

    @classmethod
    def make(cls, session, fetches, feed_tensors):
        """The callable, or None where session.run must do it (fetches other than tensors/ops or lists of ops,
        string feeds, a TF without the callable API)."""
        from tensorflow.core.protobuf import config_pb2

        if not hasattr(session, "_make_callable_from_options") or not hasattr(session, "_do_call"):
            return None
        if any(t.dtype == tf.string for t in feed_tensors):
            return None
        options = config_pb2.CallableOptions()
        results_of, fetch_index = [], {}
        for key, value in fetches.items():
            ops = value if isinstance(value, (list, tuple)) else [value]
            if all(isinstance(op, tf.Operation) for op in ops):
                options.target.extend(op.name for op in ops)
                results_of.append((key, None))
            elif isinstance(value, tf.Tensor):
                if value.name not in fetch_index:  # one output per tensor, also when fetched under two keys
                    fetch_index[value.name] = len(fetch_index)
                    options.fetch.append(value.name)
                results_of.append((key, fetch_index[value.name]))
            else:
                return None
        options.feed.extend(t.name for t in feed_tensors)
        call = session._make_callable_from_options(options)
        return cls(session, call, [(t, t.dtype.as_numpy_dtype) for t in feed_tensors], results_of)

    def __call__(self, feed):
        values = []
        for tensor, dtype in self._feed_dtypes:
            value = feed[tensor]
            if type(value) is not numpy.ndarray or value.dtype != dtype:
                value = numpy.asarray(value, dtype=dtype)
            values.append(value)
        # _do_call: TF errors name their op, as from session.run (describe_run_error finds the layer)
        outputs = self._session._do_call(self._call, *values)
        return {key: None if index is None else outputs[index] for key, index in self._results_of}
