"""
The public TFNetwork methods of the original (seed 003) that config code calls and that the compiler itself does
not need: :class:`NetworkAPIMixin`, a base class of :class:`returnn_lite.network.TFNetwork` (so also of every
subnetwork, e.g. those inside rec units).

- ``get_config()``: the Config of the root network, else the global one, else an empty one. SpecAugment and
  fusion ``eval`` layers do ``self.network.get_config().typed_value("transform")(...)``.
- ``global_train_step``: the global step variable; during construction it exists (created on first use), so
  schedules like ``tf.greater_equal(network.global_train_step, 1000)`` work. The one route that creates it is
  ``get_global_train_step_var()`` (outside any loop/cond context); the root network's :class:`NetworkRunState`
  holds it, with the callbacks, run opts and search choices by beam.
- ``get_epoch_step``, ``get_seq_tags``, ``get_global_batch_info``, ``make_subnet``, ``layer_creation_scope``,
  ``get_saveable_params_list``, ``get_saveable_param_replace_dict``, ``declare_train_params``,
  ``get_var_assigner``, ``get_all_rec_time_dims``, ``set_rec_step_info``, graph-reset and run-finished callbacks,
  run opts, ``get_network_stack``/``get_current_network``/``register_network_scope`` and
  ``register_post_control_dependencies``/``get_post_control_dependencies`` (static, per TF graph, as the original).

Also :func:`strip_net_dict_meta`: net dict keys starting with ``#`` (``#config``, ``#copy_param_mode``,
``#repetition``, ``#info``...) are metadata for the engine/pretraining, never layers.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

tf1 = tf.compat.v1

__all__ = ["NetworkAPIMixin", "NetworkRunState", "strip_net_dict_meta", "BatchInfo", "VarAssigner"]

_POST_CONTROL_DEPS_COLLECTION = "_RETURNN_post_control_dependencies"
_NETWORK_STACK_COLLECTION = "_RETURNN_network_stack"
_NET_DICT_SUB_KEYS = ("unit", "subnetwork")


def strip_net_dict_meta(net_dict, check=False):
    """
    A copy of net_dict without ``#``-keys, also inside ``unit``/``subnetwork`` dicts (the dict itself if none).
    With check: HyperParam placeholders (hyper-parameter tuning configs) fail with one line naming the option.
    """
    if not isinstance(net_dict, dict):
        return net_dict
    if check:
        from .compat.hyper_param import check_no_hyper_params

        check_no_hyper_params({k: v for k, v in net_dict.items() if not str(k).startswith("#")}, "network")
    changed = False
    out = {}
    for key, desc in net_dict.items():
        if isinstance(key, str) and key.startswith("#"):
            changed = True
            continue
        if isinstance(desc, dict):
            new_desc = desc
            for sub_key in _NET_DICT_SUB_KEYS:
                sub = desc.get(sub_key)
                if isinstance(sub, dict):
                    new_sub = strip_net_dict_meta(sub)
                    if new_sub is not sub:
                        if new_desc is desc:
                            new_desc = dict(desc)
                        new_desc[sub_key] = new_sub
            if new_desc is not desc:
                changed = True
            desc = new_desc
        out[key] = desc
    return out if changed else net_dict


class BatchInfo:
    """The global batch: ``dim`` is the batch size (scalar int32 tensor) of the extern data."""

    def __init__(self, dim):
        self.dim = dim
        self.virtual_dims = []

    def __repr__(self):
        return "BatchInfo(dim=%r)" % (self.dim,)


class VarAssigner:
    """Assigns numpy values to one variable (feeding its initializer; no new ops per call)."""

    def __init__(self, var):
        self.var = var

    def assign(self, value, session):
        session.run(self.var.initializer, feed_dict={self.var.initial_value: value})


class _SubnetHandle:
    """What :meth:`NetworkAPIMixin.make_subnet` returns: a child network plus its net dict."""

    def __init__(self, parent_net, name, opts):
        self.parent_net = parent_net
        self.name = name
        self.opts = opts or {}
        net_dict = self.opts.get("subnetwork", self.opts) if isinstance(self.opts, dict) else {}
        self.net_dict = strip_net_dict_meta(net_dict)
        self.net = _root_class(parent_net)(parent_net=parent_net, extern_data=parent_net.extern_data, name=name,
                             absolute_name_prefix=parent_net.get_absolute_name_prefix() + name + "/")
        self.net._net_dict = self.net_dict

    def have_layer(self, name):
        return name in self.net_dict

    def get_layer_desc(self, name):
        return self.net_dict[name]

    def get_layer_class(self, name):
        from .layers.base import get_layer_class

        return get_layer_class(self.net_dict[name]["class"])

    def construct_layer(self, name, parent_get_layer=None):
        return self.net.construct_layer(self.net_dict, name)

    def construct_all(self, parent_get_layer=None):
        for name in self.net_dict:
            self.construct_layer(name)


def _root_class(net):
    """TFNetwork itself (the class of the root network; subnetworks may be subclasses)."""
    return type(net.get_root_network())


class _RecStepInfo:
    """Per-step info set by :meth:`NetworkAPIMixin.set_rec_step_info` (as the rec loop's own step info)."""

    def __init__(self, step, seq_lens, time_dim, end_flag=None, end_flag_source=None):
        self.step = step
        self.seq_lens = seq_lens
        self.time_dim = time_dim
        self.end_flag = end_flag
        self.end_flag_source = end_flag_source

    def get_end_flag(self, target_search_choices=None):
        if self.end_flag is not None:
            return self.end_flag
        return tf.logical_not(self.step < self.seq_lens)


def _constructing(net):
    while net is not None:
        if net._constructing:
            return True
        net = net.parent_net
    return False


class NetworkRunState:
    """What a root network keeps for the API of this module (a subnetwork uses its root's)."""

    def __init__(self):
        self.global_train_step_var = None  # created by get_global_train_step_var, only there
        self.graph_reset_callbacks = []
        self.run_finished_callbacks = []
        self.run_opts = None  # {"epoch", "dataset_name"} between set_run_opts and set_run_finished
        self.search_choices_by_beam = {}


class NetworkAPIMixin:
    """
    Public TFNetwork API of the original beyond what construction needs (see the module doc). The host class
    sets ``run_state`` (a :class:`NetworkRunState`) in its ``__init__``.
    """

    run_state: NetworkRunState

    def _root_run_state(self):
        return self.get_root_network().run_state

    # ---- config, steps, batch

    def get_config(self, consider_global_config=True, fallback_dummy_config=True):
        net = self
        while net is not None:
            if getattr(net, "config", None) is not None:
                return net.config
            net = net.parent_net
        from .config import Config, get_global_config

        if consider_global_config:
            config = get_global_config(raise_exception=False)
            if config is not None:
                return config
        return Config() if fallback_dummy_config else None

    @property
    def global_train_step(self):
        """The global step (int64 variable of the root network); created on first use during construction, else
        None until something created it."""
        var = self._root_run_state().global_train_step_var
        if var is None and _constructing(self):
            var = self.get_global_train_step_var()
        return var

    def get_global_train_step_var(self):
        """The global step variable ``global_step`` of the root network, created on the first call (outside the
        loop/cond and name scope the caller may be in)."""
        state = self._root_run_state()
        if state.global_train_step_var is None:
            graph = tf1.get_default_graph()
            ctx = graph._get_control_flow_context()  # noqa: SLF001 (create it outside of loops/conds)
            graph._set_control_flow_context(None)  # noqa: SLF001
            try:
                with tf.control_dependencies(None), graph.name_scope(None), \
                        tf1.variable_scope(tf1.VariableScope(reuse=tf1.AUTO_REUSE, name="")):
                    state.global_train_step_var = tf1.get_variable(
                        "global_step", shape=(), dtype=tf.int64, initializer=tf1.zeros_initializer(),
                        trainable=False)
            finally:
                graph._set_control_flow_context(ctx)  # noqa: SLF001
        return state.global_train_step_var

    def get_epoch_step(self):
        """Scalar int64 tensor: the step within the current epoch (fed by the engine, default 0)."""
        graph = tf1.get_default_graph()
        step = getattr(graph, "_returnn_lite_epoch_step", None)
        if step is None:
            with tf.control_dependencies(None), tf.name_scope("globals/"):
                step = tf1.placeholder_with_default(tf.constant(0, dtype=tf.int64), shape=(), name="epoch_step")
            graph._returnn_lite_epoch_step = step
        return step

    def get_global_batch_info(self):
        return BatchInfo(self.get_data_batch_dim())

    def get_seq_tags(self, mark_data_key_as_used=True, beam=None):
        """(batch,) string tensor of the sequence tags, via extern data key ``seq_tag`` (added if missing)."""
        from .data import Data

        root = self.get_root_network()
        if not root.extern_data.has_data("seq_tag"):
            root.extern_data.register_data(Data(name="seq_tag", shape=(), dtype="string",
                                                auto_create_placeholders=True))
        data = self.get_extern_data("seq_tag", mark_data_key_as_used=mark_data_key_as_used)
        return data.placeholder

    # ---- construction helpers

    def make_subnet(self, name, opts):
        """A subnetwork ``name`` of this network with the net dict ``opts`` (or ``opts["subnetwork"]``)."""
        return _SubnetHandle(self, name, opts)

    @contextlib.contextmanager
    def layer_creation_scope(self, name):
        from .util import get_valid_scope_name_from_str

        with tf.name_scope(self.get_absolute_name_scope_prefix() + get_valid_scope_name_from_str(name) + "/") as s:
            yield s

    def get_root_ctx_network(self):
        return self.get_root_network(), self.get_absolute_name_prefix()

    def get_control_flow_ctx(self):
        return None

    def is_extra_internal_template_construction(self):
        return None

    def get_all_rec_time_dims(self):
        dims = set()
        net = self
        while net is not None:
            for d in (net.inside_rec_time_dim, net.over_rec_time_dim):
                if d is not None:
                    dims.add(d)
            net = net.parent_net
        return dims

    def set_rec_step_info(self, i, end_flag=None, end_flag_source=None, seq_lens=None):
        self.rec_step_info = _RecStepInfo(i, seq_lens, self.get_inside_rec_time_dim(), end_flag, end_flag_source)

    # ---- params

    def get_saveable_param_replace_dict(self):
        return {p: p for p in self.get_params_list()}

    def get_saveable_params_list(self):
        params = [p for p in self.get_params_list() if not getattr(p, "_returnn_lite_not_saveable", False)]
        step = self._root_run_state().global_train_step_var
        if step is not None:
            params.append(step)
        return params

    def declare_train_params(self, hidden_layer_selection=None, with_output=None, global_trainable=None):
        """Which layers train: all (default), none (global_trainable=False) or the selection (+ outputs)."""
        for layer in self.get_all_layers_deep():
            if global_trainable is not None and not global_trainable:
                layer.trainable = False
            elif hidden_layer_selection is not None:
                is_out = layer.is_output_layer()
                layer.trainable = layer.name in hidden_layer_selection or bool(is_out and with_output)

    def get_var_assigner(self, var):
        return VarAssigner(var)

    # ---- post control dependencies (static, per graph, as the original)

    @staticmethod
    def register_post_control_dependencies(deps):
        """Ops to run after each train step (e.g. batch norm statistics updates) in the current graph."""
        tf1.get_default_graph().get_collection_ref(_POST_CONTROL_DEPS_COLLECTION).extend(deps)

    @staticmethod
    def get_post_control_dependencies():
        return list(tf1.get_default_graph().get_collection(_POST_CONTROL_DEPS_COLLECTION))

    # ---- callbacks and run opts

    def register_graph_reset_callback(self, cb):
        self._root_run_state().graph_reset_callbacks.append(cb)

    def get_graph_reset_callbacks(self):
        return list(self._root_run_state().graph_reset_callbacks)

    def call_graph_reset_callbacks(self):
        for cb in self.get_graph_reset_callbacks():
            cb()

    def set_run_opts(self, epoch, dataset_name):
        self._root_run_state().run_opts = {"epoch": epoch, "dataset_name": dataset_name}

    def get_run_opts(self):
        opts = self._root_run_state().run_opts
        if opts is None:
            raise ValueError("get_run_opts: no run in progress (set_run_opts was not called)")
        return opts

    def register_run_finished_callback(self, cb):
        self._root_run_state().run_finished_callbacks.append(cb)

    def set_run_finished(self, error_occurred=False):
        state = self._root_run_state()
        if not error_occurred:
            for cb in state.run_finished_callbacks:
                cb()
        del state.run_finished_callbacks[:]
        state.run_opts = None

    # ---- network stack (per TF graph, as the original)

    @classmethod
    def get_network_stack(cls):
        return list(tf1.get_default_graph().get_collection(_NETWORK_STACK_COLLECTION))

    @classmethod
    def get_current_network(cls, must_exist=True):
        stack = cls.get_network_stack()
        if stack:
            return stack[-1]
        if must_exist:
            raise ValueError("get_current_network: no network is registered (register_network_scope)")
        return None

    @contextlib.contextmanager
    def register_network_scope(self):
        """Registers this network in the current TF graph while the context is active."""
        stack = tf1.get_default_graph().get_collection_ref(_NETWORK_STACK_COLLECTION)
        stack.append(self)
        try:
            yield self
        finally:
            stack.remove(self)

    # ---- search choices by beam (bookkeeping only)

    def register_search_choices_for_beam(self, beam, search_choices):
        self._root_run_state().search_choices_by_beam[beam] = search_choices

    def get_search_choices_from_beam(self, beam):
        return self._root_run_state().search_choices_by_beam.get(beam)
