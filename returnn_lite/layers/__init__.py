"""Layers, grouped by family. Importing a family module registers its layer classes."""

from .base import (  # noqa: F401
    ConcatInputLayer,
    CopyLayer,
    InternalLayer,
    LayerBase,
    get_layer_class,
    get_layer_class_names,
    register_layer_class,
)
