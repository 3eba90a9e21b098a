"""
The ``tf`` that config code sees (``import tensorflow as tf`` in a config file or config function, and ``tf`` in
``eval`` strings): TensorFlow 2's ``tf`` with the TF1 names that TF 2 dropped (``tf.log``, ``tf.to_float``,
``tf.random_uniform``, ``tf.Print``, ``tf.variable_scope``, ...) filled in from ``tf.compat.v1``.

Names TF 2 has keep their TF 2 meaning (so a config that runs with the original on TF 2 computes the same);
only names TF 2 lacks come from ``tf.compat.v1``. ``tf.nn.dropout`` also takes TF1's ``keep_prob``; ``tf.where``
with a vector condition and higher-rank values selects rows as in TF1 (else it broadcasts as in TF 2).
``tf.contrib`` is gone in TF 2: using it fails with one line naming it.
"""

from __future__ import annotations

import types

import tensorflow as tf

__all__ = ["make_tf1_shim", "get_tf1_shim"]

tf1 = tf.compat.v1


class _FallbackModule(types.ModuleType):
    """A module whose attributes come from ``primary``, else ``fallback``, else ``overrides`` first."""

    def __init__(self, name, primary, fallback, overrides=None):
        super().__init__(name, getattr(primary, "__doc__", None))
        self.__dict__["_primary"] = primary
        self.__dict__["_fallback"] = fallback
        self.__dict__["_overrides"] = dict(overrides or {})

    def __getattr__(self, name):
        d = self.__dict__
        if name in d["_overrides"]:
            return d["_overrides"][name]
        if name.startswith("__"):
            return getattr(d["_primary"], name)
        for mod in (d["_primary"], d["_fallback"]):
            if mod is not None and hasattr(mod, name):
                return getattr(mod, name)
        if name == "contrib":
            raise AttributeError(
                "tf.contrib does not exist in TensorFlow 2 (returnn_lite runs on TF 2): replace the tf.contrib "
                "call in the config by its TF 2 equivalent")
        raise AttributeError("module 'tensorflow' (as given to config code) has no attribute %r" % name)

    def __dir__(self):
        d = self.__dict__
        names = set(dir(d["_primary"])) | set(d["_overrides"])
        if d["_fallback"] is not None:
            names |= set(dir(d["_fallback"]))
        return sorted(names)

    def __repr__(self):
        return "<module 'tensorflow' (TF 2 with TF1 names, for config code)>"


def _dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None, **kwargs):
    """``tf.nn.dropout`` accepting TF1's ``keep_prob`` as well as TF2's ``rate``."""
    if rate is None and keep_prob is not None:
        rate = 1.0 - keep_prob
    return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed, name=name, **kwargs)


def _where(condition, x=None, y=None, name=None):
    """
    ``tf.where`` broadcasting as in TF 2, plus TF1's row selection: a vector condition with a higher-rank x selects
    whole rows (SpecAugment code written for TF1 does ``tf.where(tf.less(i, num), masked, x)`` with num (B,)).
    """
    if x is None and y is None:
        return tf.where(condition, name=name)
    condition = tf.convert_to_tensor(condition)
    x = tf.convert_to_tensor(x)
    y = tf.convert_to_tensor(y, dtype=x.dtype)
    rank = x.shape.rank if x.shape.rank is not None else y.shape.rank
    if condition.shape.rank == 1 and rank is not None and rank > 1:
        n = condition.shape[0]
        last = x.shape[-1] if x.shape.rank is not None else None
        first = x.shape[0] if x.shape.rank is not None else None
        if not (n is not None and n == last and n != first):
            condition = tf.reshape(condition, [-1] + [1] * (rank - 1))
    return tf.where(condition, x, y, name=name)


def make_tf1_shim():
    nn = _FallbackModule("tensorflow.nn", tf.nn, tf1.nn, {"dropout": _dropout})
    sub = {"nn": nn}
    for name in ("math", "random", "train", "summary", "linalg", "image", "signal", "sparse", "strings",
                 "io"):
        primary = getattr(tf, name, None)
        fallback = getattr(tf1, name, None)
        if primary is not None and fallback is not None:
            sub[name] = _FallbackModule("tensorflow." + name, primary, fallback)
    sub["where"] = _where
    return _FallbackModule("tensorflow", tf, tf1, sub)


_shim = None


def get_tf1_shim():
    """The (cached) ``tf`` module given to config code."""
    global _shim
    if _shim is None:
        _shim = make_tf1_shim()
    return _shim
