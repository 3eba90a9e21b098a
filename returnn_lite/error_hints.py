"""
Error texts of network construction, so that Python's / TF's internal text is never the whole message:

- :func:`precheck_layer_desc`: the common options that decide how a layer is wired (``from``, ``n_out``,
  ``loss``, ``target``, ``is_output_layer``) get the right types and sizes before anything is built;
- :func:`describe_build_error`: an exception while building a layer, with the option(s) at fault named
  (``missing 1 required positional argument: 'kind'`` -> ``missing required option 'kind'``;
  ``Dimension -4 must be >= 0`` -> ``option 'n_out' (-4): ...``);
- :func:`check_unreached_layers`: after construction, layers that nothing reaches: an error where a key looks
  like a misspelled ``is_output_layer`` / ``loss`` (that typo is what dropped the layer), else one warning
  listing them;
- :func:`runtime_error_hint`: what a TF error at ``session.run`` caused by the data means (a sequence shorter than a
  'valid' filter, too short for its CTC labels), appended to the CLI's one-line runtime error.
"""

from __future__ import annotations

import difflib
import re
import warnings

__all__ = ["precheck_layer_desc", "describe_build_error", "check_unreached_layers", "UnreachedLayersWarning",
           "guess_options", "runtime_error_hint"]

# keys that decide whether a layer is built at all
BUILD_KEYS = ("is_output_layer", "loss", "register_as_extern_data")

# sizes (ints or tuples of ints) that must be > 0 wherever a layer has them
SIZE_OPTIONS = ("filter_size", "strides", "pool_size", "dilation_rate", "window_size", "frame_size", "frame_shift",
                "num_heads", "total_key_dim", "fft_size", "nr_of_filters", "nr_of_channels", "num_pieces",
                "num_splits", "factor", "chunk_size", "chunk_step", "beam_size", "size", "dim")

# common numeric options of every layer (LayerBase)
NUMBER_OPTIONS = ("L2", "darc1", "spatial_smoothing", "dropout", "loss_scale", "param_dropout",
                  "param_variational_noise")

INTERNAL_MARKERS = (
    "Dimension ", "Dimensions must be", "Shape must be", "Shapes must be", "unhashable type", "has no attribute",
    "object is not", "not subscriptable", "unsupported operand", "Cannot convert", "index out of range",
    "NoneType", "not iterable", "must be >= 0", "invalid literal for", "Incompatible shapes", "Tried to convert",
    "is out of bounds", "object of type", "can't multiply", "can only concatenate", "not supported between",
    "Attempt to convert", "Expected int32", "Expected int64", "Expected float32", "Expected bool", "Value for attr",
    "Negative dimension", "division by zero", "bad operand type", "must be real number", "must be str",
    "an integer is required", "object cannot be interpreted", "missing 1 required", "required positional",
    "unexpected keyword argument", "Failed to convert", "truth value of", "got multiple values",
    "Invalid value in tensor", "Requires start <= limit", "{{node ", "Op has type", "Tensor conversion requested",
)


class UnreachedLayersWarning(UserWarning):
    """Layers of a net dict that were never built (nothing reaches them)."""


def _is_layer_names(value):
    """None, a name, or a list of names (items may be tuples such as concat's (name, axis))."""
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, str) or isinstance(v, (list, tuple)) and all(
            isinstance(w, (str, int)) or type(w).__name__ == "Dim" for w in v)
        for v in value)


def precheck_layer_desc(desc):
    """Types/sizes of the common wiring options of one layer dict (without 'class'); raises ValueError/TypeError
    naming the option."""
    if "from" in desc and not _is_layer_names(desc["from"]):
        raise TypeError("option 'from' must be a layer name or a list of layer names, got %r" % (desc["from"],))
    n_out = desc.get("n_out", None)
    if n_out is not None and type(n_out).__name__ != "_NotSpecified" and (
            isinstance(n_out, bool) or not isinstance(n_out, int) or n_out <= 0):
        raise ValueError("option 'n_out' must be a positive int, got %r" % (n_out,))
    loss = desc.get("loss", None)
    if loss is not None and not isinstance(loss, str):
        raise TypeError("option 'loss' must be a loss name (str), got %r" % (loss,))
    target = desc.get("target", None)
    if target is not None and not _is_layer_names(target):
        raise TypeError("option 'target' must be a data key (str) or a list of them, got %r" % (target,))
    for key in SIZE_OPTIONS:
        if key not in desc:
            continue
        value = desc[key]
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, int) and not isinstance(v, bool) and v <= 0 for v in values):
            raise ValueError("option %r must be positive, got %r" % (key, value))
    for key in NUMBER_OPTIONS:
        value = desc.get(key, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError("option %r must be a number, got %r" % (key, value))
    if isinstance(desc.get("dropout", None), (int, float)) and not 0 <= desc["dropout"] < 1:
        raise ValueError("option 'dropout' must be in [0, 1), got %r" % (desc["dropout"],))
    for key, value in desc.items():
        if isinstance(value, str) and value in ("True", "False", "true", "false") and key != "eval":
            raise TypeError("option %r: got the string %r; use %s (no quotes)" % (key, value, value.capitalize()))
    for key in ("is_output_layer",):
        if key in desc and desc[key] is not None and not isinstance(desc[key], bool):
            raise TypeError("option %r must be True or False, got %r" % (key, desc[key]))


def _is_internal(exc, text):
    """Python's or TF's own exception text (not one of returnn_lite's messages)."""
    module = type(exc).__module__
    if module.startswith("tensorflow"):
        return True
    if module != "builtins":  # returnn_lite's own exception classes carry our messages
        return False
    if any(marker in text for marker in INTERNAL_MARKERS):
        return True
    return isinstance(exc, (KeyError, IndexError, AttributeError, ZeroDivisionError)) and "layer" not in text


def guess_options(message, desc, strong_only=False):
    """Option names whose value shows in the message (strong), else whose value's type name is quoted there."""
    strong, weak = [], []
    for key, value in (desc or {}).items():
        if not isinstance(key, str) or key.startswith("_") or key == "class":
            continue
        if isinstance(value, bool) or value is None:
            if isinstance(value, bool) and re.search(r"\b%s\b" % value, message):
                weak.append(key)
            continue
        if isinstance(value, (int, float)):
            if re.search(r"(?<![\w.])%s(?![\w.])" % re.escape(repr(value)), message):
                (strong if value not in (0, 1) else weak).append(key)
            elif "'%s'" % type(value).__name__ in message:
                weak.append(key)
        elif isinstance(value, str):
            if len(value) >= 2 and ("'%s'" % value in message or '"%s"' % value in message):
                strong.append(key)
            elif len(value) >= 3 and re.search(r"(?<![\w.])%s(?![\w.])" % re.escape(value), message):
                strong.append(key)
        elif isinstance(value, (dict, list, tuple, set)):
            numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)
                       and v not in (0, 1)] if isinstance(value, (list, tuple)) else []
            if value and repr(value) in message:
                strong.append(key)
            elif any(re.search(r"(?<![\w.])%s(?![\w.])" % re.escape(repr(v)), message) for v in numbers):
                strong.append(key)
            elif "'%s'" % type(value).__name__ in message:
                weak.append(key)
    if strong_only:
        return strong
    if not strong and not weak and re.search(r"\bNone(Type)?\b|'object'", message):  # an option set to None
        weak = [k for k, v in (desc or {}).items() if isinstance(k, str) and not k.startswith("_") and v is None]
    if not strong and not weak:  # strings that look like another type ("True", "5", "1.5"): a quoting mistake
        weak = [k for k, v in (desc or {}).items() if isinstance(k, str) and not k.startswith("_")
                and isinstance(v, str) and _looks_like_literal(v)]
    return strong or weak


def _looks_like_literal(text):
    import ast

    try:
        return not isinstance(ast.literal_eval(text), str)
    except (ValueError, SyntaxError):
        return False


def _missing_args(text):
    m = re.search(r"missing \d+ required (?:positional |keyword-only )?arguments?: (.*)$", text)
    if not m:
        return None
    return re.findall(r"'([^']+)'", m.group(1))


def describe_build_error(exc, desc):
    """The message for an exception while building a layer (the caller adds the layer name and class)."""
    from .errors import NetworkError

    if isinstance(exc, NetworkError):
        return str(exc)
    message = str(exc)
    text = "%s: %s" % (type(exc).__name__, message)
    if isinstance(exc, TypeError):
        missing = _missing_args(message)
        if missing:
            hints = []
            for name in missing:
                close = difflib.get_close_matches(name, [k for k in (desc or {}) if isinstance(k, str)], n=1,
                                                  cutoff=0.75)
                hints.append("%r%s" % (name, " (the dict has %r: a typo?)" % close[0] if close else ""))
            return "missing required option%s %s" % ("s" if len(missing) > 1 else "", ", ".join(hints))
        m = re.search(r"unexpected keyword argument '([^']+)'", message)
        if m:
            return "unknown option %r" % m.group(1)
    if not _is_internal(exc, text) or message.startswith(("option ", "options ")):
        if "option" not in message:  # our text, but without the option: name the one whose value it quotes
            culprits = [k for k in guess_options(message, desc, strong_only=True) if k not in ("from", "class")]
            if len(culprits) == 1 and "'%s'" % culprits[0] not in message:
                return "option %r: %s" % (culprits[0], text)
        return text
    culprits = guess_options(message, desc)
    if not culprits:
        return "invalid options (%s)" % text
    first_line = text.splitlines()[0] if text else text
    return "option%s %s: invalid value (%s)" % (
        "s" if len(culprits) > 1 else "",
        ", ".join("%r (%r)" % (k, desc[k]) for k in culprits[:3]), first_line)


def _known_options(class_name):
    """Parameter names of the layer class's __init__ / get_out_data_from_opts (over its bases)."""
    import inspect

    from .layers.base import get_layer_class

    try:
        layer_class = get_layer_class(class_name)
    except Exception:
        return set()
    names = set()
    for cls in layer_class.__mro__:
        for attr in ("__init__", "get_out_data_from_opts"):
            func = cls.__dict__.get(attr)
            func = getattr(func, "__func__", func)
            if func is None:
                continue
            try:
                names.update(inspect.signature(func).parameters)
            except (TypeError, ValueError):
                pass
    return names


def check_unreached_layers(network, net_dict):
    """After ``construct_from_dict``: layers of ``net_dict`` that were not built. A key resembling one of
    :data:`BUILD_KEYS` -> error naming the layer and key; otherwise one warning listing the layers."""
    from .errors import NetworkLayerException

    unreached = []
    for name, desc in net_dict.items():
        if not isinstance(desc, dict) or name in network.layers or name.startswith("#") or "/" in name:
            continue
        unreached.append(name)
        known = _known_options(desc.get("class"))
        for key in desc:
            if not isinstance(key, str) or key in BUILD_KEYS or key in known:
                continue
            close = difflib.get_close_matches(key, BUILD_KEYS, n=1, cutoff=0.75)
            if close:
                raise NetworkLayerException(
                    "unknown option %r (did you mean %r?); the layer was not built because nothing uses it"
                    % (key, close[0]), name, layer_class=desc.get("class"), network=network, net_dict=net_dict)
    if unreached:
        prefix = network.get_absolute_name_prefix()
        warnings.warn("network %r: %i layer%s never built (not an output, no loss, nothing uses %s): %s" % (
            prefix or "root", len(unreached), "s" if len(unreached) > 1 else "", "them" if len(unreached) > 1 else "it",
            ", ".join(repr(prefix + n) for n in sorted(unreached))), UnreachedLayersWarning, stacklevel=3)
    return unreached


# TF runtime messages (at session.run) whose cause is the data, with what it means for the user
RUNTIME_HINTS = (
    (("Computed output size would be negative", "could not create a descriptor for a pooling"),
     "a sequence is shorter than the filter/pool size of this layer with padding 'valid' (use padding 'same', or "
     "longer sequences)"),
    (("Not enough time for target transition sequence",),
     "ctc: an input sequence (after its downsampling by strides/pooling) has fewer frames than its labels need"),
    (("Incompatible shapes: [0]",),
     "a layer produced 0 frames: a sequence shorter than a window/filter with padding 'valid'?"),
    (("Input to reshape is a tensor with 0 values",),
     "a layer produced 0 frames: a sequence shorter than a window/filter with padding 'valid'?"),
)


def runtime_error_hint(text):
    """What a TF runtime error text (of a failed ``session.run``) means for the input data, or None."""
    for markers, hint in RUNTIME_HINTS:
        if any(m in text for m in markers):
            return hint
    return None
