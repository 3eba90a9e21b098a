"""
Checks of the engine's inputs, so that user errors end in one line naming the file / dataset key / layer instead
of a TF traceback:

- :func:`check_dataset_matches_extern_data`: before the first step, the dataset's ``num_outputs`` (dim, sparse)
  per used data key against ``extern_data``;
- :func:`check_feed_value`: per batch (numpy, cheap): label ranges of sparse data, non-finite dense values;
- :func:`describe_run_error`: a TF error at ``session.run`` mapped to the layer whose op failed;
- :func:`check_writable_dir`: the model / learning-rate file directory, before training starts.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy

__all__ = ["check_dataset_matches_extern_data", "check_feed_value", "describe_run_error", "check_writable_dir",
           "layers_using_data_key", "first_line", "tf_error_text"]


def first_line(text, limit=300):
    """The first non-empty line of ``text`` (TF messages carry tracebacks and graph dumps), shortened."""
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[:limit] + "..."
    return ""


def tf_error_text(message):
    """The message of a TF runtime error without its "Graph execution error" frame, stack and node dump."""
    lines = [line for line in str(message).splitlines()]
    skip = ("Graph execution error", "Detected at node", "Node:", "Original stack trace", "[[", "File ")
    picked = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith(skip) or line.startswith((" ", "\t")):
            if picked and text.startswith("[["):
                break
            continue
        picked.append(text)
    text = first_line(" ".join(picked[-2:]) if picked else message)
    return text.replace("\\'", "'")  # (TF escapes the quotes of an assert's message)


def layers_using_data_key(network, key):
    """Names of the layers that read extern data ``key`` (as source or as loss target)."""
    default = network.extern_data.default_input
    names = []
    for name, layer in sorted(network.layers.items()):
        if name.startswith("data"):
            continue
        srcs = [getattr(s, "name", None) for s in getattr(layer, "sources", ()) or ()]
        if ("data:" + key) in srcs or (key == default and "data" in srcs) or key in (getattr(layer, "targets", None)
                                                                                   or ()):
            names.append(name)
    return names


def _layers_text(network, key):
    names = layers_using_data_key(network, key)
    if not names:
        return ""
    return " (used by layer%s %s)" % ("s" if len(names) > 1 else "", ", ".join(repr(n) for n in names[:4]))


def _kind(sparse, dim):
    return "sparse (class indices, %s classes)" % dim if sparse else "dense (feature dim %s)" % dim


def check_dataset_matches_extern_data(dataset, network, data_keys, error_cls):
    """Dataset num_outputs (sparse, dim) vs extern_data for each used key; raises error_cls. (The rank is left
    to the per-batch check: datasets describe extra axes in different ways.)"""
    extern_data = network.extern_data
    for key in data_keys:
        if not extern_data.has_data(key):
            continue
        data = extern_data.get_data(key)
        try:
            ds_sparse = bool(dataset.is_data_sparse(key))
            ds_dim = dataset.get_data_dim(key)
            ds_shape = list(dataset.get_data_shape(key))
        except (KeyError, AttributeError, NotImplementedError):
            continue
        where = "dataset %r key %r" % (dataset.name, key)
        if ds_sparse != bool(data.sparse):
            raise error_cls("%s is %s but extern_data %r is %s%s" % (
                where, _kind(ds_sparse, ds_dim), key, _kind(data.sparse, data.dim), _layers_text(network, key)))
        if data.dim is None or ds_dim is None:
            continue
        if data.sparse:
            if ds_dim > data.dim:
                raise error_cls("%s has labels up to %i (%i classes) but extern_data %r has only %i classes%s" % (
                    where, ds_dim - 1, ds_dim, key, data.dim, _layers_text(network, key)))
            continue
        if ds_shape and ds_shape[-1] is not None and ds_shape[-1] != data.dim:
            raise error_cls("%s has feature dim %i but extern_data %r has dim %i%s" % (
                where, ds_shape[-1], key, data.dim, _layers_text(network, key)))


def check_feed_value(data, value, lens, key, dataset_name, network, seq_tags, error_cls):
    """One batch of extern data ``key``: shape vs placeholder, label range, finite values."""
    where = "dataset %r key %r" % (dataset_name, key)
    expected = data.batch_shape
    if value.ndim != len(expected) or any(e is not None and e != v for e, v in zip(expected, value.shape)):
        raise error_cls("%s: batch of shape %s does not fit extern_data %r of shape %s%s" % (
            where, value.shape, key, tuple(expected), _layers_text(network, key)))
    if not value.size:
        return
    sparse_labels = data.sparse and data.dim is not None and numpy.issubdtype(value.dtype, numpy.integer)
    # per step: the whole array (padding too) first; only a failing batch pays for the frame mask
    if sparse_labels and 0 <= value.min() and value.max() < data.dim:
        return
    if not sparse_labels and numpy.issubdtype(value.dtype, numpy.floating) and math.isfinite(value.sum()):
        return  # a nan/inf anywhere makes the sum non-finite
    valid = _valid_frames_mask(data, value, lens)
    if sparse_labels:
        vals = value[valid] if valid is not None else value
        if vals.size and (vals.max() >= data.dim or vals.min() < 0):
            bad = vals.max() if vals.max() >= data.dim else vals.min()
            raise error_cls("%s: label %i out of range [0, %i) of extern_data %r (num_outputs %i)%s%s" % (
                where, bad, data.dim, key, data.dim, _seq_text(value, valid, seq_tags, bad, data),
                _layers_text(network, key)))
    elif numpy.issubdtype(value.dtype, numpy.floating):
        vals = value[valid] if valid is not None else value
        if not numpy.isfinite(vals).all():
            raise error_cls("%s: non-finite input values (nan/inf)%s%s" % (
                where, _seq_text(value, valid, seq_tags, None, data), _layers_text(network, key)))


def _valid_frames_mask(data, value, lens):
    """Bool mask over the batch array: frames within the seq lengths (None: all valid)."""
    if lens is None or not data.have_time_axis() or value.ndim < 2:
        return None
    t_axis = data.time_dim_axis
    b_axis = data.batch_dim_axis
    if t_axis is None or b_axis is None:
        return None
    lens = numpy.asarray(lens)
    if lens.ndim != 1 or lens.shape[0] != value.shape[b_axis]:
        return None
    t = numpy.arange(value.shape[t_axis])
    mask_bt = t[None, :] < lens[:, None]  # [B, T]
    if b_axis > t_axis:
        mask_bt = mask_bt.T
    shape = [1] * value.ndim
    shape[b_axis], shape[t_axis] = value.shape[b_axis], value.shape[t_axis]
    return numpy.broadcast_to(mask_bt.reshape(shape), value.shape)


def _seq_text(value, valid, seq_tags, bad, data):
    """' in seq TAG' for the first seq with the bad value."""
    if not seq_tags or data.batch_dim_axis is None:
        return ""
    ok = numpy.isfinite(value) if bad is None else (value != bad)
    if valid is not None:
        ok = ok | ~valid
    other = tuple(a for a in range(value.ndim) if a != data.batch_dim_axis)
    per_seq = (~ok).any(axis=other) if other else ~ok
    idx = numpy.flatnonzero(per_seq)
    if not len(idx) or idx[0] >= len(seq_tags):
        return ""
    return " in seq %r" % (seq_tags[idx[0]],)


def op_layer_name(network, op_name):
    """The (absolute) name of the layer whose name scope holds TF op ``op_name``, or None."""
    if not op_name:
        return None
    parts = op_name.split("/")
    if parts[0] == "loss" and len(parts) > 2:  # "loss/<layer>/loss_ce/...": the loss of that layer
        parts = parts[1:]
    names = set()
    stack = [network]
    while stack:
        net = stack.pop()
        for layer in net.layers.values():
            names.add(layer.network.get_absolute_name_prefix() + layer.name.replace(":", "_"))
            sub = getattr(layer, "subnetwork", None)
            if sub is not None and hasattr(sub, "layers"):
                stack.append(sub)
    for i in range(len(parts), 0, -1):
        candidate = "/".join(parts[:i])
        if candidate in names:
            return candidate
    if parts[0] == "extern_data" and len(parts) >= 3:
        return "data:%s" % parts[2]
    return None


def describe_run_error(exc, network, dataset_name, step):
    """One line for an exception from ``session.run``: the layer (from the failed op's name scope) and TF's
    first message line."""
    op = getattr(exc, "op", None)
    op_name = getattr(op, "name", None) if op is not None else None
    if not op_name:
        node_def = getattr(exc, "node_def", None)
        op_name = getattr(node_def, "name", None)
    layer = op_layer_name(network, op_name)
    text = tf_error_text(getattr(exc, "message", None) or exc)
    where = "dataset %r step %i" % (dataset_name, step)
    if layer:
        where += ", layer %r" % layer
    if op_name:
        where += " (TF op %r)" % op_name
    from ..error_hints import runtime_error_hint

    hint = runtime_error_hint(text)
    return "%s: runtime error: %s: %s%s" % (where, type(exc).__name__, text, " (%s)" % hint if hint else "")


def check_writable_dir(filename, what):
    """Create the directory of ``filename`` if needed and write a probe file there; returns an error text or None."""
    directory = os.path.dirname(os.path.abspath(filename))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".write_probe.")
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        return "%s %r: directory %r is not writable (%s)" % (what, filename, directory, exc.strerror or exc)
    return None
