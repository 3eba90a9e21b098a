"""
Layer documentation from the code: ``python -m returnn_lite.doc LAYER`` prints a layer class's description, what
it outputs, and its options (own first, then the ones every layer has) with defaults and the one-line docs of the
``:param NAME: text`` lines of the class docstrings. ``python -m returnn_lite.doc`` lists the layer classes.
"""

from __future__ import annotations

import inspect
import re
import sys

from .layer_options import DICT_ONLY_OPTIONS, get_layer_options_info
from .layers.base import LayerBase, get_layer_class, layer_registry

_PARAM_RE = re.compile(r"^\s*:param\s+(?:[\w\[\], |.]+\s+)?(\w+):\s*(.*)$")

# the dict keys that are not __init__ arguments
_DICT_ONLY_DOCS = {
    "class": "the layer class name",
    "from": "the source layers (names; default \"data\"); concatenated on the feature axis by most layers",
    "loss_opts": "options of the loss (dict)",
    "loss_scale": "factor of this layer's loss in the objective (default 1.0)",
    "loss_only_on_non_search": "no loss when the network searches",
}


def option_docs(layer_class):
    """:return: option -> one-line doc, from the ``:param x: ...`` lines of the docstrings along the MRO"""
    docs = dict(_DICT_ONLY_DOCS)
    for klass in reversed(layer_class.__mro__):
        text = klass.__dict__.get("__doc__") or ""
        for line in text.splitlines():
            m = _PARAM_RE.match(line)
            if m:
                docs[m.group(1)] = m.group(2).strip()
    return docs


def _description(layer_class):
    doc = inspect.cleandoc(layer_class.__doc__ or "")
    return "\n".join(line for line in doc.splitlines() if not _PARAM_RE.match(line)).strip()


def format_layer_doc(name):
    cls = get_layer_class(name)
    info = get_layer_options_info(cls)
    docs = option_docs(cls)
    own_opts = [k for k in inspect.signature(cls.__init__).parameters if k in info.params]
    common = set(inspect.signature(LayerBase.__init__).parameters)
    lines = ["layer class %r (%s.%s)" % (name, cls.__module__, cls.__name__), "", _description(cls) or "(no description)",
             "", "Output: see the description; the output template comes from %s.get_out_data_from_opts." % cls.__name__,
             "", "Options:"]
    order = own_opts + sorted(k for k in info.params if k not in own_opts and k not in common) + sorted(
        k for k in info.params if k in common and k not in own_opts) + [k for k in DICT_ONLY_OPTIONS if k != "class"]
    for key in order:
        default = info.defaults.get(key, inspect.Parameter.empty)
        if key in info.required:
            default_str = "required"
        elif key in DICT_ONLY_OPTIONS:
            default_str = ""
        else:
            default_str = "default %r" % (default,)
        flags = []
        if key in info.unsupported:
            flags.append("refused unless %s" % " or ".join(repr(a) for a in info.unsupported[key]))
        lines.append("  %-34s %s%s%s" % (key, default_str, (" [%s]" % "; ".join(flags)) if flags else "",
                                         (": " + docs[key]) if key in docs else ""))
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("\nLayer classes: %s" % ", ".join(n for n in layer_registry.names() if not n.startswith("_")))
        return 0
    for name in argv:
        try:
            print(format_layer_doc(name))
        except ValueError as exc:
            print("error: %s" % exc, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
