"""ExternData: the descriptions (and placeholders) of the data the network is fed with."""

from __future__ import annotations

from .data import Data
from .util import did_you_mean


class DataNotFound(KeyError):
    """An extern data key that does not exist."""

    def __str__(self):
        return self.args[0] if self.args else "DataNotFound"


class ExternData:
    """Holds a :class:`Data` per data key of the dataset (e.g. "data", "classes")."""

    def __init__(self, data=None, default_input="data", default_target="classes"):
        self.data = {}
        self.default_input = default_input
        self.default_target = default_target
        if data:
            self.register_data_from_dict(data)

    def init_from_config(self, config, auto_create_placeholders=True):
        """From ``extern_data`` or the older ``num_inputs``/``num_outputs`` of a config."""
        self.default_input = config.value("default_input", "data")
        self.default_target = config.value("target", "classes")
        opts = config.typed_value("extern_data", None)
        if opts is None:
            num_inputs = config.typed_value("num_inputs", None)
            num_outputs = config.typed_value("num_outputs", None)
            opts = {}
            if num_inputs is not None:
                opts["data"] = {"dim": num_inputs}
            if isinstance(num_outputs, dict):
                for key, v in num_outputs.items():
                    dim, ndim = v if isinstance(v, (list, tuple)) else (v, 2)
                    opts[key] = {"dim": dim, "sparse": ndim == 1}
            elif num_outputs is not None:
                opts[self.default_target] = {"dim": num_outputs, "sparse": True}
        self.register_data_from_dict(opts, auto_create_placeholders=auto_create_placeholders)

    def register_data_from_dict(self, data, auto_create_placeholders=True):
        for key, opts in data.items():
            if isinstance(opts, Data):
                self.register_data(opts)
                continue
            opts = dict(opts)
            opts.setdefault("auto_create_placeholders", auto_create_placeholders)
            try:
                self.register_data(Data(name=key, **opts))
            except (TypeError, ValueError) as exc:
                raise ValueError("extern_data %r: %s" % (key, exc)) from exc

    def register_data(self, data):
        self.data[data.name] = data

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
