"""
CustomCheckpointLoader: loads a TF checkpoint into a network's params by name, with renames and param conversions.
"""

from __future__ import annotations

import tensorflow as tf

tf1 = tf.compat.v1


class CustomCheckpointLoader:
    """
    Loads a TF checkpoint into the network's params, by name, with optional renames
    (``var_name_mapping``: param name -> checkpoint name) and param conversions.
    """

    def __init__(self, filename, saveable_params, params_prefix="", load_if_prefix="", ignore_missing=False,
                 ignore_params=(), ignore_params_prefixes=(), var_name_mapping=None, network=None):
        self.filename = filename
        self.params = list(saveable_params)
        self.params_prefix = params_prefix
        self.load_if_prefix = load_if_prefix
        self.ignore_missing = ignore_missing
        self.ignore_params = set(ignore_params)
        self.ignore_params_prefixes = tuple(ignore_params_prefixes)
        self.var_name_mapping = dict(var_name_mapping or {})
        self.network = network
        try:
            self.reader = tf.train.load_checkpoint(filename)
        except Exception as exc:
            raise IOError("cannot read checkpoint %r: %s" % (filename, exc)) from exc
        self.ckpt_shapes = self.reader.get_variable_to_shape_map()

    def get_variable_value_map(self):
        """:return: dict var -> numpy value"""
        values, missing = {}, []
        for var in self.params:
            name = var.op.name
            if name in self.ignore_params or (self.ignore_params_prefixes and name.startswith(self.ignore_params_prefixes)):
                continue
            if self.load_if_prefix and not name.startswith(self.load_if_prefix):
                continue
            ckpt_name = self.var_name_mapping.get(name, self.params_prefix + name[len(self.load_if_prefix):])
            if ckpt_name not in self.ckpt_shapes:
                converted = _convert_param(name, var, self.reader, self.ckpt_shapes)
                if converted is None:
                    missing.append(name)
                    continue
                values[var] = converted
                continue
            value = self.reader.get_tensor(ckpt_name)
            if tuple(value.shape) != tuple(var.shape.as_list()):
                raise ValueError("checkpoint %r: param %r has shape %s, the network expects %s" % (
                    self.filename, name, value.shape, tuple(var.shape.as_list())))
            values[var] = value
        if missing and not self.ignore_missing:
            raise KeyError("checkpoint %r lacks params %s (it has: %s)" % (
                self.filename, missing, sorted(self.ckpt_shapes)[:50]))
        return values

    def load_now(self, session):
        from .network import assign_values  # network.py imports this module

        with session.graph.as_default():
            return self._load_now(session, assign_values)

    def _load_now(self, session, assign_values):
        values = self.get_variable_value_map()
        if self.network is not None and "global_step" in self.ckpt_shapes:
            step_var = self.network.get_root_network().global_train_step
            if step_var is not None:
                values[step_var] = self.reader.get_tensor("global_step")
        assign_values(session, values)
        return True


def _convert_param(name, var, reader, ckpt_shapes):
    """Hook for param layout conversions (e.g. other LSTM implementations); None if not convertible."""
    from .param_conversion import convert_param

    return convert_param(name, var, reader, ckpt_shapes)
