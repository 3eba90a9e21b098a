"""
Pretraining: networks that change per epoch, as the original's ``Pretrain`` module builds them.

Config forms:

- ``pretrain = "default"`` (or ``True``): layer-wise construction "from_output": the first pretrain epoch has the
  output layer on top of the first hidden layer, each further epoch puts back the next hidden layer, the last one
  is the full network (``network``, or the net described by the old ``hidden_size``/``hidden_type`` keys).
- ``pretrain = {"repetitions": N|[N, ...]|{"default": N, "final": M, idx: K}, "construction_algo": ALGO,
  "copy_param_mode": ..., "output_layers": ..., "input_layers": ...}`` with ALGO ``"from_output"``,
  ``"from_input"``, ``"no_network_modifications"`` or a function ``f(idx, net_dict) -> net_dict | None``
  (called with idx 0, 1, ... until it returns None; the full network always comes last). The older keys
  ``pretrain_repetitions`` and ``pretrain_construction_algo`` work too.
- A net dict key ``"#repetition"`` overrides the repetitions of that step.
- :class:`WrapEpochValue` values anywhere in a net dict are resolved to ``func(epoch=epoch)`` for the epoch the
  network is built for (also without pretraining).
- ``get_network(epoch, **kwargs)`` in the config (after the pretrain epochs, if any) gives the net dict per epoch.

:func:`get_net_dict_for_epoch` is what the engine (and anyone constructing a config's network) calls.
"""

from __future__ import annotations

import copy
import inspect

__all__ = ["WrapEpochValue", "find_pretrain_wrap_values", "resolve_wrapped_values", "Pretrain",
           "pretrain_from_config", "network_json_from_config", "get_net_dict_for_epoch", "PretrainError"]


class PretrainError(ValueError):
    """A pretrain setting that cannot be used."""


class WrapEpochValue:
    """A net dict value that depends on the epoch: ``WrapEpochValue(lambda epoch: min(epoch * 0.1, 0.3))``."""

    def __init__(self, func):
        self.func = func

    def get_value(self, epoch):
        return self.func(epoch=epoch)

    def __repr__(self):
        return "WrapEpochValue(%r)" % (self.func,)


def find_pretrain_wrap_values(net_json):
    """Whether there is a :class:`WrapEpochValue` anywhere in net_json (dicts, lists, tuples)."""
    stack = [net_json]
    while stack:
        v = stack.pop()
        if isinstance(v, WrapEpochValue):
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def resolve_wrapped_values(value, epoch):
    """A copy of value (dicts/lists/tuples rebuilt where needed) with each WrapEpochValue replaced by its value."""
    if isinstance(value, WrapEpochValue):
        return value.get_value(epoch=epoch)
    if isinstance(value, dict):
        return {k: resolve_wrapped_values(v, epoch) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and find_pretrain_wrap_values(value):
        return type(value)(resolve_wrapped_values(v, epoch) for v in value)
    return value


def _sources(layer_desc):
    src = layer_desc.get("from", ["data"])
    if isinstance(src, str):
        return [src]
    return list(src)


class Pretrain:
    """The sequence of networks of the pretrain epochs; epoch ``len(steps)`` and later use the last (full) one."""

    def __init__(self, original_network_json, network_init_args=None, copy_param_mode=None, copy_output_layer=None,
                 greedy=None, repetitions=None, construction_algo="from_output", output_layers=("output",),
                 input_layers=("data",)):
        if copy_param_mode not in (None, "ifpossible", "subset", "reset"):
            raise PretrainError("pretrain copy_param_mode %r: expected None, 'ifpossible', 'subset' or 'reset'"
                                % (copy_param_mode,))
        if greedy:
            raise PretrainError("pretrain greedy=True (train only the new layers) is not supported by returnn_lite")
        self.copy_param_mode = copy_param_mode
        self.copy_output_layer = copy_output_layer
        self.greedy = False
        self.network_init_args = network_init_args
        self._original = original_network_json
        self._construction_algo = construction_algo
        self._input_layers = list(input_layers)
        self._output_layers = list(output_layers)
        if construction_algo == "from_output":
            steps = self._construct_from_output()
        elif construction_algo == "from_input":
            steps = self._construct_from_input()
        elif construction_algo == "no_network_modifications":
            steps = [self._original]
        elif callable(construction_algo):
            steps = self._construct_custom(construction_algo)
        else:
            raise PretrainError("pretrain construction_algo %r: expected 'from_output', 'from_input', "
                                "'no_network_modifications' or a function (idx, net_dict)" % (construction_algo,))
        if not callable(construction_algo):
            steps = self._drop_steps_without_new_trainable(steps)
        self.repetitions = self._repetitions_list(repetitions, steps)
        self._step_net_jsons = []
        for n_rep, net in zip(self.repetitions, steps):
            self._step_net_jsons.extend(copy.deepcopy(net) for _ in range(n_rep))

    # ---- construction algorithms

    def _is_output(self, net, name):
        desc = net[name]
        return name in self._output_layers or desc.get("class") == "softmax" or "target" in desc

    def _construct_from_output(self):
        """Starting from the full net, repeatedly bypass the layers feeding the output layers."""
        for name in self._output_layers:
            if name not in self._original:
                raise PretrainError("pretrain 'from_output': the network has no output layer %r" % name)
        steps = [self._original]
        while True:
            new = copy.deepcopy(steps[0])
            found = False
            while True:
                new_sources, deleted = set(), set()
                for out in self._output_layers:
                    for src in _sources(new[out]):
                        if src in self._input_layers:
                            new_sources.add(src)
                        elif src in new:
                            new_sources.update(_sources(new[src]))
                            del new[src]
                            deleted.add(src)
                        else:
                            new_sources.add(src)
                old_sources = sorted({s for out in self._output_layers for s in _sources(new[out])})
                if sorted(new_sources) == old_sources:
                    break
                for out in self._output_layers:
                    new[out]["from"] = sorted(new_sources)
                if new_sources & set(self._input_layers):
                    continue  # the output would sit on the input data (other dim): go further
                if all(not self._original[d].get("trainable", True) for d in deleted if d in self._original):
                    continue
                found = True
                break
            if not found:
                return steps
            steps.insert(0, new)

    def _construct_from_input(self):
        """Grow from the input: step k has the layers up to depth k from the data, plus the output layers."""
        orig = self._original
        steps = []
        depth = 1
        while True:
            reach, frontier = set(), set(self._input_layers)
            for _ in range(depth):
                frontier = {n for n, d in orig.items() if n not in reach and set(_sources(d)) & (frontier | reach
                                                                                            | set(self._input_layers))}
                if not frontier - reach:
                    break
                reach |= frontier
            net = {n: copy.deepcopy(orig[n]) for n in reach}
            for n in orig:
                if self._is_output(orig, n):
                    net[n] = copy.deepcopy(orig[n])
            missing = {s for d in net.values() for s in _sources(d)} - set(net) - set(self._input_layers)
            if not missing or len(net) == len(orig):
                break
            for n, d in net.items():
                d["from"] = [s for s in self._existing_inputs(net, n) if s not in self._input_layers] or ["data"]
            steps.append(net)
            depth += 1
        steps.append(orig)
        return steps

    def _existing_inputs(self, net, name):
        found, seen, stack = [], {name}, list(_sources(self._original[name]))
        while stack:
            src = stack.pop(0)
            if src in net or src in self._input_layers:
                if src not in found:
                    found.append(src)
            elif src not in seen and src in self._original:
                seen.add(src)
                stack.extend(_sources(self._original[src]))
        return found

    def _construct_custom(self, func):
        steps = []
        idx = 0
        while True:
            net = func(idx=idx, net_dict=copy.deepcopy(self._original))
            if not net:
                break
            steps.append(net)
            idx += 1
        steps.append(self._original)
        return steps

    def _drop_steps_without_new_trainable(self, steps):
        """A step that only adds non-trainable (or output) layers to the previous one is dropped."""
        kept = []
        for i in range(len(steps) - 1):
            prev = steps[i - 1] if i > 0 else {}
            cur = steps[i]
            if any(n not in prev and not self._is_output(cur, n) and cur[n].get("trainable", True) for n in cur):
                kept.append(cur)
        kept.append(steps[-1])
        return kept

    @staticmethod
    def _repetitions_list(repetitions, steps):
        n = len(steps)
        if not repetitions:
            repetitions = 1
        if isinstance(repetitions, dict):
            rep = dict(repetitions)
            reps = [rep.pop("default", 1)] * n
            for k, v in rep.items():
                reps[n - 1 if k == "final" else k] = v
        else:
            reps = list(repetitions) if isinstance(repetitions, (list, tuple)) else [int(repetitions)]
            if not 0 < len(reps) <= n:
                raise PretrainError("pretrain repetitions %r: expected 1 to %i entries (one per pretrain step)"
                                    % (repetitions, n))
            reps += [reps[-1]] * (n - len(reps))
        for i, net in enumerate(steps):
            if isinstance(net, dict) and "#repetition" in net:
                reps[i] = net.pop("#repetition")
        return reps

    # ---- public interface

    def __str__(self):
        return "Pretrain construction algo %r, number of pretrain epochs: %i" % (
            self._construction_algo, self.get_train_num_epochs())

    def get_train_num_epochs(self):
        return len(self._step_net_jsons)

    def get_final_network_json(self):
        return self._step_net_jsons[-1]

    def get_network_json_for_epoch(self, epoch):
        """The net dict of epoch (starting at 1), WrapEpochValues resolved."""
        if epoch < 1:
            raise PretrainError("pretrain: epoch %r, epochs start at 1" % (epoch,))
        idx = min(epoch, len(self._step_net_jsons)) - 1
        return resolve_wrapped_values(self._step_net_jsons[idx], epoch)


_LINE_FORMAT_LAYER_CLASSES = {"forward": "linear", "hidden": "linear", "linear": "linear"}


def network_json_from_config(config):
    """``network`` of the config, or the net of the old line format (``hidden_size``, ``hidden_type``, ...)."""
    net = config.typed_value("network", None)
    if isinstance(net, dict):
        return net
    if net is not None:
        raise PretrainError("config 'network' must be a dict, got %s" % type(net).__name__)
    sizes = config.int_list("hidden_size", None)
    if not sizes:
        raise PretrainError("the config has no 'network' dict (and no 'hidden_size' of the old line format)")
    types_ = config.list("hidden_type", ["forward"])
    acts = config.list("activation", ["tanh"])
    if config.bool("bidirectional", False):
        raise PretrainError("old line-format config with bidirectional=true: write a 'network' dict instead")
    dropout = config.float_list("dropout", [0.0])
    net, src = {}, "data"
    for i, size in enumerate(sizes):
        kind = types_[min(i, len(types_) - 1)]
        if kind not in _LINE_FORMAT_LAYER_CLASSES:
            raise PretrainError("old line-format config: hidden_type %r is not supported (use a 'network' dict)"
                                % kind)
        name = "hidden_%i" % i
        net[name] = {"class": _LINE_FORMAT_LAYER_CLASSES[kind], "n_out": size, "from": [src],
                     "activation": acts[min(i, len(acts) - 1)]}
        drop = dropout[min(i, len(dropout) - 1)]
        if drop:
            net[name]["dropout"] = drop
        src = name
    net["output"] = {"class": "softmax", "loss": config.value("loss", "ce"), "from": [src]}
    return net


def pretrain_from_config(config):
    """A :class:`Pretrain` from the config's ``pretrain`` setting, or None without pretraining."""
    value = config.typed_value("pretrain", None) if config.is_typed("pretrain") else config.value("pretrain", None)
    if isinstance(value, str):
        lower = value.strip().lower()
        if lower in ("", "0", "false", "no", "none", "off"):
            return None
        if lower in ("1", "true", "yes", "on"):
            value = "default"
        elif lower != "default":
            raise PretrainError("pretrain %r: expected 'default', a dict or False" % value)
    if not value:
        return None
    opts = dict(value) if isinstance(value, dict) else {}
    if not isinstance(value, (dict, str)) and value is not True:
        raise PretrainError("pretrain %r: expected 'default', a dict or False" % (value,))
    if config.has("pretrain_repetitions"):
        opts.setdefault("repetitions", config.typed_value("pretrain_repetitions") if config.is_typed(
            "pretrain_repetitions") else config.int_list("pretrain_repetitions"))
    if config.has("pretrain_construction_algo"):
        opts.setdefault("construction_algo", config.value("pretrain_construction_algo"))
    if config.has("pretrain_copy_output_layer"):
        opts.setdefault("copy_output_layer", config.typed_value("pretrain_copy_output_layer"))
    known = set(inspect.signature(Pretrain.__init__).parameters) - {"self", "original_network_json"}
    unknown = sorted(set(opts) - known)
    if unknown:
        raise PretrainError("pretrain option(s) %s not known (known: %s)" % (unknown, sorted(known)))
    return Pretrain(original_network_json=network_json_from_config(config), **opts)


def _raise_if_python2(exc, func):
    """A config function written for Python 2 (xrange, dict.iteritems, ...): one line naming its file and line."""
    import traceback

    from .compat.py2 import python2_feature, python2_message

    found = python2_feature(exc)
    if found is None:
        return
    filename = getattr(getattr(func, "__code__", None), "co_filename", "<config>")
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    raise PretrainError(python2_message(filename, lines[-1] if lines else None, found[1])) from None


def _call_get_network(func, epoch, **kwargs):
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        params = {}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return func(epoch=epoch, **kwargs)
    if "epoch" in params:
        return func(epoch=epoch)
    return func(epoch)


def get_net_dict_for_epoch(config, epoch=1, pretrain=None, **kwargs):
    """
    The net dict the original trains in ``epoch``: the pretrain step network during the pretrain epochs, else
    ``get_network(epoch, **kwargs)`` if the config defines it, else ``network``; WrapEpochValues resolved.
    ``pretrain`` may pass a Pretrain built before (else it is built from the config).
    """
    from .config import global_config_ctx

    with global_config_ctx(config):
        if pretrain is None:
            pretrain = pretrain_from_config(config)
        if pretrain is not None and epoch <= pretrain.get_train_num_epochs():
            return pretrain.get_network_json_for_epoch(epoch)
        func = config.typed_value("get_network", None)
        if callable(func):
            try:
                net = _call_get_network(func, epoch, **kwargs)
            except (NameError, AttributeError, TypeError) as exc:
                _raise_if_python2(exc, func)
                raise
        elif pretrain is not None:
            net = pretrain.get_final_network_json()
        else:
            net = network_json_from_config(config)
    if not isinstance(net, dict):
        raise PretrainError("the network for epoch %i is not a dict (got %s)" % (epoch, type(net).__name__))
    return resolve_wrapped_values(net, epoch)
