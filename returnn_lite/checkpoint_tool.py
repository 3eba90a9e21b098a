"""
``returnn-lite-checkpoint`` (also ``python tools/checkpoint.py``): inspect, convert, average and diff TF checkpoints.

Exit status: 0 ok; 1 ``diff`` found differences or ``inspect --config`` found missing/mismatched params;
2 bad input (one line on stderr naming the file and the param). Output checkpoints are written to a temp name in
the target directory and renamed (index file last), so OUT is never half-written.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys

import numpy as np

from . import param_conversion as pc

PROG = "returnn-lite-checkpoint"

# Names from the modules that import TensorFlow: bound into this module on first use (by main after parsing the
# arguments, so that --help does not load TF; by imports from outside through __getattr__).
_TF_MODULE_NAMES = {
    "checkpoint_files": ("_GLOBAL_NAMES", "Checkpoint", "ToolError", "write_checkpoint"),
    "checkpoint_loader": ("CheckpointError", "CustomCheckpointLoader", "DictCheckpoint"),
}


def _import_tf_modules():
    import importlib

    from .tf_startup import import_tensorflow

    import_tensorflow()  # first: its import-time log lines are filtered
    for module_name, names in _TF_MODULE_NAMES.items():
        module = importlib.import_module("%s.%s" % (__package__, module_name))
        for name in names:
            globals()[name] = getattr(module, name)


def __getattr__(name):
    if any(name in names for names in _TF_MODULE_NAMES.values()):
        _import_tf_modules()
        return globals()[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ---- network from a config ----

def network_from_config(config_file, overrides=(), native_ops=False, search=False, ref_variables=False):
    """
    Builds the config's network (no training: train_flag False) in a new graph with a session.
    :param bool native_ops: False: TF's own ops only (same params; no compiling, the graph runs anywhere)
    :param bool search: build with search_flag (beam search in choice layers)
    :param bool ref_variables: plain (non-resource) TF variables, which freeze into constants also inside v1
        while loops (resource gathers there do not)
    :return: the TF engine backend, with .network, .session, .graph, .close_session()
    """
    from . import native_op

    _import_tf_modules()
    import tensorflow as tf

    old = os.environ.get(native_op.ENV_MODE)
    if not native_ops:
        os.environ[native_op.ENV_MODE] = "0"
        overrides = list(overrides) + [(native_op.CONFIG_KEY, False)]
    resource = tf.compat.v1.resource_variables_enabled()
    if ref_variables:
        logger = tf.get_logger()
        level = logger.level
        logger.setLevel("ERROR")  # its deprecation note is no news for an export
        try:
            tf.compat.v1.disable_resource_variables()
        finally:
            logger.setLevel(level)
    try:
        return _network_from_config(config_file, overrides, search)
    finally:
        if ref_variables and resource:
            tf.compat.v1.enable_resource_variables()
        if old is None:
            os.environ.pop(native_op.ENV_MODE, None)
        else:
            os.environ[native_op.ENV_MODE] = old


def _network_from_config(config_file, overrides, search):
    from .config import Config
    from .engine.engine import Engine
    from .engine.progress import Log

    config = Config()
    try:
        config.load_file(config_file)
    except OSError as exc:
        raise ToolError("config %r: %s" % (config_file, exc)) from None
    for key, value in overrides:
        config.set(key, value)
    config.set("task", "search" if search else "forward")  # train_flag False; search: search_flag
    config.set("backend", "tensorflow")  # the tool works on the TF graph and TF checkpoints
    engine = Engine(config, log=Log(verbosity=0, stream=io.StringIO()))
    dataset = None
    if not any(config.has(k) for k in ("extern_data", "num_outputs", "num_inputs")):
        for key in ("eval", "dev", "train"):
            dataset = engine.load_dataset(key)
            if dataset is not None:
                break
    engine.backend.build(config.int("load_epoch", 1) or 1, dataset, train=False)
    return engine.backend


def _layer_name_of(network, var):
    layer = network._layer_of_param(var)
    return layer.get_absolute_name() if layer is not None else var.op.name.split("/")[0]


def check_against_network(ckpt, network):
    """
    :return: dict with lists: ok, converted, missing, mismatched (name, layer, detail), unexpected (name, layer)
    """
    loader = CustomCheckpointLoader(ckpt.filename, saveable_params=network.get_params_list(), network=network,
                                    ignore_missing=True)
    out = {"ok": [], "converted": [], "missing": [], "mismatched": [], "unexpected": []}
    names = {v.ref(): v.op.name for v in loader.params}
    used = set()
    for var in loader.params:
        name = names[var.ref()]
        shape = tuple(var.shape.as_list())
        layer = _layer_name_of(network, var)
        if name in ckpt.shapes:
            used.add(name)
            cshape = ckpt.shapes[name]
            if cshape == shape or (pc.batch_norm_param(name) and np.prod(cshape) == np.prod(shape)):
                out["ok"].append((name, layer, ""))
            else:
                out["mismatched"].append((name, layer, "checkpoint %s, network %s" % (list(cshape), list(shape))))
            continue
        before = set(loader._cache)
        try:
            value = loader._value_for(var, name, set(names.values()))
        except (CheckpointError, ValueError) as exc:
            out["mismatched"].append((name, layer, str(exc)))
            continue
        new = set(loader._cache) - before
        used |= new
        if value is None:
            out["missing"].append((name, layer, ""))
        else:
            out["converted"].append((name, layer, "from %s" % ", ".join(sorted(new)) if new else ""))
    for name in ckpt.param_names():
        if name not in used and name not in loader._cache:
            out["unexpected"].append((name, name.split("/")[0], ""))
    return out


# ---- subcommands ----

def cmd_inspect(args, out):
    ckpt = Checkpoint(args.checkpoint)
    ckpt.check_size()
    params = ckpt.param_names()
    opt = [n for n in ckpt.names() if n not in params and n not in _GLOBAL_NAMES]
    size = sum(os.path.getsize(f) for f in ckpt.data_files())
    print("checkpoint %s (%s)" % (ckpt.filename, "%.1f MB" % (size / 1e6) if size >= 1e5 else "%i bytes" % size),
          file=out)
    step = ckpt.global_step()
    print("global step: %s" % (step if step is not None else "none"), file=out)
    shown = params if not args.all else ckpt.names()
    width = max([len(n) for n in shown] + [4])
    header = "%-*s  %-18s %-8s" % (width, "name", "shape", "dtype")
    if args.stats:
        header += " %11s %11s %11s %11s" % ("min", "max", "mean", "std")
    print(header, file=out)
    for name in shown:
        line = "%-*s  %-18s %-8s" % (width, name, list(ckpt.shapes[name]), ckpt.dtypes[name].name)
        if args.stats:
            v = ckpt.get(name)
            if v.size and v.dtype.kind in "fiub":
                v = v.astype(np.float64)
                line += " %11.4g %11.4g %11.4g %11.4g" % (v.min(), v.max(), v.mean(), v.std())
        print(line, file=out)
    print("%i params in %i tensors%s" % (
        ckpt.num_values(params), len(params),
        "; optimizer state: %i values in %i tensors" % (ckpt.num_values(opt), len(opt)) if opt else ""), file=out)
    for name in args.tensors or ():
        if name not in ckpt.shapes:
            from .util import did_you_mean

            raise CheckpointError("checkpoint %r has no param %r.%s" % (ckpt.filename, name,
                                                                       did_you_mean(name, ckpt.names())))
        with np.printoptions(threshold=200, edgeitems=4, precision=5, suppress=True):
            print("%s %s:\n%s" % (name, list(ckpt.shapes[name]), ckpt.get(name)), file=out)
    if args.config:
        engine = network_from_config(args.config)
        try:
            res = check_against_network(ckpt, engine.network)
        finally:
            engine.close_session()
        print("check against the network of %s: %i params ok, %i by layout conversion, %i missing, "
              "%i shape-mismatched, %i unexpected" % (
                  args.config, len(res["ok"]), len(res["converted"]), len(res["missing"]),
                  len(res["mismatched"]), len(res["unexpected"])), file=out)
        for kind in ("converted", "missing", "mismatched", "unexpected"):
            for name, layer, detail in res[kind]:
                print("  %-10s %s (layer %r)%s" % (kind, name, layer, ": " + detail if detail else ""), file=out)
        if res["missing"] or res["mismatched"]:
            return 1
    return 0


def _parse_renames(items):
    renames = []
    for item in items or ():
        if "=" not in item:
            raise ToolError("--rename %r: expected 'OLD_REGEX=NEW' (e.g. 'old/(.*)=new/\\1')" % item)
        pattern, repl = item.split("=", 1)
        try:
            renames.append((re.compile(pattern), repl))
        except re.error as exc:
            raise ToolError("--rename %r: bad regex: %s" % (item, exc)) from None
    return renames


def apply_renames(values, renames, filename):
    out, origin = {}, {}
    for name, value in values.items():
        new = name
        for pattern, repl in renames:
            m = pattern.fullmatch(name)
            if m:
                new = m.expand(repl)
                break
        if new in out:
            raise ToolError("checkpoint %r: --rename maps both %r and %r onto %r" % (filename, origin[new], name, new))
        out[new], origin[new] = value, name
    return out


def convert_values(ckpt, args, log):
    """The explicit conversions of ``convert`` on the checkpoint's tensors. :return: name -> value"""
    values = ckpt.read_all()
    if not args.keep_optimizer_state:
        values = {k: v for k, v in values.items() if not ckpt.is_optimizer_state(k)}
    for prefix in args.drop or ():
        dropped = [k for k in values if k.startswith(prefix)]
        if not dropped:
            raise ToolError("checkpoint %r: --drop %r matches no param" % (ckpt.filename, prefix))
        for k in dropped:
            del values[k]
        print("dropped %i params with prefix %r" % (len(dropped), prefix), file=log)
    values = apply_renames(values, _parse_renames(args.rename), ckpt.filename)
    if args.lstm:
        try:
            done = pc.convert_lstm_layouts(values, args.lstm, args.source_forget_bias, args.target_forget_bias)
        except ValueError as exc:
            raise ToolError("checkpoint %r: %s" % (ckpt.filename, exc)) from None
        for prefix, src in done:
            print("LSTM %s: %s -> %s" % (prefix, src, pc.get_lstm_layout(args.lstm).name), file=log)
        if not done:
            print("note: no LSTM params needed a conversion to %s" % args.lstm, file=log)
    if args.batch_norm_v2:
        try:
            done = pc.convert_batch_norm_to_v2(values)
        except ValueError as exc:
            raise ToolError("checkpoint %r: %s" % (ckpt.filename, exc)) from None
        print("batch norm -> v2: %i params" % len(done), file=log)
    return values


def cmd_convert(args, out):
    ckpt = Checkpoint(args.input)
    if args.lstm:
        pc.get_lstm_layout(args.lstm)  # fail early on an unknown layout
    values = convert_values(ckpt, args, out)
    if args.config:
        values = _convert_for_config(ckpt, values, args, out)
    if args.dtype:
        dtype = np.dtype(args.dtype)
        if dtype.kind != "f":
            raise ToolError("--dtype %r: only float types (float16, float32, float64)" % args.dtype)
        values = {k: (v.astype(dtype) if v.dtype.kind == "f" else v) for k, v in values.items()}
    path = write_checkpoint(args.output, values)
    print("wrote %s: %i tensors" % (path, len(values)), file=out)
    return 0


def _convert_for_config(ckpt, values, args, out):
    """Values for exactly the params of the config's network (layouts converted automatically)."""
    engine = network_from_config(args.config)
    try:
        network = engine.network
        loader = CustomCheckpointLoader(DictCheckpoint(values, ckpt.filename), saveable_params=network.get_params_list(),
                                        network=network, ignore_missing=args.ignore_missing)
        loader.source_forget_bias = args.source_forget_bias
        value_map = loader.get_variable_value_map()
    finally:
        engine.close_session()
    result = {var.op.name: v.value for var, v in value_map.items() if v.value is not None}
    unused = sorted(set(k for k in values if k not in loader._cache and k not in _GLOBAL_NAMES))
    if unused:
        print("not in the network of %s (left out): %s" % (args.config, ", ".join(unused)), file=out)
    if "global_step" in values:
        result["global_step"] = values["global_step"]
    return result


def cmd_average(args, out):
    if len(args.checkpoints) < 2:
        raise ToolError("average: needs at least 2 checkpoints and OUT")
    ckpts = [Checkpoint(f) for f in args.checkpoints]
    first = ckpts[0]
    names = first.param_names()
    for c in ckpts[1:]:
        for name in names:
            if name not in c.shapes:
                raise CheckpointError("checkpoint %r: param %r missing (it is in %r)" % (c.filename, name, first.filename))
            if c.shapes[name] != first.shapes[name]:
                raise CheckpointError("checkpoint %r: param %r has shape %s, in %r it has %s" % (
                    c.filename, name, list(c.shapes[name]), first.filename, list(first.shapes[name])))
        extra = [n for n in c.param_names() if n not in first.shapes]
        if extra:
            raise CheckpointError("checkpoint %r: param %r is not in %r" % (c.filename, extra[0], first.filename))
    result = {}
    k = len(ckpts)
    for name in names:
        dtype = first.dtypes[name]
        if dtype.kind != "f":
            result[name] = ckpts[-1].get(name)
            continue
        acc = first.get(name).astype(np.float64 if dtype.itemsize < 8 else dtype)
        for c in ckpts[1:]:
            acc += c.get(name)
        acc /= k
        result[name] = acc.astype(dtype)
    step = ckpts[-1].global_step()
    if step is not None:
        result["global_step"] = np.int64(step)
    path = write_checkpoint(args.output, result)
    print("wrote %s: average of %i checkpoints, %i params in %i tensors, global step %s" % (
        path, k, first.num_values(names), len(names), step), file=out)
    return 0


def cmd_diff(args, out):
    a, b = Checkpoint(args.a), Checkpoint(args.b)
    names_a, names_b = set(a.names()), set(b.names())
    if args.params_only:
        names_a, names_b = set(a.param_names()), set(b.param_names())
    differ = 0
    for name in sorted(names_a - names_b):
        print("only in A: %s %s" % (name, list(a.shapes[name])), file=out)
        differ += 1
    for name in sorted(names_b - names_a):
        print("only in B: %s %s" % (name, list(b.shapes[name])), file=out)
        differ += 1
    same = 0
    for name in sorted(names_a & names_b):
        if a.shapes[name] != b.shapes[name]:
            print("shape:     %s A %s B %s" % (name, list(a.shapes[name]), list(b.shapes[name])), file=out)
            differ += 1
            continue
        va, vb = a.get(name), b.get(name)
        if va.dtype != vb.dtype:
            print("dtype:     %s A %s B %s" % (name, va.dtype, vb.dtype), file=out)
            differ += 1
            continue
        if va.dtype.kind in "fiub":
            d = np.abs(va.astype(np.float64) - vb.astype(np.float64))
            max_abs = float(d.max()) if d.size else 0.0
        else:
            max_abs = 0.0 if np.array_equal(va, vb) else float("inf")
        if max_abs > args.atol:
            scale = float(np.abs(va.astype(np.float64)).max()) if va.size and va.dtype.kind in "fiub" else 0.0
            print("differs:   %s %s max abs diff %.4g (rel %.3g), mean abs diff %.4g" % (
                name, list(a.shapes[name]), max_abs, max_abs / scale if scale else float("inf"),
                float(d.mean()) if va.dtype.kind in "fiub" and d.size else 0.0), file=out)
            differ += 1
        else:
            same += 1
    print("%i tensors equal%s, %i differ" % (same, " (atol %g)" % args.atol if args.atol else "", differ), file=out)
    return 1 if differ else 0


# ---- command line ----

def make_parser():
    p = argparse.ArgumentParser(prog=PROG, description="Inspect, convert, average and diff TF checkpoints "
                                                      "(of returnn_lite and the original RETURNN).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    s = sub.add_parser("inspect", help="variables, shapes, dtypes, global step, total params",
                       description="List the checkpoint's variables; optionally stats, values and a check against "
                                   "a config's network (exit status 1 if params are missing or mismatched).")
    s.add_argument("checkpoint", help="checkpoint prefix (or its .index file)")
    s.add_argument("--tensors", nargs="+", metavar="NAME", help="print these tensors' values")
    s.add_argument("--stats", action="store_true", help="min/max/mean/std per tensor")
    s.add_argument("--all", action="store_true", help="also list optimizer state and the global step")
    s.add_argument("--config", help="check against this config's network: missing, unexpected, shape-mismatched")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("convert", help="rename, convert layouts, cast, drop params",
                       description="Conversions apply in this order: --drop, --rename, --lstm, --batch-norm-v2, "
                                   "--config (exactly the params of that network, layouts converted automatically), "
                                   "--dtype. Optimizer state is left out unless --keep-optimizer-state.")
    s.add_argument("input")
    s.add_argument("output")
    s.add_argument("--config", help="target config: write exactly its network's params, converting layouts")
    s.add_argument("--rename", action="append", metavar="OLD=NEW",
                   help="regex rename of whole names, e.g. 'old/(.*)=new/\\1' (repeatable; first match wins)")
    s.add_argument("--lstm", metavar="LAYOUT",
                   help="convert all LSTM params to this layout: native (nativelstm2/lstm), standardlstm (TF "
                        "LSTMCell), basiclstm, lstmblock, keras")
    s.add_argument("--source-forget-bias", type=float, default=None,
                   help="run-time forget_bias of the TF LSTM cells in the input (default 1.0; folded into the bias)")
    s.add_argument("--target-forget-bias", type=float, default=None,
                   help="run-time forget_bias of the target TF LSTM cells (default 1.0; taken out of the bias)")
    s.add_argument("--batch-norm-v2", action="store_true", help="batch_norm params of param_version 0/1 -> 2")
    s.add_argument("--dtype", help="cast float params (float16, float32, float64)")
    s.add_argument("--drop", action="append", metavar="PREFIX", help="drop params with this name prefix")
    s.add_argument("--keep-optimizer-state", action="store_true", help="keep optimizer slots (e.g. W/Adam)")
    s.add_argument("--ignore-missing", action="store_true", help="with --config: leave out params not found")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("average", help="average N checkpoints (params only; global step of the last)")
    s.add_argument("checkpoints", nargs="+", metavar="CKPT", help="checkpoints, then OUT")
    s.set_defaults(func=lambda args, out: cmd_average(
        argparse.Namespace(checkpoints=args.checkpoints[:-1], output=args.checkpoints[-1]), out))

    s = sub.add_parser("diff", help="which tensors differ, by how much (exit status 1 if any)")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--atol", type=float, default=0.0, help="ignore differences up to this (default 0: exact)")
    s.add_argument("--params-only", action="store_true", help="ignore optimizer state and the global step")
    s.set_defaults(func=cmd_diff)
    from .torch.checkpoint_conversion import add_subcommands as _add_torch_subcommands  # rf layers <-> torch

    _add_torch_subcommands(sub)
    return p


def main(argv=None, out=None):
    out = out or sys.stdout
    args = make_parser().parse_args(argv)
    from .tf_startup import configure_cli_log_level

    configure_cli_log_level()
    _import_tf_modules()
    from .config import ConfigError
    from .engine.engine import EngineError

    try:
        return args.func(args, out)
    except (CheckpointError, ToolError, OSError, KeyError, ValueError, ConfigError, EngineError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print("%s %s: error: %s" % (PROG, args.command, str(msg).splitlines()[0] if msg else type(exc).__name__),
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
