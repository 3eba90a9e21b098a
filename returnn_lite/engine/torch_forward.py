"""
``task = "forward"`` on the torch engine: the outputs that ``forward_step`` marks (``mark_as_output``), either to
HDF (the loop's writer) or to the config's ``forward_callback``
(:class:`returnn_lite.forward_iface.ForwardCallbackIface`), one sequence at a time, as the original.
"""

from __future__ import annotations

import numpy
import torch

from .backend import EngineError
from .progress import ProgressLine

__all__ = ["expected_outputs", "batch_major", "run_forward_callback"]


def expected_outputs(config):
    """The config's ``model_outputs`` as a TensorDict (a dynamic dim gets a lengths template that forward_step may
    fill, as demo-torch does), or None."""
    from .. import frontend as rf
    from ..tensor import TensorDict, batch_dim

    opts = config.typed_value("model_outputs", None)
    if not opts:
        return None
    outputs = TensorDict()
    try:
        outputs.update(opts, auto_convert=True)
    except Exception as exc:
        raise EngineError("model_outputs %r: %s" % (opts, exc)) from None
    for t in outputs.data.values():
        for d in t.dims:
            d.reset_eager()
            if d.dimension is None and not d.is_batch_dim():
                d.dyn_size_ext = rf.convert_to_tensor(torch.zeros([0], dtype=torch.int32), dims=[batch_dim],
                                                      dtype="int32", name="%s:size" % d.description)
    return outputs


def _lens_of(dim):
    return dim.dyn_size_ext.raw_tensor.detach().cpu().numpy().astype("int32")


def batch_major(out):
    """(numpy [B, T, ...], lens [B]) of an output Tensor (one frame per seq without a dynamic dim)."""
    dims = list(out.dims)
    b = [d for d in dims if d.is_batch_dim()]
    dyn = [d for d in dims if d.dimension is None and not d.is_batch_dim()]
    order = b + dyn[:1] + [d for d in dims if d not in b and d not in dyn[:1]]
    x = out.raw_tensor.permute([dims.index(d) for d in order]).detach()
    x = (x.float() if x.dtype in (torch.bfloat16, torch.float16) else x).cpu().numpy()
    if dyn:
        lens = _lens_of(dyn[0])
    else:
        x = x[:, None]
        lens = numpy.ones([x.shape[0]], dtype="int32")
    return x, lens


def _seq_outputs(outputs, b):
    """The outputs of seq ``b`` of the batch: a TensorDict, batch dim removed, dynamic dims cut to their lengths,
    raw tensors as numpy arrays."""
    from ..tensor import Tensor, TensorDict

    res = TensorDict()
    for name, out in outputs.data.items():
        dims = list(out.dims)
        raw = out.raw_tensor.detach()
        raw = (raw.float() if raw.dtype in (torch.bfloat16, torch.float16) else raw).cpu().numpy()
        if any(d.is_batch_dim() for d in dims):
            axis = [i for i, d in enumerate(dims) if d.is_batch_dim()][0]
            raw = numpy.take(raw, b, axis=axis)
            dims.pop(axis)
        index = []
        for d in dims:
            if d.dimension is None and d.dyn_size_ext is not None and d.dyn_size_ext.raw_tensor is not None:
                sizes = d.dyn_size_ext.raw_tensor.detach().cpu().numpy()
                index.append(slice(0, int(sizes[b]) if sizes.ndim == 1 else int(sizes)))
            else:
                index.append(slice(None))
        t = Tensor(name, dims=dims, dtype=out.dtype, sparse_dim=out.sparse_dim)
        t.raw_tensor = raw[tuple(index)]
        res.data[name] = t
    return res


def run_forward_callback(engine, backend, dataset):
    """forward_step over ``dataset``; ``forward_callback`` gets init(model=), process_seq(seq_tag=, outputs=) for
    every seq and finish()."""
    from ..datasets import batch_to_arrays

    callback = engine.config.typed_value("forward_callback")
    if isinstance(callback, type):
        callback = callback()
    elif callable(callback) and not hasattr(callback, "process_seq"):
        callback = callback()  # a factory, as the original allows
    for method in ("init", "process_seq", "finish"):
        if not callable(getattr(callback, method, None)):
            raise EngineError("forward_callback %r has no method %s (see returnn_lite.forward_iface."
                              "ForwardCallbackIface: init, process_seq, finish)" % (callback, method))
    engine.batch_size = engine.config.typed_value("forward_batch_size", None) or engine.batch_size
    callback.init(model=backend.model)
    n = 0
    progress = ProgressLine(engine.log, "forward")
    for step, batch in enumerate(engine.batches(dataset, engine.epoch, train=False)):
        arrays = batch_to_arrays(dataset, batch, backend.data_keys)
        outputs = backend.forward_outputs(arrays, engine.epoch, step)
        for b in range(arrays.num_seqs):
            callback.process_seq(seq_tag=arrays.seq_tags[b], outputs=_seq_outputs(outputs, b))
        n += arrays.num_seqs
        progress.update(step + 1, n, complete_frac=dataset.get_complete_frac(batch.end_seq - 1))
    progress.finish()
    callback.finish()
    engine.log.v1("forward: %i seqs through forward_callback" % n)
