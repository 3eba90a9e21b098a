"""Losses: the Loss base with its class_name registry, and one module per family."""

from .base import Loss, get_loss_class, get_loss_class_names  # noqa: F401
