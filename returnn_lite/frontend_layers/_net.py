"""
The net dict under construction: :class:`Layer` (the raw tensor of the layers backend: a layer name and its dict)
and :class:`NetDictBuilder` (the layer dict, unique names mirroring the module hierarchy, e.g. ``lstm/ff_weight``).
"""

from __future__ import annotations

import contextlib
import re

_current = [None]


class Layer:
    """A layer of the net dict being built: the raw tensor of the layers backend."""

    __slots__ = ("name", "layer_dict", "builder")

    def __init__(self, name, layer_dict, builder):
        self.name = name
        self.layer_dict = layer_dict
        self.builder = builder

    def get_abs_name(self):
        return self.name

    def __repr__(self):
        return "<Layer %r %s>" % (self.name, self.layer_dict.get("class"))


def _snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class NetDictBuilder:
    """Collects the layers emitted by rf calls; layer names are prefixed by the module path (``a/b/op``)."""

    def __init__(self, parent=None):
        self.parent = parent  # the builder of the enclosing net dict (for a loop body)
        self.net_dict = {}
        self.scope = []  # path parts of the current module
        self._counters = {}
        self.extern_layers = {}
        self.dim_sources = {}  # Dim -> an rf Tensor (of this net dict) that has it (for range_in_axis)

    def __enter__(self):
        self._prev = _current[0]
        _current[0] = self
        return self

    def __exit__(self, *exc):
        _current[0] = self._prev

    def unique_name(self, base, *, absolute=False):
        name = base if absolute else "/".join(self.scope + [base])
        if name not in self.net_dict:
            return name
        i = self._counters.get(name, 0)
        while True:
            i += 1
            cand = "%s_%i" % (name, i)
            if cand not in self.net_dict:
                self._counters[name] = i
                return cand

    def add_layer(self, base_name, layer_dict, *, absolute=False):
        name = self.unique_name(base_name, absolute=absolute)
        self.net_dict[name] = layer_dict
        return Layer(name, layer_dict, self)

    @contextlib.contextmanager
    def module_scope(self, module):
        path = getattr(module, "_rfl_path", None)
        prev = self.scope
        if path is None:  # a module that is not part of the model: named after its class, in the current scope
            self.scope = prev + [self.unique_name(_snake(type(module).__name__)).split("/")[-1]]
        else:
            self.scope = [p for p in path.split(".") if p]
        try:
            yield
        finally:
            self.scope = prev


def get_current_builder():
    if _current[0] is None:
        raise RuntimeError("rf (layers backend): no net dict under construction; rf calls must run inside "
                           "returnn_lite.frontend_layers.get_net_dict() (or NetDictBuilder())")
    return _current[0]


def dim_source(dim):
    """A Tensor of this or the enclosing net dict that has ``dim`` (for range_in_axis), or None."""
    builder = get_current_builder()
    for b in (builder, builder.parent):
        if b is not None and dim in b.dim_sources:
            return b.dim_sources[dim]
    return None
