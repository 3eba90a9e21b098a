"""
LayerBase, the layer registry, and the mechanics every layer shares: sources, params, the
default output template, input concatenation and dropout, constraints (L2, darc1, spatial smoothing).
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from ..data import Data, Dim
from ..initializers import get_initializer, get_or_create_variable
from ..layer_ref import LayerOption, as_layer_option, is_layer_target, resolve_layer_option, target_ref
from ..registry import Registry
from ..util import NotSpecified, as_list, get_valid_scope_name_from_str

tf1 = tf.compat.v1

def _load_all_layers():
    from . import _load_all  # noqa: F401 (registers every family on first use)


layer_registry = Registry("layer class", lazy_load=_load_all_layers, list_known=False)


def register_layer_class(cls, name=None):
    return layer_registry.register(name or cls.layer_class, cls)


def is_saveable_param(var):
    """False for params registered with add_param(saveable=False) (e.g. the keep_over_epoch state variables)."""
    return not getattr(var, "_returnn_lite_not_saveable", False)


def get_layer_class(name):
    """
    :param str name: layer_class, e.g. "linear"
    :rtype: type[LayerBase]
    """
    return layer_registry.get(name)


def get_layer_class_names():
    return layer_registry.names()


class LayerBase:
    """
    Base of all layers. A subclass sets ``layer_class`` and builds ``self.output.placeholder`` in __init__.
    Options every layer has:

    :param n_out: the output feature dim (checked against the real output; derived from the target with a loss)
    :param out_type: the output template in detail (dict: dim, shape, sparse, dtype, ...), checked likewise
    :param target: the loss target: an extern data key, or "layer:NAME"
    :param loss: loss name (see returnn_lite.losses), computed on this layer's output against the target
    :param size_target: extern data key whose sequence lengths the output takes (e.g. in a rec loop)
    :param reuse_params: share params with another layer (layer name, or {"map": {param: {...}}})
    :param name_scope: scope of the params instead of the layer name ("" = none, "/x" = absolute)
    :param param_device: device of the params (e.g. "CPU")
    :param is_output_layer: build this layer even if nothing depends on it
    :param only_on_eval: the loss only counts in evaluation, not in training
    :param only_on_search: this layer (and top-level layers depending on it) only in a network with search_flag
        (search, or the extra net of ``search_train_network_layers`` in training); skipped otherwise
    :param copy_output_loss_from_source_idx: (refused unless None) take the loss of a source
    :param batch_norm: batch normalization of the output (True or a dict of batch_norm options)
    :param L2: L2 constraint factor of the params (adds L2 * sum of squares to the constraints)
    :param darc1: DARC1 constraint factor (max over features of the summed |output|)
    :param spatial_smoothing: spatial smoothing constraint factor of the output
    :param param_variational_noise: stddev of Gaussian noise added to the params in training
    :param param_dropout: dropout rate on the params (with >= 2 dims) in training
    :param updater_opts: (refused unless empty) per-layer updater options
    :param initial_output: inside a rec unit: prev:THIS at the first step ("zeros", "ones", "var", a layer, a value)
    :param state: (refused unless None) explicit state
    :param need_last: inside a rec unit: keep the last frame (rec_last_output)
    :param rec_previous_layer: inside a rec unit: this layer of the previous step (set by the loop)
    :param encapsulate: (refused unless False) build all sub-layers as one unit
    :param collocate_with: in a rec loop: layers that stay with this one (moved out of the loop only together)
    :param trainable: False: the params are not updated in training
    :param custom_param_importer: function(layer, values_dict, session) loading this layer's params from a checkpoint
    :param register_as_extern_data: register the output as extern data under this key
    :param control_dependencies_on_output: function(layer) -> ops that run before the output is used
    :param debug_print_layer_output: print the output (and sequence lengths) whenever it is computed
    :param out_shape: the expected output dims (a set of Dims, as the original): the output template must have
        exactly these (inside a rec loop also the loop's time dim), else an error naming the layer; an
        :class:`OutShape` also checks dtype and sparse dim and names where the dims were decided (e.g. the rf call)
    :param out_dim: the output feature (or sparse) Dim: gives n_out where that is missing, and the output template
        takes this Dim object as its feature dim (classes with an own ``out_dim`` option handle it themselves)
    :param in_dim: the input feature Dim: must be the feature dim of the (concatenated) sources (that Dim, or one of
        its size that is no other axis of the input), else an error naming the option
    :param param_dropout_min_ndim: ``param_dropout`` only on params with at least this many dims (None: all)
    """

    layer_class = None
    recurrent = False  # True if the layer depends on the order of frames (matters for rec loops)
    # Options that name layers: a name, or a LayerOption(name, form, keywords, dependency) for the other forms
    # (dict of layers, (layer, x) pairs, loss targets; see layer_ref.resolve_layer_option). Merged along the MRO
    # (subclass first); transform_config_dict resolves them, get_dep_layers lists their layers.
    layer_options = (LayerOption("initial_output", keywords=("zeros", "ones", "var", "keep_over_epoch",
                                                            "keep_over_epoch_no_init", "apply(0)"), dependency=False),)
    default_from = "data"  # the sources without a "from" (() for none; or a function(layer dict) -> sources)
    from_form = "layers"  # form of "from" (see layer_ref.resolve_layer_option): "layers", or "pairs" ((layer, x))
    required_options = ()  # options that must be given, not as None (beyond the __init__ args without default)
    dep_attributes = ()  # attributes with layers this layer depends on that are no option (e.g. a subnetwork's output)
    option_types = {"batch_norm": (bool, dict)}  # accepted types where the default's type is not the only one
    # options refused (an error naming them) unless they have one of these values
    unsupported_options = {"copy_output_loss_from_source_idx": (None,),
                           "state": (None,), "encapsulate": (False, None),
                           "updater_opts": (None, {})}
    # options honoured outside the layer class (checked by tests/test_layer_options.py)
    options_read_elsewhere = {"need_last": "the rec loop (layers/rec/subnet.py)",
                              "collocate_with": "the rec loop (layers/rec/subnet.py)",
                              "only_on_search": "the network (network.py construct_from_dict)",
                              "initial_output": "the rec loop (layers/rec/subnet.py)"}
    options_without_effect = {}  # option -> why the behaviour is already the one asked for
    n_out_is_output_dim = True  # an explicit n_out must equal the output's feature dim

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("layer_class"):
            register_layer_class(cls)

    def __init__(self, name, network, output, n_out=NotSpecified, out_type=None, sources=(), target=None,
                 loss=None, size_target=None, reuse_params=None, name_scope=None, param_device=None,
                 is_output_layer=None, only_on_eval=False, only_on_search=False, copy_output_loss_from_source_idx=None,
                 batch_norm=False, L2=None, darc1=None, spatial_smoothing=0.0, param_variational_noise=None,
                 param_dropout=None, updater_opts=None, initial_output=None, state=None, need_last=False,
                 rec_previous_layer=None, encapsulate=False, collocate_with=None, trainable=None,
                 custom_param_importer=None, register_as_extern_data=None, control_dependencies_on_output=None,
                 debug_print_layer_output=None, out_shape=None, out_dim=None, in_dim=None,
                 param_dropout_min_ndim=None, **kwargs):
        if kwargs:
            bad = sorted(kwargs)
            raise TypeError("%s layer %r: unknown option%s %s" % (
                self.layer_class, name, "s" if len(bad) > 1 else "", ", ".join(repr(k) for k in bad)))
        self.name = name
        self.network = network
        self.use_batch_norm = batch_norm  # True or dict of batch_norm options; applied in post_init
        self.output = output
        self.n_out = n_out
        self.out_type = out_type
        self.sources = list(sources)
        self.target = target
        self.targets = as_list(target)
        self.loss = loss
        self.size_target = size_target
        self.reuse_params = reuse_params
        self.is_output_layer_flag = is_output_layer
        self.only_on_eval = only_on_eval
        self.L2 = L2
        self.darc1 = darc1
        self.spatial_smoothing = spatial_smoothing
        self.initial_output = initial_output
        self.rec_previous_layer = rec_previous_layer
        self.trainable = True if trainable is None else trainable
        self.register_as_extern_data = register_as_extern_data
        self.custom_param_importer = custom_param_importer  # read by checkpoint_loader.py
        self.updater_opts = updater_opts  # refused unless empty (see unsupported_options)
        self.name_scope = name_scope
        self.param_device = param_device
        self.param_variational_noise = param_variational_noise
        self.param_dropout = param_dropout
        self.param_dropout_min_ndim = param_dropout_min_ndim
        if in_dim is not None:
            check_in_dim(self.layer_class, name, in_dim, sources)
        self.control_dependencies_on_output = control_dependencies_on_output
        self.debug_print_layer_output = debug_print_layer_output
        if out_shape is not None:
            verify_out_shape(self, output, out_shape)
        self.params = {}
        self.saveable_param_replace = {}
        self.stats = {}
        self.kwargs = None  # set by the network: the options this layer was built with

    # ---- config -> kwargs ----
    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        """
        Resolve names in the layer dict d (in place): "from" -> d["sources"] (layers), "loss" -> a Loss,
        "target" checked, "n_out" derived from the target when a loss is set and n_out is missing.
        """
        src_names = d.pop("from", NotSpecified)
        if src_names is NotSpecified:
            src_names = cls.default_from(d) if callable(cls.default_from) else cls.default_from
        d["sources"] = resolve_layer_option(_FROM_OPTIONS[cls.from_form], src_names, get_layer)
        if d.get("reuse_params"):
            d["reuse_params"] = _ReuseParams.from_config(d["reuse_params"], network, get_layer)
        loss_name = d.get("loss")
        loss_opts = d.pop("loss_opts", None) or {}
        loss_scale = d.pop("loss_scale", 1.0)
        if d.pop("loss_only_on_non_search", None) and network.search_flag and loss_name:
            loss_name = d["loss"] = None  # no loss in search
        if loss_name and not d.get("target"):
            from ..losses import get_loss_class

            # losses without need_target (as_is, via_layer, ...) get no default target
            default_target = get_loss_class(loss_name).get_default_target(network.extern_data)
            if default_target:
                d["target"] = default_target
        target = d.get("target")
        target_layers = None
        if is_layer_target(target):
            target_layers = {target: get_layer(target_ref(target))}  # built before this layer (its loss needs it)
        elif target and not (network.search_flag and not loss_name):
            # an unknown data key is an error also without a loss (only a loss marks the key as used); in search,
            # a target without a loss is not looked up (as the original: e.g. an LM's softmax naming its own target)
            for t in as_list(target):
                try:
                    network.get_extern_data(t, mark_data_key_as_used=bool(loss_name))
                except KeyError as exc:  # (DataNotFound)
                    raise type(exc)("option 'target': %s" % exc) from None
        if loss_name:
            from ..losses import get_loss_class

            loss_class = get_loss_class(loss_name)
            loss_opts = dict(loss_opts)
            loss_class.transform_config_dict(loss_opts, network=network, get_layer=get_layer)
            loss = loss_class(base_network=network, **loss_opts)
            loss.scale = loss_scale
            d["loss"] = loss
            if d.get("n_out", NotSpecified) is NotSpecified and "out_type" not in d and target:
                tdata = cls._static_get_target_data(target, network, target_layers)
                if tdata is not None and tdata.dim is not None:
                    # the instance's: its options may add a blank (edit_distance with ctc_decode)
                    d["n_out"] = loss.get_auto_output_layer_dim(tdata.feature_dim).dimension
        elif (target and isinstance(target, str) and not is_layer_target(target)
              and d.get("n_out", NotSpecified) is NotSpecified and "out_type" not in d
              and target in network.extern_data.data):
            # as the original: n_out is guessed from the target also without a loss (e.g. a softmax in a rec unit)
            tdata = network.get_extern_data(target)
            if tdata.dim is not None:
                d["n_out"] = tdata.dim
        for opt in cls.get_layer_option_decls():
            v = d.get(opt.name)
            if v is not None:
                d[opt.name] = resolve_layer_option(opt, v, get_layer, network)
        if d.get("out_dim") is not None:
            out_dim_to_n_out(cls, d)

    @classmethod
    def get_layer_option_decls(cls):
        """
        The options of this class that name layers (``layer_options`` along the MRO, subclass first), as LayerOption.
        :rtype: tuple[LayerOption]
        """
        res = _layer_option_decls.get(cls)
        if res is None:
            seen, res = set(), []
            for klass in cls.__mro__:
                for decl in klass.__dict__.get("layer_options", ()):
                    opt = as_layer_option(decl)
                    if opt.name not in seen:
                        seen.add(opt.name)
                        res.append(opt)
            res = _layer_option_decls[cls] = tuple(res)
        return res

    @classmethod
    def construct_children(cls, d, name, network, get_layer):
        """
        Explicit build step after :meth:`transform_config_dict` (which only turns names into objects), run inside
        the layer's name scope: child networks and templates (subnetwork, cond branches, masked_computation's unit,
        the rec unit's template). Results replace the option values they are built from (e.g. the ``subnetwork``
        dict becomes the :class:`Subnetwork`). Default: nothing.
        """

    @staticmethod
    def _static_get_target_data(target, network, target_layers=None):
        if is_layer_target(target):
            return target_layers[target].output if target_layers else None
        return network.get_extern_data(target)

    def _get_target_value(self, target=None):
        """The target Data for a loss (extern data key or ``layer:NAME``)."""
        target = target or self.target
        if is_layer_target(target):
            return self.network.get_layer(target_ref(target)).output
        return self.network.get_extern_data(target)

    # ---- output template ----
    @classmethod
    def get_out_data_from_opts(cls, name, network, sources=(), n_out=NotSpecified, out_type=None, **kwargs):
        """Default template: like the first source, with the feature dim replaced by n_out."""
        return cls._base_out_data(name, sources, n_out, out_type)

    @staticmethod
    def _base_out_data(name, sources, n_out=NotSpecified, out_type=None):
        out_type = dict(out_type or {})
        if n_out is not NotSpecified and n_out is not None:
            if out_type.get("dim", n_out) != n_out:
                raise ValueError("n_out %r does not match out_type dim %r" % (n_out, out_type["dim"]))
            out_type["dim"] = n_out
        out_type.setdefault("name", "%s_output" % name)
        if "shape" in out_type or "dim_tags" in out_type or "dims" in out_type or not sources or not sources[0]:
            if "dim" not in out_type and not any(k in out_type for k in ("shape", "dim_tags", "dims")):
                raise ValueError("n_out (or out_type) must be given: cannot derive the output dim")
            out = Data(**out_type)
            if sources and "dim_tags" not in out_type and "dims" not in out_type:
                out = _dyn_dims_from_sources(out, [s.output for s in sources if s is not None])
            return out
        src = concat_sources_template(sources, name=out_type["name"])
        dim = out_type.pop("dim", src.dim)
        dtype = out_type.pop("dtype", src.dtype if not src.sparse else "float32")
        sparse = out_type.pop("sparse", False)
        if sparse:
            dims = [d for i, d in enumerate(src.dims) if i != src.feature_dim_axis]
            return Data(name=out_type["name"], dims=dims, dtype=out_type.get("dtype", "int32"),
                        sparse_dim=Dim(dim, kind=Dim.Types.Feature, description="%s:sparse" % name))
        feat = Dim(dim, kind=Dim.Types.Feature, description="%s:feature-dense" % name)
        if src.sparse or src.feature_dim_axis is None:
            out = Data(name=out_type["name"], dims=list(src.dims) + [feat], dtype=dtype)
            out.feature_dim_axis = NotSpecified
            return out
        if src.dim == dim and not out_type.get("new_feature_dim"):
            feat = src.dims[src.feature_dim_axis] if src.dims[src.feature_dim_axis].dimension == dim else feat
        out = src.copy_template_replace_dim_tag(src.feature_dim_axis, feat, name=out_type["name"])
        out.dtype = tf.as_dtype(dtype).name
        return out

    # ---- params ----
    @contextlib.contextmanager
    def var_creation_scope(self):
        """Variable scope with the layer's absolute name, so params get the original's names (e.g. output/W)."""
        scope_name = self._param_scope_name()
        if self.reuse_params is not None:
            scope_name = self.reuse_params.get_scope_name(self) or scope_name
        scope = tf1.VariableScope(reuse=tf1.AUTO_REUSE, name=scope_name)
        with tf1.variable_scope(scope, auxiliary_name_scope=False), self._param_device_scope():
            yield scope

    def _param_scope_name(self):
        """
        The params' scope: <network prefix><layer name>; with the option ``name_scope``: that scope relative to the
        network prefix ("" = no own scope), or absolute if it starts with "/".
        """
        ns = getattr(self, "name_scope", None)
        if ns is None:
            return self.get_absolute_name_scope_prefix() + self.tf_scope_name
        if ns.startswith("/"):
            return ns[1:]
        prefix = self.get_absolute_name_scope_prefix()
        return prefix + ns if ns else prefix.rstrip("/")

    def _param_device_scope(self):
        """The option ``param_device`` (e.g. "CPU" or "/device:CPU:0"): where the params are placed."""
        device = getattr(self, "param_device", None)
        if not device:
            return contextlib.nullcontext()
        return tf.device(device if "/" in device or ":" in device else "/device:%s:0" % device.upper())

    def get_absolute_name_scope_prefix(self):
        return self.network.get_absolute_name_scope_prefix()

    @property
    def tf_scope_name(self):
        """The layer name as TF scope (param names), e.g. 'center__output' for the layer 'center-output'."""
        return get_valid_scope_name_from_str(self.name)

    def get_absolute_name(self):
        return self.network.get_absolute_name_prefix() + self.name

    def create_param(self, name, shape, initializer=None, dtype="float32", trainable=None, **kwargs):
        """Create (or reuse, with reuse_params) a variable named <layer>/<name> and register it."""
        if self.reuse_params is not None:
            shared = self.reuse_params.get_variable(self, name, shape)
            if shared is not None:
                return shared
        if initializer is None:
            initializer = "glorot_uniform"
        init = get_initializer(initializer, seed=self.network.random_seed_for(self, name))
        if trainable is None:
            trainable = self.trainable
        if self.reuse_params is None and not kwargs and not getattr(self, "param_device", None):
            scope_name = self._param_scope_name()
            var = get_or_create_variable(scope_name + "/" + name if scope_name else name, shape, init, dtype, trainable)
            if var is not None:
                return self.add_param(var)
        with self.var_creation_scope():
            var = tf1.get_variable(
                name, shape=shape, dtype=dtype, initializer=init, trainable=trainable, **kwargs)
        return self.add_param(var)

    def add_param(self, param, custom_update=None, trainable=None, saveable=None, axes_split_info=None):
        """
        Registers the variable; returns what the layer computes with: the variable, or in training with the
        options ``param_variational_noise`` (Gaussian noise of that stddev) / ``param_dropout`` (dropout of that rate,
        on params with at least 2 dims), as the original, the noisy / dropped-out variable.
        """
        name = param.op.name
        prefix = self._param_scope_name() + "/"
        if self.reuse_params is not None and not name.startswith(prefix):
            # another layer's param (reuse_params): it stays that layer's (its L2, trainable, saving), as the original
            return self._param_in_training(param)
        key = name[len(prefix):] if name.startswith(prefix) else name.split("/")[-1]
        self.params[key] = param
        if saveable is False:  # a param of the network (get_params_list) that is neither saved nor loaded
            self.saveable_param_replace[param] = None
            param._returnn_lite_not_saveable = True  # noqa: SLF001 (read by is_saveable_param, also by the loader)
        return self._param_in_training(param)

    def _param_in_training(self, param):
        noise = getattr(self, "param_variational_noise", None)
        rate = getattr(self, "param_dropout", None)
        if not (noise or rate) or not param.dtype.is_floating or self.network.train_flag is False:
            return param
        x = tf.convert_to_tensor(param)

        def train():
            y = x
            if noise:
                y = y + tf.random.normal(tf.shape(y), stddev=noise, dtype=y.dtype,
                                         seed=self.network.random_seed_for(self, "param_noise"))
            min_ndim = getattr(self, "param_dropout_min_ndim", None) or 0
            if rate and x.shape.rank is not None and x.shape.rank >= min_ndim:
                y = tf.nn.dropout(y, rate=rate, seed=self.network.random_seed_for(self, "param_dropout"))
            return y

        with tf.name_scope("param_noise_dropout"):
            return self.network.cond_on_train(train, lambda: x)

    def get_param_values_dict(self, session):
        return {k: v for k, v in session.run(self.params).items()}

    def set_param_values_by_dict(self, values_dict, session, ignore_wrong_shape=False, copy_param_mode=None):
        for k, v in values_dict.items():
            self.params[k].load(v, session)

    # ---- constraints and losses ----
    def get_constraints_value(self):
        c = []
        if self.L2:
            # the original: L2 * sum of squares (2 * tf.nn.l2_loss) over the layer's params
            c += [self.L2 * 2.0 * tf.nn.l2_loss(p) for _, p in sorted(self.params.items()) if p.dtype.is_floating]
        if self.darc1:
            c.append(self.darc1 * self._darc1_value())
        if self.spatial_smoothing:
            c.append(self.spatial_smoothing * self._spatial_smoothing_value())
        if not c:
            return None
        return tf.add_n(c) if len(c) > 1 else c[0]

    def _darc1_value(self):
        """DARC1: max over the feature dim of the sum of |x| over all frames (x before the activation if known)."""
        owa = getattr(self, "output_before_activation", None)
        x = owa.data if owa is not None and owa.data.placeholder is not None else self.output
        if x.have_time_axis():
            x = x.copy_masked(0.0, axes=[x.time_dim_axis])
        xt = tf.abs(x.placeholder)
        s = tf.reduce_sum(xt, axis=[i for i in range(x.batch_ndim) if i != x.feature_dim_axis])
        return tf.reduce_max(s)

    def _spatial_smoothing_value(self):
        """
        Energy of the high-pass filtered output, each frame's features seen as an h x w image (w*h = dim, w the
        largest divisor <= sqrt(dim)): circular padding, filter 1 in the center, -1/8 around; summed over frames.
        """
        import math

        out = self.output.copy_with_feature_last()
        dim = out.dim
        w = int(math.sqrt(dim))
        while dim % w:
            w -= 1
        h = dim // w
        if w < 3 or h < 3:
            raise ValueError("layer %r: spatial_smoothing needs a feature dim that is a w*h image with w,h >= 3, "
                             "got dim %r" % (self.name, dim))
        x = tf.reshape(out.placeholder, [-1, h, w, 1])  # rows of w features, as the original
        x = tf.concat([x[:, -1:], x, x[:, :1]], axis=1)
        x = tf.concat([x[:, :, -1:], x, x[:, :, :1]], axis=2)
        s = 1.0 / 8.0
        filt = tf.constant([[-s, -s, -s], [-s, 1.0, -s], [-s, -s, -s]], dtype=x.dtype)[:, :, None, None]
        y = tf.nn.conv2d(x, filt, strides=[1, 1, 1, 1], padding="VALID")
        energy = tf.reduce_sum(tf.square(y), axis=[1, 2, 3])
        energy = tf.reshape(energy, tf.shape(out.placeholder)[:-1])
        frames = out.copy_template_excluding_axis(out.feature_dim_axis)
        frames.placeholder = energy
        if frames.have_time_axis():
            frames = frames.copy_masked(0.0, axes=[frames.time_dim_axis])
        return tf.reduce_sum(frames.placeholder)

    def get_losses_initialized(self, reduce_func=None):
        return []

    # ---- misc API of the original ----
    def is_output_layer(self):
        return bool(self.is_output_layer_flag) or self.name == "output" or self.loss is not None

    def get_dep_layers(self):
        """
        The sources (in order, as given), then the layers of the declared layer options (``layer_options``, in any
        form) and of ``dep_attributes``, each once.
        """
        deps = [s for s in self.sources if s is not None]
        kwargs = self.kwargs or {}
        values = [kwargs.get(opt.name) for opt in self.get_layer_option_decls() if opt.dependency]
        values += [getattr(self, attr, None) for attr in self.dep_attributes]
        if isinstance(self.reuse_params, _ReuseParams):
            values += self.reuse_params.dep_layers()
        for x in _layers_in(values):
            if x not in deps:
                deps.append(x)
        return deps

    def get_sub_layer(self, layer_name):
        return None

    @classmethod
    def get_sub_layer_out_data_from_opts(cls, layer_name, parent_layer_kwargs):
        return None

    def get_last_hidden_state(self, key):
        return None

    def post_init(self, layer_desc):
        if self.use_batch_norm:  # the ``batch_norm`` option of every layer (see layers/norm.py)
            opts = self.use_batch_norm if isinstance(self.use_batch_norm, dict) else {}
            apply_batch_norm = get_layer_class("batch_norm").apply_batch_norm  # via the registry: no import cycle
            self.output.placeholder = apply_batch_norm(self, self.output, **opts)
        deps = []
        if self.control_dependencies_on_output is not None:  # fn(layer) -> ops that run before the output is used
            if not callable(self.control_dependencies_on_output):
                raise TypeError("option control_dependencies_on_output must be a function (layer) -> list of ops, "
                                "got %r" % (self.control_dependencies_on_output,))
            deps += list(self.control_dependencies_on_output(self) or [])
        if self.debug_print_layer_output:  # prints the output (with its sequence lengths) whenever it is computed
            out = self.output
            sizes = [d.dyn_size for d in out.dims if d.dyn_size is not None]
            deps.append(tf.print("layer %r:" % self.get_absolute_name(), out.short_repr(), out.placeholder,
                                 *(["seq lens:"] + sizes if sizes else []), summarize=3))
        if deps and self.output.placeholder is not None:
            with tf.control_dependencies(deps):
                self.output.placeholder = tf.identity(self.output.placeholder)

    @classmethod
    def get_rec_initial_extra_outputs(cls, **kwargs):
        """Hook for layers that keep state inside recurrent loops (window, cumsum, ...)."""
        return {}

    def __repr__(self):
        return "<%s %r out_type=%s>" % (self.__class__.__name__, self.get_absolute_name(),
                                        self.output.short_repr() if self.output is not None else None)


def last_hidden_state(state, key="*"):
    """
    A cell state dict (state name -> [B, n]) as ``get_last_hidden_state`` gives it: the concatenation of the parts
    (sorted by name, i.e. c before h), or the part ``key``.
    """
    if key not in (None, "*") and key in state:
        return state[key]
    parts = [state[k] for k in sorted(state)]
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)


_layer_option_decls = {}  # layer class -> its LayerOption declarations (LayerBase.get_layer_option_decls)
_FROM_OPTIONS = {form: LayerOption("from", form) for form in ("layers", "pairs")}  # "from" by LayerBase.from_form


def _layers_in(value):
    """The layers in an option value (a layer, or lists / tuples / dict values of them), in order."""
    if isinstance(value, LayerBase):
        yield value
    elif isinstance(value, (list, tuple)):
        for x in value:
            yield from _layers_in(x)
    elif isinstance(value, dict):
        for x in value.values():
            yield from _layers_in(x)


def generic_dim_options(layer_class):
    """
    Of ``out_dim`` / ``in_dim``: those that LayerBase handles for this class (no class below it declares them in its
    ``__init__``; such classes handle their own).
    """
    res = _generic_dim_options.get(layer_class)
    if res is None:
        res = set()
        for opt in ("out_dim", "in_dim"):
            for klass in layer_class.__mro__:
                init = klass.__dict__.get("__init__")
                if init is not None and opt in getattr(init, "__code__", _NO_CODE).co_varnames[
                        :init.__code__.co_argcount + init.__code__.co_kwonlyargcount]:
                    if klass is LayerBase:
                        res.add(opt)
                    break
        res = _generic_dim_options[layer_class] = frozenset(res)
    return res


_generic_dim_options = {}
_NO_CODE = (lambda: None).__code__


def _check_dim_option(layer_class, name, option, value):
    if not isinstance(value, Dim):
        raise ValueError("%s layer%s: option %s must be a Dim, got %r" % (
            layer_class, "" if name is None else " %r" % name, option, value))


def out_dim_to_n_out(layer_class, d):
    """The option ``out_dim`` (handled by LayerBase) gives ``n_out`` where that is missing (in place, on the dict)."""
    out_dim = d.get("out_dim")
    if out_dim is None or "out_dim" not in generic_dim_options(layer_class):
        return
    _check_dim_option(layer_class.layer_class, None, "out_dim", out_dim)
    if (d.get("n_out", NotSpecified) in (NotSpecified, None) and "out_type" not in d and out_dim.dimension
            and not issubclass(layer_class, CopyLayer)):
        # (copy-like layers take the input's dim: apply_out_dim checks it; rnn_cell: the units, as without num_proj)
        d["n_out"] = out_dim.dimension


def apply_out_dim(layer_class, output, opts, name):
    """
    The option ``out_dim`` (handled by LayerBase): the output template's feature dim (or sparse dim) becomes this
    Dim; it must have its size. Returns the template (a copy where a dim was replaced).
    """
    out_dim = opts.get("out_dim")
    if out_dim is None or output is None or "out_dim" not in generic_dim_options(layer_class):
        return output
    _check_dim_option(layer_class.layer_class, name, "out_dim", out_dim)
    if out_dim in output.dims or (output.sparse and output.sparse_dim == out_dim):
        return output
    if output.sparse and output.sparse_dim.dimension == out_dim.dimension:
        output = output.copy_template()
        output.sparse_dim = out_dim
        return output
    axis = output.feature_dim_axis
    if axis is not None and output.dims[axis].dimension == out_dim.dimension:
        new = output.copy_template_replace_dim_tag(axis, out_dim, name=output.name)
        if new.feature_dim_axis != axis:
            new.feature_dim_axis = axis
        new.beam = output.beam
        return new
    from ..errors import LayerOptionError

    raise LayerOptionError("%s layer %r: option out_dim=%s does not match the output %s (%s)" % (
        layer_class.layer_class, name, out_dim.short_repr(), output.short_repr(),
        "no feature dim" if axis is None and not output.sparse else "dim %r" % output.dim), "out_dim")


def check_in_dim(layer_class, name, in_dim, sources):
    """
    The option ``in_dim`` (handled by LayerBase): the feature dim of the (concatenated) sources. Accepted: that very
    Dim, or one of the same size that is no other axis of the input (e.g. a Dim declared by the config while the
    sources have their own feature Dim; the original would require the same Dim object).
    """
    from ..errors import LayerOptionError

    _check_dim_option(layer_class, name, "in_dim", in_dim)
    sources = [s for s in sources if s is not None]
    if not sources:
        raise LayerOptionError("%s layer %r: option in_dim=%s given, but the layer has no input" % (
            layer_class, name, in_dim.short_repr()), "in_dim")
    data = concat_sources_template(sources) if len(sources) > 1 else sources[0].output
    feat = data.sparse_dim if data.sparse else (
        data.dims[data.feature_dim_axis] if data.feature_dim_axis is not None else None)
    if feat is not None and (feat == in_dim or feat.dimension == in_dim.dimension and in_dim not in data.dims):
        return
    where = "it is another axis of the input %s" % data.short_repr() if in_dim in data.dims else (
        "the input %s has feature dim %s" % (data.short_repr(), feat.short_repr() if feat is not None else None))
    raise LayerOptionError("%s layer %r: option in_dim=%s must be the input's feature dim (%s; returnn_lite takes "
                           "in_dim only as the feature dim)" % (layer_class, name, in_dim.short_repr(), where), "in_dim")


class OutShape(frozenset):
    """
    ``out_shape`` value: the set of expected output dims, plus (optional) the expected dtype and sparse dim and
    ``origin``, where they were decided (e.g. the rf call site ``model.py:12``), named in the error.
    """

    def __new__(cls, dims, dtype=None, sparse_dim=None, origin=None):
        self = super().__new__(cls, dims)
        self.dtype, self.sparse_dim, self.origin = dtype, sparse_dim, origin
        return self

    def __repr__(self):
        return "{%s}" % ", ".join(repr(d) for d in self)

    def __reduce__(self):
        return OutShape, (list(self), self.dtype, self.sparse_dim, self.origin)


def verify_out_shape(layer, output, out_shape):
    """The option ``out_shape``: the template's dims must be exactly these (see :class:`OutShape`)."""
    dims = list(output.dims)
    expected = set(out_shape)
    problem = None
    if len(set(dims)) != len(dims) or set(dims) != expected:
        extra = set(dims) - expected
        loop_dims = {layer.network.get_inside_rec_time_dim(inside_loop=False)} - {None}
        if len(set(dims)) != len(dims) or not expected <= set(dims) or not extra <= loop_dims:
            problem = "output dims %s, expected %s" % (
                "[%s]" % ", ".join(d.short_repr() for d in dims),
                "{%s}" % ", ".join(d.short_repr() for d in sorted(expected, key=lambda d: d.description)))
    if problem is None and getattr(out_shape, "dtype", None) and output.dtype != out_shape.dtype:
        problem = "output dtype %s, expected %s" % (output.dtype, out_shape.dtype)
    if problem is None and isinstance(out_shape, OutShape) and output.sparse_dim != out_shape.sparse_dim:
        got, exp = output.sparse_dim, out_shape.sparse_dim
        problem = "output sparse dim %s, expected %s" % (got and got.short_repr(), exp and exp.short_repr())
    if problem:
        origin = getattr(out_shape, "origin", None)
        raise ValueError("%s layer %r%s: %s (option out_shape)" % (
            layer.layer_class, layer.name, " (from %s)" % origin if origin else "", problem))


class InternalLayer(LayerBase):
    """A layer whose output Data is given directly (extern data sources, sub-network outputs)."""

    @classmethod
    def get_out_data_from_opts(cls, output=None, **kwargs):
        return output


class _ReuseParams:
    """``reuse_params``: take params from another layer (``{"map": {"W": ...}}`` or a layer name)."""

    def __init__(self, layer=None, param_map=None):
        self.layer = layer
        self.param_map = param_map or {}

    @classmethod
    def from_config(cls, opts, network, get_layer):
        if isinstance(opts, str):
            return cls(layer=get_layer(opts))
        if isinstance(opts, LayerBase):
            return cls(layer=opts)
        if isinstance(opts, dict):
            param_map = {}
            for k, v in (opts.get("map") or {}).items():
                if isinstance(v, dict) and v.get("reuse_layer"):
                    v = dict(v, reuse_layer=get_layer(v["reuse_layer"]))
                if isinstance(v, dict) and v.get("layer_output") is not None:  # that layer's output is the param
                    lo = v["layer_output"]
                    v = dict(v, layer_output=lo if isinstance(lo, LayerBase) else get_layer(lo))
                param_map[k] = v
            layer = get_layer(opts["reuse_layer"]) if opts.get("reuse_layer") else None
            return cls(layer=layer, param_map=param_map)
        raise ValueError("invalid reuse_params %r" % (opts,))

    def get_scope_name(self, layer):
        if self.layer is not None:
            return self.layer.get_absolute_name_scope_prefix() + self.layer.tf_scope_name
        return None

    def dep_layers(self):
        """The layers whose outputs are params (map entries with ``layer_output``): dependencies of the layer."""
        return [v["layer_output"] for _, v in sorted(self.param_map.items())
                if isinstance(v, dict) and isinstance(v.get("layer_output"), LayerBase)]

    def get_variable(self, layer, name, shape):
        spec = self.param_map.get(name)
        if spec is None and name.startswith("rec/"):  # a rec layer's cell params: "W" for "rec/W" (as the original)
            spec = self.param_map.get(name[len("rec/"):])
        if isinstance(spec, dict) and spec.get("layer_output") is not None:
            return _layer_output_as_param(layer, name, spec, shape)
        if isinstance(spec, dict):
            if spec.get("reuse_layer") is not None:
                src = spec["reuse_layer"]
                return src.params.get(spec.get("param_name", name))
            return None
        if self.layer is not None and name in self.layer.params:
            return self.layer.params[name]  # the owner's param: not one of this layer's (no L2 twice, as the original)
        return None


def _layer_output_as_param(layer, name, spec, shape):
    """
    reuse_params map entry ``{"layer_output": <layer>, "shape": ...}``: that layer's output is the param ``name``
    (as the original). ``shape``: Dims (the output is transposed to this order) or ints; it must match the shape the
    layer asks for. The param is no param of this layer (the source layer owns its variables).
    """
    src = spec["layer_output"]
    out = src.output
    want = spec.get("shape")
    if want is not None and all(isinstance(d, Dim) for d in want):
        if set(want) != set(out.dims) or len(want) != len(out.dims):
            raise ValueError("layer %r: reuse_params map %r: layer_output %r has dims %s, shape asks for %s" % (
                layer.name, name, src.name, out.dims, list(want)))
        out = out.copy_transpose(list(want))
        want = [d.dimension for d in want]
    got = [d.dimension for d in out.dims]
    for what, dims in (("shape", want), ("the param shape", list(shape))):
        if dims is not None and [int(d) if d is not None else None for d in dims] != got:
            raise ValueError("layer %r: reuse_params map %r: layer_output %r has shape %s, %s is %s" % (
                layer.name, name, src.name, got, what, list(dims)))
    return out.placeholder


def _with_shared_feature(sources, name):
    """Each source's template with its feature axis replaced by one shared size-1 tag, and their common data."""
    ref = Dim(1, kind=Dim.Types.Feature, description="%s:concat-ref" % (name or "concat"))
    parts = []
    for s in sources:
        out = s.output
        if out.sparse:
            raise ValueError("cannot concatenate sparse source %r with other sources" % s.name)
        if out.feature_dim_axis is None:
            raise ValueError("cannot concatenate source %r: it has no feature axis" % s.name)
        part = out.copy_template_replace_dim_tag(out.feature_dim_axis, ref)
        part.placeholder = out.placeholder
        parts.append(part)
    return parts, Data.get_common_data(parts, name=name)


def concat_sources_template(sources, name=None):
    """Template of the sources concatenated along the feature axis (other axes broadcast)."""
    sources = [s for s in sources if s is not None]
    if not sources:
        raise ValueError("no sources to concatenate")
    if len(sources) == 1:
        return sources[0].output.copy_template(name=name)
    _, common = _with_shared_feature(sources, name)
    total = sum(s.output.dim for s in sources)
    feat = Dim(total, kind=Dim.Types.Feature, description="%s:concat-feature" % (name or "concat"))
    return common.copy_template_replace_dim_tag(common.feature_dim_axis, feat, name=name)


def concat_sources(sources, name=None):
    """Sources concatenated on the feature axis (a single source is returned as is)."""
    sources = [s for s in sources if s is not None]
    if len(sources) == 1:
        return sources[0].output.copy(name=name)
    template = concat_sources_template(sources, name=name)
    parts, common = _with_shared_feature(sources, name)
    aligned = [p.copy_compatible_to(common) for p in parts]
    f = common.feature_dim_axis
    sizes = [None] * common.batch_ndim  # the full size of each axis, from a source that has it
    for p in aligned:
        for j, d in enumerate(p.dims):
            if sizes[j] is None and j != f and d == common.dims[j]:
                sizes[j] = p.get_dim(j)
    xs = []
    for p, s in zip(aligned, sources):
        x = p.placeholder
        if any(p.dims[j] != common.dims[j] for j in range(common.batch_ndim) if j != f):
            shape = [s.output.dim if j == f else sizes[j] for j in range(common.batch_ndim)]
            x = tf.broadcast_to(x, shape)
        xs.append(x)
    template.placeholder = tf.concat(xs, axis=f)
    return template


class ConcatInputLayer(LayerBase):
    """
    Base for layers that work on their sources concatenated: sets ``self.input_data`` (with dropout).

    :param dropout: dropout rate on the (concatenated) input, in training
    :param dropout_noise_shape: noise shape of the dropout (axis description -> 1 (broadcast) or None); default as
        the original: one mask broadcast over the batch and spatial axes (see TFNetwork.apply_dropout)
    :param dropout_axis: the axis or axes (descriptions or Dims) along which the dropout mask varies, broadcast
        over all others (instead of dropout_noise_shape)
    :param dropout_on_forward: apply the dropout also outside of training
    :param mask: the original's obsolete mask kind, a check only: "dropout" (needs dropout > 0), "unity" (needs no
        dropout) or None
    """

    def __init__(self, dropout=0, dropout_noise_shape=None, dropout_on_forward=False, mask=None, dropout_axis=None,
                 **kwargs):
        super().__init__(**kwargs)
        if mask not in (None, "dropout", "unity") or (mask == "unity" and dropout) or (mask == "dropout" and not dropout):
            raise ValueError("%s layer %r: option mask=%r: must be None, 'dropout' (with dropout > 0) or 'unity' "
                             "(without dropout); dropout=%r" % (self.layer_class, self.name, mask, dropout))
        if dropout_axis is not None and dropout_noise_shape:
            raise ValueError("%s layer %r: give either option dropout_axis or dropout_noise_shape, not both" % (
                self.layer_class, self.name))
        self.input_data = None
        if self.sources:
            data = concat_sources(self.sources, name="%s_concat_input" % self.name)
            if dropout:
                if dropout_axis is not None:
                    axes = data.get_axes_from_description(dropout_axis)
                    dropout_noise_shape = [data.get_dim(i) if i in axes else 1 for i in range(data.batch_ndim)]
                data = self.network.apply_dropout(data, dropout, noise_shape=dropout_noise_shape,
                                                  on_forward=dropout_on_forward)
            self.input_data = data


class CopyLayer(ConcatInputLayer):
    """
    Output is the (concatenated) input.

    :param extra_deps: layers this one depends on without using their output
    """

    layer_class = "copy"
    layer_options = ("extra_deps",)  # dependencies without using their output

    def __init__(self, extra_deps=(), **kwargs):
        dropout = kwargs.get("dropout")
        super().__init__(**kwargs)
        self.extra_deps = extra_deps
        if self.input_data is not None:
            self.output.placeholder = self.input_data.placeholder
        if type(self) is CopyLayer and len(self.sources) == 1 and not dropout:
            # as the original: a plain copy keeps the source's pre-activation output (e.g. logits for ce)
            owa = getattr(self.sources[0], "output_before_activation", None)
            if owa is not None:
                self.output_before_activation = owa


    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), out_type=None, n_out=NotSpecified, **kwargs):
        if out_type or (n_out is not NotSpecified and not sources):
            return cls._base_out_data(name, sources, n_out, out_type)
        out = concat_sources_template(sources, name="%s_output" % name)
        if n_out is not NotSpecified and n_out is not None and out.dim != n_out:
            raise ValueError("n_out=%r does not match the input dim %r" % (n_out, out.dim))
        return out


def _dyn_dims_from_sources(out, sources):
    """
    An out_type given by shape gets the dynamic dims (time) of the source with most axes when the positions of the
    dynamic axes (and of the time axis) match, as the original takes the sources' sizes then.
    """
    if not sources:
        return out
    src = max(sources, key=lambda s: s.batch_ndim)

    def dyn_axes(data):
        return [a for a in data.get_dynamic_axes() if a != data.batch_dim_axis]

    def pattern(data):
        return ([data.get_batch_axis_excluding_batch(a) for a in dyn_axes(data)],
                data.get_batch_axis_excluding_batch(data.time_dim_axis) if data.time_dim_axis is not None else None)

    if not dyn_axes(out) or pattern(out) != pattern(src):
        return out
    for a_out, a_src in zip(dyn_axes(out), dyn_axes(src)):
        out = out.copy_template_replace_dim_tag(a_out, src.dims[a_src])
    return out
