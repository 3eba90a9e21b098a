"""The rec layer family: cell units, the per-step subnetwork loop, and its helper layers."""

from . import cells, convert, layer  # noqa: F401 (registers the layer classes and the param converter)
from .layer import RecLayer  # noqa: F401
