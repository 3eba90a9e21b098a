"""
CustomCheckpointLoader: loads a TF checkpoint into a network's params by name, with renames
(``var_name_mapping``), prefixes, ignore lists, per-layer custom param importers and automatic layout conversions
(LSTM layouts, batch norm param versions; see param_conversion.py) when the checkpoint's layout differs from the
network's. Renames and conversions work together: a mapping may name the params in either layout, and a mapping
of one param of a layer (``new/rec/W`` -> ``old/rec/W``) also renames the layer's other params for conversions.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from . import param_conversion as pc

tf1 = tf.compat.v1


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit: the message names the file and the param."""


def normalize_checkpoint_filename(filename):
    """Checkpoint prefix for a filename given as prefix, ``.index``, ``.meta`` or ``.data-...`` path."""
    filename = str(filename)
    for ext in (".index", ".meta"):
        if filename.endswith(ext):
            return filename[:-len(ext)]
    if ".data-" in os.path.basename(filename):
        return filename[:filename.rindex(".data-")]
    return filename


class DictCheckpoint:
    """In-memory checkpoint (name -> numpy value) with the reader interface, e.g. for the conversion tool."""

    def __init__(self, values, name="<in memory>"):
        self.values = values
        self.name = name

    def get_variable_to_shape_map(self):
        return {k: list(v.shape) for k, v in self.values.items()}

    def get_variable_to_dtype_map(self):
        return {k: tf.as_dtype(v.dtype) for k, v in self.values.items()}

    def get_tensor(self, name):
        return self.values[name]


def open_checkpoint(filename):
    """:return: (prefix, tf CheckpointReader); CheckpointError naming the file if it cannot be read."""
    if isinstance(filename, DictCheckpoint):
        return filename.name, filename
    prefix = normalize_checkpoint_filename(filename)
    if not os.path.exists(prefix + ".index"):
        raise CheckpointError("checkpoint %r: no index file %r" % (prefix, prefix + ".index"))
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as exc:  # DataLossError, NotFoundError, ... : one line, naming the file
        raise CheckpointError("checkpoint %r: index file truncated or corrupt: %s" % (
            prefix, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)) from None
    return prefix, reader


def read_tensor(reader, filename, name):
    """One tensor; CheckpointError naming the file and the param on a truncated/corrupt data file."""
    try:
        return reader.get_tensor(name)
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError("checkpoint %r: cannot read param %r, data file truncated or corrupt: %s" % (
            filename, name, msg)) from None


def assign_values(session, values):
    """Assign numpy values to variables by feeding their initializers (no new ops per call; network.py uses it too)."""
    fetches, feed = [], {}
    for var, value in values.items():
        fetches.append(var.initializer)
        feed[var.initial_value] = value
    if fetches:
        session.run(fetches, feed_dict=feed)


_custom_post_init = {}  # var ref -> func(session)


def set_custom_post_init(var, func):
    """Register func(session), called for var after the network initialized its params (initialize_params)."""
    _custom_post_init[var.ref()] = func


def have_custom_post_init(var):
    return var.ref() in _custom_post_init


class CustomCheckpointLoader:
    """
    Uses tf.train.load_checkpoint (NewCheckpointReader). For each var of saveable_params (name without the
    ``:0``), the name in the checkpoint is: ``var_name_mapping[name]`` if given, else the name with ``params_prefix``
    removed from its start and ``load_if_prefix`` removed (only vars containing load_if_prefix are loaded).
    Missing names are converted from other layouts in the checkpoint (LSTM, batch norm); the run-time
    ``forget_bias`` of TF LSTM cells is folded into the bias (source: 1.0, TF's default; target: the network
    cell's unit_opts).
    """

    class CustomParamImporter:
        """Loads all params of one layer at once via the layer's ``custom_param_importer``."""

        def __init__(self, layer, checkpoint_loader):
            self.layer = layer
            self.loader = checkpoint_loader
            key, var = next(iter(layer.params.items()))
            layer_prefix = checkpoint_loader.model_name(var.op.name[:-len(key)] + "\0") or "\0"
            self.prefix_param_name = checkpoint_loader.ckpt_name(layer_prefix[:-1] + key)[:-len(key)]
            self.checkpoint_param_names = sorted(
                n[len(self.prefix_param_name):] for n in checkpoint_loader.ckpt_shapes
                if n.startswith(self.prefix_param_name))
            self.assigned = False

        def assign_var(self, var, session):
            if self.assigned:
                return
            self.assigned = True
            values = {n: self.loader.read(self.prefix_param_name + n) for n in self.checkpoint_param_names}
            importer = self.layer.custom_param_importer
            if callable(importer):
                importer(layer=self.layer, values_dict=values, session=session)
                return
            _import_with_mode(self.layer, values, session, importer, self.loader.filename)

    class VariableValue:
        """Value to assign to a variable: a numpy array, or via a CustomParamImporter."""

        def __init__(self, value=None, custom_param_importer=None):
            assert (value is None) != (custom_param_importer is None)
            self.value = value
            self.custom_param_importer = custom_param_importer

        def assign_var(self, var, session):
            if self.custom_param_importer is not None:
                self.custom_param_importer.assign_var(var, session)
            else:
                assign_values(session, {var: self.value})

    def __init__(self, filename, saveable_params, params_prefix="", load_if_prefix="", ignore_missing=False,
                 ignore_params=(), ignore_params_prefixes=(), var_name_mapping=None, network=None):
        self.filename, self.reader = open_checkpoint(filename)
        # params registered as not saveable (e.g. keep_over_epoch states) are neither in checkpoints nor loaded
        self.params = [p for p in saveable_params if not getattr(p, "_returnn_lite_not_saveable", False)]
        self.params_prefix = params_prefix or ""
        self.load_if_prefix = load_if_prefix or ""
        self.ignore_missing = ignore_missing
        self.ignore_params = set(ignore_params or ())
        self.ignore_params_prefixes = tuple(ignore_params_prefixes or ())
        self.var_name_mapping = self._normalize_mapping(var_name_mapping or {})
        self.network = network
        self.source_forget_bias = None  # run-time forget_bias of TF LSTM cells in the checkpoint (None: 1.0)
        self.load_global_step = network is not None  # load_now also sets the network's global step
        self.ckpt_shapes = self.reader.get_variable_to_shape_map()
        self._cache = {}
        self._prefix_renames = _prefix_renames(self.var_name_mapping)

    # ---- names ----
    def model_name(self, var):
        """Name of var as the checkpoint would have it before renames (prefixes removed); None: do not load."""
        name = var if isinstance(var, str) else var.op.name
        if name in self.ignore_params or name.startswith(self.ignore_params_prefixes):
            return None
        if self.params_prefix:
            if not name.startswith(self.params_prefix):
                raise CheckpointError("checkpoint %r: params_prefix %r: param %r does not have this prefix" % (
                    self.filename, self.params_prefix, name))
            name = name[len(self.params_prefix):]
        if self.load_if_prefix:
            if self.load_if_prefix not in name:
                return None
            name = name.replace(self.load_if_prefix, "", 1)
        return name

    def _normalize_mapping(self, mapping):
        """Keys may be full param names (with params_prefix / load_if_prefix) or names as in the checkpoint."""
        out = {}
        for key, value in mapping.items():
            model = None
            if self.params_prefix or self.load_if_prefix:
                try:
                    model = self.model_name(key)
                except CheckpointError:
                    model = None
            out[model if model is not None else key] = value
        return out

    def ckpt_name(self, name):
        """Checkpoint name of a (model) name, with var_name_mapping and the layer renames derived from it."""
        if name in self.var_name_mapping:
            return self.var_name_mapping[name]
        if name in self.ckpt_shapes:
            return name
        for new, old in self._prefix_renames:
            if name.startswith(new):
                return old + name[len(new):]
        return name

    def read(self, ckpt_name):
        if ckpt_name not in self._cache:
            self._cache[ckpt_name] = read_tensor(self.reader, self.filename, ckpt_name)
        return self._cache[ckpt_name]

    def has(self, name):
        """Whether the (model) name is found in the checkpoint after renames."""
        return self.ckpt_name(name) in self.ckpt_shapes

    # ---- values ----
    def get_variable_value_map(self):
        """
        :return: var -> VariableValue, for all vars found (directly or by conversion)
        :rtype: dict[tf.Variable,CustomCheckpointLoader.VariableValue]
        """
        if self.params and hasattr(self.params[0], "graph") and tf1.get_default_graph() is not self.params[0].graph:
            with self.params[0].graph.as_default():  # variables are only hashable in their graph
                return self.get_variable_value_map()
        result, missing, wanted = {}, [], 0
        importers = self._custom_importers()
        model_names = {}
        for var in self.params:
            name = self.model_name(var)
            if name is not None:
                model_names[var.ref()] = name
        all_model_names = set(model_names.values())
        for var in self.params:
            name = model_names.get(var.ref())
            if name is None:
                continue
            wanted += 1
            layer = self._layer_of(var) if importers else None
            if layer is not None and id(layer) in importers:
                result[var] = self.VariableValue(custom_param_importer=importers[id(layer)])
                continue
            value = self._value_for(var, name, all_model_names)
            if value is None:
                missing.append(name)
                continue
            result[var] = self.VariableValue(value=value)
        if missing and (not self.ignore_missing or not result):
            if self.ignore_missing:
                raise CheckpointError("checkpoint %r: none of the %i params to load is in it (ignore_missing only "
                                      "ignores some), e.g. %r; the checkpoint has e.g. %s" % (
                                          self.filename, wanted, missing[0], sorted(self.ckpt_shapes)[:10]))
            raise CheckpointError("checkpoint %r lacks params %s (looked up as %s); it has: %s" % (
                self.filename, missing[:20], [self.ckpt_name(m) for m in missing[:20]],
                sorted(self.ckpt_shapes)[:50]))
        return result

    def _value_for(self, var, name, all_model_names):
        shape = tuple(var.shape.as_list())
        dtype = var.dtype.base_dtype.as_numpy_dtype
        ckpt_name = self.ckpt_name(name)
        if ckpt_name in self.ckpt_shapes:
            value = self.read(ckpt_name)
            if tuple(value.shape) != shape:
                if pc.batch_norm_param(name) is not None and value.size == int(np.prod(shape)):
                    value = value.reshape(shape)
                else:
                    raise CheckpointError("checkpoint %r: param %r has shape %s, the network's %r expects %s" % (
                        self.filename, ckpt_name, tuple(value.shape), var.op.name, shape))
            return _cast(value, dtype, self.filename, ckpt_name)
        value = self._convert(var, name, shape, all_model_names)
        if value is None:
            return None
        if tuple(value.shape) != shape:
            raise CheckpointError("checkpoint %r: param %r converted from another layout has shape %s, the network "
                                  "expects %s" % (self.filename, name, tuple(value.shape), shape))
        return _cast(value, dtype, self.filename, name)

    def _convert(self, var, name, shape, all_model_names):
        bn = pc.batch_norm_param(name)
        if bn is not None:
            base, _, kind = bn
            ckpt_base = self.ckpt_name(base + kind)[:-len(kind)]
            for cand in pc.batch_norm_candidates(ckpt_base, kind, self.ckpt_shapes):
                return pc.reshape_batch_norm(self.read(cand), shape)
            return None
        target = pc.lstm_target_of(name)
        if target is None:
            return None
        prefix, layout, idx = target
        if layout.name == "native" and not all(n in all_model_names for n in layout.param_names(prefix)):
            return None  # e.g. rec/W_re of another cell
        canon = self._find_lstm_source(prefix)
        if canon is None:
            return None
        values = pc.canonical_to_lstm(layout, canon, self._target_forget_bias(var, layout))
        return values[idx]

    def _find_lstm_source(self, prefix):
        """Canonical LSTM params from whatever layout the checkpoint has at (the renamed) prefix."""
        for layout in pc.LSTM_LAYOUTS.values():
            for scope in layout.read_scopes:
                names = layout.param_names(prefix, scope)
                ckpt_names = [self.ckpt_name(n) for n in names]
                if not all(c in self.ckpt_shapes for c in ckpt_names):
                    continue
                if layout.merged and self.ckpt_name(prefix + scope + "recurrent_kernel") in self.ckpt_shapes:
                    continue  # keras
                shapes = {c: self.ckpt_shapes[c] for c in ckpt_names}
                if not pc._shapes_ok(shapes, ckpt_names, layout.merged):
                    continue
                try:
                    return pc.lstm_to_canonical(layout, [self.read(c) for c in ckpt_names], self.source_forget_bias)
                except ValueError as exc:
                    raise CheckpointError("checkpoint %r: %s (params %s)" % (self.filename, exc, ckpt_names)) from None
        return None

    def _target_forget_bias(self, var, layout):
        if layout.default_forget_bias == 0.0:
            return None
        layer = self._layer_of(var)
        cell = getattr(layer, "cell", None)
        opts = getattr(cell, "opts", None) or {}
        return opts.get("forget_bias", None)

    def _layer_of(self, var):
        if self.network is None:
            return None
        for layer in self.network.get_all_layers_deep():
            if any(p is var for p in layer.params.values()):
                return layer
        return None

    def _custom_importers(self):
        if self.network is None:
            return {}
        out = {}
        for layer in self.network.get_all_layers_deep():
            if getattr(layer, "custom_param_importer", None) and layer.params:
                out[id(layer)] = self.CustomParamImporter(layer, self)
        return out

    # ---- assigning ----
    def load_now(self, session):
        """Assign the values in the session (and the global step, if a network is given and the file has one)."""
        with session.graph.as_default():
            value_map = self.get_variable_value_map()
            plain = {var: v.value for var, v in value_map.items() if v.custom_param_importer is None}
            if self.load_global_step and "global_step" in self.ckpt_shapes:
                step_var = self.network.get_root_network().global_train_step
                if step_var is not None and not any(step_var is v for v in self.params):
                    plain[step_var] = self.read("global_step")
            assign_values(session, plain)
            for var, v in value_map.items():
                if v.custom_param_importer is not None:
                    v.assign_var(var, session)
        return True

    def set_as_custom_init(self):
        """Make sure that this loader is used when the network initializes its params (initialize_params):
        the owning layers load their params from the checkpoint right after the random init."""
        if self.network is None:
            raise CheckpointError("CustomCheckpointLoader(%r).set_as_custom_init needs network=" % self.filename)
        value_map = {}

        def load_var(session, var):
            if not value_map:
                value_map.update({v.ref(): val for v, val in self.get_variable_value_map().items()} or {None: None})
            val = value_map.get(var.ref())
            if val is not None:
                val.assign_var(var, session)

        hooked = set()
        for var in self.params:
            set_custom_post_init(var, lambda session, var=var: load_var(session, var))
            layer = self._layer_of(var)
            if layer is None or id(layer) in hooked:
                continue
            hooked.add(id(layer))
            _hook_post_init(layer)


def _hook_post_init(layer):
    """Layer.post_initialize_params (called by TFNetwork.initialize_params) runs the layer's custom post inits."""
    if getattr(layer, "_custom_post_init_hooked", False):
        return
    old = getattr(layer, "post_initialize_params", None)

    def post_initialize_params(session):
        if old is not None:
            old(session)
        for p in layer.params.values():
            func = _custom_post_init.get(p.ref())
            if func is not None:
                func(session)

    layer.post_initialize_params = post_initialize_params
    layer._custom_post_init_hooked = True


def _prefix_renames(mapping):
    """From new/rec/W -> old/rec/W: ("new/", "old/") (longest first), so that other params of the layer follow."""
    out = set()
    for new, old in mapping.items():
        a, b = new.split("/"), old.split("/")
        k = 0
        while k < min(len(a), len(b)) - 1 and a[-1 - k] == b[-1 - k]:
            k += 1
        if k and a[:-k] != b[:-k]:
            out.add(("/".join(a[:-k]) + "/", "/".join(b[:-k]) + "/"))
    return sorted(out, key=lambda x: -len(x[0]))


def _cast(value, dtype, filename, name):
    if value.dtype == dtype:
        return value
    if np.issubdtype(value.dtype, np.floating) and np.issubdtype(np.dtype(dtype), np.floating):
        return value.astype(dtype)
    if np.issubdtype(value.dtype, np.integer) and np.issubdtype(np.dtype(dtype), np.integer):
        return value.astype(dtype)
    raise CheckpointError("checkpoint %r: param %r has dtype %s, the network expects %s" % (
        filename, name, value.dtype, np.dtype(dtype)))


def _import_with_mode(layer, values, session, mode, filename):
    """custom_param_importer given as a copy mode: "ifpossible" (same shape only), "subset" (overlapping part)."""
    if mode not in ("ifpossible", "subset", "as-is"):
        raise CheckpointError("layer %r: custom_param_importer %r: expected a function or one of 'as-is', "
                              "'ifpossible', 'subset'" % (layer.name, mode))
    assign = {}
    for key, var in layer.params.items():
        if key not in values:
            if mode == "as-is":
                raise CheckpointError("checkpoint %r: layer %r param %r missing" % (filename, layer.name, key))
            continue
        value, shape = values[key], tuple(var.shape.as_list())
        if tuple(value.shape) == shape:
            assign[var] = value
        elif mode == "subset" and value.ndim == len(shape):
            cur = session.run(var)
            sl = tuple(slice(0, min(a, b)) for a, b in zip(value.shape, shape))
            cur[sl] = value[sl]
            assign[var] = cur
        elif mode == "as-is":
            raise CheckpointError("checkpoint %r: layer %r param %r has shape %s, expected %s" % (
                filename, layer.name, key, value.shape, shape))
    assign_values(session, assign)
