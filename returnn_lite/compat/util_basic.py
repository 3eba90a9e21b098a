"""
Stand-in for ``returnn.util.basic``: the few helpers config files commonly import from it.
"""

from __future__ import annotations

import getpass
import os

__all__ = ["get_login_username", "NotSpecified", "BehaviorVersion", "NumbersDict"]

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
