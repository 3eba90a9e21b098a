"""
Background prefetch: a thread runs an iterator (batch generation + feature extraction + padding) ahead of
the consumer (the training loop), so that a training step does not wait on data loading when loading is
faster than training. Exceptions of the producer are raised in the consumer, with their traceback.
"""

from __future__ import annotations

import queue
import threading

__all__ = ["prefetch"]

_DONE = object()


class _Failure:
    def __init__(self, exc):
        self.exc = exc


def prefetch(iterable, size=2, name="returnn_lite-prefetch"):
    """
    Yields the items of ``iterable``, computed by a daemon thread up to ``size`` items ahead.
    ``size <= 0``: no thread, the items are computed on demand. Closing the generator (e.g. when the consumer
    stops early or raises) stops the thread after its current item.
    """
    if size <= 0:
        yield from iterable
        return
    items = queue.Queue(maxsize=size)
    stop = threading.Event()

    def put(item):
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in iterable:
                if not put(item):
                    return
        except BaseException as exc:  # noqa: the consumer re-raises it
            put(_Failure(exc))
            return
        put(_DONE)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(timeout=60)
