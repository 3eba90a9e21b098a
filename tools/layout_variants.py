#!/usr/bin/env python
"""
Metamorphic layout test over the public conformance corpus.

For every (non-error, non-stateful, deterministic) case, build the network twice:
once with the case's extern_data as given, once with every extern data entry that is in the
default batch-major form with a time axis turned time-major (classic kwargs
``batch_dim_axis=1, time_dim_axis=0``; inputs fed transposed), and every entry in the classic
time-major form (``batch_dim_axis=1, time_dim_axis=0``) turned batch-major; with several such entries
also each one flipped alone (mixed layouts); channels-first entries (``feature_dim_axis=1, time_dim_axis=2``)
get their feature axis moved last (default form). All runs load the case's
checkpoint and are fed the same inputs. The canonical outputs (``copy_as_batch_spatial_major``)
of the expected layers, their sequence lengths, the losses/objective and the gradients of the
objective w.r.t. the params must agree,
as they do in the original RETURNN.

Usage::

    python tools/layout_variants.py [--cases DIR] [--only PREFIX1,PREFIX2] [-v]

Prints ``OK name`` / ``DIFF name: <first difference>`` (``SKIP name: <reason>`` with -v) per case and a
summary line ``N ok, M diff, K skipped, E error``. Skipped: error cases, stateful cases, random ops
(dropout in training, rand_int/random), cases without a flippable extern data entry.
"""

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_DEFAULT_SHARED = os.path.normpath(os.path.join(_HERE, "..", "..", "shared", "conformance"))


def _import_check(conformance_dir=_DEFAULT_SHARED):
    if conformance_dir not in sys.path:
        sys.path.insert(0, conformance_dir)
    import check  # noqa

    return check


def _iter_values(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _iter_values(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _iter_values(v)
    else:
        yield obj


def skip_reason(case):
    """
    :param dict case:
    :return: reason to skip, or None
    """
    if case.get("expect_error"):
        return "error case"
    if case.get("stateful"):
        return "stateful"
    net = case["network"]
    strs = [v for v in _iter_values(net) if isinstance(v, str)]
    if "rand_int" in strs or "random" in strs or "random_state_init" in strs:
        return "random op"
    if case.get("train_flag"):
        # dropout in training is random
        def _has_dropout(d):
            if isinstance(d, dict):
                for k, v in d.items():
                    if k == "dropout" and isinstance(v, (int, float)) and v > 0:
                        return True
                    if k == "class" and v == "dropout":
                        return True
                    if _has_dropout(v):
                        return True
            elif isinstance(d, (list, tuple)):
                return any(_has_dropout(v) for v in d)
            return False

        if _has_dropout(net):
            return "dropout in training"
    if not time_major_keys(case["extern_data"]):
        return "no extern data in default batch-major, classic time-major or channels-first form with a time axis"
    return None


def _convertible(kwargs):
    """Default batch-major form with a time axis at 1 (batch at 0)?"""
    if any(k in kwargs for k in ("batch_dim_axis", "feature_dim_axis", "dims", "dim_tags", "same_dim_tags_as")):
        return False
    if "time_dim_axis" in kwargs and kwargs["time_dim_axis"] != 1:
        return False
    shape = kwargs.get("shape", None)
    if shape is None:
        return True  # default shape (None, dim) or (None,) if sparse: time axis at 1
    return len(shape) >= 1 and shape[0] is None


def _convertible_back(kwargs):
    """Classic time-major form (batch_dim_axis=1, time_dim_axis=0, dynamic time, default feature axis)?"""
    if any(k in kwargs for k in ("feature_dim_axis", "dims", "dim_tags", "same_dim_tags_as")):
        return False
    if kwargs.get("batch_dim_axis") != 1 or kwargs.get("time_dim_axis") != 0:
        return False
    shape = kwargs.get("shape", None)
    return shape is None or (len(shape) >= 1 and shape[0] is None)


def _convertible_feature_major(kwargs):
    """Classic channels-first form [B,F,T,...] (feature_dim_axis=1, time_dim_axis=2, dynamic time, dense)?"""
    if any(k in kwargs for k in ("batch_dim_axis", "dims", "dim_tags", "same_dim_tags_as")) or kwargs.get("sparse"):
        return False
    if kwargs.get("feature_dim_axis") != 1 or kwargs.get("time_dim_axis") != 2:
        return False
    shape = kwargs.get("shape", None)
    return shape is not None and len(shape) >= 2 and shape[0] is not None and shape[1] is None


def time_major_keys(extern_data):
    """
    Keys whose layout gets flipped (batch-major -> time-major, time-major -> batch-major,
    feature-major -> feature last).
    """
    return [
        k for k, v in extern_data.items()
        if _convertible(v) or _convertible_back(v) or _convertible_feature_major(v)
    ]


def time_major_extern_data(extern_data, only_keys=None):
    """
    The extern data with every flippable entry flipped: default batch-major entries with a time axis get
    ``batch_dim_axis=1, time_dim_axis=0``; classic time-major entries lose these options (batch-major).
    """
    out = {}
    for k, v in extern_data.items():
        v = dict(v)
        if only_keys is not None and k not in only_keys:
            pass
        elif _convertible(v):
            v["batch_dim_axis"] = 1
            v["time_dim_axis"] = 0
        elif _convertible_back(v):
            del v["batch_dim_axis"]
            del v["time_dim_axis"]
        elif _convertible_feature_major(v):
            del v["feature_dim_axis"]
            del v["time_dim_axis"]
            shape = tuple(v["shape"])
            v["shape"] = shape[1:] + shape[:1]
            v["dim"] = shape[0]
        out[k] = v
    return out


def run_variant(case_dir, case, extern_data_kwargs, inputs, transpose_keys, check, ref_batch_axes=None):
    """
    :return: dict with "out" (layer -> canonical value), "sizes" (layer -> {axis: lens}),
        "scalars" (name -> float or None), "has_batch" (layer -> bool)
    """
    import numpy as np
    import tensorflow as tf
    from returnn_lite.extern_data import ExternData
    from returnn_lite.network import TFNetwork

    tf1 = tf.compat.v1
    expected = case["expected"]
    ref_batch_axes = ref_batch_axes or {}
    with tf.Graph().as_default() as graph:
        extern_data = ExternData(extern_data_kwargs)
        net = TFNetwork(extern_data=extern_data, train_flag=case["train_flag"])
        net.construct_from_dict(case["network"])
        fetches = {}
        has_batch = {}
        templates = {}
        for lname in expected["layers"]:
            out = net.get_layer(lname).output
            canon = check.canonical(out)
            templates[lname] = check._template_of(canon)  # canonical: the raw layout may legitimately differ
            has_batch[lname] = canon.batch_dim_axis is not None
            fetches[lname] = canon.placeholder
            for axis, sz in sorted((canon.size_placeholder or {}).items()):
                fetches["%s:size%i" % (lname, axis)] = sz
        scalars = {}
        scalar_const = {}
        for k, fn in [
            ("total_loss", net.get_total_loss),
            ("total_constraints", net.get_total_constraints),
            ("objective", net.get_objective),
        ]:
            v = fn()
            if isinstance(v, (tf.Tensor, tf.Variable)):
                scalars[k] = v
            else:
                scalar_const[k] = 0.0 if v is None else float(v)
        losses_dict = getattr(net, "losses_dict", None) or {}
        if expected.get("losses") and not losses_dict:
            losses_dict = net.get_losses_initialized()[0]
        for lname, lh in losses_dict.items():
            for k, fn in [("loss", lh.get_loss_value), ("error", lh.get_error_value), ("norm_factor", lh.get_norm_factor)]:
                v = fn()
                key = "loss %r %s" % (lname, k)
                if isinstance(v, (tf.Tensor, tf.Variable)):
                    scalars[key] = v
                else:
                    scalar_const[key] = None if v is None else float(v)
        grads = {}
        objective = scalars.get("objective")
        if objective is not None:
            params = [p for p in net.get_params_list() if p.dtype.base_dtype.is_floating]
            gs = tf.gradients(objective, params, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            for p, g in zip(params, gs):
                if isinstance(g, tf.IndexedSlices):
                    g = tf.convert_to_tensor(g)
                grads[p.op.name] = g
        with tf1.Session(graph=graph) as session:
            net.initialize_params(session)
            net.load_params_from_file(os.path.join(os.path.abspath(case_dir), "model"), session)
            feed = {}
            for key, data in extern_data.data.items():
                x = inputs[key]
                size_axis_map = {}  # axis (without batch) here -> axis in the recorded inputs
                if key in transpose_keys and _convertible_feature_major(case["extern_data"][key]):
                    x = np.moveaxis(x, 1, -1)  # [B,F,T,...] -> [B,T,...,F]
                    size_axis_map = {a: a + 1 for a in range(x.ndim - 2)}
                elif key in transpose_keys:
                    x = np.swapaxes(x, 0, 1)
                elif key not in case["extern_data"] and transpose_keys and data.batch_dim_axis != ref_batch_axes.get(key, 0):
                    # data registered by a layer (register_as_extern_data): recorded (and fed, as the checker
                    # does) in the batch-major layout it has in the original case; here it follows the
                    # time-major layout of its source
                    x = np.swapaxes(x, 0, 1)
                feed[data.placeholder] = x
                for axis, sz in (data.size_placeholder or {}).items():
                    feed[sz] = inputs["%s:size%i" % (key, size_axis_map.get(axis, axis))]
            res = session.run({"out": fetches, "scalars": scalars, "grads": grads}, feed_dict=feed)
    outs, sizes = {}, {}
    for lname in expected["layers"]:
        outs[lname] = res["out"][lname]
        sizes[lname] = {}
        prefix = lname + ":size"
        for k, v in res["out"].items():
            if k.startswith(prefix) and k[len(prefix):].isdigit():
                sizes[lname][int(k[len(prefix):])] = v
    sc = dict(scalar_const)
    sc.update({k: float(v) for k, v in res["scalars"].items()})
    batch_axes = {k: d.batch_dim_axis for k, d in extern_data.data.items()}
    return {
        "out": outs, "sizes": sizes, "scalars": sc, "has_batch": has_batch, "templates": templates,
        "batch_axes": batch_axes, "grads": res["grads"],
    }


def _compare_runs(a, b, case, check, rtol, atol):
    """:raises check.Mismatch: on the first difference of run b against run a"""
    import numpy as np

    for lname in case["expected"]["layers"]:
        ta, tb = a["templates"][lname], b["templates"][lname]
        for k in check.TEMPLATE_KEYS:
            if check._norm_template_value(ta[k]) != check._norm_template_value(tb[k]):
                raise check.Mismatch(
                    "layer %r: canonical template %s: original %r, flipped %r" % (lname, k, ta[k], tb[k])
                )
        sa, sb = a["sizes"][lname], b["sizes"][lname]
        if sorted(sa) != sorted(sb):
            raise check.Mismatch(
                "layer %r: dynamic axes of canonical output: original %s, flipped %s"
                % (lname, sorted(sa), sorted(sb))
            )
        for axis in sa:
            if np.shape(sa[axis]) != np.shape(sb[axis]) or not np.array_equal(sa[axis], sb[axis]):
                raise check.Mismatch(
                    "layer %r: seq lens of axis %i: original %s, flipped %s"
                    % (lname, axis, np.asarray(sa[axis]).tolist(), np.asarray(sb[axis]).tolist())
                )
        check._compare_values(
            "layer %r output (flipped layout vs original)" % lname,
            b["out"][lname],
            a["out"][lname],
            sa,
            a["has_batch"][lname],
            rtol,
            atol,
        )
    if sorted(a["scalars"]) != sorted(b["scalars"]):
        raise check.Mismatch("scalars differ: %s vs %s" % (sorted(a["scalars"]), sorted(b["scalars"])))
    for k, va in a["scalars"].items():
        check._close_scalar(k + " (flipped layout vs original)", b["scalars"][k], va, rtol, atol)
    if sorted(a["grads"]) != sorted(b["grads"]):
        raise check.Mismatch("gradient params differ: %s vs %s" % (sorted(a["grads"]), sorted(b["grads"])))
    for n, ga in a["grads"].items():
        gb = b["grads"][n]
        scale = max(1.0, float(np.abs(ga).max()) if ga.size else 1.0)
        if ga.shape != gb.shape or not np.allclose(gb, ga, rtol=check.GRAD_RTOL, atol=check.GRAD_ATOL * scale):
            raise check.Mismatch(
                "gradient of %r (flipped layout vs original): max abs diff %s"
                % (n, float(np.abs(gb - ga).max()) if ga.shape == gb.shape else (ga.shape, gb.shape))
            )


def compare_case(case_dir, check=None):
    """
    :return: (status, message), status in "OK", "DIFF", "SKIP", "ERROR"
    """
    check = check or _import_check()
    case = check.load_case(case_dir)
    reason = skip_reason(case)
    if reason:
        return "SKIP", reason
    rtol = case.get("rtol", check.DEFAULT_RTOL)
    atol = case.get("atol", check.DEFAULT_ATOL)
    inputs = check._load_npz(os.path.join(case_dir, "inputs.npz"))
    keys = time_major_keys(case["extern_data"])
    try:
        a = run_variant(case_dir, case, case["extern_data"], inputs, (), check)
    except Exception as exc:
        return "ERROR", "original-layout run failed: %s" % check._last_line_of_exc(exc)[:300]
    variants = [keys] + ([[k] for k in keys] if len(keys) > 1 else [])
    for flip in variants:
        what = "flipped %s" % ",".join(flip)
        try:
            b = run_variant(case_dir, case, time_major_extern_data(case["extern_data"], flip), inputs, flip, check,
                            ref_batch_axes=a["batch_axes"])
        except Exception as exc:
            return "DIFF", "%s: run failed: %s" % (what, check._last_line_of_exc(exc)[:300])
        try:
            _compare_runs(a, b, case, check, rtol, atol)
        except check.Mismatch as exc:
            return "DIFF", "%s: %s" % (what, exc)
    return "OK", "%i layers, %i scalars, %i grads, flipped %s" % (
        len(a["out"]), len(a["scalars"]), len(a["grads"]), " / ".join(",".join(f) for f in variants))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=os.path.join(_DEFAULT_SHARED, "cases"))
    ap.add_argument("--only", default=None, help="comma-separated substrings of case names")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print SKIP lines")
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    check = _import_check(os.path.dirname(os.path.abspath(args.cases)))
    counts = {"OK": 0, "DIFF": 0, "SKIP": 0, "ERROR": 0}
    for case_dir in check.list_case_dirs(args.cases, only=args.only):
        name = os.path.basename(case_dir)
        status, msg = compare_case(case_dir, check)
        counts[status] += 1
        if status != "SKIP" or args.verbose:
            print("%s %s: %s" % (status, name, msg), flush=True)
    print("%i ok, %i diff, %i skipped, %i error" % (counts["OK"], counts["DIFF"], counts["SKIP"], counts["ERROR"]))
    return 0 if counts["DIFF"] == 0 and counts["ERROR"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
