"""TensorDict: the extern data (or outputs) of a step, name -> Tensor."""

from __future__ import annotations

from .tensor import Tensor


class TensorDict:
    """name -> :class:`returnn_lite.tensor.Tensor`"""

    def __init__(self, data=None):
        self.data = {}
        if data:
            self.update(data)

    def update(self, data, *, auto_convert=False):
        """From a TensorDict, a dict of Tensors, or (auto_convert) a dict of Tensor kwargs as in ``extern_data``."""
        if isinstance(data, TensorDict):
            data = data.data
        for key, value in data.items():
            if isinstance(value, Tensor):
                self.data[key] = value
            elif auto_convert and isinstance(value, dict):
                opts = dict(value)
                opts.pop("available_for_inference", None)
                self.data[key] = Tensor(name=key, **opts)
            else:
                raise TypeError("TensorDict.update: %r: expected a Tensor%s, got %r" % (
                    key, " or a dict (auto_convert=True)" if not auto_convert else " or a dict", value))

    def __getitem__(self, key):
        if key not in self.data:
            raise KeyError("TensorDict: no key %r (keys: %s)" % (key, sorted(self.data)))
        return self.data[key]

    def __contains__(self, key):
        return key in self.data

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)

    def keys(self):
        return self.data.keys()

    def values(self):
        return self.data.values()

    def items(self):
        return self.data.items()

    def reset_content(self):
        for v in self.data.values():
            v.placeholder = None

    def __repr__(self):
        return "TensorDict(%s)" % ", ".join("%s: %r" % kv for kv in self.data.items())
