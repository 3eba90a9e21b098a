"""
Extra networks (the original's ``extra.NAME:LAYER`` references and ``"extra.NAME:LAYER": {...}`` dict entries).

``extra.search:output`` is the layer ``output`` built once more in an extra network with ``search_flag=True`` (other
names: the same flags as the main network), sharing the params of the main network (same names, reused variables).
In the extra network, a dict entry ``extra.NAME:X`` replaces ``X``. Layers that neither search nor have an extra
variant nor depend on such a layer are taken from the main network as they are (not built twice).
"""

from __future__ import annotations

from .layer_ref import parse_layer_ref

EXTRA_PREFIX = "extra."


def get_extra_net(net, extra_name):
    """The extra network ``extra_name`` of net (created on first use)."""
    nets = net.__dict__.setdefault("_extra_nets", {})
    if extra_name not in nets:
        flags = dict(train_flag=net.train_flag, eval_flag=False, search_flag=net.search_flag)
        if extra_name == "search":
            flags.update(train_flag=False, search_flag=True)
        extra = type(net)(extern_data=net.extern_data, extra_parent_net=net, name="extra.%s" % extra_name, **flags)
        prefix = "%s%s:" % (EXTRA_PREFIX, extra_name)
        main_dict = net._net_dict
        extra._net_dict = dict({k: v for k, v in main_dict.items() if not k.startswith(EXTRA_PREFIX)},
                               **{k[len(prefix):]: v for k, v in main_dict.items() if k.startswith(prefix)})
        extra.extra_name = extra_name
        extra._extra_own = _layers_to_rebuild(main_dict, prefix, extra.search_flag)
        nets[extra_name] = extra
    return nets[extra_name]


def _layers_to_rebuild(net_dict, prefix, search):
    """Names that the extra network builds itself: extra variants, searching layers, and what depends on them."""
    own = {k[len(prefix):] for k in net_dict if k.startswith(prefix)}
    names = {k for k in net_dict if not k.startswith(EXTRA_PREFIX)}

    def has_choice(desc):
        if isinstance(desc, dict):
            if desc.get("class") == "choice" and search and desc.get("search", True) is not False:
                return True
            return any(has_choice(v) for v in desc.values())
        if isinstance(desc, (list, tuple)):
            return any(has_choice(v) for v in desc)
        return False

    def refs(desc, res):
        if isinstance(desc, str) and desc:
            r = parse_layer_ref(desc)
            if r.kind == "base":  # (in a rec unit: a layer of the main network)
                r = parse_layer_ref(r.name)
            if r.kind == "layer" and r.name in names:
                res.add(r.name)
            elif r.kind == "layer" and r.base_name in names:
                res.add(r.base_name)
        elif isinstance(desc, dict):
            for v in desc.values():
                refs(v, res)
        elif isinstance(desc, (list, tuple)):
            for v in desc:
                refs(v, res)
        return res

    own |= {k for k in names if has_choice(net_dict[k])}
    deps = {k: refs(net_dict[k], set()) for k in names}
    changed = True
    while changed:
        changed = False
        for k in names - own:
            if deps[k] & own:
                own.add(k)
                changed = True
    return own


def layer_from_extra_or_main(net, name):
    """In an extra network: the main network's layer where the extra network does not build its own, else None."""
    parent = getattr(net, "extra_parent_net", None)
    if parent is None or name in net._extra_own or parse_layer_ref(name).kind == "data" or name in net.layers:
        return None
    return parent.get_layer(name)
