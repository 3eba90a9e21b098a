#!/usr/bin/env python3
"""
Writes the extra frontend (rf) conformance cases under tests/data/frontend_cases/<name>/ in the format of
../shared/conformance/frontend (model.py, params.npz, inputs.npz, expected.npz, case.json).

The expected values come from independent float64 numpy implementations of each model below (written from the
original's documented semantics), never from either returnn_lite backend; param gradients by central differences.
Run from the project root: ``python tools/make_frontend_cases.py``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "frontend_cases")
sys.path.insert(0, os.path.join(ROOT, "tools"))

from frontend_case_models import CASES  # noqa: E402

SIZES = np.array([7, 5, 4], dtype="int32")


def _rng(name):
    return np.random.RandomState(sum(map(ord, name)) * 7919 % (2 ** 31))  # stable per case name


def make_inputs(spec, rng):
    """spec: key -> (shape with 'T' for the time axis, dtype, vocab or None); sizes per dim name 'size:<dim>'"""
    inputs = {}
    for key, (shape, dtype, vocab) in spec["data"].items():
        shape = [spec["dim_len"].get(s, s) if isinstance(s, str) else s for s in shape]
        if dtype.startswith("int"):
            inputs[key] = rng.randint(0, vocab, size=shape).astype(dtype)
        else:
            inputs[key] = rng.randn(*shape).astype(dtype)
    for dim_name, sizes in spec["sizes"].items():
        inputs["size:" + dim_name] = np.asarray(sizes, dtype="int32")
    return inputs


def num_grads(loss_fn, params, eps=1e-5):
    grads = {}
    for name, p in params.items():
        g = np.zeros(p.shape, "float64")
        flat = p.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            lp = loss_fn(params)
            flat[i] = old - eps
            lm = loss_fn(params)
            flat[i] = old
            g.reshape(-1)[i] = (lp - lm) / (2 * eps)
        grads[name] = g
    return grads


def write_case(case):
    name = case["name"]
    rng = _rng(name)
    inputs = make_inputs(case["inputs"], rng)
    params = {k: (rng.randn(*shape) * case.get("param_scale", 0.5)).astype("float32")
              for k, shape in case["params"].items()}
    p64 = {k: v.astype("float64") for k, v in params.items()}
    for k, v in case.get("initial", {}).items():
        p64[k] = np.full(case["params"][k], v, "float64")
    in64 = {k: (v.astype("float64") if v.dtype.kind == "f" else v) for k, v in inputs.items()}
    res = case["ref"](in64, p64)
    expected = {}
    for k, v in res["outputs"].items():
        expected["out:" + k] = np.asarray(v)
    for k, v in res.get("sizes", {}).items():
        expected[k] = np.asarray(v, "int32")
    losses = res.get("losses", {})
    for k, (summed, inv_norm) in losses.items():
        expected["loss:%s:summed" % k] = np.asarray(summed, "float32")
        expected["loss:%s:inv_norm" % k] = np.asarray(inv_norm, "float32")
        expected["loss:%s:mean" % k] = np.asarray(summed / inv_norm, "float32")
    if losses:
        expected["total_loss"] = np.asarray(res["total_loss"], "float32")
    if case.get("grads"):
        keep = set(case.get("keep_initial", []))

        def loss_fn(p):
            return case["ref"](in64, p)["total_loss"]

        trainable = {k: v for k, v in p64.items()}
        grads = num_grads(loss_fn, trainable)
        for k, g in grads.items():
            expected["grad:" + k] = g.astype("float32")
        del keep
    for k, v in list(expected.items()):
        if k.startswith("out:") and ":size" not in k:
            expected[k] = v.astype(case["outputs"][k[4:]]["dtype"])
            # frames beyond the lengths zeroed
            meta = case["outputs"][k[4:]]
            for axis_s in meta.get("size_dims", {}):
                sz = expected["out:%s:size%s" % (k[4:], axis_s)]
                axis = int(axis_s)
                val = expected[k]
                idx = np.arange(val.shape[axis])
                shape = [1] * val.ndim
                shape[axis] = val.shape[axis]
                if sz.ndim == 0:
                    m = idx.reshape(shape) < sz
                elif "B" not in meta["dims"]:
                    continue  # as the checker: lengths per batch entry but no batch axis
                else:
                    bshape = [1] * val.ndim
                    bshape[meta["dims"].index("B")] = sz.shape[0]
                    m = idx.reshape(shape) < sz.reshape(bshape)
                expected[k] = np.where(m, val, np.zeros((), val.dtype))
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.py"), "w") as f:
        f.write(case["model"].lstrip("\n"))
    np.savez(os.path.join(folder, "params.npz"), **params)
    np.savez(os.path.join(folder, "inputs.npz"), **inputs)
    np.savez(os.path.join(folder, "expected.npz"), **expected)
    meta = {"name": name, "task": case["task"], "outputs": case["outputs"], "losses": sorted(losses),
            "keep_initial": case.get("keep_initial", []), "grads": bool(case.get("grads")),
            "rtol": 1e-4, "atol": 1e-5}
    if case.get("grads"):
        meta.update({"grad_rtol": 1e-3, "grad_atol": 1e-5})
    with open(os.path.join(folder, "case.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print("wrote", folder)


def main(argv):
    only = argv[1:] or None
    for case in CASES:
        if only and case["name"] not in only:
            continue
        write_case(case)


if __name__ == "__main__":
    main(sys.argv)
