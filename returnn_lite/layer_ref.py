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


def strip_layer_prefix(ref):
    """ "layer:x" -> "x"; other refs unchanged."""
    return ref[len("layer:"):] if isinstance(ref, str) and ref.startswith("layer:") else ref
