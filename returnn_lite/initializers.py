"""Param initializers from config values: numbers, names ("glorot_uniform"), call strings, dicts."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1

_BY_NAME = {
    "glorot_uniform": tf1.glorot_uniform_initializer,
    "xavier": tf1.glorot_uniform_initializer,
    "xavier_uniform": tf1.glorot_uniform_initializer,
    "glorot_normal": tf1.glorot_normal_initializer,
    "xavier_normal": tf1.glorot_normal_initializer,
    "orthogonal": tf1.orthogonal_initializer,
    "zeros": tf1.zeros_initializer,
    "zero": tf1.zeros_initializer,
    "ones": tf1.ones_initializer,
    "constant": tf1.constant_initializer,
    "random_normal": tf1.random_normal_initializer,
    "random_uniform": tf1.random_uniform_initializer,
    "truncated_normal": tf1.truncated_normal_initializer,
    "variance_scaling": tf1.variance_scaling_initializer,
    "he_normal": lambda seed=None: tf1.variance_scaling_initializer(2.0, "fan_in", "truncated_normal", seed=seed),
    "he_uniform": lambda seed=None: tf1.variance_scaling_initializer(2.0, "fan_in", "uniform", seed=seed),
    "lecun_normal": lambda seed=None: tf1.variance_scaling_initializer(1.0, "fan_in", "truncated_normal", seed=seed),
    "lecun_uniform": lambda seed=None: tf1.variance_scaling_initializer(1.0, "fan_in", "uniform", seed=seed),
}
_BY_CLASS = {
    "variancescaling": tf1.variance_scaling_initializer,
    "glorotuniform": tf1.glorot_uniform_initializer,
    "glorotnormal": tf1.glorot_normal_initializer,
    "orthogonal": tf1.orthogonal_initializer,
    "randomnormal": tf1.random_normal_initializer,
    "randomuniform": tf1.random_uniform_initializer,
    "truncatednormal": tf1.truncated_normal_initializer,
    "constant": tf1.constant_initializer,
    "zeros": tf1.zeros_initializer,
    "ones": tf1.ones_initializer,
}


def _xavier_initializer(uniform=True, seed=None, dtype=tf.float32):
    return tf1.variance_scaling_initializer(1.0, "fan_avg", "uniform" if uniform else "normal", seed=seed, dtype=dtype)


_NAMESPACE = []  # built once (get_initializer of an expression runs once per param)


def _eval_namespace():
    if not _NAMESPACE:
        _NAMESPACE.append(_make_eval_namespace())
    return dict(_NAMESPACE[0])  # a copy: the expression must not change it for the next one


def _make_eval_namespace():
    ns = {k: getattr(math, k) for k in dir(math) if not k.startswith("_")}
    ns.update({"math": math, "numpy": np, "np": np, "tf": tf, "float": float, "int": int})
    for n, f in _BY_NAME.items():
        ns[n] = f
        ns[n + "_initializer"] = f
    class_names = {"VarianceScaling": "variancescaling", "GlorotUniform": "glorotuniform", "GlorotNormal": "glorotnormal",
                   "Orthogonal": "orthogonal", "RandomNormal": "randomnormal", "RandomUniform": "randomuniform",
                   "TruncatedNormal": "truncatednormal", "Constant": "constant", "Zeros": "zeros", "Ones": "ones"}
    ns.update({k: _BY_CLASS[v] for k, v in class_names.items()})
    ns["xavier_initializer"] = _xavier_initializer
    ns["random_uniform_abs_initializer"] = lambda limit, **kw: tf1.random_uniform_initializer(-limit, limit, **kw)
    return ns


def _normalize(name):
    name = name.strip()
    for suffix in ("_initializer", "initializer"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


_CONSTANT_CACHE = {}  # (type, value) -> tf1.constant_initializer (immutable; TF's constructor is slow)
_EXPRESSION_CACHE = {}  # expression string -> the TF initializer it gives (no seed in it: the same every time)


def _constant_initializer(value):
    key = (type(value), value)
    init = _CONSTANT_CACHE.get(key)
    if init is None:
        init = _CONSTANT_CACHE[key] = tf1.constant_initializer(value)
    return init


def get_initializer(spec, seed=None):
    """
    :param float|int|str|dict|callable spec: e.g. 0, "glorot_uniform", "random_normal(stddev=0.1)",
        {"class": "VarianceScaling", "scale": 0.5, "mode": "fan_out"}
    """
    if callable(spec) and not isinstance(spec, (str, dict)):
        return spec
    if isinstance(spec, (int, float)):
        return _constant_initializer(spec)
    if isinstance(spec, dict):
        opts = dict(spec)
        cls_name = opts.pop("class").replace("_", "").lower()
        cls_name = _normalize(cls_name)
        if cls_name not in _BY_CLASS:
            raise ValueError("unknown initializer class %r; known: %s" % (spec["class"], sorted(_BY_CLASS)))
        if "seed" not in opts and cls_name not in ("constant", "zeros", "ones"):
            opts["seed"] = seed
        return _BY_CLASS[cls_name](**opts)
    if isinstance(spec, str):
        s = spec.strip()
        try:
            return _constant_initializer(float(s))
        except ValueError:
            pass
        if "(" in s:  # an expression, evaluated as the original does (initializer names, math, numpy in scope)
            if s in _EXPRESSION_CACHE:
                return _EXPRESSION_CACHE[s]
            res = eval(s, {"__builtins__": {}}, _eval_namespace())  # noqa: S307 (config code)
            if isinstance(res, (int, float, np.number, np.ndarray)):
                return tf1.constant_initializer(res)
            if _is_v1_initializer(res):  # immutable: one object for every param with this expression
                _EXPRESSION_CACHE[s] = res
            return res
        name = _normalize(s)
        if name not in _BY_NAME:
            raise ValueError("unknown initializer %r; known: %s" % (spec, sorted(_BY_NAME)))
        factory = _BY_NAME[name]
        if name in ("zeros", "zero", "ones"):
            return factory()
        return factory(seed=seed)
    raise TypeError("invalid initializer spec %r" % (spec,))


def _variable_store():
    """TF's variable store of the current graph (what ``tf1.get_variable`` looks names up in), or None if TF changed."""
    try:
        from tensorflow.python.ops import variable_scope as tf_variable_scope

        store = tf_variable_scope._get_default_variable_store()  # noqa: SLF001 (no public API)
        return store if isinstance(getattr(store, "_vars", None), dict) else None
    except (ImportError, AttributeError):
        return None


def _is_v1_initializer(initializer):
    try:
        from tensorflow.python.ops import init_ops
    except ImportError:
        return False
    return isinstance(initializer, init_ops.Initializer)


def get_or_create_variable(full_name, shape, initializer, dtype="float32", trainable=True):
    """
    The variable ``full_name`` of the current graph as ``tf1.get_variable`` with ``reuse=AUTO_REUSE`` in the scope of
    its absolute name gives it (the same ops, names and collections, registered in TF's variable store so that later
    ``get_variable`` calls find it), without get_variable's per-call scope and signature lookups (a big net creates
    hundreds). None where that path does not apply (eager mode, other initializer kinds, ref variables, TF internals
    changed): the caller then uses ``tf1.get_variable``.
    """
    if tf.executing_eagerly() or not _is_v1_initializer(initializer):
        return None
    from tensorflow.python.ops import resource_variables_toggle

    if not resource_variables_toggle.resource_variables_enabled():
        return None
    store = _variable_store()
    if store is None:
        return None
    dtype = tf.as_dtype(dtype)
    shape = tf.TensorShape(shape)
    found = store._vars.get(full_name)  # noqa: SLF001
    if found is not None:
        if not shape.is_compatible_with(found.shape) or not dtype.is_compatible_with(found.dtype):
            raise ValueError("param %r exists with shape %s, dtype %s; asked for shape %s, dtype %s" % (
                full_name, found.shape, found.dtype.name, shape, dtype.name))
        return found
    if not shape.is_fully_defined():
        return None
    graph = tf1.get_default_graph()
    # the initial value is made before the variable (as plain TF code does), not by a callable inside it: the same
    # ops and names, without the colocation attribute TF would add to each of them
    with tf1.init_scope(), graph.name_scope(full_name + "/Initializer/"):
        initial_value = initializer(shape.as_list(), dtype=dtype)
    with graph.name_scope(None):  # absolute names, as get_variable's
        var = tf.Variable(initial_value, name=full_name, trainable=trainable, dtype=dtype.base_dtype, shape=shape)
    store._vars[full_name] = var  # noqa: SLF001
    return var
