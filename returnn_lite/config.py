"""
The RETURNN-style :class:`Config`: a key -> value store filled from a config file and command-line overrides.

Python config files are executed; every public top-level name becomes a config value. The namespace the file
runs in *is* :attr:`Config.typed_dict`, so functions defined in the config see later overrides of globals
(``++num_epochs 5`` changes ``num_epochs`` for ``def get_network(): ... num_epochs ...`` too).

Besides Python, two older formats load: JSON (content starting with ``{``) and "key value" lines
(values with commas become lists of strings), as in the original.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import traceback
import types

__all__ = ["Config", "ConfigError", "get_global_config", "set_global_config", "global_config_ctx"]


class ConfigError(Exception):
    """A config file that is missing or cannot be parsed/executed, or a config value of the wrong form."""

    def __init__(self, message, filename=None, lineno=None):
        super().__init__(message)
        self.filename = filename
        self.lineno = lineno


_TRUE_STRINGS = {"true", "1", "yes", "on", "y"}
_FALSE_STRINGS = {"false", "0", "no", "off", "n", "none", ""}


def _parse_bool_str(key, value):
    lower = value.strip().lower()
    if lower in _TRUE_STRINGS:
        return True
    if lower in _FALSE_STRINGS:
        return False
    raise ConfigError("config value %r: cannot interpret %r as bool" % (key, value))


# keys that only take numbers: a ++key value that is not one fails at once (other keys fail when read as a number)
_NUMBER_KEYS = frozenset([
    "num_epochs", "batch_size", "max_seqs", "learning_rate", "log_verbosity", "save_interval", "forward_batch_size",
    "accum_grad_multiple_step", "gradient_clip", "gradient_clip_global_norm", "gradient_noise", "prefetch_batches",
    "learning_rate_warmup_steps", "min_learning_rate", "newbob_learning_rate_decay", "num_inputs", "num_outputs"])


def _parse_literal(value):
    """Python literal where possible (``5``, ``0.1``, ``[1,2]``, ``None``), else the string itself."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


class Config:
    """
    Config values live in two dicts, as in the original: :attr:`typed_dict` (Python objects from a Python or
    JSON config, :func:`set`, or ``++key literal`` overrides) and :attr:`dict` (lists of strings from the
    old line format and non-literal command-line values). Typed values take precedence.
    """

    def __init__(self, items=None):
        self.dict = {}  # key -> list[str]
        self.typed_dict = {}  # key -> object; also the exec namespace of Python configs
        self.files = []
        self.cmd_line_args = {}  # key -> the value string of a ++key value override (for error messages)
        if items:
            self.update(items)

    # ---- loading

    def load_file(self, f):
        """
        Load a config file (path, or file-like object with ``read()``).
        Raises :class:`ConfigError` naming the file (and line) when it is missing or broken.
        """
        if hasattr(f, "read"):
            return self.load_string(f.read(), filename=getattr(f, "name", "<stream>"))
        filename = os.fspath(f)
        if not os.path.isfile(filename):
            raise ConfigError("config file not found: %r" % filename, filename=filename)
        try:
            with open(filename, "r", encoding="utf8") as fin:
                content = fin.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError("cannot read config file %r: %s" % (filename, exc), filename=filename) from exc
        self.files.append(filename)
        self.load_string(content, filename=filename)

    def load_string(self, content, filename="<string>"):
        """Like :func:`load_file`, for config content given directly."""
        stripped = content.strip()
        if stripped.startswith("#!") or filename.endswith(".py"):
            self._load_python(content, filename)
        elif stripped.startswith("{"):
            self._load_json(content, filename)
        else:
            # No marker: Python if it compiles (a "key value" line never does), else the old line format.
            try:
                code = compile(content, filename, "exec")
            except SyntaxError as exc:
                _raise_if_python2(exc, content, filename)
                self._load_lines(content, filename, python_error=exc)
            else:
                self._load_python(content, filename, code=code)

    def _load_python(self, content, filename, code=None):
        from .compat import returnn_import_hook  # local: compat imports this module
        from .compat.legacy import config_builtins

        if code is None:
            try:
                code = compile(content, filename, "exec")
            except SyntaxError as exc:
                _raise_if_python2(exc, content, filename)
                raise ConfigError(
                    "%s:%s: syntax error in config: %s" % (filename, exc.lineno, exc.msg),
                    filename=filename, lineno=exc.lineno) from exc
        ns = self.typed_dict
        ns["__file__"] = filename  # stays: config functions may use it later
        ns.setdefault("__name__", "__returnn_config__")
        # The config runs with builtins whose __import__ knows the original's module names (old and new), also
        # when its functions run later; ``config`` is this Config, as in the original.
        ns["__builtins__"] = config_builtins()
        ns.setdefault("config", self)
        try:
            with returnn_import_hook(), global_config_ctx(self):
                exec(code, ns)
        except ConfigError:
            raise
        except Exception as exc:
            lineno = _config_lineno_from_traceback(exc, filename)
            _raise_if_python2(exc, content, filename, lineno)
            raise ConfigError(
                "%s:%s: error while executing config: %s: %s" % (filename, lineno, type(exc).__name__, exc),
                filename=filename, lineno=lineno) from exc
        # A typed value wins over an old untyped one of the same name.
        for key in self.keys():
            self.dict.pop(key, None)

    def _load_json(self, content, filename):
        try:
            values = json.loads(_strip_json_comments(content))
        except json.JSONDecodeError as exc:
            raise ConfigError("%s:%s: invalid JSON config: %s" % (filename, exc.lineno, exc.msg),
                              filename=filename, lineno=exc.lineno) from exc
        if not isinstance(values, dict):
            raise ConfigError("%s: JSON config must be an object, got %s" % (filename, type(values).__name__),
                              filename=filename)
        self.update(values)

    def _load_lines(self, content, filename, python_error=None):
        for lineno, line in enumerate(content.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 1)
            # "x = 1" is a broken Python line, not key "x" with value "= 1"
            if len(parts) != 2 or not re.match(r"^[A-Za-z_][\w.\-]*$", parts[0]) or parts[1].startswith("="):
                msg = "%s:%i: cannot parse config line %r (expected 'key value')" % (filename, lineno, line)
                if python_error is not None:
                    msg += "; as Python config: line %s: %s" % (python_error.lineno, python_error.msg)
                raise ConfigError(msg, filename=filename, lineno=lineno)
            self.add_line(parts[0], parts[1])

    def add_line(self, key, value):
        """An untyped ``key value`` entry (old format). Values with commas become lists of strings."""
        value = value.strip()
        if key in self.typed_dict:
            # Keep typed entries typed (config functions may read them as globals): convert via literal parsing,
            # keep the string only where the old value was a string too.
            old = self.typed_dict[key]
            self.typed_dict[key] = value if isinstance(old, str) else self._convert_like(key, value, old)
            return
        self.dict[key] = value.split(",") if "," in value else [value]

    @staticmethod
    def _convert_like(key, value, old):
        if isinstance(old, bool):
            return _parse_bool_str(key, value)
        return _parse_literal(value)

    def parse_cmd_args(self, args):
        """
        Apply ``++key value`` (or ``++key=value``) overrides. Values are Python literals where they parse as
        such, else strings. Returns the other arguments (e.g. the config file name) unchanged, in order.
        """
        rest = []
        args = list(args)
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if not arg.startswith("++"):
                rest.append(arg)
                continue
            key = arg[2:]
            if "=" in key:
                key, value = key.split("=", 1)
            else:
                if i >= len(args):
                    raise ConfigError("command line: %r needs a value" % arg)
                value = args[i]
                i += 1
            if not key:
                raise ConfigError("command line: empty key in %r" % arg)
            self.cmd_line_args[key] = value
            self._set_from_string(key, value)
        return rest

    def _set_from_string(self, key, value):
        old = self.typed_dict.get(key)
        if key in _NUMBER_KEYS and isinstance(_parse_literal(value), str) and not isinstance(old, str):
            raise ConfigError("command line: ++%s %s: %r must be a number" % (key, value, key))
        if isinstance(old, bool):
            parsed = _parse_bool_str(key, value)
        elif isinstance(old, str):
            parsed = value  # a string option stays a string ("++task 123" is not an int)
        else:
            parsed = _parse_literal(value)
        if isinstance(parsed, str) and not isinstance(old, str) and key not in self.typed_dict:
            self.dict[key] = parsed.split(",") if "," in parsed else [parsed]  # untyped, like the original
            return
        self.typed_dict[key] = parsed
        self.dict.pop(key, None)

    # ---- setting

    def set(self, key, value):
        """Set a typed value."""
        self.typed_dict[key] = value
        self.dict.pop(key, None)

    def update(self, values):
        for key, value in dict(values).items():
            self.set(key, value)

    # ---- reading

    def keys(self):
        """Public config keys (no dunders, no imported modules)."""
        keys = [k for k, v in self.typed_dict.items()
                if not k.startswith("__") and not isinstance(v, types.ModuleType) and v is not self]
        return keys + [k for k in self.dict if k not in self.typed_dict]

    def has(self, key):
        return key in self.typed_dict or key in self.dict

    __contains__ = has

    def is_typed(self, key):
        return key in self.typed_dict

    def value(self, key, default=None, index=None, list_join_str=","):
        """The value as string (lists joined with ``list_join_str``), or ``default``."""
        if key in self.typed_dict:
            value = self.typed_dict[key]
            if value is None:
                return default
            if index is not None:
                return str(value[index])
            if isinstance(value, (list, tuple)):
                return list_join_str.join(str(v) for v in value)
            return str(value)
        if key in self.dict:
            values = self.dict[key]
            return values[index] if index is not None else list_join_str.join(values)
        return default

    def typed_value(self, key, default=None, index=None):
        """The Python object; untyped (string) entries are parsed as literals where possible."""
        if key in self.typed_dict:
            value = self.typed_dict[key]
        elif key in self.dict:
            value = _parse_literal(",".join(self.dict[key]))
        else:
            return default
        return value[index] if index is not None else value

    def opt_typed_value(self, key, default=None):
        """The typed value if there is one, else the string value."""
        if key in self.typed_dict:
            return self.typed_dict[key]
        return self.value(key, default)

    def get_of_type(self, key, type_, default=None):
        value = self.typed_value(key, default)
        if value is not None and not isinstance(value, type_):
            raise ConfigError("config value %r should be of type %s, got %r" % (key, type_.__name__, value))
        return value

    def _bad_value(self, key, value, kind):
        where = ""
        if key in getattr(self, "cmd_line_args", {}):
            where = " (given on the command line: ++%s %s)" % (key, self.cmd_line_args[key])
        return ConfigError("config value %r: cannot interpret %r as %s%s" % (key, value, kind, where))

    def int(self, key, default=None, index=None):
        if key in self.typed_dict:
            value = self.typed_value(key, default, index=index)
            try:
                if isinstance(value, str):
                    value = float(value)  # "5" or "5.0"
                return None if value is None else int(value)
            except (TypeError, ValueError, OverflowError):
                raise self._bad_value(key, value, "int") from None
        value = self.value(key, None, index=index)
        if value is None:
            return default
        try:
            return int(float(value))
        except (ValueError, OverflowError):
            raise self._bad_value(key, value, "int") from None

    def float(self, key, default=None, index=None):
        if key in self.typed_dict:
            value = self.typed_value(key, default, index=index)
            try:
                return None if value is None else float(value)
            except (TypeError, ValueError):
                raise self._bad_value(key, value, "float") from None
        value = self.value(key, None, index=index)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise self._bad_value(key, value, "float") from None

    def bool(self, key, default=None, index=None):
        if key in self.typed_dict:
            value = self.typed_value(key, default, index=index)
            if isinstance(value, str):
                return _parse_bool_str(key, value)
            return None if value is None else bool(value)
        value = self.value(key, None, index=index)
        if value is None:
            return default
        return _parse_bool_str(key, value)

    def is_true(self, key, default=False):
        return bool(self.bool(key, default))

    def list(self, key, default=None):
        """As list: typed lists/tuples as they are, a typed scalar as ``[value]``, untyped as list of strings."""
        if key in self.typed_dict:
            value = self.typed_dict[key]
            if value is None:
                return default
            if isinstance(value, (list, tuple)):
                return list(value)
            return [value]
        if key in self.dict:
            return list(self.dict[key])
        return default

    def int_list(self, key, default=None):
        values = self.list(key, None)
        try:
            return default if values is None else [int(v) for v in values]
        except (TypeError, ValueError):
            raise self._bad_value(key, values, "a list of ints") from None

    def float_list(self, key, default=None):
        values = self.list(key, None)
        try:
            return default if values is None else [float(v) for v in values]
        except (TypeError, ValueError):
            raise self._bad_value(key, values, "a list of floats") from None

    def int_pair(self, key, default=None):
        """``(a, b)`` from a typed pair, a typed int (``(a, a)``), or a string ``"a:b"`` / ``"a"``."""
        if not self.has(key):
            return default
        value = self.typed_dict.get(key) if key in self.typed_dict else self.value(key)
        if value is None:
            return default
        if isinstance(value, (list, tuple)):
            if len(value) != 2:
                raise ConfigError("config value %r: expected a pair, got %r" % (key, value))
            return int(value[0]), int(value[1])
        if isinstance(value, int):
            return value, value
        text = str(value)
        parts = text.split(":") if ":" in text else text.split(",")
        try:
            if len(parts) == 1:
                return int(parts[0]), int(parts[0])
            if len(parts) == 2:
                return int(parts[0]), int(parts[1])
        except ValueError:
            pass
        raise ConfigError("config value %r: cannot interpret %r as int pair" % (key, value))

    def __repr__(self):
        return "<Config files=%r keys=%r>" % (self.files, sorted(self.keys()))


def _strip_json_comments(content):
    """JSON configs of the original's first years carry ``// ...`` (and ``# ...``) comments: blank them out
    (outside strings, keeping line numbers)."""
    out, in_str, i, n = [], False, 0, len(content)
    while i < n:
        c = content[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(content[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "#" or content.startswith("//", i):
            end = content.find("\n", i)
            i = n if end < 0 else end
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _raise_if_python2(exc, content, filename, lineno=None):
    """A config written for Python 2: one ConfigError naming the file, the line and "Python 2 syntax"."""
    from .compat.py2 import python2_feature, python2_message

    found = python2_feature(exc, content)
    if found is not None:
        line = found[0] if found[0] is not None else lineno
        raise ConfigError(python2_message(filename, line, found[1]), filename=filename, lineno=line) from None


def _config_lineno_from_traceback(exc, filename):
    """The innermost line of the config file in exc's traceback (None if the config is not on it)."""
    lineno = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename:
            lineno = frame.lineno
    if lineno is None and isinstance(exc, SyntaxError) and exc.filename == filename:
        lineno = exc.lineno
    return lineno


# ---- the global config

_global_config = None


def get_global_config(raise_exception=True, auto_create=False, return_empty_if_none=False):
    """The config set by :func:`set_global_config` / :func:`global_config_ctx` (or being loaded right now)."""
    global _global_config
    if _global_config is not None:
        return _global_config
    if auto_create:
        _global_config = Config()
        return _global_config
    if return_empty_if_none:
        return Config()
    if raise_exception:
        raise ConfigError("no global config set (use set_global_config or global_config_ctx)")
    return None


def set_global_config(config):
    global _global_config
    _global_config = config


@contextlib.contextmanager
def global_config_ctx(config):
    """Temporarily make ``config`` the global config."""
    global _global_config
    prev = _global_config
    _global_config = config
    try:
        yield config
    finally:
        _global_config = prev
