"""Activation functions by the names RETURNN configs use, and Python expressions of ``x``."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {
    "identity": tf.identity,
    "linear": tf.identity,
    "relu": tf.nn.relu,
    "relu6": tf.nn.relu6,
    "crelu": tf.nn.crelu,
    "elu": tf.nn.elu,
    "selu": tf.nn.selu,
    "gelu": _gelu_tanh,
    "gelu2": lambda x: x * tf.sigmoid(1.702 * x),
    "gelu3": lambda x: tf.nn.gelu(x, approximate=False),
    "silu": tf.nn.silu,
    "swish": tf.nn.silu,
    "tanh": tf.tanh,
    "sigmoid": tf.sigmoid,
    "log_sigmoid": tf.math.log_sigmoid,
    "softplus": tf.nn.softplus,
    "softsign": tf.nn.softsign,
    "softmax": tf.nn.softmax,
    "log_softmax": tf.nn.log_softmax,
    "leaky_relu": tf.nn.leaky_relu,
    "abs": tf.abs,
    "neg": tf.negative,
    "exp": tf.exp,
    "log": tf.math.log,
    "sqrt": tf.sqrt,
    "rsqrt": tf.math.rsqrt,
    "square": tf.square,
    "sin": tf.sin,
    "cos": tf.cos,
    "erf": tf.math.erf,
    "round": tf.round,
    "floor": tf.floor,
    "ceil": tf.math.ceil,
    "sign": tf.sign,
    "logical_not": tf.logical_not,
    "safe_log": lambda x: tf.math.log(tf.maximum(x, 1e-20)),
}


def get_activation_function(name):
    """
    :param str|None name: a known name ("relu"), "a+b" compositions applied left to right,
        or a Python expression of ``x`` using ``tf``/``np`` (e.g. "tf.sqrt(tf.abs(x)) * 2")
    :rtype: (tf.Tensor)->tf.Tensor
    """
    if name is None or name == "":
        return tf.identity
    if callable(name):
        return name
    if not isinstance(name, str):
        raise TypeError("invalid activation %r" % (name,))
    if name in ACTIVATIONS:
        return ACTIVATIONS[name]
    if "+" in name and all(p.strip() in ACTIVATIONS for p in name.split("+")):
        funcs = [ACTIVATIONS[p.strip()] for p in name.split("+")]

        def composed(x):
            for f in funcs:
                x = f(x)
            return x

        return composed
    if "x" in name and ("(" in name or any(op in name for op in "*/+-")):
        try:
            code = compile(name, "<activation>", "eval")
        except SyntaxError as exc:
            raise ValueError("invalid activation expression %r: %s" % (name, exc)) from exc
        ns = {"tf": tf, "np": np, "math": math, **ACTIVATIONS}
        return lambda x: eval(code, dict(ns), {"x": x})  # noqa: S307 (config expressions, as in the original)
    from .util import did_you_mean

    raise ValueError("invalid activation function %r.%s Known: %s" % (
        name, did_you_mean(name, ACTIVATIONS), ", ".join(sorted(ACTIVATIONS))))
