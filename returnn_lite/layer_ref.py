"""
The layer-reference grammar, parsed in one place (every lookup goes through :func:`parse_layer_ref`):

    ref   := ":i"                     the step index inside a rec loop
           | "data" | "data:" KEY     extern data (of the network that owns it: own data, else the parent's)
           | "prev:" NAME             NAME's output of the previous step (inside a rec unit)
           | "base:" ref              ref in the parent network ("base:base:x" two levels up)
           | "layer:" ref             the same as ref (explicit layer, e.g. in ``target``)
           | "extra." NET ":" ref     ref in an extra network (e.g. "extra.search:output")
           | NAME ("/" SUB)*          a layer of this network, or a sub-layer of one ("rec/sub", "split/0")

Resolution walks the scope chain (see ``TFNetwork.get_layer``): a network resolves the names it owns (its layer dict
and built layers) and hands "base:" and, where it falls back to its parent, unknown names to its parent network.

A loss target (the options ``target``, ``target_``) is not a reference but names one:

    target := "layer:" ref            a layer
            | KEY                     extern data KEY (the reference "data:KEY")

Options that name layers are declared per layer class (``LayerBase.layer_options``, :class:`LayerOption`) in one of
the forms of :func:`resolve_layer_option`; nothing else turns option values into layers.
"""

from __future__ import annotations

from typing import NamedTuple, Optional


class LayerRef(NamedTuple):
    """
    :ivar kind: "step" (:i), "data", "prev", "base", "extra" or "layer"
    :ivar name: data key (None for the default input "data"), the inner reference (prev, base, extra) or the layer name
    :ivar extra_net: name of the extra network (kind "extra")
    """

    kind: str
    name: Optional[str]
    extra_net: Optional[str] = None

    @property
    def base_name(self):
        """For kind "layer": the first path component ("rec" of "rec/sub")."""
        return self.name.split("/", 1)[0]

    @property
    def sub_name(self):
        """For kind "layer": the sub-layer path ("sub" of "rec/sub"), None for a plain name."""
        parts = self.name.split("/", 1)
        return parts[1] if len(parts) > 1 else None

    @property
    def canonical(self):
        """The reference as one string without redundant prefixes ("layer:x" -> "x", "layer:prev:x" -> "prev:x")."""
        if self.kind == "layer":
            return self.name
        if self.kind == "step":
            return ":i"
        if self.kind == "data":
            return "data" if self.name is None else "data:" + self.name
        if self.kind == "extra":
            return "extra.%s:%s" % (self.extra_net, self.name)
        return "%s:%s" % (self.kind, self.name)


_cache = {}


def parse_layer_ref(ref):
    """
    :param str ref: e.g. "data:classes", "prev:s", "base:encoder", "rec/sub", ":i"
    :rtype: LayerRef
    """
    res = _cache.get(ref)
    if res is not None:
        return res
    if not isinstance(ref, str) or not ref:
        raise ValueError("invalid layer reference %r (expected a layer name such as 'data', 'prev:s', 'base:x')" % (
            ref,))
    if ref == ":i":
        res = LayerRef("step", None)
    elif ref == "data":
        res = LayerRef("data", None)
    elif ref.startswith("data:"):
        res = LayerRef("data", ref[len("data:"):])
    elif ref.startswith("prev:"):
        res = LayerRef("prev", ref[len("prev:"):])
    elif ref.startswith("base:"):
        res = LayerRef("base", ref[len("base:"):])
    elif ref.startswith("layer:"):
        res = parse_layer_ref(ref[len("layer:"):])
    elif ref.startswith("extra.") and ":" in ref:
        net, inner = ref[len("extra."):].split(":", 1)
        res = LayerRef("extra", inner, extra_net=net)
    else:
        res = LayerRef("layer", ref)
    if len(_cache) < 100000:
        _cache[ref] = res
    return res


def data_key(ref, default_input="data"):
    """The extern data key of "data" / "data:KEY"."""
    r = parse_layer_ref(ref)
    assert r.kind == "data", ref
    return default_input if r.name is None else r.name


def is_layer_target(target):
    """Whether a loss target names a layer ("layer:NAME") rather than extern data."""
    return isinstance(target, str) and target.startswith("layer:")


def target_ref(target):
    """The reference a loss target names: "layer:NAME" -> "NAME", extern data KEY -> "data:KEY"."""
    return target[len("layer:"):] if is_layer_target(target) else "data:" + target


# ---- options that name layers (declared per layer class) ----

class LayerOption(NamedTuple):
    """
    Declaration of an option whose value names layers (an entry of ``LayerBase.layer_options``; a plain str there
    is ``LayerOption(name)``). ``LayerBase.transform_config_dict`` resolves the value in its form (see
    :func:`resolve_layer_option`); ``LayerBase.get_dep_layers`` lists the layers in the resolved value.

    :ivar name: the option
    :ivar form: "layer", "layers", "dict", "pairs" or "target" (see :func:`resolve_layer_option`)
    :ivar keywords: strings that are constants of the option, not layer names (e.g. "zeros" of ``initial_output``)
    :ivar dependency: False: the layers are read, but are not dependencies (e.g. a rec layer's initial state)
    """

    name: str
    form: str = "layer"
    keywords: tuple = ()
    dependency: bool = True


FORMS = ("layer", "layers", "dict", "pairs", "target")


def as_layer_option(decl):
    """:rtype: LayerOption"""
    opt = LayerOption(decl) if isinstance(decl, str) else decl
    if opt.form not in FORMS:
        raise ValueError("layer option %r: unknown form %r (one of %s)" % (opt.name, opt.form, ", ".join(FORMS)))
    return opt


def resolve_layer_option(opt, value, get_layer, network=None):
    """
    The value of the option declared by opt with its layer names resolved by get_layer, by opt.form:

    - "layer": a name -> the layer; a list of names -> list of layers; anything else stays as it is (a constant, a
      layer dict that ``construct_children`` builds, a layer)
    - "layers": a name or a list of names -> list of layers ("none"/None entries dropped)
    - "dict": {key: name} -> {key: layer} (each value as "layer"); a value that is no dict as "layer"
    - "pairs": [(name, x), ...] -> [(layer, x), ...]
    - "target": a loss target (see module doc) -> its layer; the extern data key is marked as used in network

    :param LayerOption opt:
    :param get_layer: function(str) -> layer
    """
    form = opt.form
    if form == "layer":
        return _resolve_names(value, get_layer, opt.keywords)
    if form == "layers":
        return [get_layer(n) for n in (value if isinstance(value, (list, tuple)) else [value])
                if n is not None and n != "none"]
    if form == "dict":
        if isinstance(value, dict):
            return {k: _resolve_names(v, get_layer, opt.keywords) for k, v in value.items()}
        return _resolve_names(value, get_layer, opt.keywords)
    if form == "pairs":
        if not value or not isinstance(value, (list, tuple)) or not all(
                isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) for p in value):
            raise ValueError("option %r must be a list of (layer name, value) pairs, got %r" % (opt.name, value))
        return [(get_layer(name), x) for name, x in value]
    if form == "target":
        if not isinstance(value, str):
            return value
        if not is_layer_target(value) and network is not None:
            network.get_extern_data(value, mark_data_key_as_used=True)
        return get_layer(target_ref(value))
    raise ValueError("layer option %r: unknown form %r" % (opt.name, form))


def _resolve_names(value, get_layer, keywords=()):
    if isinstance(value, str):
        return value if value in keywords else get_layer(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(x, str) for x in value):
        return [x if x in keywords else get_layer(x) for x in value]
    return value


def strip_layer_prefix(ref):
    """ "layer:x" -> "x"; other refs unchanged."""
    return ref[len("layer:"):] if isinstance(ref, str) and ref.startswith("layer:") else ref
