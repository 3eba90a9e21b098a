"""
Exceptions of network construction (re-exported by :mod:`returnn_lite.network`, as in the original).

This module imports nothing from the package, so that every other module (layers, losses, the rec loop) can raise
these errors without importing the network.
"""

from __future__ import annotations

__all__ = ["NetworkError", "NetworkConstructionDependencyLoopException", "LayerNotFound", "NetworkLayerException",
           "LayerOptionError"]


def _net_prefix(network):
    return network.get_absolute_name_prefix() if network is not None else ""


class NetworkError(Exception):
    """Base of the network construction errors."""


class NetworkConstructionDependencyLoopException(NetworkError):
    """Layers that depend on each other without ``prev:``."""

    def __init__(self, network, layer_name, constructing_layers, net_dict=None):
        chain = list(constructing_layers[constructing_layers.index(layer_name):]) + [layer_name]
        super().__init__("dependency loop in network %r: %s (break it with 'prev:' inside a rec unit)" % (
            _net_prefix(network) or "root", " -> ".join(repr(n) for n in chain)))
        self.network = network
        self.layer_name = layer_name
        self.constructing_layers = constructing_layers
        self.net_dict = net_dict


class LayerNotFound(NetworkError):
    """A layer name that cannot be resolved."""

    def __init__(self, message, layer_name=None, network=None, net_dict=None):
        super().__init__(message)
        self.layer_name = layer_name
        self.network = network
        self.net_dict = net_dict


class NetworkLayerException(NetworkError):
    """
    An error while building one layer; names the layer (with its network prefix), its class and the cause.
    Argument order as in the original: ``(message, layer_name, network, net_dict=None)``.
    """

    def __init__(self, message, layer_name, network=None, net_dict=None, layer_class=None):
        text = "layer %r%s: %s" % (_net_prefix(network) + layer_name,
                                   " (class %r)" % layer_class if layer_class else "", message)
        super().__init__(text)
        self.message = message
        self.layer_name = layer_name
        self.layer_class = layer_class
        self.network = network
        self.net_dict = net_dict


class LayerOptionError(ValueError):
    """A bad option of a layer dict (unknown, missing, wrong type, contradicting the output); names the option."""

    def __init__(self, message, option=None):
        super().__init__(message)
        self.option = option
