"""
Every registered layer class has an explicit example (tests/layers/examples.py) and runs in training and eval mode:
the real output must agree with its template (rank, static dims, dtype, sequence lengths of dynamic axes), and the
gradient of the sum of a float output w.r.t. the layer's params and float inputs must be finite. Templates that lie
are the most common bug class of layer libraries. A class without example fails here.
"""

import functools
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite import frontend_layers  # noqa: F401 (registers frontend_op, so the class list is complete)
from returnn_lite.data import batch_dim
from returnn_lite.extern_data import ExternData
from returnn_lite.layers import get_layer_class_names
from returnn_lite.layers.base import layer_registry
from returnn_lite.network import TFNetwork

sys.path.insert(0, os.path.dirname(__file__))
from examples import (EXAMPLES, EXTERN, FAILS_WHEN_COMPUTED, INTERNAL, NO_INPUT_GRADIENT, UNAVAILABLE,  # noqa: E402
                      UNCONNECTED_PARAMS)

tf1 = tf.compat.v1

LENS = np.array([7, 5, 4], "int32")


def _subst_tmp(obj, tmp):
    if isinstance(obj, str):
        return obj.replace("__TMP__", tmp)
    if isinstance(obj, dict):
        return {k: _subst_tmp(v, tmp) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_subst_tmp(v, tmp) for v in obj)
    return obj


def _build(layer_class, opts, train_flag, tmp="/nonexistent"):
    graph = tf.Graph()
    with graph.as_default():
        opts = _subst_tmp(dict(opts), str(tmp))
        net_dict = dict(opts.pop("_net", {}))  # helper layers some classes need as inputs
        search = opts.pop("_search", False)
        out_like_data = opts.pop("_out_like_data", False)
        desc = {"class": layer_class, "from": "data"}
        desc.update(opts)
        net_dict["output"] = desc
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=train_flag, search_flag=search)
        if out_like_data:
            desc["out"] = net.extern_data.get_data("data").copy_template()
        net.construct_from_dict(net_dict)
        return graph, net


def test_every_class_has_example():
    names = set(get_layer_class_names())
    missing = sorted(names - set(EXAMPLES) - set(UNAVAILABLE) - set(INTERNAL) - FAILS_WHEN_COMPUTED)
    assert not missing, "layer classes without example in tests/layers/examples.py: %s" % missing
    stale = sorted((set(EXAMPLES) | set(UNAVAILABLE) | set(INTERNAL) | FAILS_WHEN_COMPUTED) - names)
    assert not stale, "examples for unregistered layer classes: %s" % stale
    assert set(INTERNAL.values()) <= set(EXAMPLES)
    assert set(NO_INPUT_GRADIENT) <= set(EXAMPLES) and set(UNCONNECTED_PARAMS) <= set(EXAMPLES)


def test_masked_computation_covers_masked_select(monkeypatch):
    # inside a rec loop masked_computation becomes an internal _masked_select layer (rec/subnet.py)
    cls = layer_registry.get("_masked_select")
    built = []
    orig_init = cls.__init__

    @functools.wraps(orig_init)  # keeps the signature the option check reads
    def init(self, *args, **kwargs):
        built.append(kwargs.get("name"))
        orig_init(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", init)
    net_dict = {"output": {"class": "rec", "from": "data", "unit": {
        "sum": {"class": "reduce", "mode": "sum", "axis": "F", "from": "data:source"},
        "m": {"class": "compare", "kind": "greater", "value": 0.0, "from": "sum"},
        "mc": {"class": "masked_computation", "mask": "m", "from": "data:source",
               "unit": {"class": "linear", "n_out": 3, "from": "data"}},
        "output": {"class": "copy", "from": "mc"}}}}
    with tf.Graph().as_default() as graph:
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=True)
        net.construct_from_dict(net_dict)
        data = net.extern_data.get_data("data")
        with tf1.Session(graph=graph) as session:
            net.initialize_params(session)
            value = session.run(net.get_layer("output").output.placeholder, feed_dict={
                data.placeholder: np.random.RandomState(0).randn(3, 7, 6).astype("float32"),
                data.size_placeholder[0]: LENS})
    assert built, "masked_computation inside a rec loop did not build a _masked_select layer"
    assert value.shape[-1] == 3 and np.all(np.isfinite(value))


@pytest.mark.parametrize("layer_class", sorted(UNAVAILABLE))
def test_unavailable_raises(layer_class):
    with pytest.raises(Exception, match="NotImplementedError: layer class '%s'" % layer_class) as exc_info:
        _build(layer_class, {}, train_flag=False)
    assert UNAVAILABLE[layer_class] in str(exc_info.value)


@pytest.mark.parametrize("train_flag", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("layer_class", [name for name in get_layer_class_names()
                                         if name not in UNAVAILABLE and name not in INTERNAL
                                         and name not in FAILS_WHEN_COMPUTED])
def test_template_matches_output(layer_class, train_flag, tmp_path):
    assert layer_class in EXAMPLES, "no example for layer class %r in tests/layers/examples.py" % layer_class
    graph, net = _build(layer_class, EXAMPLES[layer_class], train_flag, tmp_path)
    with graph.as_default():
        layer = net.get_layer("output")
        out = layer.output
        data = net.extern_data.get_data("data")
        classes = net.extern_data.get_data("classes")
        rng = np.random.RandomState(0)
        feed = {
            data.placeholder: rng.randn(3, 7, 6).astype("float32"),
            data.size_placeholder[0]: LENS,
            classes.placeholder: rng.randint(0, 4, (3, 7)).astype("int32"),
            classes.size_placeholder[0]: LENS,
        }
        sizes = {i: d.dyn_size for i, d in enumerate(out.dims) if d.is_dynamic() and d.dyn_size is not None}
        grads = {}
        if out.dtype.startswith("float") and not out.sparse:
            xs = [p for p in net.get_params_list() if p.dtype.base_dtype.is_floating] + [data.placeholder]
            gs = tf1.gradients(tf.reduce_sum(tf.cast(out.placeholder, tf.float32)), xs)
            grads = {x.name: g for x, g in zip(xs, gs) if g is not None}
            trainable = set(net.get_trainable_params())
            layer_params = [p.name for key, p in layer.params.items()
                            if p in trainable and p.dtype.base_dtype.is_floating
                            and UNCONNECTED_PARAMS.get(layer_class) != key]
        with tf1.Session(graph=graph) as session:
            net.initialize_params(session)
            value, size_values, grad_values = session.run((out.placeholder, sizes, grads), feed_dict=feed)
    value = np.asarray(value)
    assert value.ndim == out.batch_ndim, "rank: got %s, template %s" % (value.shape, out)
    for axis, dim in enumerate(out.batch_shape):
        if dim is not None:
            assert value.shape[axis] == dim, "axis %i: got %s, template %s" % (axis, value.shape, out)
    if out.have_batch_axis() and out.dims[out.batch_dim_axis] is batch_dim:  # not a merged/flattened batch axis
        assert value.shape[out.batch_dim_axis] == 3 * (out.beam.beam_size if out.beam else 1)
    assert value.dtype == np.dtype(out.dtype), "dtype: got %s, template %s" % (value.dtype, out.dtype)
    if out.sparse and value.size:
        assert value.min() >= 0 and value.max() < out.dim
    for axis, lens in size_values.items():
        lens = np.asarray(lens)
        assert lens.max() <= value.shape[axis], "seq lens %s exceed axis %i of shape %s" % (lens, axis, value.shape)
        if out.have_batch_axis() and lens.ndim == 1:
            assert lens.shape[0] == value.shape[out.batch_dim_axis]  # the batch may be merged with other axes
    if out.dtype.startswith("float") and not out.sparse:
        for name, g in grad_values.items():
            g = np.asarray(g.values if hasattr(g, "values") else g)
            assert np.all(np.isfinite(g)), "gradient w.r.t. %s is not finite" % name
        if layer_class not in NO_INPUT_GRADIENT:
            assert data.placeholder.name in grad_values, "output of %r is not connected to its input" % layer_class
        for name in layer_params:  # the layer's own params must get a gradient from its output
            assert name in grad_values, "param %s of layer %r is not connected to its output" % (name, layer_class)
