"""ExternData: the descriptions (and placeholders) of the data the network is fed with."""

from __future__ import annotations

from .data import Data, Dim
from .util import did_you_mean


class DataNotFound(KeyError):
    """An extern data key that does not exist."""

    def __str__(self):
        return self.args[0] if self.args else "DataNotFound"


class ExternData:
    """Holds a :class:`Data` per data key of the dataset (e.g. "data", "classes")."""

    def __init__(self, data=None, default_input="data", default_target="classes"):
        self.data = {}
        self.extra_added_keys = set()  # keys registered by layers (register_as_extern_data): never fed
        self.default_input = default_input
        self.default_target = default_target
        if data:
            self.register_data_from_dict(data)

    def init_from_config(self, config, auto_create_placeholders=True):
        """
        From ``extern_data`` or the older ``num_inputs``/``num_outputs`` of a config, in all their forms:
        ``num_outputs = 2`` (sparse ``classes``), ``{"classes": [dim, ndim]}`` (ndim 1: sparse, 2: dense,
        more: extra spatial axes; also in ``extern_data``), ``{"classes": dim}`` (sparse; ``data``: dense), dict
        values as Data kwargs (``{"dim": 205, "sparse": True, "dtype": "uint8"}``), ``num_inputs`` (dense ``data``,
        sparse with ``sparse_input``). HyperParam placeholders fail with one line naming the key.
        """
        from .compat.hyper_param import check_no_hyper_params

        self.default_input = config.value("default_input", "data")
        self.default_target = config.value("target", "classes")
        opts = config.typed_value("extern_data", None)
        if opts is not None:
            check_no_hyper_params(opts, "config extern_data")
            if not isinstance(opts, dict):
                raise ValueError("config extern_data must be a dict (data key -> Data kwargs), got %r" % (opts,))
        else:
            for key in ("num_inputs", "num_outputs"):
                check_no_hyper_params(config.typed_value(key, None), "config " + key)
            opts = extern_data_opts_from_num_outputs(config)
        self.register_data_from_dict(opts, auto_create_placeholders=auto_create_placeholders)

    def register_data_from_dict(self, data, auto_create_placeholders=True):
        for key, opts in data.items():
            if isinstance(opts, Data):
                self.register_data(opts)
                continue
            if isinstance(opts, (list, tuple)):  # the original's (dim, ndim) shorthand
                opts = _dim_ndim_opts(key, opts, "extern_data")
            if not isinstance(opts, dict):
                raise ValueError("extern_data %r: expected a dict of Data kwargs or (dim, ndim), got %r" % (key, opts))
            opts = dict(opts)
            if isinstance(opts.get("dim"), Dim):  # "dim": feature Dim object
                opts["dim"] = opts["dim"].dimension
            opts.setdefault("auto_create_placeholders", auto_create_placeholders)
            from .layer_options import check_extern_data_opts
            try:
                check_extern_data_opts(opts)
                self.register_data(Data(name=key, **opts))
            except (TypeError, ValueError, IndexError) as exc:
                raise ValueError("extern_data %r: %s" % (key, exc)) from exc

    def register_data(self, data, extra_added=False):
        """:param bool extra_added: registered by a layer (``register_as_extern_data``), not fed from the dataset"""
        self.data[data.name] = data
        if extra_added:
            self.extra_added_keys.add(data.name)

    def has_data(self, name):
        return name in self.data

    def get_data(self, name):
        if name not in self.data:
            raise DataNotFound("ExternData: unknown key %r. Known keys: %s.%s" % (
                name, sorted(self.data), did_you_mean(name, self.data)))
        return self.data[name]

    def get_default_input_data(self):
        if self.default_input in self.data:
            return self.data[self.default_input]
        return next(iter(self.data.values()))

    def get_default_target_data(self):
        return self.get_data(self.default_target)

    def get_sorted_data_items(self):
        keys = sorted(self.data)
        for k in (self.default_target, self.default_input):
            if k in keys:
                keys.remove(k)
                keys.insert(0, k)
        return [(k, self.data[k]) for k in keys]

    def get_data_description(self):
        return ", ".join("%s: %s" % (k, v.short_repr()) for k, v in self.get_sorted_data_items())

    def get_all_dimension_tags(self, allow_same_feature_dim=False):
        tags = []
        for _, data in self.get_sorted_data_items():
            for d in data.dims:
                if d not in tags:
                    tags.append(d)
        return tags

    def __repr__(self):
        return "<ExternData %s>" % self.get_data_description()


def _ndim_opts(dim, ndim):
    if ndim == 1:
        return {"dim": dim, "shape": (None,), "sparse": True}
    if ndim == 2:
        return {"dim": dim, "shape": (None, dim)}
    if isinstance(ndim, int) and ndim >= 3:
        return {"dim": dim, "shape": (None,) * (ndim - 1) + (dim,)}
    raise ValueError("ndim %r: expected 1 (sparse), 2 (dense) or more" % (ndim,))


def _dim_ndim_opts(key, value, option):
    """``(dim, ndim)`` -> Data kwargs: ndim 1 sparse ``[T]``, 2 dense ``[T, dim]``, more: extra spatial axes."""
    if len(value) != 2:
        raise ValueError("config %s[%r] = %r: expected (dim, ndim)" % (option, key, value))
    dim, ndim = value
    try:
        return _ndim_opts(int(dim) if dim is not None else None, int(ndim))
    except (TypeError, ValueError) as exc:
        raise ValueError("config %s[%r] = %r: %s" % (option, key, value, exc)) from None


def extern_data_opts_from_num_outputs(config):
    """Data kwargs per key from ``num_inputs``/``num_outputs`` (and ``sparse_input``), as the original reads them."""
    target = config.value("target", "classes")
    num_inputs = config.typed_value("num_inputs", None)
    if num_inputs is not None and not isinstance(num_inputs, int):
        try:
            num_inputs = int(num_inputs)
        except (TypeError, ValueError):
            raise ValueError("config num_inputs: expected an int, got %r" % (num_inputs,)) from None
    num_outputs = config.typed_value("num_outputs", None)
    if num_outputs is None:
        entries = {}
    elif isinstance(num_outputs, dict):
        entries = dict(num_outputs)
    else:
        try:
            entries = {target: [int(num_outputs), 1]}
        except (TypeError, ValueError):
            raise ValueError("config num_outputs: expected an int or a dict, got %r" % (num_outputs,)) from None
    opts = {}
    for key, value in entries.items():
        if isinstance(value, dict):
            opts[key] = dict(value)
        elif isinstance(value, Dim):
            opts[key] = {"dim": value.dimension, "sparse": key != "data"}
        elif isinstance(value, (list, tuple)):
            opts[key] = _dim_ndim_opts(key, value, "num_outputs")
        elif isinstance(value, int):
            opts[key] = _ndim_opts(value, 2 if key == "data" else 1)
        else:
            raise ValueError("config num_outputs[%r] = %r: expected an int, [dim, ndim] or a dict" % (key, value))
    if "data" not in opts and num_inputs is not None:
        sparse = config.bool("sparse_input", False)
        opts["data"] = _ndim_opts(num_inputs, 1 if sparse else 2)
    return opts
