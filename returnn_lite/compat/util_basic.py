"""
Stand-in for ``returnn.util.basic``: the few helpers config files commonly import from it.
"""

from __future__ import annotations

import getpass
import os

__all__ = ["get_login_username", "NotSpecified", "BehaviorVersion", "NumbersDict", "cleanup_env_var_path", "hms",
           "hms_fraction", "human_size", "human_bytes_size", "dict_joined", "cf", "describe_returnn_version"]

try:
    from returnn_lite.util import NotSpecified
except ImportError:  # the core util module is optional for config loading
    class _NotSpecifiedType:
        def __repr__(self):
            return "NotSpecified"

        def __bool__(self):
            return False

    NotSpecified = _NotSpecifiedType()


def get_login_username():
    """The login name of the current user (e.g. used in configs for scratch paths)."""
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry, e.g. in containers
        return os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"


_cf_cache = {}


def cf(filename):
    """
    The cache-file helper of the original (its cluster's cache manager ``cf``): the path of a local copy of
    ``filename``. Without a ``cf`` executable on PATH (no cache manager), the path unchanged.
    """
    import shutil
    import subprocess

    if filename in _cf_cache:
        return _cf_cache[filename]
    if int(os.environ.get("DEBUG", "0") or 0) or not shutil.which("cf"):
        return filename
    try:
        cached = subprocess.check_output(["cf", filename]).strip().decode("utf8")
    except (subprocess.CalledProcessError, OSError):
        print("Cache manager: error occurred, using the file %r directly" % filename)
        return filename
    if not os.path.exists(cached):
        raise FileNotFoundError("cache manager 'cf' returned %r for %r, which does not exist" % (cached, filename))
    _cf_cache[filename] = cached
    return cached


def describe_returnn_version():
    """A version string (configs print or store it)."""
    return "1.0+returnn_lite"


def cleanup_env_var_path(env_var, path_prefix):
    """Removes the entries starting with ``path_prefix`` from the ``os.pathsep``-separated env var (if set)."""
    if env_var not in os.environ:
        return
    parts = os.environ[env_var].split(os.pathsep)
    os.environ[env_var] = os.pathsep.join(p for p in parts if not p.startswith(path_prefix))


def hms(seconds):
    """``3725`` -> ``"1:02:05"``."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "%i:%02i:%02i" % (hours, minutes, seconds)


def hms_fraction(seconds, decimals=4):
    """``3725.5`` -> ``"1:02:05.5000"``."""
    minutes, seconds = divmod(float(seconds), 60.0)
    hours, minutes = divmod(int(minutes), 60)
    return "%i:%02i:%0*.*f" % (hours, minutes, decimals + 3, decimals, seconds)


def human_size(n, factor=1000, frac=0.8, prec=1):
    """``1200000`` -> ``"1.2M"``."""
    postfixes = ["", "K", "M", "G", "T", "P"]
    i = 0
    while i < len(postfixes) - 1 and n > factor ** (i + 1) * frac:
        i += 1
    if i == 0:
        return str(n)
    return "%.*f%s" % (prec, float(n) / factor ** i, postfixes[i])


def human_bytes_size(n, factor=1024, frac=0.8, prec=1):
    """``1536`` -> ``"1.5KB"``."""
    return human_size(n, factor=factor, frac=frac, prec=prec) + "B"


def dict_joined(*ds):
    """The dicts merged left to right."""
    res = {}
    for d in ds:
        res.update(d)
    return res


class BehaviorVersion:
    """
    Minimal stand-in for the original's behavior-version switch. The value comes from the config key
    ``behavior_version``; returnn_lite implements one behaviour, so this only records and reports it.
    """

    _version = None

    @classmethod
    def set(cls, version):
        cls._version = version

    @classmethod
    def get(cls):
        if cls._version is not None:
            return cls._version
        from returnn_lite.config import get_global_config

        config = get_global_config(raise_exception=False)
        return config.int("behavior_version", 0) if config else 0

    @classmethod
    def is_set(cls):
        return cls._version is not None

    @classmethod
    def require(cls, condition, message, version):
        """The original raises for old behaviour; we accept everything."""
        return None


def __getattr__(name):
    if name == "NumbersDict":  # lazily, datasets pull in numpy
        from returnn_lite.datasets.basic import NumbersDict

        return NumbersDict
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
