"""
Every registered layer class that can be built from a small option set: the real output must agree
with its template (rank, static dims, dtype, sequence lengths of dynamic axes). Templates that lie
are the most common bug class of layer libraries.
"""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.data import batch_dim
from returnn_lite.extern_data import ExternData
from returnn_lite.layers import get_layer_class_names
from returnn_lite.network import TFNetwork

tf1 = tf.compat.v1

EXTERN = {"data": {"dim": 6}, "classes": {"dim": 4, "sparse": True}}
LENS = np.array([7, 5, 4], "int32")

# options that make a layer constructible; tried in order, the first that builds is checked
SPECIFIC = {
    "linear": [{"n_out": 3, "activation": "relu"}],
    "hidden": [{"n_out": 3}],
    "forward": [{"n_out": 3}],
    "softmax": [{"n_out": 3}],
    "activation": [{"activation": "tanh"}],
    "combine": [{"kind": "add", "from": ["data", "data"]}],
    "eval": [{"eval": "source(0) * 2.0"}],
    "compare": [{"kind": "greater", "value": 0.0}],
    "constant": [{"value": 1.5, "from": []}],
    "cast": [{"dtype": "int32"}],
    "switch": [{"condition": True, "true_from": "data", "false_from": 0.0}],
    "scaled_grad": [{"scale": 0.5}],
    "source": [{"data_key": "classes", "from": []}],
    "rec": [{"unit": "lstm", "n_out": 3}, {"unit": "gru", "n_out": 3}],
    "conv": [{"filter_size": (3,), "n_out": 3, "padding": "same"}],
    "pool": [{"mode": "max", "pool_size": (2,), "padding": "same"}],
    "transposed_conv": [{"filter_size": (3,), "n_out": 3, "padding": "same"}],
    "reduce": [{"mode": "sum", "axis": "T"}, {"mode": "max", "axis": "F"}],
    "reduce_out": [{"mode": "max", "num_pieces": 2}],
    "split_dims": [{"axis": "F", "dims": (2, 3)}],
    "merge_dims": [{"axes": "except_time"}, {"axes": ["B", "T"]}],
    "slice": [{"axis": "T", "slice_start": 1}, {"axis": "F", "slice_end": 2}],
    "window": [{"window_size": 3}],
    "cumsum": [{"axis": "T"}],
    "gather": [{"axis": "F", "position": 1}],
    "pad": [{"axes": "T", "padding": (1, 2)}],
    "variable": [{"shape": (3,), "from": []}],
    "self_attention": [{"num_heads": 2, "total_key_dim": 4, "n_out": 4}],
    "positional_encoding": [{"add_to_input": True}],
    "batch_norm": [{}],
    "layer_norm": [{}],
    "dot": [{"red1": "F", "red2": "F", "var1": "T", "var2": "T", "from": ["data", "data"]}],
}
GENERIC = [
    {},
    {"n_out": 3},
    {"axis": "T"},
    {"axis": "F"},
    {"axes": "T"},
]


def _try_build(layer_class, opts):
    graph = tf.Graph()
    with graph.as_default():
        desc = {"class": layer_class, "from": "data"}
        desc.update(opts)
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=False)
        net.construct_from_dict({"output": desc})
        return graph, net


@pytest.mark.parametrize("layer_class", get_layer_class_names())
def test_template_matches_output(layer_class):
    errors = []
    for opts in SPECIFIC.get(layer_class, []) + GENERIC:
        try:
            graph, net = _try_build(layer_class, opts)
            break
        except Exception as exc:  # noqa: BLE001 (find options this class accepts)
            errors.append("%s: %s" % (opts, str(exc).splitlines()[0][:200]))
    else:
        pytest.skip("not constructible from the small option sets: %s" % errors[:2])
    with graph.as_default():
        out = net.get_layer("output").output
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
        with tf1.Session(graph=graph) as session:
            net.initialize_params(session)
            value, size_values = session.run((out.placeholder, sizes), feed_dict=feed)
    value = np.asarray(value)
    assert value.ndim == out.batch_ndim, "rank: got %s, template %s" % (value.shape, out)
    for axis, dim in enumerate(out.batch_shape):
        if dim is not None:
            assert value.shape[axis] == dim, "axis %i: got %s, template %s" % (axis, value.shape, out)
    if out.have_batch_axis() and out.dims[out.batch_dim_axis] is batch_dim:  # not a merged/flattened batch axis
        assert value.shape[out.batch_dim_axis] == 3
    assert value.dtype == np.dtype(out.dtype), "dtype: got %s, template %s" % (value.dtype, out.dtype)
    if out.sparse and value.size:
        assert value.min() >= 0 and value.max() < out.dim
    for axis, lens in size_values.items():
        lens = np.asarray(lens)
        assert lens.max() <= value.shape[axis], "seq lens %s exceed axis %i of shape %s" % (lens, axis, value.shape)
        if out.have_batch_axis() and lens.ndim == 1:
            assert lens.shape[0] == 3
