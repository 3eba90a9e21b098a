"""
Export for inference (``returnn-lite-export``, also ``python tools/export.py``): from a config + checkpoint,

- a frozen GraphDef (``.pb`` binary or ``.pbtxt`` text; params as constants, like the original's
  compile_tf_graph) with stable tensor names, and next to it ``<graph>.json`` listing them:
  inputs ``extern_data/placeholders/data/data:0`` (features, [B, T, F] or sparse [B, T]) and
  ``extern_data/placeholders/data/data_dim0_size:0`` (sequence lengths [B]); outputs
  ``<layer>/output_batch_major:0`` (the output layer, batch major) and ``<layer>/output_seq_lens:0``;
- a SavedModel (``--saved-model DIR``) with the serving signature ``serving_default``: inputs ``features`` and
  ``lengths``, outputs ``output`` and ``output_lengths``. It needs only TensorFlow (not returnn_lite):
  ``tf.saved_model.load(DIR).signatures["serving_default"](features=x, lengths=n)``.

The forward network (train_flag False) is exported, or with ``--search`` the search network (search_flag: beam
search in choice layers); its output layer must not have a beam (export e.g. the ``decide`` layer).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

PROG = "returnn-lite-export"
tf = tf1 = CheckpointError = None  # bound by _import_tf on first use: --help does not load TensorFlow


def _import_tf():
    global tf, tf1, CheckpointError
    if tf is None:
        from .tf_startup import import_tensorflow

        tf = import_tensorflow()  # first: its import-time log lines are filtered
        tf1 = tf.compat.v1
        from .checkpoint_loader import CheckpointError


class ExportError(Exception):
    pass


def _stable_outputs(network, layer_name):
    """Identity ops with stable names for the output layer (batch major) and its sequence lengths."""
    try:
        layer = network.get_layer(layer_name)
    except Exception:
        raise ExportError("output layer %r not in the network (layers: %s)" % (
            layer_name, ", ".join(sorted(network.layers)))) from None
    if getattr(layer.output, "beam", None) is not None:
        raise ExportError("output layer %r has a beam (%s): export a layer that resolves it (e.g. a 'decide' layer) "
                          "with --output-layer" % (layer_name, layer.output.beam))
    out = layer.output.copy_as_batch_major() if layer.output.have_batch_axis() else layer.output
    scope = layer.tf_scope_name
    with tf.name_scope(scope + "/"):
        y = tf.identity(out.placeholder, name="output_batch_major")
        lens = None
        if out.have_time_axis() and out.get_sequence_lengths() is not None:
            lens = tf.identity(out.get_sequence_lengths(), name="output_seq_lens")
    return y, lens


def _input_tensors(network, key="data"):
    data = network.extern_data.get_data(key) if hasattr(network.extern_data, "get_data") else \
        network.extern_data.data[key]
    x = data.placeholder
    lens = data.get_sequence_lengths() if data.have_time_axis() else None
    return x, lens


def _describe(t):
    return {"name": t.name, "shape": t.shape.as_list() if t.shape.rank is not None else None,
            "dtype": t.dtype.base_dtype.name}


def _freeze(session, fetch_names):
    """Variables -> constants, also inside functions (while loop bodies: resource reads/gathers become plain ops)."""
    try:
        from tensorflow.python.framework.convert_to_constants import \
            convert_variables_to_constants_from_session_graph as convert
    except ImportError:  # older TF
        return tf1.graph_util.convert_variables_to_constants(session, session.graph.as_graph_def(), fetch_names)
    return _fix_function_gathers(convert(session, session.graph.as_graph_def(), fetch_names))


def _fix_function_gathers(graph_def):
    """
    TF's converter leaves ResourceGather inside functions (e.g. an embedding lookup in a while loop body) while
    their variable argument became a constant float: rewrite those into GatherV2 on the value (axis 0).
    """
    from tensorflow.core.framework import attr_value_pb2, types_pb2

    for func in graph_def.library.function:
        arg_types = {a.name: a.type for a in func.signature.input_arg}
        for node in list(func.node_def):
            if node.op != "ResourceGather":
                continue
            src = node.input[0].split(":")[0]
            if arg_types.get(src, types_pb2.DT_RESOURCE) == types_pb2.DT_RESOURCE:
                continue
            axis = func.node_def.add()
            axis.name = node.name + "_frozen_axis"
            axis.op = "Const"
            axis.attr["dtype"].type = types_pb2.DT_INT32
            axis.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(0, dtype=tf.int32))
            dtype = node.attr["dtype"].type
            batch_dims = node.attr["batch_dims"].i if "batch_dims" in node.attr else 0
            for key in list(node.attr):
                if key not in ("Tindices", "_class"):
                    del node.attr[key]
            node.op = "GatherV2"
            node.attr["Tparams"].CopyFrom(attr_value_pb2.AttrValue(type=dtype))
            node.attr["Taxis"].CopyFrom(attr_value_pb2.AttrValue(type=types_pb2.DT_INT32))
            node.attr["batch_dims"].CopyFrom(attr_value_pb2.AttrValue(i=batch_dims))
            node.input.insert(2, axis.name + ":output:0")
    return graph_def


def build_frozen_graph(config_file, checkpoint, output_layer=None, search=False, native_ops=False):
    """
    :param bool native_ops: allow returnn_lite's native (C++) ops in the graph; the default builds the graph from
        TF's own ops only, so that it runs where the op libraries are not available
    :return: (frozen GraphDef, names dict: {"inputs": {...}, "outputs": {...}})
    """
    from .checkpoint_tool import network_from_config

    _import_tf()
    engine = network_from_config(config_file, native_ops=native_ops, search=search, ref_variables=True)
    try:
        network = engine.network
        config = engine.config
        layer_name = output_layer or (config.value("search_output_layer", None) if search else None) or \
            config.value("forward_output_layer", None) or ("decision" if search and "decision" in network.layers
                                                           else network.get_default_output_layer_name())
        with engine.graph.as_default():
            y, y_lens = _stable_outputs(network, layer_name)
            x, x_lens = _input_tensors(network)
            network.load_params_from_file(checkpoint, session=engine.session)
            fetch_names = [t.op.name for t in (y, y_lens) if t is not None]
            graph_def = _freeze(engine.session, fetch_names)
            graph_def = tf1.graph_util.extract_sub_graph(graph_def, fetch_names)
        names = {"inputs": {"data": _describe(x)}, "outputs": {"output": _describe(y)}, "output_layer": layer_name,
                 "search": bool(search)}
        if x_lens is not None:
            names["inputs"]["data_seq_lens"] = _describe(x_lens)
        if y_lens is not None:
            names["outputs"]["output_seq_lens"] = _describe(y_lens)
        registered = set(tf.raw_ops.__dict__)
        custom = sorted({n.op for n in graph_def.node if n.op not in registered})
        if custom:
            names["custom_ops"] = custom  # only with native_ops: the graph needs returnn_lite's op libraries
    finally:
        engine.close_session()
    return graph_def, names


def _atomic_write(path, data, mode="wb"):
    tmp = "%s.tmp%i" % (path, os.getpid())
    with open(tmp, mode) as f:
        f.write(data)
    os.replace(tmp, path)


def write_graph(graph_def, names, path):
    """Write the frozen graph (.pb binary, .pbtxt text) and <path>.json with the input/output names."""
    if path.endswith(".pbtxt"):
        from google.protobuf import text_format

        _atomic_write(path, text_format.MessageToString(graph_def), "w")
    else:
        _atomic_write(path, graph_def.SerializeToString())
    _atomic_write(os.path.splitext(path)[0] + ".json", json.dumps(names, indent=2) + "\n", "w")


def write_saved_model(graph_def, names, directory):
    """SavedModel (serving signature features + lengths -> output + output_lengths); written to a temp dir first."""
    _import_tf()
    directory = os.path.abspath(directory)
    tmp = directory + ".tmp%i" % os.getpid()
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
        get = graph.get_tensor_by_name
        inputs = {"features": get(names["inputs"]["data"]["name"])}
        if "data_seq_lens" in names["inputs"]:
            inputs["lengths"] = get(names["inputs"]["data_seq_lens"]["name"])
        outputs = {"output": get(names["outputs"]["output"]["name"])}
        if "output_seq_lens" in names["outputs"]:
            outputs["output_lengths"] = get(names["outputs"]["output_seq_lens"]["name"])
        with tf1.Session(graph=graph) as session:
            builder = tf1.saved_model.Builder(tmp)
            signature = tf1.saved_model.predict_signature_def(inputs=inputs, outputs=outputs)
            builder.add_meta_graph_and_variables(session, [tf1.saved_model.SERVING],
                                                 signature_def_map={"serving_default": signature},
                                                 strip_default_attrs=True)
            builder.save()
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return directory


def make_parser():
    p = argparse.ArgumentParser(prog=PROG, description="Export a config's network with a checkpoint for inference: "
                                                      "frozen GraphDef (+ JSON of input/output names) and/or "
                                                      "SavedModel with a serving signature.")
    p.add_argument("config", help="the config (its network, extern_data)")
    p.add_argument("--checkpoint", "--load", required=True, help="checkpoint prefix (or .index file)")
    p.add_argument("--graph", help="write the frozen graph here (.pb binary, .pbtxt text) and <graph>.json")
    p.add_argument("--saved-model", help="write a SavedModel into this directory")
    p.add_argument("--output-layer", help="default: forward_output_layer of the config, else 'output'")
    p.add_argument("--native-ops", action="store_true",
                   help="keep returnn_lite's native (C++) ops in the graph (then it needs their libraries to run); "
                        "default: TF's own ops only")
    p.add_argument("--search", action="store_true",
                   help="export the search graph (beam search in choice layers; output layer: search_output_layer "
                        "of the config, else 'decision' if it exists)")
    return p


def main(argv=None, out=None):
    out = out or sys.stdout
    args = make_parser().parse_args(argv)
    if not args.graph and not args.saved_model:
        print("%s: error: nothing to write: give --graph and/or --saved-model" % PROG, file=sys.stderr)
        return 2
    from .tf_startup import configure_cli_log_level

    configure_cli_log_level()
    _import_tf()
    from .config import ConfigError
    from .engine.engine import EngineError

    try:
        graph_def, names = build_frozen_graph(args.config, args.checkpoint, args.output_layer, args.search,
                                              args.native_ops)
        if args.graph:
            write_graph(graph_def, names, args.graph)
            print("wrote %s (%i nodes) and %s" % (args.graph, len(graph_def.node),
                                                 os.path.splitext(args.graph)[0] + ".json"), file=out)
        if args.saved_model:
            write_saved_model(graph_def, names, args.saved_model)
            print("wrote SavedModel %s (signature serving_default: features, lengths -> output, output_lengths)"
                  % args.saved_model, file=out)
        for kind in ("inputs", "outputs"):
            for key, d in names[kind].items():
                print("  %-7s %-16s %s %s %s" % (kind[:-1], key, d["name"], d["shape"], d["dtype"]), file=out)
    except (ExportError, CheckpointError, ConfigError, EngineError, OSError, KeyError, ValueError) as exc:
        msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        print("%s: error: %s" % (PROG, msg.splitlines()[0] if msg else type(exc).__name__), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
