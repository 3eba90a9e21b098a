"""
Batches for the torch engine, made ahead of the step (``torch_dataloader_opts``):

* ``num_workers`` 0 (default): one background thread makes ``prefetch_batches`` (default 2) batches ahead;
* ``num_workers`` N > 0: N ``torch.utils.data.DataLoader`` worker processes (forked, each with its copy of the
  dataset in the epoch's state) make every N-th batch; the loader hands them over in the order of the epoch;
* ``pin_memory`` (default: True on a GPU): the batch's tensors are in page-locked memory, so that the copy to the
  GPU is asynchronous; ``prefetch_factor``: batches per worker made ahead (DataLoader's option).

The seq order, batching and sharding are the loop's (:meth:`returnn_lite.engine.engine.Engine.batches`); the main
process also starts the epoch of the dataset (for the progress fraction and ``finish_epoch``).
"""

from __future__ import annotations

import numpy
import torch

from ..datasets import batch_to_arrays
from ..datasets.prefetch import prefetch

__all__ = ["batch_pairs"]


def _tensor_layout(backend):
    """key -> (rank, numpy dtype) of the extern data, as the step feeds it."""
    return {key: (len(backend.extern_data.data[key].dims), backend.extern_data.data[key].dtype)
            for key in backend.data_keys}


def _to_tensors(arrays, layout, pin):
    tensors = {}
    for key, (ndim, dtype) in layout.items():
        value = arrays.data[key]
        if value.ndim == ndim + 1 and value.shape[1] == 1:
            value = value[:, 0]
        t = torch.from_numpy(numpy.ascontiguousarray(value.astype(dtype, copy=False)))
        tensors[key] = t.pin_memory() if pin else t
    return tensors


class _BatchStream(torch.utils.data.IterableDataset):
    """In worker k of N: batches k, k + N, ... of the epoch, as (index, batch, arrays, tensors)."""

    def __init__(self, engine, dataset, epoch, train, keys, layout):
        super().__init__()
        self.engine, self.dataset, self.epoch, self.train = engine, dataset, epoch, train
        self.keys, self.layout = keys, layout

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, num = (info.id, info.num_workers) if info is not None else (0, 1)
        for i, batch in enumerate(self.engine.batches(self.dataset, self.epoch, self.train)):
            if i % num == worker:
                arrays = batch_to_arrays(self.dataset, batch, self.keys)
                yield i, batch, arrays, _to_tensors(arrays, self.layout, pin=False)


def batch_pairs(engine, backend, dataset, epoch, train, opts):
    """(batch, arrays) pairs; ``arrays.torch_tensors``: the step's input tensors (pinned where asked)."""
    num_workers = int(opts.get("num_workers", 0) or 0)
    pin = bool(opts.get("pin_memory", backend.device.type == "cuda")) and torch.cuda.is_available()
    keys = backend.data_keys
    layout = _tensor_layout(backend)
    if num_workers <= 0:
        def make():
            for batch in engine.batches(dataset, epoch, train):
                arrays = batch_to_arrays(dataset, batch, keys)
                arrays.torch_tensors = _to_tensors(arrays, layout, pin)
                yield batch, arrays

        return prefetch(make(), size=engine.config.int("prefetch_batches", 2))
    if engine.dist is not None:  # the main process's copy of the epoch (progress fraction, finish_epoch)
        engine.dist.init_seq_order(dataset, epoch)
    else:
        dataset.init_seq_order(epoch=epoch)
    kwargs = {"prefetch_factor": int(opts["prefetch_factor"])} if opts.get("prefetch_factor") else {}
    loader = torch.utils.data.DataLoader(
        _BatchStream(engine, dataset, epoch, train, keys, layout), batch_size=None, num_workers=num_workers,
        pin_memory=pin, multiprocessing_context="fork", **kwargs)
    return _ordered(loader, dataset)


def _ordered(loader, dataset):
    from .backend import EngineError

    index = -1
    try:
        for index, batch, arrays, tensors in loader:
            arrays.torch_tensors = tensors
            yield batch, arrays
    except RuntimeError as exc:  # e.g. "DataLoader worker (pid N) is killed by signal: Killed."
        if "DataLoader worker" not in str(exc):
            raise
        raise EngineError("dataset %r: a torch_dataloader_opts worker died: %s (%i batches of the epoch were done)" % (
            dataset.name, str(exc).splitlines()[0], index + 1)) from None
