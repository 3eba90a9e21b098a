"""
Configs written for Python 2 (print statements, ``except X, e``, ``0777``, backticks, ``xrange``...) cannot run on
Python 3, neither with the original RETURNN nor here. :func:`python2_feature` recognizes them from the SyntaxError
(or the NameError/AttributeError while the config runs), so that loading fails at once with one line naming the
file, the line and "Python 2 syntax" instead of a confusing Python 3 message (or, for a config without a ``#!``
header, an attempt to read it in the old "key value" line format).
"""

from __future__ import annotations

import re

__all__ = ["python2_feature", "python2_message"]

# SyntaxError messages of Python 3 that only Python 2 code produces -> what the feature is
_SYNTAX_MESSAGES = (
    ("Missing parentheses in call to 'print'", "print statement; use print(...)"),
    ("Missing parentheses in call to 'exec'", "exec statement; use exec(...)"),
    ("multiple exception types must be parenthesized", "'except X, e:'; use 'except X as e:'"),
    ("leading zeros in decimal integer literals", "octal literal like 0777; use 0o777"),
)
# source lines (of a line that does not compile) with a Python 2 construct -> what it is
_SYNTAX_LINES = (
    (re.compile(r"^\s*raise\s+[\w.]+\s*,"), "'raise E, msg'; use 'raise E(msg)'"),
    (re.compile(r"`[^`]*`"), "backtick repr; use repr(...)"),
    (re.compile(r"<>"), "'<>' operator; use '!='"),
    (re.compile(r"\b[uU][rR]?['\"]"), None),  # u"..." is valid Python 3; only ur"..." is not (checked below)
    (re.compile(r"\b\d+[lL]\b"), "long literal like 10L; use 10"),
)
_UR_PREFIX = re.compile(r"\b[uU][rR]['\"]")
# names that only exist in Python 2 -> the Python 3 replacement
_PY2_NAMES = {"xrange": "range", "unicode": "str", "basestring": "str", "long": "int", "raw_input": "input",
              "unichr": "chr", "execfile": "exec(open(f).read())", "file": "open", "reload": "importlib.reload"}
_PY2_ATTRS = {"iteritems": "items()", "iterkeys": "keys()", "itervalues": "values()", "has_key": "'k in d'"}


def python2_feature(exc, content=None):
    """
    :param BaseException exc: the error compiling or running a config
    :param str|None content: the config source (to look at the failing line of a SyntaxError)
    :return: (lineno or None, description of the Python 2 construct), or None if exc does not look like Python 2
    """
    if isinstance(exc, SyntaxError):
        msg = exc.msg or ""
        for pattern, what in _SYNTAX_MESSAGES:
            if pattern in msg:
                return exc.lineno, what
        line = exc.text
        if line is None and content is not None and exc.lineno:
            lines = content.splitlines()
            line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else None
        if line:
            if _UR_PREFIX.search(line):
                return exc.lineno, "ur\"...\" string prefix; use r\"...\""
            for regex, what in _SYNTAX_LINES:
                if what and regex.search(line):
                    return exc.lineno, what
        return None
    if isinstance(exc, NameError):
        name = getattr(exc, "name", None)
        if name is None:
            m = re.search(r"name '(\w+)' is not defined", str(exc))
            name = m.group(1) if m else None
        if name in _PY2_NAMES:
            return None, "'%s' (Python 2 builtin); use %s" % (name, _PY2_NAMES[name])
    if isinstance(exc, TypeError) and "print(<message>, file=<output_stream>)" in str(exc):
        return None, "'print >>f, x'; use print(x, file=f)"
    if isinstance(exc, AttributeError):
        m = re.search(r"object has no attribute '(\w+)'", str(exc))
        if m and m.group(1) in _PY2_ATTRS:
            return None, "dict.%s (Python 2); use %s" % (m.group(1), _PY2_ATTRS[m.group(1)])
    return None


def python2_message(filename, lineno, what):
    """The one-line error for a Python 2 config."""
    return ("%s:%s: Python 2 syntax in config: %s. Config files must be Python 3 (the original RETURNN cannot load "
            "this file on Python 3 either)" % (filename, lineno if lineno is not None else "?", what))
