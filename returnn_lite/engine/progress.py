"""
Terminal feedback: the log (stdout plus optional ``log`` file, filtered by ``log_verbosity``) and a progress
line that is redrawn in place during an epoch when stdout is a terminal.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["Log", "ProgressLine", "hms"]


def hms(seconds):
    """0:00:03 style."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "%i:%02i:%02i" % (h, m, s)


class Log:
    """
    ``log.v(level, ...)`` prints when ``level <= verbosity``: 1 epoch results, 3 epoch starts, 4 info (default
    verbosity), 5 per-step lines. Everything also goes to the log file (with the file's own verbosity).
    """

    def __init__(self, verbosity=4, filename=None, file_verbosity=None, stream=None):
        self.verbosity = verbosity
        self.stream = stream if stream is not None else sys.stdout
        self.file = None
        self.file_verbosity = verbosity if file_verbosity is None else file_verbosity
        if filename:
            directory = os.path.dirname(os.path.abspath(filename))
            os.makedirs(directory, exist_ok=True)
            self.file = open(filename, "a", buffering=1)
        self.progress = None  # the active ProgressLine, cleared before printing

    @classmethod
    def from_config(cls, config):
        verbosity = config.typed_value("log_verbosity", 4)
        if isinstance(verbosity, (list, tuple)):
            verbosity = verbosity[0]
        verbosity = int(verbosity) if verbosity is not None else 4
        filenames = config.typed_value("log", None)
        if not isinstance(filenames, (list, tuple)):
            filenames = [filenames]
        # "stdout" and "| cmd" entries of the original mean no file here (stdout is always written)
        filename = next((str(f) for f in filenames if f and str(f) != "stdout" and not str(f).startswith("|")),
                        None)
        return cls(verbosity=verbosity, filename=filename)

    def v(self, level, *args, sep=" "):
        text = sep.join(str(a) for a in args)
        if level <= self.verbosity:
            if self.progress is not None:
                self.progress.clear()
            print(text, file=self.stream, flush=True)
        if self.file is not None and level <= self.file_verbosity:
            self.file.write(text + "\n")

    def v1(self, *args):
        self.v(1, *args)

    def v3(self, *args):
        self.v(3, *args)

    def v4(self, *args):
        self.v(4, *args)

    def v5(self, *args):
        self.v(5, *args)

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None


class ProgressLine:
    """``epoch 3 step 12 (45%) 230.1 seqs/s loss 0.123 ETA 0:00:07``, redrawn at most 10 times a second."""

    def __init__(self, log, prefix, enabled=None, min_interval=0.1):
        self.log = log
        self.prefix = prefix
        stream = log.stream
        self.enabled = (hasattr(stream, "isatty") and stream.isatty()) if enabled is None else enabled
        self.min_interval = min_interval
        self.start = time.time()
        self._last_draw = 0.0
        self._width = 0
        if self.enabled:
            log.progress = self

    def update(self, step, num_seqs, loss=None, complete_frac=None):
        if not self.enabled:
            return
        now = time.time()
        if now - self._last_draw < self.min_interval:
            return
        self._last_draw = now
        elapsed = max(now - self.start, 1e-6)
        parts = ["%s step %i" % (self.prefix, step)]
        if complete_frac:
            parts.append("(%.0f%%)" % (100.0 * complete_frac))
        parts.append("%.1f seqs/s" % (num_seqs / elapsed))
        if loss is not None:
            parts.append("loss %.4g" % loss)
        if complete_frac and complete_frac > 0:
            parts.append("ETA %s" % hms(elapsed / complete_frac - elapsed))
        text = " ".join(parts)
        self.log.stream.write("\r" + text.ljust(self._width))
        self.log.stream.flush()
        self._width = len(text)

    def clear(self):
        if self.enabled and self._width:
            self.log.stream.write("\r" + " " * self._width + "\r")
            self.log.stream.flush()
            self._width = 0

    def finish(self):
        self.clear()
        if self.log.progress is self:
            self.log.progress = None
