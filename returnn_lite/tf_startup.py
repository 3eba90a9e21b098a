"""
TensorFlow's log output for the command-line tools (``rnn.py``, ``returnn-lite-checkpoint``, ``returnn-lite-export``).

Their contract is that a run prints nothing on stderr but its own lines (an error is exactly one line). TF's C++
logging is filtered by ``TF_CPP_MIN_LOG_LEVEL`` (0 all, 1 no INFO, 2 no WARNING, 3 no ERROR); where the user has
not set it, the tools use 3. Some lines are printed while ``import tensorflow`` loads its libraries, before TF reads
that level (absl's "All log messages before absl::InitializeLog() ..." and the oneDNN INFO notice):
:func:`import_tensorflow` drops those that are below the level, and passes everything else on to stderr. TF's
Python logger (deprecation warnings) gets the same level (2: errors only, 3: none).
A user who sets ``TF_CPP_MIN_LOG_LEVEL=0`` sees all of them.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

ENV_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
CLI_DEFAULT_LEVEL = 3
_ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# absl/glog line: "I0000 00:00:1795807891.582329    6453 port.cc:153] text"
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\s\]]+:\d+\] ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def user_log_level():
    """The user's own ``TF_CPP_MIN_LOG_LEVEL`` (as it was before returnn_lite was imported), or None."""
    from . import USER_TF_CPP_MIN_LOG_LEVEL

    return USER_TF_CPP_MIN_LOG_LEVEL


def configure_cli_log_level():
    """Before TF is imported: the CLI default level unless the user set one. Returns the level in effect."""
    user = user_log_level()
    if user is None:
        os.environ[ENV_LEVEL] = str(CLI_DEFAULT_LEVEL)
    return _level(os.environ.get(ENV_LEVEL))


def _level(text):
    try:
        return int(text or 0)
    except ValueError:
        return 0


def filter_import_lines(text, level):
    """``text`` without absl's preamble and the absl log lines below ``level`` (TF printed them regardless)."""
    if level <= 0:
        return text
    kept = []
    for line in text.splitlines(True):
        if line.rstrip("\r\n") == _ABSL_PREAMBLE:
            continue
        m = _ABSL_LINE.match(line)
        if m and _SEVERITY[m.group(1)] < level:
            continue
        kept.append(line)
    return "".join(kept)


def import_tensorflow():
    """
    ``import tensorflow`` with the import-time lines below ``TF_CPP_MIN_LOG_LEVEL`` left out, and TF's Python logger
    (deprecation warnings) at the same level; returns the module.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    level = _level(os.environ.get(ENV_LEVEL))
    tensorflow = _import_filtered(level)
    if level >= 2:
        tensorflow.get_logger().setLevel("ERROR" if level == 2 else "CRITICAL")
    return tensorflow


def _import_filtered(level):
    if level <= 0:
        import tensorflow

        return tensorflow
    sys.stderr.flush()
    try:
        saved_fd = os.dup(2)
    except OSError:  # no stderr to filter
        import tensorflow

        return tensorflow
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow
        finally:
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            capture.seek(0)
            text = filter_import_lines(capture.read().decode("utf-8", "replace"), level)
            if text:
                sys.stderr.write(text)
                sys.stderr.flush()
    return tensorflow
