"""The rec layer family: cell units, the per-step subnetwork loop, and its helper layers."""

from . import cells, layer  # noqa: F401 (registers the layer classes)
from .layer import RecLayer  # noqa: F401
