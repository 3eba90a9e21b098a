"""
Option validation before anything is built: unknown options (did-you-mean), missing required options, types, sizes,
and an explicit n_out / out_type that contradicts the real output. Every error names the layer and the option.
"""

import pytest
import tensorflow as tf

from returnn_lite.network import NetworkLayerException
from returnn_lite.testing import build_network

EXTERN = {"data": {"dim": 5}, "classes": {"dim": 4, "sparse": True}}


def _error(net_dict, extern=None):
    with tf.Graph().as_default():
        with pytest.raises(NetworkLayerException) as info:
            build_network(net_dict, extern or EXTERN)
    return str(info.value)


def test_unknown_option_did_you_mean():
    msg = _error({"output": {"class": "linear", "n_ot": 3, "activation": None}})
    assert "'output'" in msg and "unknown option 'n_ot'" in msg and "did you mean 'n_out'" in msg


def test_is_output_layer_typo():
    msg = _error({"output": {"class": "copy"}, "x": {"class": "copy", "is_ouput_layer": True}})
    assert "'x'" in msg and "'is_ouput_layer'" in msg and "'is_output_layer'" in msg


def test_missing_required_option_named():
    msg = _error({"output": {"class": "cond", "true_layer": "data", "false_layer": "data"}})
    assert "'output'" in msg and "option 'condition' is required" in msg


def test_bool_option_must_be_bool():
    msg = _error({"output": {"class": "variable", "shape": (3,), "add_batch_axis": "True"}})
    assert "'output'" in msg and "'add_batch_axis' must be a bool" in msg and "'True'" in msg


@pytest.mark.parametrize("n_out", [0, -3, "5", 2.5])
def test_n_out_positive_int(n_out):
    msg = _error({"output": {"class": "linear", "n_out": n_out, "activation": None}})
    assert "'output'" in msg and "'n_out' must be a positive int" in msg


def test_explicit_n_out_contradicts_output():
    msg = _error({"output": {"class": "activation", "activation": "relu", "n_out": 7}})
    assert "'output'" in msg and "n_out=7" in msg and ("contradicts" in msg or "does not match" in msg)


def test_explicit_out_type_contradicts_output():
    msg = _error({"output": {"class": "activation", "activation": "relu", "out_type": {"dim": 3}}})
    assert "'output'" in msg and "out_type" in msg


def test_explicit_n_out_contradicts_output_in_rec_unit():
    msg = _error({"output": {"class": "rec", "from": "data", "unit": {
        "output": {"class": "activation", "activation": "tanh", "from": "data:source", "n_out": 9}}}})
    assert "'output/output'" in msg and "n_out=9" in msg


def test_explicit_n_out_contradicts_output_loss_layer():
    msg = _error({"output": {"class": "activation", "activation": "softmax", "loss": "ce", "target": "classes",
                             "n_out": 4}})
    assert "'output'" in msg and "n_out=4" in msg


def test_unknown_option_in_rec_unit():
    msg = _error({"output": {"class": "rec", "from": "data", "unit": {
        "output": {"class": "linear", "activation": "tanh", "from": "data:source", "n_out": 3, "bias_int": 0}}}})
    assert "'output/output'" in msg and "'bias_int'" in msg


def test_valid_options_pass():
    with tf.Graph().as_default():
        net = build_network({"output": {"class": "linear", "activation": "tanh", "n_out": 3, "with_bias": False,
                                        "is_output_layer": True}}, EXTERN)
        assert net.get_layer("output").output.dim == 3


# ---- every option of every layer signature is read or refused ----

def _merged(cls, attr):
    res = {}
    for klass in reversed(cls.__mro__):
        res.update(klass.__dict__.get(attr, {}))
    return res


def test_every_option_is_read_or_refused():
    """
    Each __init__ option of each layer class is used in the class's code (its __init__ or another of its methods,
    e.g. get_out_data_from_opts), or declared as refused (``unsupported_options``: an error unless the default),
    as honoured elsewhere (``options_read_elsewhere``) or as already the behaviour (``options_without_effect``).
    """
    import ast
    import inspect
    import textwrap

    from returnn_lite.layers.base import LayerBase, layer_registry

    def used_names(func):
        node = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
        res = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        res |= {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        uses_locals = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "locals" for n in ast.walk(node))
        return res, uses_locals

    dropped = {}
    checked = 0
    for _, cls in layer_registry.items():
        declared = set(_merged(cls, "unsupported_options")) | set(_merged(cls, "options_read_elsewhere")) | set(
            _merged(cls, "options_without_effect"))
        for klass in cls.__mro__:
            if not (isinstance(klass, type) and issubclass(klass, LayerBase)) or "__init__" not in klass.__dict__:
                continue
            used, uses_locals = used_names(klass.__dict__["__init__"])
            if uses_locals:  # options collected via locals() (e.g. batch_norm): all read
                continue
            for key, value in klass.__dict__.items():
                func = getattr(value, "__func__", value)
                if key != "__init__" and inspect.isfunction(func):
                    used |= used_names(func)[0]
            params = list(inspect.signature(klass.__dict__["__init__"]).parameters.values())[1:]
            for p in params:
                if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in ("name", "network", "output"):
                    continue
                checked += 1
                if p.name not in used and p.name not in declared:
                    dropped.setdefault("%s (%s)" % (cls.layer_class, klass.__name__), []).append(p.name)
    assert checked > 500
    assert not dropped, "options accepted and dropped: %s" % dropped


@pytest.mark.parametrize("opts, option", [
    ({"updater_opts": {"optimizer": {"class": "adam"}}}, "updater_opts"), ({"encapsulate": True}, "encapsulate")])
def test_unsupported_option_refused(opts, option):
    msg = _error({"output": dict({"class": "linear", "activation": None, "n_out": 3}, **opts)})
    assert "'output'" in msg and "option %s=" % option in msg and "not supported" in msg


def _run(net_dict, train_flag, fetch, extern=None, seed=0):
    import numpy as np

    from returnn_lite.testing import random_feed

    with tf.Graph().as_default():
        net = build_network(net_dict, extern or EXTERN, train_flag=train_flag)
        with tf.compat.v1.Session() as session:
            net.initialize_params(session)
            feed = random_feed(net, [3, 2], seed=seed)
            return [np.asarray(x) for x in session.run(fetch(net), feed_dict=feed)], net


def test_param_variational_noise_and_dropout_in_training_only():
    import numpy as np

    for opt in ({"param_variational_noise": 0.5}, {"param_dropout": 0.5}):
        net_dict = {"output": dict({"class": "linear", "activation": None, "n_out": 4}, **opt)}

        def fetch(net):
            out = net.get_layer("output")
            w = out.params["W"]
            return [out.output.placeholder, tf.matmul(tf.reshape(out.sources[0].output.placeholder, [-1, 5]), w) + (
                out.params["b"])]

        (y, y_plain), _ = _run(net_dict, True, fetch)
        assert not np.allclose(y.reshape(-1, 4), y_plain), opt  # training: noisy / dropped-out weights
        (y, y_plain), _ = _run(net_dict, False, fetch)
        assert np.allclose(y.reshape(-1, 4), y_plain, atol=1e-6), opt  # eval: the weights as they are


def test_rec_initializers():
    import numpy as np

    net_dict = {"output": {"class": "rec", "unit": "nativelstm2", "n_out": 3, "bias_init": 5.0,
                           "forward_weights_init": 0.25, "recurrent_weights_init": "zeros"}}
    (b, w, w_re), _ = _run(net_dict, False, lambda net: [net.get_layer("output").params[k]
                                                         for k in ("rec/b", "rec/W", "rec/W_re")])
    assert np.all(b == 5.0) and np.all(w == 0.25) and np.all(w_re == 0.0)


def test_name_scope_option():
    _, net = _run({"output": {"class": "linear", "activation": None, "n_out": 3, "name_scope": "shared"}}, False,
                  lambda net: [])
    assert sorted(p.op.name for p in net.get_params_list()) == ["shared/W", "shared/b"]


def test_control_dependencies_and_debug_print(capfd):
    calls = []

    def deps(layer):
        calls.append(layer.name)
        return [tf.print("checked", layer.name)]

    (y,), _ = _run({"output": {"class": "copy", "control_dependencies_on_output": deps,
                               "debug_print_layer_output": True}}, False,
                   lambda net: [net.get_layer("output").output.placeholder])
    assert calls == ["output"]
    err = capfd.readouterr().err
    assert "checked output" in err and "layer 'output'" in err


def test_copy_extra_deps_are_dependencies():
    with tf.Graph().as_default():
        net = build_network({"a": {"class": "linear", "activation": None, "n_out": 2},
                             "output": {"class": "copy", "extra_deps": ["a"]}}, EXTERN)
        assert net.get_layer("a") in net.get_layer("output").get_dep_layers()
