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
    "concat": [{"from": [("data", "T"), ("data", "T")]}, {"from": [("data", "F"), ("data", "F")]}],
    "accumulate_mean": [{"exp_average": 0.1}],
    "elemwise_prod": [{"axes": "F"}],
    "gating": [{"activation": "tanh", "from": ["data", "data"]}],
    "math_norm": [{"p": 2, "axes": "F"}],
    "repeat": [{"repetitions": 2, "axis": "T"}],
    "resize": [{"factor": 2, "axis": "T", "kind": "nn"}],
    "seq_len_mask": [{"mask_value": 0.0}],
    "shift_axis": [{"amount": 1, "axis": "T"}],
    "split": [{"axis": "F", "num_splits": 2}],
    "squeeze": [{"axis": "F", "from": "sq_in", "_net": {"sq_in": {"class": "expand_dims", "axis": "F",
                                                                      "from": "data"}}}],
    "swap_axes": [{"axis1": "T", "axis2": "F"}],
    "tile": [{"multiples": {"F": 2}}],
    "time_chunking": [{"chunk_size": 3, "chunk_step": 2}],
    "top_k": [{"axis": "F", "k": 2}],
    "transpose": [{"perm": {"T": "F", "F": "T"}}],
    "range": [{"limit": 5, "from": []}],
    "range_from_length": [{"from": "len", "_net": {"len": {"class": "length", "from": "data"}}}],
    "remove": [{"symbol": 0, "from": "data:classes"}],
    "gather_nd": [{"position": "data:classes", "from": "data"}],
    "rnn_cell": [],
    "subnetwork": [{"subnetwork": {"output": {"class": "linear", "n_out": 3, "from": "data"}}}],
    "cond": [{"condition": "flag", "true_layer": {"class": "copy", "from": "data"},
              "false_layer": {"class": "copy", "from": "data"},
              "_net": {"flag": {"class": "constant", "value": True, "from": []}}}],
    "loss": [{"loss_": "ce", "from": "sm", "target_": "classes",
              "_net": {"sm": {"class": "softmax", "n_out": 4, "from": "data"}}}],
    "edit_distance": [{"a": "data:classes", "b": "data:classes", "from": []}],
    "stft": [{"frame_shift": 2, "frame_size": 4, "fft_size": 4, "from": "raw",
              "_net": {"raw": {"class": "reduce", "mode": "sum", "axis": "F", "from": "data"}}}],
    "generic_attention": [{"weights": "att", "base": "data", "from": [],
                           "_net": {"att": {"class": "softmax_over_spatial", "from": "energy"},
                                    "energy": {"class": "reduce", "mode": "sum", "axis": "F", "keep_dims": True,
                                               "from": "data"}}}],
    "unflatten_nd": [],
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
        opts = dict(opts)
        net_dict = dict(opts.pop("_net", {}))  # helper layers some classes need as inputs
        desc = {"class": layer_class, "from": "data"}
        desc.update(opts)
        net_dict["output"] = desc
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=False)
        net.construct_from_dict(net_dict)
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
            assert lens.shape[0] == value.shape[out.batch_dim_axis]  # the batch may be merged with other axes
