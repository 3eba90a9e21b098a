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

__all__ = ["batch_pairs", "split_batch_arrays"]


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


def _checked(backend, arrays, dataset_name):
    """The batch check (label range, finite values, shapes) made by the producer, ahead of the step: None, or the
    error text (the loop raises it at the batch's turn, as the step would)."""
    from .backend import EngineError

    try:
        backend.check_batch(arrays, dataset_name)
    except EngineError as exc:
        return str(exc)
    return None


class _BatchStream(torch.utils.data.IterableDataset):
    """In worker k of N: batches k, k + N, ... of the epoch, as (index, batch, arrays without their data, tensors,
    check error text or None). The data goes over once: as the tensors (shared memory); the main process takes
    ``arrays.data`` as numpy views of them."""

    def __init__(self, engine, dataset, epoch, train, keys, layout):
        super().__init__()
        self.engine, self.dataset, self.epoch, self.train = engine, dataset, epoch, train
        self.keys, self.layout = keys, layout

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, num = (info.id, info.num_workers) if info is not None else (0, 1)
        backend = self.engine.backend
        for i, batch in enumerate(self.engine.batches(self.dataset, self.epoch, self.train)):
            if i % num == worker:
                arrays = batch_to_arrays(self.dataset, batch, self.keys)
                check_error = _checked(backend, arrays, self.dataset.name)
                tensors = _to_tensors(arrays, self.layout, pin=False)
                arrays.data = {}
                yield i, batch, arrays, tensors, check_error


def _with_tensor_data(arrays, tensors):
    """``arrays`` whose data are numpy views of ``tensors`` (as the step feeds them)."""
    arrays.data = {key: t.numpy() for key, t in tensors.items()}


def batch_pairs(engine, backend, dataset, epoch, train, opts):
    """(batch, arrays) pairs; ``arrays.torch_tensors``: the step's input tensors (pinned where asked);
    ``arrays.check_error``: the batch check's error text or None (checked ahead of the step)."""
    num_workers = int(opts.get("num_workers", 0) or 0)
    pin = bool(opts.get("pin_memory", backend.device.type == "cuda")) and torch.cuda.is_available()
    keys = backend.data_keys
    layout = _tensor_layout(backend)
    if num_workers <= 0:
        def make():
            for batch in engine.batches(dataset, epoch, train):
                arrays = batch_to_arrays(dataset, batch, keys)
                arrays.torch_tensors = _to_tensors(arrays, layout, pin)
                arrays.check_error = _checked(backend, arrays, dataset.name)
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
    batches = iter(loader)
    try:
        for index, batch, arrays, tensors, check_error in batches:
            _with_tensor_data(arrays, tensors)
            arrays.torch_tensors = tensors
            arrays.check_error = check_error
            yield batch, arrays
    except (RuntimeError, EOFError, ConnectionError) as exc:
        # "DataLoader worker (pid N) is killed by signal: Killed.", or (a race) the closed pipe of the dead worker
        text = str(exc).splitlines()[0] if "DataLoader worker" in str(exc) else _dead_worker_text(batches)
        if text is None:
            raise
        raise EngineError("dataset %r: a torch_dataloader_opts worker died: %s (%i batches of the epoch were done)" % (
            dataset.name, text, index + 1)) from None


def _dead_worker_text(batches):
    """As torch's message, for a worker process that has exited with an error or a signal; None if none has."""
    import signal
    import time

    try:
        for _ in range(50):  # the pipe may close a moment before the process is reaped
            for worker in getattr(batches, "_workers", None) or []:
                code = worker.exitcode
                if code is not None and code != 0:
                    how = ("killed by signal: %s" % signal.Signals(-code).name) if code < 0 else \
                        "exited with code %i" % code
                    return "DataLoader worker (pid %s) %s" % (worker.pid, how)
            time.sleep(0.02)
    except RuntimeError as exc:  # torch's SIGCHLD handler, raised in the main thread wherever it is
        if "DataLoader worker" in str(exc):
            return str(exc).splitlines()[0]
        raise
    return None


def split_batch_arrays(arrays):
    """Two batches of the first and the second half of the seqs of ``arrays`` (a
    :class:`returnn_lite.datasets.BatchArrays`), each padded only to its own longest seq (``torch_oom_retry``)."""
    from ..datasets.batching import BatchArrays

    n = arrays.num_seqs
    halves = []
    for part in (slice(0, n // 2), slice(n // 2, n)):
        data, lens = {}, {}
        for key, value in arrays.data.items():
            key_lens = arrays.seq_lens[key][part]
            value = value[part]
            if value.ndim >= 2 and len(key_lens) and value.shape[1] > 1:
                value = value[:, :max(int(key_lens.max()), 1)]
            data[key], lens[key] = value, key_lens
        halves.append(BatchArrays(data=data, seq_lens=lens, seq_tags=list(arrays.seq_tags[part]),
                                  seq_idxs=list(arrays.seq_idxs[part])))
    return halves
