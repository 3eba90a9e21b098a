"""
The options of every layer class, derived once per class from the ``__init__`` signatures along its MRO (plus the
dict keys every layer dict may have and the class's ``transform_options``), and the checks a layer dict goes through
before anything is built (:func:`validate_layer_desc`): unknown options (with did-you-mean), missing required
options, types (a bool option takes a bool: ``"True"`` is an error), sizes (``n_out`` > 0). After the output
template exists, :func:`check_explicit_output` compares an explicit ``n_out`` / ``out_type`` with it.
Every error is a :class:`LayerOptionError` naming the option (the network adds the layer's name).
"""

from __future__ import annotations

import inspect
import numbers
import re

from .errors import LayerOptionError
from .util import NotSpecified, close_matches

# keys of every layer dict that are not __init__ arguments (transform_config_dict turns them into others)
DICT_ONLY_OPTIONS = ("class", "from", "loss_opts", "loss_scale", "loss_only_on_non_search")
# __init__ arguments that are not user options (set by the network / transform_config_dict)
INTERNAL_ARGS = ("self", "name", "network", "output", "sources", "rec_previous_layer")
# keys the rec loop puts into the dicts of its sub-layers
INTERNAL_DICT_KEYS = ("rec_previous_layer",)

# options with a number as default that also take a str (initializers, constants of any dtype)
NUMBER_OR_STR_OPTIONS = ("bias_init", "value", "constant", "pad_value", "mask_value", "initial_output", "fill_value")

# accepted types of options every layer class has whose default (None) does not tell the type; a class's own
# ``option_types`` wins
COMMON_OPTION_TYPES = {
    "collocate_with": (str, list, tuple), "L2": (int, float), "darc1": (int, float), "loss_scale": (int, float),
    "param_variational_noise": (int, float), "param_dropout": (int, float), "param_dropout_min_ndim": (int,),
    "loss_only_on_non_search": (bool,), "is_output_layer": (bool,), "trainable": (bool,), "encapsulate": (bool,),
    "register_as_extern_data": (str,), "updater_opts": (dict,), "name_scope": (str,), "param_device": (str,),
    "size_target": (str,), "copy_output_loss_from_source_idx": (int,), "debug_print_layer_output": (bool, dict),
    "out_shape": (set, frozenset, tuple, list), "control_dependencies_on_output": (str, list, tuple),
    "loss_opts": (dict,), "param_name": (str,),
}
# a TF device: "CPU", "gpu:1", "/device:CPU:0", "/job:x/device:GPU:0"
_DEVICE_RE = r"^(/job:\w+(/replica:\d+)?(/task:\d+)?)?/?(device:)?(cpu|gpu)(:\d+)?$"
# options given as Dim objects (the tag, not a size)
DIM_OPTIONS = ("out_dim", "in_dim")
# initializer options take a name, a number or a dict (as the original's get_initializer)
_INITIALIZER_SUFFIXES = ("_init", "initializer")

_cache = {}


class LayerOptionsInfo:
    """What one layer class accepts (see module doc)."""

    def __init__(self, layer_class):
        self.layer_class = layer_class
        params = {}
        for klass in reversed(layer_class.__mro__):
            init = klass.__dict__.get("__init__")
            if init is None or klass is object:
                continue
            for p in inspect.signature(init).parameters.values():
                if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in INTERNAL_ARGS:
                    continue
                params[p.name] = p
        self.params = params  # option -> inspect.Parameter (the most derived declaration)
        self.defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
        self.names = set(params) | set(DICT_ONLY_OPTIONS) | set(INTERNAL_DICT_KEYS) | set(getattr(layer_class, "transform_options", ()))
        # required: no default in the class's own __init__ (a base class's may be passed on by the subclass)
        own = inspect.signature(layer_class.__init__).parameters.values()
        self.not_none = tuple(getattr(layer_class, "required_options", ()))  # declared required: also not None
        self.required = sorted(set(self.not_none) | {
            p.name for p in own if p.default is inspect.Parameter.empty and p.name not in INTERNAL_ARGS
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            and p.name not in getattr(layer_class, "derived_options", ())})
        option_types = {}
        for klass in reversed(layer_class.__mro__):
            option_types.update(klass.__dict__.get("option_types", {}))
        self.option_types = option_types  # option -> tuple of accepted types (beyond the default's type)
        unsupported = {}
        for klass in reversed(layer_class.__mro__):
            unsupported.update(klass.__dict__.get("unsupported_options", {}))
        # (a subclass that supports an option a base refuses maps it to None)
        self.unsupported = {k: v for k, v in unsupported.items() if v is not None}  # option -> accepted values (anything else is refused)


def get_layer_options_info(layer_class):
    """:rtype: LayerOptionsInfo"""
    info = _cache.get(layer_class)
    if info is None:
        info = _cache[layer_class] = LayerOptionsInfo(layer_class)
    return info


def _is_bool(v):
    return isinstance(v, bool) or type(v).__name__ == "bool_"


def _is_positive_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def accepted_option_types(info, key):
    """The types option ``key`` accepts, as far as its declaration tells (a tuple of types), else None."""
    types = info.option_types.get(key)
    if types is not None:
        return types
    if key in DIM_OPTIONS:
        from .data import Dim  # (not at import: data imports much)

        return (Dim, str) if key == "in_dim" else (Dim,)  # (in_dim "T": an axis, refused by the layer by name)
    if key in COMMON_OPTION_TYPES:
        return COMMON_OPTION_TYPES[key]
    if key not in info.defaults:
        return None
    default = info.defaults[key]
    if _is_bool(default):
        return (bool,)
    if key.endswith(_INITIALIZER_SUFFIXES):
        return None
    from .data import Dim

    if isinstance(default, (int, float)):
        # (a list: an int size per axis, e.g. strides; a Dim: a size given by its tag; a str: a number-or-str option)
        return (numbers.Number, list, tuple, Dim) + ((str,) if key in NUMBER_OR_STR_OPTIONS or key in getattr(
            info.layer_class, "layer_options", ()) else ())
    if isinstance(default, str):
        # (axes: a name, a number, a Dim or several; a rec unit: a dict)
        return (str, numbers.Integral, list, tuple, set, dict, Dim)
    return None


def validate_layer_desc(layer_class, desc):
    """
    Checks the options of one layer dict (without "class") before transform_config_dict and the template.
    :raises LayerOptionError: naming the option
    """
    if getattr(layer_class, "accepts_any_options", False):
        return
    info = get_layer_options_info(layer_class)
    cls_name = layer_class.layer_class
    for key in desc:
        if key not in info.names:
            matches = close_matches(key, info.names, n=3)
            raise LayerOptionError("unknown option %r for layer class %r%s (options: python -m returnn_lite.doc %s)" % (
                key, cls_name, "; did you mean %s?" % " or ".join(repr(m) for m in matches) if matches else "",
                cls_name), key)
    for key in info.required:
        if key not in desc:
            raise LayerOptionError("option %r is required for layer class %r" % (key, cls_name), key)
    for key in info.not_none:
        if desc[key] is None:
            raise LayerOptionError("option %r is required for layer class %r (got None)" % (key, cls_name), key)
    for key, accepted in info.unsupported.items():
        if key in desc and not any(desc[key] is a or (type(desc[key]) is type(a) and desc[key] == a)
                                   for a in accepted):
            raise LayerOptionError("option %s=%r is not supported by returnn_lite for layer class %r (supported: %s)" % (
                key, desc[key], cls_name, " or ".join(repr(a) for a in accepted)), key)
    for key, value in desc.items():
        if value is None or value is NotSpecified:
            continue
        if callable(value) and not isinstance(value, type):  # (a function computing the value: the layer calls it)
            continue
        types = accepted_option_types(info, key)
        if types is None or isinstance(value, types) or _is_bool(value) and bool in types:
            continue
        if types[0].__name__ == "Dim":
            raise LayerOptionError("option %s must be a Dim, got %r" % (key, value), key)
        if types == (bool,):
            raise LayerOptionError("option %r must be a bool (True/False), got %r (%s)" % (
                key, value, type(value).__name__), key)
        if isinstance(value, str) and int in types and str not in types:
            raise LayerOptionError("option %r must be a number, got the string %r" % (key, value), key)
        raise LayerOptionError("option %r must be %s, got %r (%s)" % (
            key, " or ".join(t.__name__ for t in types), value, type(value).__name__), key)
    out_shape = desc.get("out_shape")
    if isinstance(out_shape, (set, frozenset, tuple, list)):
        from .data import Dim

        bad = [d for d in out_shape if not isinstance(d, Dim)]
        if bad:
            raise LayerOptionError("option 'out_shape' must be a set of Dims, got the item %r" % (bad[0],),
                                   "out_shape")
    device = desc.get("param_device")
    if isinstance(device, str) and not re.match(_DEVICE_RE, device, re.IGNORECASE):
        raise LayerOptionError("option 'param_device' %r is not a device (e.g. 'CPU', 'GPU', '/device:CPU:0')" % (
            device,), "param_device")
    n_out = desc.get("n_out", None)
    if n_out is not None and n_out is not NotSpecified and not _is_positive_int(n_out):
        raise LayerOptionError("option 'n_out' must be a positive int, got %r" % (n_out,), "n_out")
    out_type = desc.get("out_type")
    if out_type is not None and not isinstance(out_type, dict) and not callable(out_type):
        raise LayerOptionError("option 'out_type' must be a dict, got %r" % (out_type,), "out_type")


def check_explicit_output(layer, desc):
    """An explicit n_out / out_type (as given in the layer dict) must agree with the layer's real output."""
    out = layer.output
    n_out = desc.get("n_out")
    layer_class = getattr(layer, "cls", type(layer))  # (a rec template layer knows its class as .cls)
    if getattr(layer_class, "n_out_is_output_dim", True) and _is_positive_int(n_out) and out.dim != n_out:
        raise LayerOptionError("option n_out=%r contradicts the output %s (%s)" % (
            n_out, out.short_repr(), "it has no feature dim" if out.dim is None else "its dim is %r" % out.dim),
            "n_out")
    if _is_positive_int(n_out):
        _check_n_out_against_loss_target(layer, n_out, desc)
    out_type = desc.get("out_type")
    if isinstance(out_type, dict):
        dim = out_type.get("dim", NotSpecified)
        if _is_positive_int(dim) and out.dim is not None and out.dim != dim:
            raise LayerOptionError("option out_type dim=%r contradicts the output %s (its dim is %r)" % (
                dim, out.short_repr(), out.dim), "out_type")
        shape = out_type.get("shape")
        if isinstance(shape, (list, tuple)) and len(shape) == len(out.shape) and any(
                a is not None and b is not None and a != b for a, b in zip(shape, out.shape)):
            raise LayerOptionError("option out_type shape=%r contradicts the output %s" % (
                tuple(shape), out.short_repr()), "out_type")
        for key in ("sparse", "dtype"):
            if key in out_type and out_type[key] != getattr(out, key):
                raise LayerOptionError("option out_type %s=%r contradicts the output %s" % (
                    key, out_type[key], out.short_repr()), "out_type")


def _loss_of_desc(layer, desc):
    """The loss object of a layer dict whose loss is not computed (no train/eval flag: the layer has none)."""
    from .losses import get_loss_class

    try:
        loss_class = get_loss_class(desc["loss"])
        return loss_class(base_network=layer.network, **dict(desc.get("loss_opts") or {}))
    except Exception:  # noqa: (a bad loss / loss_opts is reported where the loss is built)
        return None


def _target_data(layer, target_name):
    """The extern data of a target name (None for a layer target or one not available here)."""
    try:
        return layer.network.get_root_network().extern_data.data.get(target_name)
    except Exception:  # noqa: (no extern data here)
        return None


def _check_n_out_against_loss_target(layer, n_out, desc):
    """An explicit n_out on a layer with a loss must fit the loss's target, also where the loss is never computed
    (no train/eval flag; a rec unit's output under search): the same check as when the loss is registered."""
    kwargs = getattr(layer, "kwargs", None)  # (a rec unit's template layer keeps its options)
    loss = getattr(layer, "loss", None) if kwargs is None else kwargs.get("loss")
    target_name = getattr(layer, "target", None) if kwargs is None else kwargs.get("target")
    if isinstance(target_name, (list, tuple)):
        target_name = target_name[0] if len(target_name) == 1 else None
    if loss is None and isinstance(desc.get("loss"), str):
        loss = _loss_of_desc(layer, desc)
        target_name = target_name or desc.get("target")
    if loss is None and isinstance(target_name, str):  # no loss: the target gives the output dim (as without n_out)
        target = _target_data(layer, target_name)
        if target is not None and target.dim is not None and target.dim != n_out:
            raise LayerOptionError("option n_out=%r contradicts the target %r %s (its %s is %i)" % (
                n_out, target_name, target.short_repr(), "number of classes" if target.sparse else "dim",
                target.dim), "n_out")
        return
    if not getattr(loss, "need_target", False) or not isinstance(target_name, str):
        return
    try:
        if kwargs is None:
            target = layer._get_target_value()
        else:  # (a data key; other targets are checked when the loss is registered)
            target = layer.network.get_root_network().extern_data.data.get(target_name)
    except Exception:  # noqa: (a target not available here, e.g. not in extern_data under search: checked later)
        return
    if target is None:
        return
    try:
        loss.check_dims(layer, target)
    except ValueError as exc:
        raise LayerOptionError("option n_out=%r contradicts the target %r of loss %r: %s" % (
            n_out, target_name, loss.class_name, exc), "n_out") from None


def iter_nested_layer_descs(desc, prefix):
    """(``prefix/sub/...`` name, layer dict) of the layers in a layer dict's ``unit`` / ``subnetwork`` dict,
    recursively (a rec unit's layers are built lazily: one never needed would escape the validation)."""
    for key in ("unit", "subnetwork"):
        sub = desc.get(key)
        if not isinstance(sub, dict):
            continue
        # masked_computation's unit is one layer dict
        for name, sub_desc in [(key, sub)] if isinstance(sub.get("class"), str) else sub.items():
            if isinstance(name, str) and isinstance(sub_desc, dict):
                yield "%s/%s" % (prefix, name), sub_desc
                yield from iter_nested_layer_descs(sub_desc, "%s/%s" % (prefix, name))


def check_extern_data_opts(opts):
    """
    Types and sizes of one extern_data entry (Data kwargs) before the Data is made: ``dim`` a positive int (None:
    unknown), ``shape`` a tuple of positive ints / None, bool flags bools, axis options within the batch shape,
    ``dtype`` a TF dtype name. Raises ValueError naming the option (the caller adds the data key).
    """
    import tensorflow as tf

    dim = opts.get("dim", None)
    if dim is not None and dim is not NotSpecified and type(dim).__name__ != "Dim" and not _is_positive_int(dim):
        raise ValueError("option 'dim' must be a positive int (or None), got %r" % (dim,))
    shape = opts.get("shape", None)
    if shape is not None:
        if not isinstance(shape, (list, tuple)) or not all(
                s is None or _is_positive_int(s) or isinstance(s, int) and s == 0 for s in shape):
            raise ValueError("option 'shape' must be a tuple of positive ints or None (dynamic), got %r" % (shape,))
    for key in ("sparse", "available_for_inference", "auto_create_placeholders"):
        if key in opts and opts[key] is not None and not _is_bool(opts[key]):
            raise ValueError("option %r must be a bool (True/False), got %r" % (key, opts[key]))
    dtype = opts.get("dtype", None)
    if dtype is not None:
        try:
            tf.as_dtype(dtype)
        except TypeError:
            raise ValueError("option 'dtype' %r is not a dtype (e.g. 'float32', 'int32')" % (dtype,)) from None
    if shape is None and not opts.get("dims") and not opts.get("dim_tags"):  # the default shape
        shape = (None,) if opts.get("sparse") or opts.get("sparse_dim") else (None, dim)
    if isinstance(shape, (list, tuple)):
        batch_ndim = len(shape) + (0 if opts.get("batch_dim_axis", 0) is None else 1)
        for key in ("batch_dim_axis", "time_dim_axis", "feature_dim_axis"):
            axis = opts.get(key, None)
            if axis is None or axis is NotSpecified:
                continue
            if not isinstance(axis, int) or isinstance(axis, bool) or not -batch_ndim <= axis < batch_ndim:
                raise ValueError("option %s=%r: not an axis of the shape %r (with batch: %i axes)" % (
                    key, axis, tuple(shape), batch_ndim))
