"""
Activation functions by the names RETURNN configs use (``get_activation_function`` of the original):

* ``None``, ``""``, ``"none"``, ``"identity"``: identity
* a string with ``(``: a Python expression of ``x`` (``"tf.sqrt(tf.abs(x)) * 2"``)
* a string with one of ``+ - * /``: binary op of the two sides, each a name or a number, applied to the same input
  (``"2 * sigmoid"`` is ``2 * sigmoid(x)``, ``"relu+tanh"`` is ``relu(x) + tanh(x)``; ops checked in that order)
* otherwise the name is looked up in ``tf.nn`` (relu, elu, gelu (exact erf form), swish, softmax over the last
  axis, ...), then ``tf`` (exp, abs, sqrt, ...), then ``tf.math`` (log, log_sigmoid, erf, ...), then a few
  RETURNN helpers (gelu2, gelu3, safe_log, safe_exp, neg, ...).
"""

from __future__ import annotations

import math
import operator

import numpy as np
import tensorflow as tf


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _op_type(x):
    try:
        return x.op.type
    except AttributeError:  # eager tensor
        return None


def _safe_log(x, eps=1e-20):
    if _op_type(x) == "Softmax":  # log of a softmax: log_softmax of its logits (numerically stable, as the original)
        return tf.nn.log_softmax(x.op.inputs[0])
    if _op_type(x) == "Sigmoid":
        return tf.math.log_sigmoid(x.op.inputs[0])
    return tf.math.log(tf.maximum(x, tf.cast(eps, x.dtype)))


def _safe_exp(x, eps=1e-20):
    if _op_type(x) == "Log":
        return x.op.inputs[0]
    limit = math.log(np.finfo(x.dtype.as_numpy_dtype).max) - 1.0
    return tf.maximum(tf.exp(tf.minimum(x, limit)), tf.cast(eps, x.dtype))


# RETURNN's own helpers (reached only when tf.nn / tf / tf.math have no such name)
_EXTRA = {
    "gelu": _gelu_tanh,  # shadowed by tf.nn.gelu (exact), as in the original
    "gelu2": lambda x: x * tf.sigmoid(1.702 * x),
    "gelu3": lambda x: 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0))),
    "safe_log": _safe_log,
    "safe_exp": _safe_exp,
    "neg": tf.negative,
    "linear": tf.identity,
}

# kept for importers; the lookup below is the reference
ACTIVATIONS = dict(_EXTRA)

_BIN_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def _lookup_name(s):
    for ns in (tf.nn, tf, tf.math):
        f = getattr(ns, s, None)
        if f is not None and callable(f) and not isinstance(f, type):
            return f
    if s in _EXTRA:
        return _EXTRA[s]
    return None


def _is_number(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def _with_op(s):
    def convert(v):
        v = v.strip()
        if _is_number(v):
            try:
                num = int(v)
            except ValueError:
                num = float(v)
            return lambda x: num
        return get_activation_function(v)

    for k in "+-*/":
        if k in s:
            parts = s.split(k)
            if len(parts) != 2:
                raise ValueError("invalid activation function %r (only one %r supported)" % (s, k))
            a, b = convert(parts[0]), convert(parts[1])
            op = _BIN_OPS[k]

            def combined(x):
                return op(a(x), b(x))

            return combined
    raise ValueError("invalid activation function %r" % (s,))


def get_activation_function(name):
    """
    :param str|None|callable name: see the module doc
    :rtype: (tf.Tensor)->tf.Tensor
    """
    if not name or name in ("none", "identity"):
        return tf.identity
    if callable(name):
        return name
    if not isinstance(name, str):
        raise TypeError("invalid activation %r" % (name,))
    if "(" in name:
        try:
            code = compile(name, "<activation>", "eval")
        except SyntaxError as exc:
            raise ValueError("invalid activation expression %r: %s" % (name, exc)) from exc
        ns = {"tf": tf, "np": np, "numpy": np, "math": math}
        return lambda x: eval(code, dict(ns), {"x": x})  # noqa: S307 (config expressions, as in the original)
    if any(k in name for k in _BIN_OPS):
        return _with_op(name)
    f = _lookup_name(name)
    if f is not None:
        return f
    raise ValueError("invalid activation function %r (not in tf.nn, tf, tf.math nor one of %s)" % (
        name, ", ".join(sorted(_EXTRA))))
