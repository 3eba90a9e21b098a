"""Small helpers shared by the whole package (no TF graph state here)."""

from __future__ import annotations

import difflib
import os
import tempfile


class NotSpecifiedType:
    """Sentinel for 'argument not given' where None is a meaningful value."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "NotSpecified"

    def __bool__(self):
        return False

    def __reduce__(self):
        return (NotSpecifiedType, ())


NotSpecified = NotSpecifiedType()


def close_matches(name, candidates, n=5):
    """Names from candidates that look like name, best first (for 'did you mean' messages)."""
    return difflib.get_close_matches(str(name), sorted(str(c) for c in candidates), n=n, cutoff=0.5)


def did_you_mean(name, candidates):
    matches = close_matches(name, candidates)
    return (" Did you mean %s?" % " or ".join(repr(m) for m in matches)) if matches else ""


def as_list(x):
    """None -> [], scalar -> [x], list/tuple -> list(x)."""
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def get_valid_scope_name_from_str(s):
    """
    The TF scope name the original uses for a layer name: ':', '(', ')' and '-' become '__' (e.g. layer
    'center-output' has the param 'center__output/W'); an invalid first char c becomes '.<ord(c)>.'.
    """
    for c in (":", "(", ")", "-"):
        s = s.replace(c, "__")
    if s[:1] in ("_", "\\", "/"):
        s = (".%i." % ord(s[0])) + s[1:]
    return s


def atomic_write(filename, write, binary=False):
    """
    Write a file all or nothing: ``write(f)`` fills a temp file in the same directory, which is synced and then
    renamed onto ``filename`` (``os.replace``); on any error the temp file is removed and ``filename`` is untouched.
    """
    directory = os.path.dirname(os.path.abspath(filename))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(filename), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, filename)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# Model code written for the original imports ``returnn.util.basic`` (NotSpecified, BehaviorVersion) and
# ``returnn.util.math`` (ceil_div); as ``returnn_lite.util.basic`` / ``.math`` they are found in util_submodules/.
__path__ = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "util_submodules")]
