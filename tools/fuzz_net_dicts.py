#!/usr/bin/env python3
"""
Mutation fuzzer over the networks of the conformance cases (a test tool): each mutant is one case network with
one user error (an option key with a typo, a misspelled ``is_output_layer``/``loss`` key, an option of the wrong
type, a size <= 0, a removed option, a dependency loop, a wrong target, a source that does not exist, an
``n_out`` that contradicts the output). Each mutant is built (``construct_from_dict`` + ``get_objective``) and, if
that succeeds, run once (outputs, objective and its gradients) on the case's inputs, in a worker subprocess (a crash of TF only loses that mutant).

Classes of results:

- ``clean``: an error at construction naming the mutated layer (and, where an option is at fault, the option:
  counted as ``clean_named_option`` / ``clean_no_option``);
- ``raw``: an error that does not name the layer, whose text is TF's / Python's internal text (``Dimension -4
  must be >= 0``, ``unhashable type``, ...), or an error only at ``session.run``;
- ``clean_run``: an error at ``session.run`` from one of our run-time checks (a TF assert whose text names the
  layer), where only the data can tell (e.g. a frame-wise loss whose output and target lengths differ);
- ``crash``: the worker process died (or hung);
- ``accepted``: a mutation that is a user error was built and run without any error;
- ``accepted_ok``: a mutation that may be legal (a removed optional option) was accepted.

Usage::

    python tools/fuzz_net_dicts.py --seed 0 --count 150 [--cases DIR] [--only rec_] [-v] [--json out.json]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import select
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (a worktree of the repo lies one level deeper than the main checkout: look up the tree for shared/)
DEFAULT_CASES = next((os.path.join(d, "shared", "conformance", "cases") for d in (
    os.path.dirname(REPO), os.path.dirname(os.path.dirname(REPO)))
    if os.path.isdir(os.path.join(d, "shared", "conformance", "cases"))),
    os.path.join(os.path.dirname(REPO), "shared", "conformance", "cases"))

SIZE_KEYS = {"n_out", "num_heads", "total_key_dim", "repetitions", "window_size", "filter_size", "strides",
             "frame_size", "frame_shift", "pool_size", "fft_size", "num_pieces", "nr_of_channels", "nr_of_filters",
             "num_splits", "factor", "dilation_rate", "size", "dim", "beam_size", "window_right", "window_left"}
NEVER_MUTATE = {"class"}
SUBNET_KEYS = ("unit", "subnetwork")
# options whose value is one layer dict (masked_computation's unit, cond's branches and condition)
LAYER_DICT_KEYS = ("unit", "true_layer", "false_layer", "condition")
# texts that are Python's / TF's, not ours: an error whose message is (after the layer prefix) just one of these
RAW_MARKERS = (
    "Dimension ", "Dimensions must be", "Shape must be", "Shapes must be", "unhashable type", "required positional "
    "argument", "has no attribute", "object is not", "not subscriptable", "unsupported operand", "Cannot convert",
    "list index out of range", "tuple index out of range", "NoneType", "not iterable", "must be >= 0",
    "invalid literal for int", "Incompatible shapes", "Tried to convert", "got an unexpected keyword",
    "index out of range", "KeyError", "is out of bounds", "object of type", "can't multiply", "can only concatenate",
    "not supported between instances", "Attempt to convert a value", "Expected int32", "Expected float32",
    "Value for attr", "Negative dimension", "division by zero", "bad operand type", "ZeroDivisionError",
    "Invalid value in tensor", "Requires start <= limit", "{{node ", "Op has type", "Tensor conversion requested",
)


# ---- mutants

def load_cases(cases_dir, only=None):
    cases = []
    for name in sorted(os.listdir(cases_dir)):
        path = os.path.join(cases_dir, name)
        if not os.path.isfile(os.path.join(path, "case.py")):
            continue
        if name.startswith("error_") or (only and not any(o in name for o in only.split(","))):
            continue
        with open(os.path.join(path, "case.py")) as f:
            case = ast.literal_eval(f.read())
        if case.get("expect_error") or ("search_flag" in case and not case["search_flag"]):
            continue  # (search cases via extra.search: not with these flags)
        case["dir"] = path
        cases.append(case)
    return cases


def iter_layers(net_dict, prefix=()):
    """(path of layer names, layer dict) for every layer, also inside rec units / subnetworks."""
    for name, desc in net_dict.items():
        if not isinstance(desc, dict):
            continue
        yield prefix + (name,), desc
        for key in SUBNET_KEYS:
            sub = desc.get(key)
            if isinstance(sub, dict) and sub and all(isinstance(v, dict) for v in sub.values()):
                yield from iter_layers(sub, prefix + (name, key))
        for key in LAYER_DICT_KEYS:  # one layer dict: mutated as deeply as the others
            sub = desc.get(key)
            if isinstance(sub, dict) and isinstance(sub.get("class"), str):
                yield from iter_layers({key: sub}, prefix + (name,))


def _get(net_dict, path):
    d = net_dict
    for part in path:
        d = d[part]
    return d


def _typo(key, rng):
    for _ in range(10):
        kind = rng.randrange(3)
        if kind == 0 and len(key) >= 3:
            i = rng.randrange(len(key) - 1)
            new = key[:i] + key[i + 1] + key[i] + key[i + 2:]
        elif kind == 1 and len(key) >= 4:
            i = rng.randrange(1, len(key))
            new = key[:i] + key[i + 1:]
        else:
            i = rng.randrange(len(key))
            new = key[:i] + key[i] + key[i:]
        if new != key:
            return new
    return key + "x"


def _wrong_type(key, value, rng):
    """A value of the wrong type for this option, or None if we cannot tell one."""
    if isinstance(value, bool):
        return str(value)  # "True"
    if key in ("from", "target", "loss", "activation", "kind", "mode", "padding", "eval", "reduce", "unit"):
        return rng.choice([{"x": 1}, 3.5]) if key != "from" else rng.choice([5, {"x": 1}])
    if isinstance(value, int) and key in SIZE_KEYS:
        return rng.choice([str(value), float(value) + 0.5, [value, value]])
    if isinstance(value, float):
        return str(value)
    return None


def _bad_size(key, value, rng):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return -2 if key == "repetitions" else rng.choice([0, -2, -4])
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        new = list(value)
        new[rng.randrange(len(new))] = rng.choice([0, -2])
        return type(value)(new)
    return None


MUTATIONS = ("typo_key", "typo_output_key", "wrong_type", "bad_size", "remove_option", "loop", "wrong_target",
             "wrong_from", "n_out_contradicts",
             # wider: rec units / subnetworks, axes, losses, extern_data, classes, cycles
             "bad_prev_ref", "unit_missing_ref", "unit_no_output", "no_end", "base_missing", "dense_target",
             "bad_rate", "zero_n_out", "bad_axis", "extern_bad", "bad_loss", "bad_loss_opts", "loss_on_layer",
             "cycle", "unknown_class", "none_value",
             # the declared options of every layer class (layer_options.py), set to values of the wrong type
             "option_value", "option_value", "option_value", "n_out_changed", "extern_sparse")
AXIS_KEYS = ("axis", "axes", "red1", "red2", "var1", "var2", "in_spatial_dims", "axis1", "axis2", "time_axis")
BAD_AXES = ("X", "stag:no_such_tag", 9, -9, "spatial:5", "dim:12345", "Q")
LOSS_KINDS = ("dense_target", "bad_loss_opts", "loss_on_layer", "wrong_target", "typo_output_key")
# losses that need sparse targets (class indices)
SPARSE_LOSSES = ("ctc", "edit_distance", "bleu", "generic_ce")


def mutate(case, kind, rng):
    """One mutant of the case network: dict(kind, path, option, must_fail, net, desc), or None if not applicable."""
    net = ast.literal_eval(repr(case["network"]))
    expected_layers = set(case.get("expected", {}).get("layers", {}))
    layers = [(p, d) for p, d in iter_layers(net) if len(p) > 1 or p[0] in expected_layers or d.get("loss")]
    if not layers:
        return None
    path, desc = rng.choice(layers)
    name = path[-1]
    res = {"kind": kind, "path": "/".join(path), "layer": name, "option": None, "must_fail": True}
    keys = [k for k in desc if k not in NEVER_MUTATE]
    if kind == "typo_key":
        if not keys:
            return None
        key = rng.choice(keys)
        new = _typo(key, rng)
        desc[new] = desc.pop(key)
        res.update(option=new, desc="option %r -> %r" % (key, new))
    elif kind == "typo_output_key":
        key = rng.choice(["is_ouput_layer", "is_output_layr", "los", "is_output"])
        desc[key] = "ce" if key == "los" else True
        res.update(option=key, desc="added %r" % key)
    elif kind == "wrong_type":
        cands = [(k, _wrong_type(k, desc[k], rng)) for k in keys]
        cands = [(k, v) for k, v in cands if v is not None]
        if not cands:
            return None
        key, value = rng.choice(cands)
        res.update(option=key, desc="%s: %r -> %r" % (key, desc[key], value))
        desc[key] = value
    elif kind == "bad_size":
        cands = [(k, _bad_size(k, desc[k], rng)) for k in keys if k in SIZE_KEYS]
        cands = [(k, v) for k, v in cands if v is not None]
        if not cands:
            return None
        key, value = rng.choice(cands)
        res.update(option=key, desc="%s: %r -> %r" % (key, desc[key], value))
        desc[key] = value
    elif kind == "remove_option":
        cands = [k for k in keys if k not in ("is_output_layer",)]
        if not cands:
            return None
        key = rng.choice(cands)
        desc.pop(key)
        res.update(option=key, desc="removed %r" % key, must_fail=False)
    elif kind == "loop":
        container = _get(net, path[:-1]) if len(path) > 1 else net
        srcs = desc.get("from", "data")
        srcs = [srcs] if isinstance(srcs, str) else list(srcs) if isinstance(srcs, (list, tuple)) else []
        srcs = [s for s in srcs if isinstance(s, str) and s in container and isinstance(container[s], dict)]
        if not srcs:
            desc["from"] = name  # the layer from itself
            res.update(desc="'from' itself")
        else:
            src = rng.choice(srcs)
            container[src]["from"] = name
            res.update(desc="source %r made from %r" % (src, name))
    elif kind == "wrong_target":
        if "target" in desc:
            res.update(option=("target", "clases"), desc="target %r -> 'clases'" % desc["target"])
            desc["target"] = "clases"
        elif desc.get("loss"):
            desc["target"] = "clases"
            res.update(option=("target", "clases"), desc="added target 'clases'")
        else:
            return None
    elif kind == "wrong_from":
        srcs = desc.get("from")
        if isinstance(srcs, str) and srcs not in ("data",) and not srcs.startswith(("data:", "prev:", "base:")):
            desc["from"] = srcs + "x"
        elif isinstance(srcs, (list, tuple)) and srcs and isinstance(srcs[0], str):
            desc["from"] = [srcs[0] + "x"] + list(srcs[1:])
        else:
            desc["from"] = "no_such_layer"
        bad = desc["from"] if isinstance(desc["from"], str) else desc["from"][0]
        res.update(option=("from", bad), desc="from -> %r" % (desc["from"],))
    elif kind == "n_out_contradicts":
        if "n_out" in desc or "out_type" in desc or desc.get("class") in ("rec",):
            return None
        desc["n_out"] = 12345
        res.update(option="n_out", desc="added n_out 12345")
    elif not _mutate_wider(kind, case, net, path, desc, res, rng):
        return None
    res["net"] = net
    res["case"] = case["name"]
    res["case_dir"] = case["dir"]
    return res


def _in_unit(path):
    return len(path) >= 3 and path[-2] == "unit"


def _sources(desc):
    srcs = desc.get("from", "data")
    return [srcs] if isinstance(srcs, str) else list(srcs) if isinstance(srcs, (list, tuple)) else []


def _mutate_wider(kind, case, net, path, desc, res, rng):
    """The wider mutation kinds (see MUTATIONS); False if not applicable to this layer."""
    name = path[-1]
    container = _get(net, path[:-1]) if len(path) > 1 else net
    if kind == "bad_prev_ref":  # prev: of a layer that is not in the unit
        if not _in_unit(path):
            return False
        desc["from"] = _sources(desc) + ["prev:no_such_layer"]
        res.update(option="no_such_layer", desc="added source 'prev:no_such_layer'")
    elif kind == "unit_missing_ref":
        if not _in_unit(path):
            return False
        desc["from"] = ["no_such_sub"] + _sources(desc)[1:]
        res.update(option="no_such_sub", desc="from -> %r" % (desc["from"],))
    elif kind == "unit_no_output":  # a rec unit / subnetwork without its 'output' layer
        for key in SUBNET_KEYS:
            sub = desc.get(key)
            if isinstance(sub, dict) and "output" in sub and isinstance(sub["output"], dict):
                del sub["output"]
                for other in sub.values():  # references to it would be a different error
                    if isinstance(other, dict) and "output" in _sources(other):
                        return False
                res.update(option="output", desc="removed %s/output" % key)
                return True
        return False
    elif kind == "no_end":  # a rec unit without its 'end' layer (under search: nothing ends the loop)
        unit = desc.get("unit")
        if not (isinstance(unit, dict) and isinstance(unit.get("end"), dict)):
            return False
        if any(isinstance(d, dict) and "end" in [r.split(":")[-1] for r in _sources(d) if isinstance(r, str)]
               for d in unit.values()):
            return False
        del unit["end"]
        # with a target or max_seq_len the loop has an end: may be legal
        res.update(option="end", desc="removed unit/end", must_fail=False)
    elif kind == "base_missing":
        if len(path) < 2:
            return False
        desc["from"] = "base:no_such_layer"
        res.update(option="no_such_layer", desc="from -> 'base:no_such_layer'")
    elif kind == "dense_target":  # a sparse loss with a dense float target
        if not desc.get("loss"):
            return False
        dense = [k for k, v in case["extern_data"].items() if isinstance(v, dict) and not v.get("sparse")]
        if not dense:
            return False
        res.update(option=("target", dense[0], desc["loss"]), desc="target -> dense %r (loss %r)" % (
            dense[0], desc["loss"]), must_fail=desc["loss"] in SPARSE_LOSSES)
        desc["target"] = dense[0]
    elif kind == "bad_rate":
        value = rng.choice([1.5, -0.5, 2])
        res.update(option="dropout", desc="dropout %r" % value)
        desc["dropout"] = value
    elif kind == "zero_n_out":
        if "n_out" not in desc:
            return False
        res.update(option="n_out", desc="n_out %r -> 0" % (desc["n_out"],))
        desc["n_out"] = 0
    elif kind == "bad_axis":
        keys = [k for k in AXIS_KEYS if k in desc]
        if not keys:
            return False
        key, value = rng.choice(keys), rng.choice(BAD_AXES)
        if isinstance(desc[key], (list, tuple)) and desc[key]:
            value = [value] + list(desc[key])[1:]
        res.update(option=key, desc="%s: %r -> %r" % (key, desc[key], value))
        desc[key] = value
    elif kind == "extern_bad":
        return _mutate_extern(case, res, rng)
    elif kind == "extern_sparse":
        return _mutate_extern_sparse(case, res, rng)
    elif kind == "option_value":
        return _mutate_option_value(desc, res, rng)
    elif kind == "n_out_changed":  # an n_out that contradicts the target of the layer (or of its rec unit)
        if not isinstance(desc.get("n_out"), int) or not (desc.get("target") or desc.get("loss")):
            return False
        value = rng.choice([desc["n_out"] + 1, 12345, 2 * desc["n_out"] + 3])
        if desc.get("loss") == "triplet_loss":  # (its n_out is an embedding dim x3, not the target's: break that)
            value = desc["n_out"] + 1
        res.update(option="n_out", desc="n_out %r -> %r (target %r)" % (desc["n_out"], value, desc.get("target")))
        desc["n_out"] = value
    elif kind == "bad_loss":
        desc["loss"] = rng.choice(["no_such_loss", "cee", "CTC"])
        res.update(option=("loss", desc["loss"]), desc="loss -> %r" % desc["loss"])
    elif kind == "bad_loss_opts":
        if not desc.get("loss"):
            return False
        desc["loss_opts"] = dict(desc.get("loss_opts") or {}, bogus_opt=1)
        res.update(option="bogus_opt", desc="loss_opts += bogus_opt")
    elif kind == "loss_on_layer":  # a loss on a layer of another kind (may fit: a clean error or accepted)
        if desc.get("loss") or desc.get("class") in ("rec", "subnetwork") or len(path) > 1:
            return False
        sparse = sorted(k for k, v in case["extern_data"].items() if isinstance(v, dict) and v.get("sparse"))
        if not sparse:
            return False
        loss = rng.choice(["ce", "ctc", "mse", "edit_distance", "bin_ce"])
        desc.update(loss=loss, target=sparse[0])
        res.update(option=("loss", loss, "target"), desc="added loss %r target %r" % (loss, sparse[0]),
                   must_fail=False)
    elif kind == "cycle":  # a -> b -> a (no prev:)
        srcs = [x for x in _sources(desc) if isinstance(x, str) and isinstance(container.get(x), dict)
                and x != name and "from" in container[x]]  # (a default 'from' made explicit is another error)
        if not srcs:
            return False
        other = rng.choice(srcs)
        container[other]["from"] = _sources(container[other]) + [name]
        res.update(desc="%r -> %r -> %r" % (name, other, name))
    elif kind == "unknown_class":
        cls = desc.get("class")
        new = rng.choice(["no_such_class", _typo(cls, rng) if isinstance(cls, str) else "x"])
        desc["class"] = new
        res.update(option=new, desc="class %r -> %r" % (cls, new))
    elif kind == "none_value":  # None for an option with a value (legal where None is the default)
        keys = [k for k in desc if k not in ("class", "from") and desc[k] is not None]
        if not keys:
            return False
        key = rng.choice(keys)
        res.update(option=key, desc="%s: %r -> None" % (key, desc[key]), must_fail=False)
        desc[key] = None
    else:
        raise ValueError(kind)
    return True


def _option_infos():
    """{layer class name: LayerOptionsInfo} of every registered layer class (the option declarations)."""
    global _OPTION_INFOS
    if _OPTION_INFOS is None:
        if REPO not in sys.path:
            sys.path.insert(0, REPO)
        from returnn_lite.layer_options import get_layer_options_info
        from returnn_lite.layers.base import get_layer_class, get_layer_class_names

        _OPTION_INFOS = {}
        for name in get_layer_class_names():
            try:
                _OPTION_INFOS[name] = get_layer_options_info(get_layer_class(name))
            except Exception:  # noqa: (a class that cannot be looked up is not fuzzed by option)
                continue
    return _OPTION_INFOS


_OPTION_INFOS = None
# options that are wiring (other mutation kinds) or that take anything
OPTION_VALUE_SKIP = ("class", "from", "rec_previous_layer", "name_scope", "reuse_params", "eval_locals")
BAD_FOR_ANY = ({"no_such_key": 1}, "no_such_value", -7, 2.5, [1, "x"])


def _mutate_option_value(desc, res, rng):
    """One declared option of the layer's class (present or not) set to a value of the wrong type for its default:
    a user error where the default tells the type (bool, int, float, str), else a value that may be legal."""
    from returnn_lite.layer_options import accepted_option_types

    info = _option_infos().get(desc.get("class"))
    if info is None:
        return False
    names = sorted(k for k in set(info.params) | set(info.names) if k not in OPTION_VALUE_SKIP)
    if not names:
        return False
    key = rng.choice(names)
    default = info.defaults.get(key)
    accepted = accepted_option_types(info, key)
    if isinstance(default, bool):
        value = rng.choice(["yes", 2, 0.5, [True]])
    elif isinstance(default, (int, float)):
        value = rng.choice(["3", {"x": 1}])
    elif isinstance(default, str):
        value = rng.choice([3.5, {"x": 1}])
    else:
        value = rng.choice(BAD_FOR_ANY)
    # a user error where the declaration tells the accepted types (the default's type, or declared types)
    must_fail = accepted is not None and not isinstance(value, accepted) and not (
        isinstance(value, bool) and bool in accepted)
    res.update(option=key, desc="%s: %r -> %r" % (key, desc.get(key, "<default %r>" % (default,)), value),
               must_fail=must_fail)
    desc[key] = value
    return True


def _mutate_extern_sparse(case, res, rng):
    """A dense data key turned sparse (as if the dataset gave class indices): the layers using it must say so at
    construction, or a run-time check must name the layer, never TF's index error."""
    ext = ast.literal_eval(repr(case["extern_data"]))
    # (int data only: the case's inputs still feed; a float input made sparse fails at feeding, not in the net)
    dense = sorted(k for k, v in ext.items() if isinstance(v, dict) and not v.get("sparse")
                   and str(v.get("dtype", "float32")).startswith("int"))
    if not dense:
        return False
    key = rng.choice(dense)
    opts = ext[key]
    # the same axes (the case's inputs still feed): a dense feature axis becomes a spatial one of the sparse data
    opts["shape"] = tuple(opts["shape"] if opts.get("shape") is not None else (None, opts["dim"]) if opts.get("dim") else (None,))
    opts["sparse"] = True
    if rng.random() < 0.5:
        ext[key].pop("dim", None)
    res.update(layer=key, option="sparse", desc="extern_data %r made sparse (%r)" % (key, ext[key]),
               must_fail=False)
    res["extern_data"] = ext
    return True


def _mutate_extern(case, res, rng):
    """A mistake in extern_data (the mutant carries its own extern_data)."""
    ext = ast.literal_eval(repr(case["extern_data"]))
    key = rng.choice(sorted(ext))
    opts = ext[key]
    if not isinstance(opts, dict):
        return False
    dim = opts.get("dim")
    choices = [("dim", -3), ("dim", "5"), ("dim", 0), ("sparse", "yes"), ("dtype", "flaot32"),
               ("feature_dim_axis", 7), ("time_dim_axis", 5), ("shape", 5), ("available_for_inference", "x")]
    if opts.get("sparse"):
        choices.append(("dim", None))
    if isinstance(dim, int) and not opts.get("sparse"):
        shape = opts.get("shape", (None, dim))
        if isinstance(shape, (list, tuple)) and shape:
            choices.append(("shape", tuple(shape[:-1]) + (dim + 1,)))
    opt, value = rng.choice(choices)
    res.update(layer=key, option=opt, desc="extern_data %r: %s %r -> %r" % (key, opt, opts.get(opt), value),
               must_fail=not (opt == "dim" and value is None))  # sparse dim None: unknown vocab, may be legal
    opts[opt] = value
    res["extern_data"] = ext
    return True


def make_mutants(cases, seed, count):
    rng = random.Random(seed)
    mutants = []
    while len(mutants) < count:
        kind = rng.choice(MUTATIONS)
        for _ in range(40):  # kinds that fit few layers (e.g. no_end: a unit with 'end') get their share too
            mutant = mutate(rng.choice(cases), kind, rng)
            if mutant is not None:
                break
        if mutant is not None:
            mutant["id"] = len(mutants)
            mutants.append(mutant)
    return mutants


# ---- worker (in a subprocess)

def _exc_text(exc):
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append("%s: %s" % (type(exc).__name__, exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def run_mutant(spec):
    """Build + run one mutant; returns dict(stage, error type, message, chain)."""
    import numpy
    import tensorflow as tf

    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    tf1 = tf.compat.v1
    case = ast.literal_eval(open(os.path.join(spec["case_dir"], "case.py")).read())
    with tf.Graph().as_default():
        try:
            extern_data = ExternData(spec.get("extern_data") or case["extern_data"])
            flags = {"search_flag": True} if case.get("search_flag") else {}
            if case.get("eval_flag") is not None:
                flags["eval_flag"] = case["eval_flag"]
            train_flag = case["train_flag"] if case.get("search_flag") else spec.get("train_flag", case["train_flag"])
            net = TFNetwork(extern_data=extern_data, train_flag=train_flag, **flags)
            net.construct_from_dict(spec["net"])
            objective = net.get_objective()
        except Exception as exc:
            return {"stage": "construct", "type": type(exc).__name__, "message": str(exc), "chain": _exc_text(exc)}
        try:
            inputs = dict(numpy.load(os.path.join(spec["case_dir"], "inputs.npz")))
            feed = {}
            for key, data in extern_data.data.items():
                if key not in inputs:
                    continue
                feed[data.placeholder] = inputs[key]
                for axis, size in (data.size_placeholder or {}).items():
                    if "%s:size%i" % (key, axis) in inputs:
                        feed[size] = inputs["%s:size%i" % (key, axis)]
            fetches = {name: layer.output.placeholder for name, layer in net.layers.items()
                       if getattr(layer.output, "placeholder", None) is not None}
            if isinstance(objective, (tf.Tensor, tf.Variable)):
                fetches["_objective"] = objective
                params = net.get_trainable_params() if hasattr(net, "get_trainable_params") else net.get_params_list()
                grads = [g for g in tf.gradients(objective, params) if g is not None] if params else []
                if grads:
                    fetches["_grads"] = grads
            with tf1.Session() as session:
                net.initialize_params(session)
                session.run(fetches, feed_dict=feed)
            built, stack = set(), [("", net)]
            while stack:  # (also the layers of subnetwork layers)
                prefix, n = stack.pop()
                for name, layer in n.layers.items():
                    built.add(prefix + name)
                    sub = getattr(layer, "subnetwork", None)
                    if sub is not None and hasattr(sub, "layers"):
                        stack.append((prefix + name + "/", sub))
        except Exception as exc:
            from returnn_lite.engine.checks import tf_error_text  # (the CLI's one-line text of a run-time error)

            return {"stage": "run", "type": type(exc).__name__, "message": tf_error_text(str(exc))[:500],
                    "chain": _exc_text(exc)[:2000]}
    return {"stage": "ok", "built": sorted(built)}


def worker_main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, REPO)
    import warnings

    warnings.filterwarnings("ignore")
    for line in sys.stdin:
        spec = ast.literal_eval(line)
        try:
            res = run_mutant(spec)
        except BaseException as exc:  # noqa: the worker must answer
            res = {"stage": "worker", "type": type(exc).__name__, "message": str(exc)[:500], "chain": ""}
        res["id"] = spec["id"]
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


# ---- classification

def _strip_layer_prefix(message):
    """ "layer 'x' (class 'y'): ..." -> "..." (repeatedly)."""
    text = message
    while text.startswith("layer '"):
        i = text.find(": ")
        if i < 0:
            break
        text = text[i + 2:]
    return text


def classify(mutant, res):
    stage = res.get("stage")
    if stage in ("crash", "timeout"):
        return "crash"
    if stage == "ok":
        # a layer inside a subnetwork that nothing uses is never built (as in the original; the root network warns
        # about its own unreached layers): a mistake in it is legitimately not seen
        in_subnet = mutant.get("path", "").split("/")
        if "subnetwork" in in_subnet and "unit" not in in_subnet and "built" in res and \
                "/".join(p for p in in_subnet if p != "subnetwork") not in res["built"]:
            return "accepted_ok"
        return "accepted" if mutant["must_fail"] else "accepted_ok"
    if stage == "run":  # our run-time check (a TF assert naming the layer) where only the data tells: clean_run
        message = res.get("message", "")
        ours = message.startswith("assertion failed: [") and "layer '%s'" % mutant["layer"] in message
        return "clean_run" if ours else "raw"
    if stage == "worker":
        return "raw"
    message = res.get("message", "")
    layer = mutant["layer"]
    # the layer, or a path through it ('output/masked/unit/data' names 'masked')
    names_layer = re.search(r"'(?:[^'\s]*/)?%s(?:/[^'\s]*)?'" % re.escape(layer), message) is not None
    if mutant["kind"] in ("loop", "cycle"):
        names_layer = names_layer or "dependency loop" in message
    if not mutant["must_fail"] or mutant["kind"] == "extern_bad":
        # a removed option / a legal-looking change may surface at a layer that uses this one: fine if it names it
        names_layer = names_layer or message.startswith("layer '")
    core = _strip_layer_prefix(message)
    core = core.split(": ", 1)[1] if core.split(": ", 1)[0].endswith(("Error", "Exception")) and ": " in core else core
    is_raw_text = any(core.startswith(m) or core.startswith("'") and m in core[:40] for m in RAW_MARKERS)
    if not names_layer or is_raw_text:
        return "raw"
    return "clean"


def names_option(mutant, res):
    option = mutant.get("option")
    if not option:
        return None
    message = res.get("message", "")
    return any(re.search(r"(?<![\w])%s(?![\w])" % re.escape(o), message)
               for o in (option if isinstance(option, tuple) else (option,)))


# ---- driver

class _Worker:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   TF_CPP_MIN_LOG_LEVEL="3")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                                     bufsize=1)

    def run(self, spec, timeout):
        self.proc.stdin.write(repr(spec) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return {"stage": "timeout"}
        line = self.proc.stdout.readline()
        if not line:
            return {"stage": "crash", "returncode": self.proc.wait()}
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()


def run_fuzzer(seed=0, count=150, cases_dir=DEFAULT_CASES, only=None, timeout=120, verbose=False):
    """Returns (counts dict, list of (mutant, result, class))."""
    mutants = make_mutants(load_cases(cases_dir, only), seed, count)
    results = []
    worker = None
    try:
        for mutant in mutants:
            if worker is None:
                worker = _Worker()
            spec = {"id": mutant["id"], "net": mutant["net"], "case_dir": mutant["case_dir"],
                    "extern_data": mutant.get("extern_data")}
            if mutant["kind"] in LOSS_KINDS:  # losses are only computed in training
                spec["train_flag"] = True
            res = worker.run(spec, timeout)
            if res.get("stage") in ("crash", "timeout"):
                worker.proc.kill()
                worker.close()
                worker = None
            cls = classify(mutant, res)
            results.append((mutant, res, cls))
            if verbose:
                print("%3i %-12s %-18s %-40s %-16s %s" % (
                    mutant["id"], cls, mutant["kind"], mutant["case"] + ":" + mutant["path"], mutant.get("desc", ""),
                    (res.get("message") or res.get("stage"))[:300].replace("\n", " ")), flush=True)
    finally:
        if worker is not None:
            worker.close()
    counts = {}
    for mutant, res, cls in results:
        counts[cls] = counts.get(cls, 0) + 1
        if cls == "clean":
            named = names_option(mutant, res)
            if named is not None:
                key = "clean_named_option" if named else "clean_no_option"
                counts[key] = counts.get(key, 0) + 1
    return counts, results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=150)
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--only", default=None)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--json", default=None)
    parser.add_argument("--show", default="raw,crash,accepted,clean_no_option",
                        help="classes to list at the end (comma separated)")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main()
    start = time.time()
    counts, results = run_fuzzer(args.seed, args.count, args.cases, args.only, args.timeout, args.verbose)
    show = set(args.show.split(","))
    for mutant, res, cls in results:
        label = cls
        if cls == "clean" and names_option(mutant, res) is False:
            label = "clean_no_option"
        if label in show:
            print("%-16s %-18s %s: %s\n    %s" % (label, mutant["kind"], mutant["case"] + ":" + mutant["path"],
                                                mutant.get("desc", ""),
                                                (res.get("message") or res.get("stage", ""))[:400].replace("\n", " ")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"mutant": {k: v for k, v in m.items() if k != "net"}, "result": r, "class": c}
                       for m, r, c in results], f, indent=1, default=repr)
    print("%i mutants in %.0fs: %s" % (len(results), time.time() - start,
                                       ", ".join("%s %i" % kv for kv in sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
