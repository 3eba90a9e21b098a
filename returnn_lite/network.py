"""
TFNetwork: compiles a RETURNN layer dict onto a TF graph.

For each requested name: resolve the dict entry, look up the layer class, turn the entry into kwargs
(``transform_config_dict``), derive the output template (``get_out_data_from_opts``), build the layer.
Every exception raised while a layer is built is re-raised once as a :class:`NetworkLayerException`
naming the layer and its class.
"""

from __future__ import annotations

import contextlib
import functools
import sys

import numpy as np
import tensorflow as tf

from .data import Data, Dim, graph_cached, tensor_dim
from .tensor.tensor import with_arith_operands
from .fast_grads import mul_by_mask
from .data import batch_dim as _batch_dim
from .error_hints import check_unreached_layers, describe_build_error, precheck_layer_desc
from .errors import (  # noqa: F401 (re-exported: part of this module's API, as in the original)
    LayerNotFound,
    LayerOptionError,
    NetworkConstructionDependencyLoopException,
    NetworkError,
    NetworkLayerException,
)
from .extern_data import DataNotFound, ExternData
from .extra_net import only_on_search_layers, search_only_deps
from .layer_options import check_explicit_output, iter_nested_layer_descs, validate_layer_desc
from .layer_ref import data_key, is_layer_target, parse_layer_ref
from .layers.base import InternalLayer, LayerBase, apply_out_dim, get_layer_class
from .losses.holder import LossHolder  # noqa: F401 (part of this module's API, as in the original)
from .network_api import NetworkAPIMixin, NetworkRunState, strip_net_dict_meta
from .util import NotSpecified, did_you_mean

tf1 = tf.compat.v1
_BASE_CONSTRUCT_CHILDREN = LayerBase.construct_children.__func__

__all__ = [
    "TFNetwork", "Subnetwork", "ExternData", "DataNotFound", "LossHolder", "CustomCheckpointLoader", "TFNetworkParamsSerialized",
    "NetworkError", "NetworkConstructionDependencyLoopException", "LayerNotFound", "NetworkLayerException",
]


def assign_output_beam(layer_class, output, layer_desc):
    """A layer's output is on the search beam of its sources (unless the layer class sets or removes it)."""
    if output.beam is None and not getattr(layer_class, "removes_beam", False):
        from .layers.search import beam_of_options

        output.beam = beam_of_options(layer_desc)


def _in_session_graph(method):
    """Run a method that takes a session inside the session's graph (variables are only hashable there)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        session = kwargs.get("session")
        if session is None:
            session = next((a for a in args if isinstance(a, tf1.Session) or hasattr(a, "graph")), None)
        if session is None or tf1.get_default_graph() is session.graph:
            return method(self, *args, **kwargs)
        with session.graph.as_default():
            return method(self, *args, **kwargs)

    return wrapper


class TFNetworkParamsSerialized:
    """All params as numpy arrays: layer name -> param name -> value."""

    def __init__(self, values_dict, global_train_step):
        self.values_dict = values_dict
        self.global_train_step = global_train_step


class TFNetwork(NetworkAPIMixin):
    """A collection of interconnected layers with trainable params, built from a layer dict."""

    def __init__(self, config=None, extern_data=None, rnd_seed=None, train_flag=None, eval_flag=None,
                 search_flag=None, parent_layer=None, parent_net=None, extra_parent_net=None, name=None,
                 absolute_name_prefix=None, inside_rec_time_dim=None, over_rec_time_dim=None, **_unused):
        self.config = config
        if extern_data is None:
            if parent_net is not None:
                extern_data = parent_net.extern_data
            else:
                extern_data = ExternData()
                if config is not None:
                    extern_data.init_from_config(config)
        self.extern_data = extern_data
        self.parent_layer = parent_layer
        self.parent_net = parent_net
        self.extra_parent_net = extra_parent_net
        self.name = name or (parent_layer.name if parent_layer is not None else "")
        self._absolute_name_prefix = absolute_name_prefix
        if train_flag is None:
            train_flag = parent_net.train_flag if parent_net is not None else _global_train_flag()
        self.train_flag = train_flag
        self.eval_flag = (train_flag is not False) if eval_flag is None else eval_flag
        self.search_flag = bool(search_flag) if search_flag is not None else (
            parent_net.search_flag if parent_net is not None else False)
        self.inside_rec_time_dim = inside_rec_time_dim
        self.over_rec_time_dim = over_rec_time_dim
        self.random = np.random.RandomState(42 if rnd_seed is None else rnd_seed)
        self.layers = {}
        self.losses_dict = {}
        self.used_data_keys = set()
        self._net_dict = {}
        self._constructing = []
        self._building_sources_first = False
        self._validated_descs = set()  # ids of the layer dicts of _net_dict that _validate_net_dict checked
        self._objective = None
        self._saver = None
        self._batch_dim = None
        self.run_state = NetworkRunState()  # (used on the root network)
        self.update_ops = []
        self.rec_step_info = None

    # ---- names ----
    def get_root_network(self):
        return self if self.parent_net is None else self.parent_net.get_root_network()

    def get_absolute_name_prefix(self):
        """Layer name prefix, always ending in '/' or empty (e.g. 'sub/')."""
        if self._absolute_name_prefix is not None:
            return self._absolute_name_prefix
        if self.parent_layer is not None:
            return self.parent_layer.get_absolute_name() + "/"
        return ""

    def get_absolute_name_scope_prefix(self):
        """Like get_absolute_name_prefix, each part as TF scope name (see get_valid_scope_name_from_str)."""
        from .util import get_valid_scope_name_from_str

        parts = self.get_absolute_name_prefix().split("/")
        return "/".join(get_valid_scope_name_from_str(p) if p else p for p in parts)

    def __repr__(self):
        return "<TFNetwork %r train=%s>" % (self.get_absolute_name_prefix() or "root", self.train_flag)

    # ---- construction ----
    def construct_from_dict(self, net_dict, get_layer=None):
        """Build every layer that is an output, has a loss, or is marked is_output_layer."""
        net_dict = strip_net_dict_meta(net_dict, check=self.parent_net is None)  # "#config"...: metadata
        self._net_dict = net_dict
        self._validate_net_dict(net_dict)
        search_only = set() if self.search_flag else only_on_search_layers(net_dict)
        # layers registered as extern data first (others may use them as target), as the original
        for name, desc in sorted(net_dict.items(), key=lambda kv: (
                not (isinstance(kv[1], dict) and kv[1].get("register_as_extern_data")), kv[0])):
            if not isinstance(desc, dict):
                raise NetworkLayerException("layer description must be a dict, got %r" % (desc,), name, network=self)
            if name in search_only:  # only_on_search (or depends on such a layer): not without search
                continue
            if (name == "output" or name.endswith(":output") or desc.get("loss") or desc.get("is_output_layer")
                    or desc.get("register_as_extern_data")):
                self.construct_layer(net_dict, name, get_layer=get_layer)
        if self.parent_net is None:
            skipped = search_only | search_only_deps(net_dict, search_only)  # (no warning for those)
            check_unreached_layers(self, {k: v for k, v in net_dict.items() if k not in skipped} if skipped else net_dict)

    def _validate_net_dict(self, net_dict):
        """The options of every layer dict, also of layers that are never built (e.g. an is_output_layer typo)."""
        for name, desc in net_dict.items():
            if not isinstance(desc, dict):
                raise NetworkLayerException("layer description must be a dict, got %r" % (desc,), name, network=self)
            class_name = desc.get("class")
            try:
                if class_name is None:
                    raise ValueError("no 'class' given")
                validate_layer_desc(get_layer_class(class_name), {k: v for k, v in desc.items() if k != "class"})
                self._validated_descs.add(id(desc))  # (construct_layer need not validate it again)
            except Exception as exc:
                raise NetworkLayerException("%s: %s" % (type(exc).__name__, exc), name, self, net_dict,
                                            layer_class=class_name) from exc
            if self.parent_net is None:  # layers of rec units / subnetworks: also those never built
                self._validate_nested(desc, name)

    def _validate_nested(self, desc, name):
        for sub_name, sub_desc in iter_nested_layer_descs(desc, name):
            class_name = sub_desc.get("class")
            try:
                if class_name is None:
                    raise ValueError("no 'class' given")
                sub_desc = {k: v for k, v in sub_desc.items() if k != "class"}
                precheck_layer_desc(sub_desc)
                validate_layer_desc(get_layer_class(class_name), sub_desc)
            except Exception as exc:
                raise NetworkLayerException("%s: %s" % (type(exc).__name__, exc), sub_name, self,
                                            layer_class=class_name) from exc

    # ---- reference resolution: one parser (layer_ref.py), one scope chain ----
    def owns_layer(self, name):
        """Whether name is a layer of this network (built, or in its layer dict)."""
        return name in self.layers or name in self._net_dict

    def construct_layer(self, net_dict, name, get_layer=None, add_layer=None, check_existing=True):
        """
        Resolve the reference name (see :mod:`returnn_lite.layer_ref`): a layer of net_dict is built (and,
        recursively, what it depends on) unless it exists already; prefixed references and names this network does
        not own go along the scope chain (:meth:`_resolve_prefixed`, :meth:`_resolve_not_owned`).
        """
        if name in self.layers:
            return self.layers[name]
        ref = parse_layer_ref(name)
        if ref.canonical != name:  # e.g. "layer:x" is x
            return self.construct_layer(net_dict, ref.canonical, get_layer=get_layer, add_layer=add_layer)
        if ref.kind == "data":
            return self._get_extern_data_layer(name)
        if ref.kind == "extra" or self.extra_parent_net is not None:  # extra networks (see extra_net.py)
            layer = self._resolve_extra(ref, name)
            if layer is not None:
                return layer
        if ref.kind != "layer":
            return self._resolve_prefixed(ref, name, net_dict, get_layer)
        if name not in net_dict:
            # "a/b": a sub-layer of a, where a is ours (a child network: else the parent may own "a/b" as a name)
            if ref.sub_name is not None and (self.parent_net is None or ref.base_name in net_dict
                                             or ref.base_name in self.layers):
                return self._get_sub_layer(net_dict, name, get_layer)
            return self._resolve_not_owned(name, net_dict)
        if name in self._constructing:
            raise NetworkConstructionDependencyLoopException(self, name, self._constructing)
        if get_layer is None:
            if self._building_sources_first:  # called by _construct_sources_first: the sources are built
                self._building_sources_first = False  # (layers named in options of this one: theirs first again)
            else:
                self._construct_sources_first(net_dict, name)
                if name in self.layers:
                    return self.layers[name]

            def get_layer(src_name):
                return self.construct_layer(net_dict, src_name)
        desc = dict(net_dict[name])
        class_name = desc.pop("class", None)
        self._constructing.append(name)
        try:
            if class_name is None:
                raise ValueError("no 'class' given")
            precheck_layer_desc(desc)
            layer_class = get_layer_class(class_name)
            if id(net_dict[name]) not in self._validated_descs:
                validate_layer_desc(layer_class, desc)
            layer_class.transform_config_dict(desc, network=self, get_layer=get_layer)
            _construct_dim_size_layers(desc, get_layer)
            self._adapt_source_beams(name, desc)
            if layer_class.construct_children.__func__ is not _BASE_CONSTRUCT_CHILDREN:
                with tf.name_scope(self._layer_name_scope(name)):
                    layer_class.construct_children(desc, name=name, network=self, get_layer=get_layer)
            layer = (add_layer or self.add_layer)(name=name, layer_class=layer_class, **desc)
            try:
                check_explicit_output(layer, net_dict[name])
            except Exception:
                self.layers.pop(name, None)  # a rejected layer is not built (a retry raises again)
                raise
            return layer
        except NetworkLayerException:
            raise
        except NetworkConstructionDependencyLoopException:
            raise
        except Exception as exc:
            msg = describe_build_error(exc, net_dict.get(name))
            raise NetworkLayerException(msg, name, self, net_dict, layer_class=class_name) from exc
        finally:
            self._constructing.remove(name)

    def _resolve_prefixed(self, ref, name, net_dict, get_layer):
        """data / base: / prev: / :i / extra.NET: references (ref is the parsed name)."""
        if ref.kind == "data":
            return self._get_extern_data_layer(name)
        if ref.kind == "base":
            if self.parent_net is None:
                raise LayerNotFound("%r: there is no base network (this is the root network)" % name, name, self)
            return self.parent_net.get_layer(ref.name)
        if ref.kind in ("prev", "step"):
            return self._resolve_in_loop(name)
        return self._resolve_extra(ref, name)  # extra.NET:ref

    def _resolve_extra(self, ref, name):
        """extra.NET:ref in the extra network NET; inside an extra network, its own layers, else the main's."""
        from .extra_net import get_extra_net, layer_from_extra_or_main

        if ref.kind == "extra":
            return get_extra_net(self, ref.extra_net).get_layer(ref.name)
        return layer_from_extra_or_main(self, name)

    def _resolve_in_loop(self, name):
        """prev:X and :i: only a rec unit's network (or a child of one) resolves them."""
        raise LayerNotFound("%r: 'prev:' and ':i' only exist inside the unit of a rec layer (network %r)" % (
            name, self.get_absolute_name_prefix() or "root"), name, self)

    def _resolve_not_owned(self, name, net_dict):
        """A plain name this network does not own (the root network: an error with close matches)."""
        raise LayerNotFound("layer %r not found in network %r.%s" % (
            name, self.get_absolute_name_prefix() or "root", did_you_mean(name, net_dict)), name, self)

    def _construct_sources_first(self, net_dict, name):
        """
        Build the plain "from" sources of name bottom-up (iterative depth-first order), so that deep chains do
        not recurse: TF records the Python stack for every op it creates, which gets slow with deep stacks.
        """
        order, seen, stack = [], set(), [(name, False)]
        while stack:
            layer_name, expanded = stack.pop()
            if expanded:
                order.append(layer_name)
                continue
            if layer_name in seen or layer_name in self.layers or not isinstance(net_dict.get(layer_name), dict) \
                    or layer_name in self._constructing:  # (a dependency loop: construct_layer names it)
                continue
            seen.add(layer_name)
            stack.append((layer_name, True))
            sources = net_dict[layer_name].get("from", "data")
            for src in reversed(sources if isinstance(sources, (list, tuple)) else [sources]):
                if isinstance(src, str):
                    stack.append((src, False))
        for layer_name in order[:-1]:
            if layer_name not in self.layers:
                self._building_sources_first = True
                try:
                    self.construct_layer(net_dict, layer_name)
                finally:
                    self._building_sources_first = False

    def add_layer(self, name, layer_class, **layer_desc):
        """Template via get_out_data_from_opts, then the layer itself; registers losses."""
        with tf.name_scope(self._layer_name_scope(name)):
            output = layer_class.get_out_data_from_opts(name=name, network=self, **layer_desc)
            if output is None:
                raise ValueError("%s.get_out_data_from_opts returned no template" % layer_class.__name__)
            output = apply_out_dim(layer_class, output, layer_desc, name)  # the option out_dim of every layer
            assign_output_beam(layer_class, output, layer_desc)
            layer = layer_class(name=name, network=self, output=output, **layer_desc)
        layer.kwargs = layer_desc
        try:
            _check_output_matches_template(layer)
        except ValueError as exc:
            given = [k for k in ("out_type", "n_out") if layer_desc.get(k, NotGiven) not in (None, NotGiven, NotSpecified)]
            if given:
                raise LayerOptionError("%s: option %s contradicts the real output" % (exc, "/".join(given)),
                                       given[0]) from exc
            raise
        self.layers[name] = layer
        if layer.loss is not None and self.eval_flag:
            self._register_loss(name, layer)
        if layer.register_as_extern_data:
            self.get_root_network().extern_data.register_data(
                layer.output.copy(name=layer.register_as_extern_data), extra_added=True)
        layer.post_init(layer_desc)
        return layer

    def _adapt_source_beams(self, name, desc):
        """
        Sources (all layers named in the options) on different search beams are brought to the newest beam, here,
        once for all layers: data without beam is repeated per hypothesis, data of an earlier search step is
        selected by the source beams of the later choice (see SearchBeam, Data.copy_select_beam).
        """
        from .data import SearchBeam
        from .layers.search import beam_adapted_layer, layers_in_options

        layers = layers_in_options(desc)
        beams = {id(layer.output.beam): layer.output.beam for layer in layers if layer.output.beam is not None}
        if not beams or (len(beams) == 1 and all(layer.output.beam is not None for layer in layers)):
            return
        beam = SearchBeam.get_combined_beam(*beams.values(), owner="layer %r" % name)
        cache = self.__dict__.setdefault("_beam_adapted", {})

        def adapt(value):
            if isinstance(value, (list, tuple)):
                return type(value)(adapt(v) for v in value)
            if isinstance(value, dict):
                return {k: adapt(v) for k, v in value.items()}
            if hasattr(value, "output") and hasattr(value, "network") and value.output.beam is not beam:
                key = (id(value), id(beam))
                if key not in cache:
                    cache[key] = (value, beam_adapted_layer(value, beam, self))
                return cache[key][1]
            return value

        for key in list(desc):
            desc[key] = adapt(desc[key])

    def _register_loss(self, name, layer):
        loss = layer.loss
        target = layer._get_target_value() if loss.need_target and layer.target else None
        try:
            loss.check_dims(layer, target)
        except ValueError as exc:
            n_out = (self._net_dict.get(name) or {}).get("n_out") if isinstance(self._net_dict, dict) else None
            if not isinstance(n_out, int):
                raise
            # (an explicit n_out is the option at fault: named as where the loss is not computed)
            raise LayerOptionError("option n_out=%r contradicts the target %r of loss %r: %s" % (
                n_out, layer.target, loss.class_name, exc), "n_out") from None
        key = self.get_absolute_name_prefix() + name
        self.get_root_network().losses_dict[key] = LossHolder(
            name=key, loss=loss, layer_output=layer.output, layer=layer, network=self)

    def _layer_name_scope(self, name):
        name = name.replace(":", "_")
        return self.get_absolute_name_prefix() + (name if name[:1].isalnum() else ".%i.%s" % (ord(name[0]), name[1:])) + "/"

    def owns_extern_data(self, key):
        """Whether "data:KEY" is this network's own extern data (else the parent network's)."""
        return self.parent_net is None

    def _get_extern_data_layer(self, name):
        key = data_key(name, self.extern_data.default_input)
        if not self.owns_extern_data(key):
            return self.parent_net._get_extern_data_layer(name)
        if name in self.layers:
            return self.layers[name]
        layer = InternalLayer(name=name, network=self, output=self.get_extern_data(key))
        self.layers[name] = layer
        return layer

    def _get_sub_layer(self, net_dict, name, get_layer=None):
        parent_name, sub_name = name.split("/", 1)
        parent = (get_layer or (lambda n: self.construct_layer(net_dict, n)))(parent_name)
        sub = parent.get_sub_layer(sub_name)
        if sub is None:
            raise LayerNotFound("layer %r has no sub-layer %r" % (parent_name, sub_name), name, self)
        return sub

    def get_extern_data(self, key, mark_data_key_as_used=True):
        root = self.get_root_network()
        data = root.extern_data.get_data(key)
        if mark_data_key_as_used:
            root.used_data_keys.add(key)
        return data

    def get_used_data_keys(self, exclude_extra_added=True):
        root = self.get_root_network()
        if exclude_extra_added:  # registered by layers (register_as_extern_data): computed, not fed
            return root.used_data_keys - root.extern_data.extra_added_keys
        return set(root.used_data_keys)

    def get_layer(self, layer_name):
        """The layer by reference ("data", "data:KEY", "base:NAME", "NAME/SUB", ...); builds it on demand."""
        if layer_name in self.layers:
            return self.layers[layer_name]
        return self.construct_layer(self._net_dict, layer_name)

    # ---- flags ----
    def cond_on_train(self, fn_train, fn_eval):
        if isinstance(self.train_flag, bool):
            return fn_train() if self.train_flag else fn_eval()
        return tf.cond(self.train_flag, fn_train, fn_eval)

    def apply_dropout(self, data, rate, noise_shape=None, on_forward=False, seed=None):
        """
        Dropout on data in training (or always with on_forward), as the original's layer input dropout
        (``dropout``/``dropout_noise_shape`` options): noise_shape None or a dict {axis description: 1 (broadcast) or
        None (not)}; axes not given broadcast (one mask for them) if they are the batch or a spatial axis (the
        original's ``Data.get_bc_shape``: only the feature axis gets its own values), unless the key "*" gives the
        value for all axes not given. A list/tuple is the noise shape itself.
        """
        if not rate or (self.train_flag is False and not on_forward):
            return data
        x = data.placeholder
        if noise_shape is None or isinstance(noise_shape, dict):
            dims = {}
            default = NotGiven
            for k, v in (noise_shape or {}).items():
                if k == "*":
                    default = v
                    continue
                for a in data.get_axes_from_description(k):
                    dims[a] = v
            shape = []
            for i in range(data.batch_ndim):
                v = dims.get(i, default)
                if v is NotGiven:  # the original's default: broadcast over batch and spatial axes
                    v = None if i == data.feature_dim_axis else 1
                if v in (1, "x"):
                    shape.append(1)
                elif i == data.batch_dim_axis and data.beam is None and data.dims[i] is _batch_dim:
                    shape.append(self.get_data_batch_dim())  # cached: no shape op per dropout
                else:
                    shape.append(data.get_dim(i))
        else:
            shape = list(noise_shape)

        if on_forward:
            return data.copy(placeholder=tf.nn.dropout(x, rate=rate, noise_shape=shape, seed=seed))
        return data.copy(placeholder=self.dropout_on_train(x, rate, noise_shape=shape, seed=seed))

    def dropout_on_train(self, x, rate, noise_shape=None, seed=None):
        """
        ``tf.nn.dropout(x, rate, noise_shape, seed)`` in training, x otherwise. With a train_flag tensor, without a
        ``tf.cond`` (whose branch functions are slow to build and to differentiate): the noise shape, rate and scale
        are selected by the flag (outside training: one random number, rate 0, scale 1, so x * 1.0 = x exactly), and
        the mask is not differentiated. In training the same random op and the same values as ``tf.nn.dropout``.
        """
        if not rate or self.train_flag is False:
            return x
        if self.train_flag is True:
            return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)
        if isinstance(rate, (tf.Tensor, tf.Variable)):
            return self.cond_on_train(lambda: tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed),
                                      lambda: x)
        x = tf.convert_to_tensor(x)
        with tf.name_scope("dropout"):
            rate_t, scale_t, zero_t = self._dropout_consts(float(rate), x.dtype)
            if isinstance(noise_shape, (list, tuple)):  # None: x's size (as tf.nn.dropout)
                noise_shape = [tensor_dim(x, i) if n is None else n for i, n in enumerate(noise_shape)]
            keep = tf.random.uniform(self._dropout_noise_shape(x, noise_shape), seed=seed, dtype=x.dtype) >= rate_t
            y = mul_by_mask(x, tf.where(keep, scale_t, zero_t))
        y.set_shape(x.shape)
        return y

    def _dropout_consts(self, rate, dtype):
        """(rate, 1 / (1 - rate), 0) in training, (0, 1, 0) otherwise, as scalars, once per graph, rate and dtype."""
        flag = self.train_flag

        def create():
            with tf.name_scope("globals/dropout_%s/" % str(rate).replace(".", "_")):
                return (tf.where(flag, tf.constant(rate, dtype), tf.constant(0, dtype)),
                        tf.where(flag, tf.constant(1 / (1 - rate), dtype), tf.constant(1, dtype)),
                        tf.constant(0, dtype))

        return graph_cached(("dropout", rate, dtype.name, flag.ref()), create)

    def _dropout_noise_shape(self, x, noise_shape):
        """
        The noise shape in training, all ones otherwise (one random number: no cost outside training), once per
        graph for a noise shape of ints and shared size tensors (e.g. [1, 1, F] or [B, 1, F]).
        """
        flag = self.train_flag

        def create():
            shape = tf.shape(x) if noise_shape is None else tf.convert_to_tensor(noise_shape, dtype=tf.int32)
            ones = [1] * shape.shape[0] if shape.shape.rank == 1 and shape.shape[0] is not None else \
                tf.ones_like(shape)
            return tf.where(flag, shape, ones)

        if noise_shape is None:
            return create()
        key = tuple(n.ref() if isinstance(n, (tf.Tensor, tf.Variable)) else int(n) for n in noise_shape)
        return graph_cached(("dropout_noise_shape", flag.ref()) + key, create)

    def random_seed_for(self, layer, param_name):
        return int(self.get_root_network().random.randint(2 ** 31 - 1))

    def get_data_batch_dim(self):
        """Batch size of the current step, from the extern data (cached)."""
        root = self.get_root_network()
        if root._batch_dim is None:
            for data in [root.extern_data.get_default_input_data()] + list(root.extern_data.data.values()):
                if data.placeholder is not None and data.have_batch_axis():
                    with tf.name_scope("batch_dim"):
                        root._batch_dim = tf.shape(data.placeholder)[data.batch_dim_axis]
                    break
            else:
                raise ValueError("cannot determine the batch size: no extern data with a batch axis")
        return root._batch_dim

    # ---- layers ----
    def get_output_layers(self):
        return [layer for layer in self.layers.values() if layer.is_output_layer()]

    def get_default_output_layer_name(self):
        if "output" in self.layers:
            return "output"
        outs = [n for n, layer in self.layers.items() if layer.is_output_layer()]
        return outs[0] if len(outs) == 1 else None

    def get_default_output_layer(self, must_exist=True):
        name = self.get_default_output_layer_name()
        if name is None:
            if must_exist:
                raise LayerNotFound("no default output layer (no layer named 'output')", "output", self)
            return None
        return self.layers[name]

    def get_all_layers_shallow(self):
        return list(self.layers.values())

    def get_all_layers_deep(self):
        """All layers, also of sub networks and of the extra networks (e.g. of search_train_network_layers)."""
        seen, res = set(), []
        extra = [layer for net in self.__dict__.get("_extra_nets", {}).values() for layer in net.layers.values()]
        for layer in list(self.layers.values()) + extra:
            for sub in [layer] + [x for net in getattr(layer, "get_sub_networks", lambda: [])()
                                  for x in net.get_all_layers_deep()]:
                if id(sub) not in seen:
                    seen.add(id(sub))
                    res.append(sub)
        return res

    def print_network_info(self, name="Network", file=None):
        file = file or sys.stdout
        print("%s layer topology:" % name, file=file)
        print("  extern data: %s" % self.extern_data.get_data_description(), file=file)
        for layer in self.get_all_layers_deep():
            if layer.name.startswith("data"):
                continue
            print("  layer %s %r #: %s" % (layer.layer_class, layer.get_absolute_name(), layer.output.dim), file=file)
        print("net params #: %i" % self.get_num_params(), file=file)

    # ---- params ----
    def get_params_list(self):
        params = {}
        for layer in self.get_all_layers_deep():
            for p in layer.params.values():
                params.setdefault(p.op.name, p)
        return list(params.values())

    def get_trainable_params(self):
        trainable = {v.ref() for v in tf1.trainable_variables()}
        return [p for p in self.get_params_list()
                if p.ref() in trainable and getattr(self._layer_of_param(p), "trainable", True)]

    def _layer_of_param(self, param):
        for layer in self.get_all_layers_deep():
            if any(p is param for p in layer.params.values()):
                return layer
        return None

    def get_num_params(self):
        return int(sum(np.prod(p.shape.as_list()) for p in self.get_params_list() if p.shape.is_fully_defined()))

    def get_auxiliary_params(self):
        step = self._root_run_state().global_train_step_var
        return [step] if step is not None else []

    @_in_session_graph
    def initialize_params(self, session):
        params = self.get_params_list() + self.get_auxiliary_params()
        if params:
            session.run([p.initializer for p in params])
        for layer in self.get_all_layers_deep():  # e.g. subnetwork load_on_init
            hook = getattr(layer, "post_initialize_params", None)
            if hook is not None:
                hook(session)

    @_in_session_graph
    def get_param_values_dict(self, session):
        return {layer.name: layer.get_param_values_dict(session)
                for layer in self.layers.values() if layer.params}

    @_in_session_graph
    def set_param_values_by_dict(self, values_dict, ignore_non_existing=False, session=None, **kwargs):
        for layer_name, values in values_dict.items():
            if layer_name not in self.layers:
                if ignore_non_existing:
                    continue
                raise LayerNotFound("set_param_values_by_dict: no layer %r" % layer_name, layer_name, self)
            assign_values(session, {self.layers[layer_name].params[k]: v for k, v in values.items()})

    @_in_session_graph
    def get_params_serialized(self, session):
        step = self.get_global_train_step(session)
        return TFNetworkParamsSerialized(self.get_param_values_dict(session), step)

    @_in_session_graph
    def set_params_by_serialized(self, serialized, session, **kwargs):
        self.set_param_values_by_dict(serialized.values_dict, session=session, **kwargs)
        self.set_global_train_step(serialized.global_train_step, session)

    @_in_session_graph
    def set_global_train_step(self, step, session):
        assign_values(session, {self.get_global_train_step_var(): np.int64(step)})

    @_in_session_graph
    def get_global_train_step(self, session):
        return int(session.run(self.get_global_train_step_var()))

    def _saveable_dict(self):
        d = {p.op.name: p for p in self.get_params_list() if not getattr(p, "_returnn_lite_not_saveable", False)}
        step = self._root_run_state().global_train_step_var
        if step is not None:
            d["global_step"] = step
        return d

    def reset_saver(self):
        self._saver = None

    @_in_session_graph
    def save_params_to_file(self, filename, session):
        """Standard TF checkpoint with the original's variable names (e.g. output/W)."""
        d = self._saveable_dict()
        if self._saver is None or set(self._saver_keys) != set(d):
            self._saver = tf1.train.Saver(var_list=d, max_to_keep=2 ** 31 - 1, save_relative_paths=True)
            self._saver_keys = set(d)
        self._saver.save(session, filename, write_meta_graph=False, write_state=False)

    @_in_session_graph
    def load_params_from_file(self, filename, session, ignore_missing=False):
        loader = CustomCheckpointLoader(filename, saveable_params=self.get_params_list(), network=self,
                                        ignore_missing=ignore_missing)
        loader.load_now(session)

    # ---- losses and objective ----
    def get_losses_initialized(self, reduce_func=None, with_total=False):
        """
        (loss name -> LossHolder, total loss, total constraints), as the original (the totals are None without
        with_total). Losses register themselves when their layer is built. With reduce_func (e.g. identity, for
        per-frame values), fresh holders of copies of the losses using it.
        """
        root = self.get_root_network()
        losses = root.losses_dict
        if reduce_func is not None:
            losses = {name: holder.copy_new_base(reduce_func=reduce_func) for name, holder in losses.items()}
        if with_total:
            return losses, root.get_total_loss(), root.get_total_constraints()
        return losses, None, None

    def maybe_construct_objective(self):
        if self._objective is not None:
            return
        with tf.name_scope("objective/"):
            losses = []
            for name, holder in sorted(self.losses_dict.items()):
                value = holder.get_loss_value_for_objective()
                if value is None:
                    continue
                if holder.get_only_on_eval():
                    if self.train_flag is True:
                        continue
                    if not isinstance(self.train_flag, bool):
                        value = tf.cond(self.train_flag, lambda: tf.zeros_like(value), lambda: value)
                losses.append(value)
            total_loss = _add_all(losses)
            constraints = [c for c in (layer.get_constraints_value() for layer in self.get_all_layers_deep())
                           if c is not None]
            total_constraints = _add_all(constraints)
            if isinstance(total_loss, int) and isinstance(total_constraints, int):
                objective = 0
            elif isinstance(total_constraints, int):
                objective = total_loss
            elif isinstance(total_loss, int):
                objective = total_constraints
            else:
                objective = tf.add(total_loss, total_constraints, name="objective")
        self._total_loss, self._total_constraints, self._objective = total_loss, total_constraints, objective

    def get_objective(self):
        self.maybe_construct_objective()
        return self._objective

    def get_total_loss(self):
        self.maybe_construct_objective()
        return self._total_loss

    def get_total_constraints(self):
        self.maybe_construct_objective()
        return self._total_constraints

    def get_fetches_dict(self, config=None, should_train=None, should_eval=None, with_summary=False, with_size=False,
                         **_kwargs):
        """Per loss: cost:NAME, error:NAME, loss_norm_factor:NAME; with_size: size:KEY:AXIS."""
        d = {}
        for name, holder in self.losses_dict.items():
            if holder.get_only_on_eval() and should_train:
                continue
            v = holder.get_loss_value_for_fetch()
            if v is not None:
                d["cost:%s" % name] = v
            e = holder.get_error_value()
            if e is not None:
                d["error:%s" % name] = e
            d["loss_norm_factor:%s" % name] = holder.get_norm_factor()
        if with_size:
            for key in self.used_data_keys:
                data = self.extern_data.get_data(key)
                for axis, size in data.size_placeholder.items():
                    d["size:%s:%i" % (key, axis)] = size
        return d

    def get_used_targets(self):
        return sorted({t for layer in self.get_all_layers_deep() if layer.loss is not None for t in layer.targets
                       if t and not is_layer_target(t)})

    def get_default_target(self):
        targets = self.get_used_targets()
        return targets[0] if targets else self.extern_data.default_target

    # ---- rec hooks ----
    def is_inside_rec_layer(self, inside_loop=True):
        if self.inside_rec_time_dim is not None:
            return True
        if not inside_loop and self.over_rec_time_dim is not None:
            return True
        return self.parent_net.is_inside_rec_layer(inside_loop) if self.parent_net is not None else False

    def get_inside_rec_time_dim(self, inside_loop=True):
        if self.inside_rec_time_dim is not None:
            return self.inside_rec_time_dim
        if not inside_loop and self.over_rec_time_dim is not None:
            return self.over_rec_time_dim
        return self.parent_net.get_inside_rec_time_dim(inside_loop) if self.parent_net is not None else None

    def get_rec_parent_layer(self, inside_loop=True):
        layer = self.parent_layer
        while layer is not None:
            if layer.layer_class == "rec":
                return layer
            layer = layer.network.parent_layer
        return None

    def have_rec_step_info(self):
        return self.get_rec_step_info(must_exist=False) is not None

    def get_rec_step_info(self, must_exist=True):
        net = self
        while net is not None:
            if net.rec_step_info is not None:
                return net.rec_step_info
            net = net.parent_net
        if must_exist:
            raise ValueError("%r is not inside a rec loop" % self)
        return None

    def get_rec_step_index(self):
        return self.get_rec_step_info().step


class _NotGiven:
    pass


NotGiven = _NotGiven()


def _construct_dim_size_layers(desc, get_layer):
    """
    A Dim made by rf's ``Dim(size_tensor)`` (layers backend) has as lengths the output of a layer of the net dict:
    it is built first, before a layer with that dim (or a dim of dim arithmetic on it) in its output needs them.
    """
    dims = desc.get("out_shape") or (desc["out"].dims if isinstance(desc.get("out"), Data) else ())
    for d in with_arith_operands(dims):
        if d.dimension is not None or d.is_batch_dim():
            continue
        ext = d.dyn_size_ext
        size_layer_name = getattr(ext.placeholder, "get_abs_name", None) if ext is not None else None
        if size_layer_name is not None and d.complete_dyn_size() is None:
            d.dyn_size = get_layer(size_layer_name()).output.placeholder


def _global_train_flag():
    """One 'train_flag' placeholder per graph (False unless fed), for networks built without a fixed flag."""
    graph = tf1.get_default_graph()
    flag = getattr(graph, "_returnn_lite_train_flag", None)
    if flag is None:
        with tf.name_scope("globals/"):
            flag = tf1.placeholder_with_default(False, shape=(), name="train_flag")
        graph._returnn_lite_train_flag = flag
    return flag


def _add_all(values):
    if not values:
        return 0
    return tf.add_n(values) if len(values) > 1 else values[0]


def _check_output_matches_template(layer):
    """The built tensor must agree with the template (rank, static dims, dtype): templates must not lie."""
    out = layer.output
    x = out.placeholder
    if x is None:
        raise ValueError("layer %r did not set its output placeholder" % layer.name)
    if x.shape.rank is not None and x.shape.rank != out.batch_ndim:
        srcs = ", ".join("%s %s" % (s.name, s.output.short_repr()) for s in layer.sources if s is not None)
        raise ValueError("layer %r: output tensor has rank %i but its template %s has rank %i%s" % (
            layer.name, x.shape.rank, out.short_repr(), out.batch_ndim, " (sources: %s)" % srcs if srcs else ""))
    if x.dtype.base_dtype.name != out.dtype:
        raise ValueError("layer %r: output tensor dtype %s, template says %s" % (layer.name, x.dtype.name, out.dtype))
    if x.shape.rank is not None:
        for i, (got, exp) in enumerate(zip(x.shape.as_list(), out.batch_shape)):
            if got is not None and exp is not None and got != exp:
                raise ValueError("layer %r: output tensor shape %s does not match template %s (axis %i)" % (
                    layer.name, x.shape, out.short_repr(), i))


class Subnetwork(TFNetwork):
    """
    A child network of a layer (``subnetwork`` layers, ``cond`` branches, ``masked_computation`` and ``rec`` units;
    see :mod:`returnn_lite.subnetwork` for its options); the API of the original's ``returnn.tf.network.Subnetwork``.
    """

    def __init__(self, parent_net, name, net_dict=None, own_data=None, fallback_to_parent=False,
                 parent_get_layer=None, absolute_name_prefix=None, name_scope_prefix=None, parent_layer=None,
                 **flags):
        flags.setdefault("train_flag", parent_net.train_flag)
        flags.setdefault("search_flag", parent_net.search_flag)
        flags.setdefault("eval_flag", parent_net.eval_flag)
        if absolute_name_prefix is None:
            absolute_name_prefix = parent_net.get_absolute_name_prefix() + name + "/"
        super().__init__(parent_net=parent_net, extern_data=parent_net.extern_data, name=name,
                         absolute_name_prefix=absolute_name_prefix, parent_layer=parent_layer, **flags)
        self._net_dict = net_dict if net_dict is not None else {}
        self.own_data = dict(own_data or {})
        self.fallback_to_parent = fallback_to_parent
        self.parent_get_layer = parent_get_layer
        self._name_scope_prefix = name_scope_prefix

    def __repr__(self):
        return "<Subnetwork %r parent_layer=%r train=%s>" % (
            self.get_absolute_name_prefix(), self.parent_layer, self.train_flag)

    # ---- names ----
    def get_absolute_name_scope_prefix(self):
        if self._name_scope_prefix is not None:
            return self._name_scope_prefix
        return super().get_absolute_name_scope_prefix()

    # ---- what this network owns, and where the rest goes ----
    def owns_extern_data(self, key):
        return key in self.own_data

    def _get_extern_data_layer(self, name):
        key = data_key(name, self.extern_data.default_input)
        if key not in self.own_data:
            return self.parent_net._get_extern_data_layer(name)
        if name not in self.layers:
            self.layers[name] = InternalLayer(name=name, network=self, output=self.own_data[key])
        return self.layers[name]

    def get_extern_data(self, key, mark_data_key_as_used=True):
        if key in self.own_data:
            return self.own_data[key]
        return self.parent_net.get_extern_data(key, mark_data_key_as_used=mark_data_key_as_used)

    def _parent_lookup(self, name):
        return (self.parent_get_layer or self.parent_net.get_layer)(name)

    def _resolve_in_loop(self, name):
        if name == ":i":
            return self._parent_lookup(name)
        rest = parse_layer_ref(name).name  # (prev:REST)
        if self.fallback_to_parent and not self.owns_layer(rest) and rest not in self._constructing_dict():
            return self._parent_lookup(name)
        return self._parent_lookup("prev:%s/%s" % (self.name, rest))

    def _constructing_dict(self):
        return self._current_net_dict if self._current_net_dict is not None else self._net_dict

    def _resolve_not_owned(self, name, net_dict):
        if self.fallback_to_parent:
            return self._parent_lookup(name)
        return super()._resolve_not_owned(name, net_dict)

    _current_net_dict = None

    def construct_layer(self, net_dict, name=None, get_layer=None, add_layer=None, check_existing=True,
                        parent_get_layer=None):
        """
        As :meth:`TFNetwork.construct_layer`; also in the original's form ``construct_layer(name,
        parent_get_layer=None)`` (a layer of this network's own layer dict).
        """
        if isinstance(net_dict, str):
            net_dict, name = self._net_dict, net_dict
        if parent_get_layer is not None:
            self.parent_get_layer = parent_get_layer
        outer, self._current_net_dict = self._current_net_dict, net_dict
        try:
            return super().construct_layer(net_dict, name, get_layer=get_layer, add_layer=add_layer,
                                           check_existing=check_existing)
        finally:
            self._current_net_dict = outer

    # ---- the original's Subnetwork API ----
    @property
    def net(self):
        """The network itself (the original's ``Subnetwork.net``)."""
        return self

    def get_layer_func(self, get_layer):
        """:return: get_layer for this network: own names here, the rest via get_layer (the parent's lookup)."""
        self.parent_get_layer = get_layer
        return self.get_layer

    def get_sub_layer_func(self, base_get_layer):
        """:return: lookup of this network's layers for the parent (``NAME/SUB`` -> ``SUB`` here)."""
        if base_get_layer is not None:
            self.parent_get_layer = base_get_layer
        return self.get_layer

    def construct_all(self, parent_get_layer=None):
        """Build every layer of the layer dict."""
        if parent_get_layer is not None:
            self.parent_get_layer = parent_get_layer
        for name in self._net_dict:
            self.get_layer(name)

    def complete_construction_parent_subnet_layer(self, parent_get_layer=None):
        """Build what the owning layer needs (outputs, losses); :return: the owning layer."""
        if parent_get_layer is not None:
            self.parent_get_layer = parent_get_layer
        self.construct_from_dict(self._net_dict)
        return self.parent_layer

    def have_layer(self, name):
        return self.owns_layer(name)

    def get_layer_desc(self, name):
        return self._net_dict[name]

    def get_layer_class(self, name):
        return get_layer_class(self._net_dict[name]["class"])


from .checkpoint_loader import CustomCheckpointLoader, assign_values  # noqa: E402,F401 (re-export; own module)

