#!/usr/bin/env python3
"""
Audit of the layer (and loss) options: what the seeds (../shared/seeds, 001 = layer classes and losses, 004 =
options every layer has) document, against what returnn_lite's registries accept.

For every documented class (``layer_class`` / ``class_name``) and option it lists:

- ``missing class``: no returnn_lite class under that name;
- ``not accepted``: a documented option that the class does not know (a config using it fails with "unknown
  option", which is a clear error, but the option is neither honoured nor refused by name);
- ``refused``: declared in ``unsupported_options`` (an error naming it unless it has the default value);
- ``no effect``: declared in ``options_without_effect`` (the behaviour asked for is already the one of returnn_lite);
- ``maybe ignored``: an option of a returnn_lite ``__init__`` that no method of its class reads (static check, as
  tests/test_layer_options.py does), or that is only stored as ``self.X`` with ``X`` read nowhere in returnn_lite;
  and options popped from ``kwargs`` and never read again.

Besides the seeds, the options of LayerBase and _ConcatInputLayer of the original's current version (the one the
conformance corpus was measured with) are checked as well (``KNOWN_COMMON``: ``out_dim``, ``in_dim``, ...), since
configs written for it use them on every layer.

Usage: ``python tools/audit_layer_options.py [--seeds DIR] [--verbose]``; exit status 0 (it is a report).

Summary of the last run (2026-11-24, branch options; the full listing and the fixes: docs/layer_option_audit.md):
  79 documented layer classes and 18 losses, none missing; 517 options checked (seeds + current original):
  before the fixes 15 not accepted (out_dim, in_dim, param_dropout_min_ndim, dropout_axis of every layer; Dim
  options of constant/split/stack/tile/slice_nd/unflatten_nd; ...), 2 refused that are easy (rnn_cell weights_init,
  mask) and 5 accepted but dropped or wrong (accumulate_mean mode, combine_dims keep_order, linear grad_filter
  inverted, dropout without the documented broadcast, ...); 5 only stored, never read (meta_loss_scale of
  synthetic_gradient/tikhonov_regularization, debug/implementation choices of ce/ctc/edit_distance: now declared
  without effect); after them: 0 not accepted, 14 refused by name, 7 without effect, 3 "maybe ignored" (the sprint
  losses' options: those losses refuse to be built); 6 rarely used
  classes of the current original outside the seeds are missing (edit_distance_table, optimal_completions, ...).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DEFAULT_SEEDS = os.path.normpath(os.path.join(ROOT, "..", "shared", "seeds"))

# args of the documented signatures that are no user options (internal, or the "from" of the dict)
INTERNAL = {"self", "name", "network", "sources", "output", "base_network", "kwargs"}

# The options every layer has in the original's current version (LayerBase / _ConcatInputLayer __init__), beyond
# those seed 004 lists: facts about its documented interface (names only).
KNOWN_COMMON = [
    "n_out", "out_dim", "out_type", "out_shape", "in_dim", "target", "loss", "size_target", "reuse_params",
    "name_scope", "param_device", "is_output_layer", "only_on_eval", "only_on_search",
    "copy_output_loss_from_source_idx", "batch_norm", "L2", "darc1", "spatial_smoothing",
    "param_variational_noise", "param_dropout", "param_dropout_min_ndim", "updater_opts", "initial_output",
    "state", "need_last", "encapsulate", "collocate_with", "trainable", "custom_param_importer",
    "register_as_extern_data", "control_dependencies_on_output", "debug_print_layer_output",
    "loss_scale", "loss_opts", "loss_only_on_non_search",
]
KNOWN_CONCAT_INPUT = ["dropout", "dropout_noise_shape", "dropout_on_forward", "dropout_axis", "mask"]

# Options of the original's current version beyond the seeds (which document an older version), for the classes
# configs use most (names only, from its layer documentation): checked like the documented ones.
KNOWN_CURRENT = {
    "merge_dims": ["out_dim"], "split": ["out_dims"], "repeat": ["out_dim"], "tile": ["out_dims"],
    "stack": ["out_spatial_dim"], "reduce_out": ["out_dim"], "slice": ["out_dim"],
    "slice_nd": ["axis", "out_spatial_dim"], "gather": ["clip_to_valid"], "scatter_nd": ["out_spatial_dim"],
    "rand_int": ["sparse_dim"], "range": ["out_spatial_dim"], "range_from_length": ["out_spatial_dim"],
    "constant": ["shape", "sparse_dim", "feature_dim"], "window": ["window_dim", "out_spatial_dim"],
    "pad": ["out_dims", "handle_dynamic_dims"], "unflatten_nd": ["in_dim", "out_dims"],
    "time_chunking": ["axis", "out_dim"], "dot": ["reduce"], "shift_axis": ["pad_value"], "resize": ["out_dim"],
    "combine": ["allow_broadcast_all_sources"], "compare": ["allow_broadcast_all_sources"],
    "variable": ["saveable", "non_critical_for_restore", "init_by_layer", "param_name"],
    "prefix_in_time": ["axis", "out_dim"], "postfix_in_time": ["axis", "out_dim"],
    "conv": ["in_dim", "in_spatial_dims", "out_dim", "out_spatial_dims"],
    "pool": ["in_dim", "in_spatial_dims", "out_dim", "out_spatial_dims"],
    "transposed_conv": ["in_dim", "in_spatial_dims", "out_dim", "out_spatial_dims"],
    "layer_norm": ["in_dim", "out_dim"], "norm": ["axis"], "math_norm": ["axis"], "gating": ["out_dim"],
    "top_k": ["axis", "k", "k_dim", "sorted"], "activation": ["opts"],
    "scaled_grad": ["shift", "scale_shift_by_sum_over_axis", "clip_max_axis"],
    "self_attention": ["num_heads", "total_key_dim", "key_shift", "forward_weights_init", "attention_dropout",
                       "attention_left_only", "initial_state", "restrict_state_to_last_seq", "state_var_lengths"],
    "positional_encoding": ["axis", "add_to_input", "constant", "offset"],
    "relative_positional_encoding": ["n_out", "forward_weights_init", "clipping", "fixed"],
    "cum_concat": ["out_spatial_dim"],
    "rec": ["unit", "unit_opts", "direction", "input_projection", "initial_state", "max_seq_len", "max_seq_len_via",
            "forward_weights_init", "recurrent_weights_init", "bias_init", "optimize_move_layers_out", "cheating",
            "unroll", "back_prop", "use_global_rec_step_offset", "include_eos", "debug", "axis"],
    "rnn_cell": ["n_out", "unit", "unit_opts", "initial_state", "initial_output", "weights_init"],
    "choice": ["beam_size", "keep_beams", "search", "input_type", "prob_scale", "base_beam_score_scale",
               "random_sample_scale", "length_normalization", "length_normalization_exponent",
               "custom_score_combine", "source_beam_sizes", "scheduled_sampling", "cheating",
               "explicit_search_sources"],
    "decide": ["length_normalization"], "get_last_hidden_state": ["n_out", "combine", "key"],
    "rec_unstack": ["axis", "declare_rec_time"], "masked_computation": ["mask", "unit", "masked_from"],
    "unmask": ["mask", "skip_initial"], "generic_attention": ["weights", "auto_squeeze"],
    "dot_attention": ["energy_factor"], "gauss_window_attention": ["window_size", "std", "inner_size",
                                                                   "inner_size_step"],
    "sparse_softmax_cross_entropy_with_logits": ["logits", "targets", "axis"],
}
# Layer classes of the original's current version outside the seeds (rec.py, signal_processing.py) that configs use
# rarely; reported as missing where returnn_lite has none (a config using one gets "unknown layer class").
KNOWN_CURRENT_CLASSES = ["edit_distance_table", "optimal_completions", "tile_features", "batch_median_pooling",
                         "alternating_real_to_complex", "complex_to_alternating_real"]


def _split_args(sig):
    """Top-level comma split of a signature's argument text (defaults may hold brackets and quotes)."""
    args, depth, cur, quote = [], 0, "", None
    for ch in sig:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        args.append(cur.strip())
    return args


def parse_seed_classes(path):
    """
    :return: list of (python class name, kind "layer"|"loss", registry name, [options], required options)
    """
    text = open(path, encoding="utf-8").read()
    heads = list(re.finditer(r"^class returnn\.tf\.layers\.basic\.(\w+)\((.*)\)\[source\]$", text, re.M))
    res = []
    for i, m in enumerate(heads):
        body = text[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        lc = re.search(r"^layer_class = '([^']*)'", body, re.M)
        cn = re.search(r"^class_name = '([^']*)'", body, re.M)
        if not lc and not cn:
            continue
        opts, required = [], []
        for arg in _split_args(m.group(2)):
            if arg.startswith("*"):
                continue
            key = arg.split("=", 1)[0].strip()
            if key in INTERNAL or key.startswith("_"):
                continue
            opts.append(key)
            if "=" not in arg:
                required.append(key)
        res.append((m.group(1), "layer" if lc else "loss", (lc or cn).group(1), opts, required))
    return res


def parse_common_options(path):
    """The options seed 004 lists for every layer (lines 'name [type] ...')."""
    text = open(path, encoding="utf-8").read()
    return re.findall(r"^(\w+) \[[^\]]+\]", text, re.M)


def _merged(cls, attr):
    res = {}
    for klass in reversed(cls.__mro__):
        res.update(klass.__dict__.get(attr, {}) or {})
    return res


def _used_names(func):
    node = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    res = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    res |= {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    res |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    uses_locals = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "locals" for n in ast.walk(node))
    return res, uses_locals


def maybe_ignored(cls, base_cls):
    """Options of the __init__s along cls's MRO that no method of their class reads (and are not declared)."""
    declared = set(_merged(cls, "unsupported_options")) | set(_merged(cls, "options_read_elsewhere")) | set(
        _merged(cls, "options_without_effect"))
    res = []
    for klass in cls.__mro__:
        if not (isinstance(klass, type) and issubclass(klass, base_cls)) or "__init__" not in klass.__dict__:
            continue
        used, uses_locals = _used_names(klass.__dict__["__init__"])
        if uses_locals:
            continue
        for key, value in klass.__dict__.items():
            func = getattr(value, "__func__", value)
            if key != "__init__" and inspect.isfunction(func):
                used |= _used_names(func)[0]
        for p in list(inspect.signature(klass.__dict__["__init__"]).parameters.values())[1:]:
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in INTERNAL:
                continue
            if p.name not in used and p.name not in declared and not p.name.startswith("_"):
                res.append("%s (%s)" % (p.name, klass.__name__))
    return res


_LOADED_ATTRS = None


def _loaded_attrs():
    """Names of all attributes read (``x.NAME`` in load context) anywhere in returnn_lite."""
    global _LOADED_ATTRS
    if _LOADED_ATTRS is None:
        res = set()
        for dirpath, _, files in os.walk(os.path.join(ROOT, "returnn_lite")):
            for fn in files:
                if fn.endswith(".py"):
                    tree = ast.parse(open(os.path.join(dirpath, fn), encoding="utf-8").read())
                    res |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                            and isinstance(n.ctx, ast.Load)}
                    res |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                            and isinstance(n.value, str)}  # (getattr(self, "NAME"))
        _LOADED_ATTRS = res
    return _LOADED_ATTRS


def stored_unused(cls, base_cls):
    """
    Options of the __init__s along cls's MRO that are only stored (``self.ATTR = option``) and whose attribute
    nothing in returnn_lite reads.
    """
    res = []
    for klass in cls.__mro__:
        if not (isinstance(klass, type) and issubclass(klass, base_cls)) or "__init__" not in klass.__dict__:
            continue
        node = ast.parse(textwrap.dedent(inspect.getsource(klass.__dict__["__init__"]))).body[0]
        params = [a.arg for a in node.args.args[1:] + node.args.kwonlyargs]
        loads = {}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                loads[n.id] = loads.get(n.id, 0) + 1
        stored = {}
        for n in ast.walk(node):
            if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute)
                    and isinstance(n.targets[0].value, ast.Name) and n.targets[0].value.id == "self"
                    and isinstance(n.value, ast.Name)):
                stored.setdefault(n.value.id, []).append(n.targets[0].attr)
        declared = set(_merged(cls, "unsupported_options")) | set(_merged(cls, "options_read_elsewhere")) | set(
            _merged(cls, "options_without_effect"))
        for p in params:
            if p in stored and loads.get(p, 0) == len(stored[p]) and p not in declared and not any(
                    a in _loaded_attrs() for a in stored[p]):
                res.append("%s (%s, stored as self.%s, never read)" % (p, klass.__name__, stored[p][0]))
    return res


def popped_kwargs(module_dir):
    """``kwargs.pop("x", ...)`` calls in the layer modules whose value is not assigned (dropped)."""
    res = []
    for fn in sorted(os.listdir(module_dir)):
        if not fn.endswith(".py"):
            continue
        for lineno, line in enumerate(open(os.path.join(module_dir, fn), encoding="utf-8"), 1):
            if re.match(r"\s*kwargs\.pop\(", line):
                res.append("%s:%i: %s" % (fn, lineno, line.strip()))
    return res


def audit(seeds_dir, verbose=False):
    from returnn_lite.layer_options import get_layer_options_info
    from returnn_lite.layers.base import ConcatInputLayer, LayerBase, get_layer_class, layer_registry
    from returnn_lite.losses import get_loss_class
    from returnn_lite.losses.base import Loss

    seed001 = [f for f in os.listdir(seeds_dir) if f.startswith("001_")][0]
    seed004 = [f for f in os.listdir(seeds_dir) if f.startswith("004_")][0]
    classes = parse_seed_classes(os.path.join(seeds_dir, seed001))
    common = parse_common_options(os.path.join(seeds_dir, seed004))
    lines = []
    counts = {"layer classes": 0, "loss classes": 0, "missing classes": 0, "options checked": 0,
              "not accepted": 0, "refused": 0, "no effect": 0, "maybe ignored": 0}

    def out(s=""):
        lines.append(s)

    # the options every layer has
    base_info = get_layer_options_info(get_layer_class("copy"))
    out("== options every layer has (seed 004, and LayerBase/_ConcatInputLayer of the current original)")
    for opt in list(dict.fromkeys(common + KNOWN_COMMON + KNOWN_CONCAT_INPUT)):
        if opt == "class":
            continue
        counts["options checked"] += 1
        if opt not in base_info.names:
            counts["not accepted"] += 1
            out("  not accepted: %s" % opt)
        elif opt in base_info.unsupported:
            counts["refused"] += 1
            out("  refused: %s (unless %s)" % (opt, " or ".join(repr(v) for v in base_info.unsupported[opt])))
    out()
    out("== documented classes")
    for py_name, kind, reg_name, opts, required in classes:
        counts["%s classes" % kind] += 1
        try:
            cls = get_layer_class(reg_name) if kind == "layer" else get_loss_class(reg_name)
        except Exception:  # noqa: BLE001 (the registries raise their own error types)
            counts["missing classes"] += 1
            out("  %s %r (%s): missing class" % (kind, reg_name, py_name))
            continue
        notes = []
        if kind == "layer":
            info = get_layer_options_info(cls)
            names, unsupported = info.names, info.unsupported
            without = _merged(cls, "options_without_effect")
            if getattr(cls, "accepts_any_options", False):
                names = set(opts)
        else:
            params = {}
            for klass in reversed(cls.__mro__):
                if "__init__" in klass.__dict__ and klass is not object:
                    params.update(inspect.signature(klass.__dict__["__init__"]).parameters)
            names = set(params)
            unsupported = _merged(cls, "unsupported_options")
            without = _merged(cls, "options_without_effect")
        for opt in opts:
            counts["options checked"] += 1
            if opt not in names:
                counts["not accepted"] += 1
                notes.append("not accepted: %s" % opt)
            elif opt in unsupported:
                counts["refused"] += 1
                notes.append("refused: %s (unless %s)" % (opt, " or ".join(repr(v) for v in unsupported[opt])))
            elif opt in without:
                counts["no effect"] += 1
                notes.append("no effect: %s (%s)" % (opt, without[opt]))
        ignored = maybe_ignored(cls, LayerBase if kind == "layer" else Loss)
        ignored += stored_unused(cls, LayerBase if kind == "layer" else Loss)
        counts["maybe ignored"] += len(ignored)
        notes += ["maybe ignored: %s" % x for x in ignored]
        if notes or verbose:
            out("  %s %r (%s):%s" % (kind, reg_name, cls.__name__, "" if notes else " ok"))
            for n in notes:
                out("    " + n)
    out()
    out("== options of the current original beyond the seeds (KNOWN_CURRENT)")
    for reg_name, opts in sorted(KNOWN_CURRENT.items()):
        try:
            cls = get_layer_class(reg_name)
        except Exception:  # noqa: BLE001
            counts["missing classes"] += 1
            out("  layer %r: missing class" % reg_name)
            continue
        info = get_layer_options_info(cls)
        for opt in opts:
            counts["options checked"] += 1
            if opt not in info.names:
                counts["not accepted"] += 1
                out("  layer %r: not accepted: %s" % (reg_name, opt))
            elif opt in info.unsupported:
                counts["refused"] += 1
                out("  layer %r: refused: %s (unless %s)" % (reg_name, opt, " or ".join(
                    repr(v) for v in info.unsupported[opt])))
    known = {n for n, _ in layer_registry.items()}
    missing = [n for n in KNOWN_CURRENT_CLASSES if n not in known]
    if missing:
        out("  classes of the current original not in returnn_lite (%i, not in the seeds): %s" % (
            len(missing), ", ".join(missing)))
    documented = {n for (_, k, n, _, _) in classes if k == "layer"}
    extra = sorted(n for n, _ in layer_registry.items() if n not in documented)
    out()
    out("== returnn_lite layer classes not in the seeds (%i): %s" % (len(extra), ", ".join(extra)))
    extra_notes = []
    for n in extra:
        cls = get_layer_class(n)
        ignored = maybe_ignored(cls, LayerBase) + stored_unused(cls, LayerBase)
        info = get_layer_options_info(cls)
        refused = sorted(set(info.unsupported) - set(get_layer_options_info(ConcatInputLayer).unsupported)
                         - set(base_info.unsupported))
        if ignored or refused:
            extra_notes.append("  %s: %s" % (n, "; ".join(
                ["maybe ignored: %s" % x for x in ignored] + ["refused: %s" % r for r in refused])))
    counts["maybe ignored"] += sum(x.count("maybe ignored") for x in extra_notes)
    lines.extend(extra_notes)
    popped = popped_kwargs(os.path.join(ROOT, "returnn_lite", "layers"))
    out()
    out("== kwargs.pop(...) without use in layers/ (%i)" % len(popped))
    lines.extend("  " + p for p in popped)
    out()
    out("== summary: " + ", ".join("%s %i" % kv for kv in counts.items()))
    return lines, counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=DEFAULT_SEEDS)
    parser.add_argument("--verbose", action="store_true", help="also list the classes without findings")
    args = parser.parse_args(argv)
    lines, _ = audit(args.seeds, verbose=args.verbose)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
