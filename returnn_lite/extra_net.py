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

    own |= {k for k in names if has_choice(net_dict[k])}
    return _with_dependents(net_dict, names, own)


def _refs(desc, names, res):
    """The layers of names that desc (a layer dict, or a part of it) refers to (also via base: in a rec unit)."""
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
            _refs(v, names, res)
    elif isinstance(desc, (list, tuple)):
        for v in desc:
            _refs(v, names, res)
    return res


def _with_dependents(net_dict, names, own):
    """own plus every layer of names that (transitively) refers to one of own."""
    own = set(own)
    deps = {k: _refs(net_dict[k], names, set()) for k in names}
    changed = True
    while changed:
        changed = False
        for k in names - own:
            if deps[k] & own:
                own.add(k)
                changed = True
    return own


def only_on_search_layers(net_dict):
    """Layers with ``only_on_search=True`` and the layers depending on them: not built without search_flag."""
    names = {k for k, v in net_dict.items() if isinstance(v, dict) and not k.startswith(EXTRA_PREFIX)}
    marked = {k for k in names if net_dict[k].get("only_on_search")}
    return _with_dependents(net_dict, names, marked) if marked else set()


def search_only_deps(net_dict, search_only):
    """The layers that only the search-only layers use (not built in the main net without search: no warning)."""
    if not search_only:
        return set()
    names = {k for k, v in net_dict.items() if isinstance(v, dict) and not k.startswith(EXTRA_PREFIX)}
    res, todo = set(), list(search_only)
    while todo:
        for k in _refs(net_dict[todo.pop()], names, set()):
            if k not in res and k not in search_only:
                res.add(k)
                todo.append(k)
    return res


def layer_from_extra_or_main(net, name):
    """In an extra network: the main network's layer where the extra network does not build its own, else None."""
    parent = getattr(net, "extra_parent_net", None)
    if parent is None or name in net._extra_own or parse_layer_ref(name).kind == "data" or name in net.layers:
        return None
    return parent.get_layer(name)


SEARCH_TRAIN_NET = "search_train"


def construct_search_train_net(net, net_dict, layer_list):
    """
    The config option ``search_train_network_layers`` (training): the layers of layer_list are built in an extra
    network with ``search_flag=True`` (same train flag as net), as the layers they depend on which net has not
    built (e.g. those that only only_on_search layers use); the layers net has built are taken from it. Params are
    shared by name. The losses of the extra network count in training: they join net's losses (layer name, or
    ``extra.search_train:NAME`` where net has a loss of that name), as its data keys join net's.
    """
    unknown = [name for name in layer_list if name not in net_dict]
    if unknown:
        raise ValueError("search_train_network_layers %r: no such layer(s) %s in the network" % (layer_list, unknown))
    nets = net.__dict__.setdefault("_extra_nets", {})
    extra = type(net)(config=net.config, extern_data=net.extern_data, extra_parent_net=net,
                      name="extra.%s" % SEARCH_TRAIN_NET, train_flag=net.train_flag, eval_flag=net.eval_flag,
                      search_flag=True)
    extra._net_dict = {k: v for k, v in net_dict.items() if not k.startswith(EXTRA_PREFIX)}
    extra.extra_name = SEARCH_TRAIN_NET
    extra._extra_own = {k for k in extra._net_dict if k not in net.layers} | set(layer_list)
    nets[SEARCH_TRAIN_NET] = extra
    for name in layer_list:
        extra.construct_layer(extra._net_dict, name)
    for key, holder in extra.losses_dict.items():
        if key in net.losses_dict:
            key = "%s%s:%s" % (EXTRA_PREFIX, SEARCH_TRAIN_NET, key)
        holder.name = key
        net.losses_dict[key] = holder
    net.used_data_keys |= extra.used_data_keys
    return [extra.layers[name] for name in layer_list]
