"""The state of cell units, as rec layers, their sub-layers and beams see it."""

from __future__ import annotations

import tensorflow as tf


def last_hidden_state(state, key="*"):
    """Concatenation of the state parts (sorted by name, i.e. c before h), or one part."""
    if key not in (None, "*") and key in state:
        return state[key]
    parts = [state[k] for k in sorted(state)]
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)
