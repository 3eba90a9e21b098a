"""
One small name -> object registry, used for layer classes, losses and rec cells: registration under a name and
aliases, lookup with a did-you-mean error, and lazy loading (a function that imports the modules which register
themselves, called once on the first lookup).
"""

from __future__ import annotations

from .util import did_you_mean


class Registry:
    """
    :param str kind: what is registered, for error messages ("layer class", "loss", "cell unit")
    :param callable|None lazy_load: called once before the first lookup (imports the registering modules)
    :param callable|None normalize: name -> canonical lookup key (e.g. lower case), applied to names and lookups
    """

    def __init__(self, kind, lazy_load=None, normalize=None, list_known=True):
        self.kind = kind
        self._list_known = list_known
        self._lazy_load = lazy_load
        self._normalize = normalize or (lambda name: name)
        self._entries = {}  # key -> object
        self._aliases = {}  # alias key -> key
        self._loaded = lazy_load is None

    def register(self, name, obj=None, aliases=()):
        """Register obj under name (and aliases). Usable as a decorator: ``@reg.register("name")``."""
        if obj is None:
            return lambda o: self.register(name, o, aliases=aliases) or o
        key = self._normalize(name)
        self._entries[key] = obj
        for alias in aliases:
            self._aliases[self._normalize(alias)] = key
        return obj

    def _load(self):
        if not self._loaded:
            self._loaded = True
            self._lazy_load()

    def __contains__(self, name):
        self._load()
        key = self._normalize(name)
        return key in self._entries or key in self._aliases

    def get(self, name):
        """The object registered under name or an alias; a ValueError naming close matches otherwise."""
        self._load()
        key = self._normalize(name)
        key = self._aliases.get(key, key)
        if key not in self._entries:
            known = self.names(with_aliases=True)
            raise ValueError("unknown %s %r.%s%s" % (
                self.kind, name, did_you_mean(key, known), (" Known: %s" % ", ".join(known)) if self._list_known else ""))
        return self._entries[key]

    def names(self, with_aliases=False):
        self._load()
        return sorted(set(self._entries) | (set(self._aliases) if with_aliases else set()))

    def items(self):
        self._load()
        return sorted(self._entries.items())
