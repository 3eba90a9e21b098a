"""Shared helpers of rf: the model-code call site for errors, dim checks, output dims of broadcast ops."""

from __future__ import annotations

import os
import sys

from ..tensor.tensor import Dim, Tensor, axes_of, has_repeated_dim  # noqa: F401 (axes_of: shared axis resolution)

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # returnn_lite/


class FrontendError(Exception):
    """Bad rf usage (dim mismatch, unknown dim, ...); the message names the model code's call site."""


_INTERNAL_FILES = {}  # code file name -> whether it is returnn_lite's own (call_site runs once per emitted layer)


def _is_internal(filename):
    internal = _INTERNAL_FILES.get(filename)
    if internal is None:
        internal = _INTERNAL_FILES[filename] = not filename.startswith("<") and os.path.abspath(
            filename).startswith(_PKG_DIR + os.sep)
    return internal


def call_site():
    """'file:line' of the innermost frame outside returnn_lite (the model code that called rf)."""
    f = sys._getframe(1)
    while f is not None:
        if not _is_internal(f.f_code.co_filename):
            return "%s:%i" % (f.f_code.co_filename, f.f_lineno)
        f = f.f_back
    return "<unknown>"


def error(func, msg):
    """A FrontendError 'rf.<func> at <file:line>: msg'."""
    return FrontendError("rf.%s at %s: %s" % (func, call_site(), msg))


def dims_str(dims):
    return "[%s]" % ", ".join(d.short_repr() for d in dims)


def is_tensor(x):
    return isinstance(x, Tensor)


def as_dims(axis):
    if isinstance(axis, Dim):
        return [axis]
    return list(axis)


def check_dims_in(func, tensor, dims, what="axis"):
    for d in dims:
        if d not in tensor.dims:
            hint = ""
            if any(x.description == d.description for x in tensor.dims):
                hint = " (it has another Dim object of that name: dims are matched by identity, not by name)"
            raise error(func, "%s %s is not a dim of %s %s%s" % (
                what, d.short_repr(), tensor.name, dims_str(tensor.dims), hint))


def broadcast_dims(func, tensors, allow_broadcast_all_sources=False, dim_order=None):
    """Dims of the result of an elementwise op: the union; unless allowed, one operand must have all of them."""
    tensors = [t for t in tensors if is_tensor(t)]
    if len(tensors) == 2 and tensors[0].dims == tensors[1].dims and dim_order is None:
        return list(tensors[0].dims)  # fast path: same dims (the common case)
    out = []
    for t in tensors:
        for d in t.dims:
            if d not in out:
                out.append(d)
    if not allow_broadcast_all_sources and len(tensors) > 1:
        if not any(len(set(t.dims)) == len(out) for t in tensors):
            raise error(func, "dims do not match: %s; no operand has all dims %s (use "
                        "allow_broadcast_all_sources=True to broadcast all sources)" % (
                            ", ".join("%s %s" % (t.name, dims_str(t.dims)) for t in tensors), dims_str(out)))
    # the order of the operand with most dims first
    if tensors:
        big = max(tensors, key=lambda t: len(t.dims))
        out = list(big.dims) + [d for d in out if d not in big.dims]
    if dim_order is not None:
        out = [d for d in dim_order if d in out] + [d for d in out if d not in dim_order]
    return out


def concat_out_dims(sources, out_dim):
    """Dims of ``concat(*sources)``: the first source's dims with its concat axis replaced by ``out_dim``, then
    the other sources' dims it lacks (broadcast), in order."""
    first, axis0 = sources[0]
    dims = [out_dim if d == axis0 else d for d in first.dims]
    for x, _ in sources[1:]:
        for d in x.dims:
            if d not in dims and all(d != a for _, a in sources):
                dims.append(d)
    return dims


def result_dtype(values):
    for v in values:
        if is_tensor(v):
            return v.dtype
    for v in values:
        if isinstance(v, float):
            return "float32"
    return "int32"
