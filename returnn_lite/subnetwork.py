"""
:class:`Subnetwork`: the one kind of child network. Used for ``subnetwork`` layers, the branches of ``cond``, the
unit of ``masked_computation`` and the per-step networks of ``rec`` units. What differs is configuration:

- ``own_data``: extern data of the child (``data``/``data:KEY``), e.g. a subnetwork layer's sources; other keys
  resolve in the parent network;
- ``fallback_to_parent``: names the child does not own resolve in the parent (cond branches, masked_computation);
- ``parent_get_layer``: how the parent resolves names (e.g. the rec template's lookup); ``prev:X`` and ``:i`` of the
  child go there (as ``prev:<name>/X`` for the child's own layers);
- ``absolute_name_prefix`` (layer names, e.g. ``rec/``) and ``name_scope_prefix`` (params, e.g. ``rec/rec/``);
- flags: ``train_flag``, ``eval_flag`` (False where the owning layer registers the losses itself), ``search_flag``,
  ``inside_rec_time_dim`` / ``over_rec_time_dim``.
"""

from __future__ import annotations

from .layer_ref import data_key, parse_layer_ref
from .layers.base import InternalLayer, get_layer_class
from .network import TFNetwork

__all__ = ["Subnetwork"]


class Subnetwork(TFNetwork):
    """A child network of a layer (see module doc); the API of the original's ``returnn.tf.network.Subnetwork``."""

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
