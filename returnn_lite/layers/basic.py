"""
Basic layers: source, dropout, linear (and its aliases), softmax, activation, combine, eval, compare,
switch, constant, cast, length, scaled_grad.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..activations import get_activation_function
from ..data import Data, Dim
from ..fast_grads import matmul_by_weights
from ..util import NotSpecified, as_list
from .base import ConcatInputLayer, CopyLayer, LayerBase, concat_sources_template, register_layer_class


class OutputWithActivation:
    """The pre-activation output of a layer (e.g. logits), for losses that want it."""

    def __init__(self, data, act_name):
        self.data = data
        self.act_name = act_name


class SourceLayer(LayerBase):
    """Extern data as a layer (``data_key``).

    :param data_key: key of the extern data (default None: the default input, usually "data")
    """

    layer_class = "source"
    default_from = ()

    def __init__(self, data_key=None, **kwargs):
        super().__init__(**kwargs)
        self.output.placeholder = self.network.get_extern_data(data_key or self.network.extern_data.default_input).placeholder

    @classmethod
    def get_out_data_from_opts(cls, name, network, data_key=None, **kwargs):
        return network.get_extern_data(data_key or network.extern_data.default_input).copy(name="%s_output" % name)


class DropoutLayer(CopyLayer):
    """Copy with dropout on the input (options of every concat-input layer)."""

    layer_class = "dropout"

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        d.setdefault("dropout", 0.0)


def _filter_grad(x, threshold, axes):
    """
    Identity; in backprop, as the original's filter_grad: the gradient of a sequence is removed (zero) where its
    max square over ``axes`` is not below the threshold (kept where max(grad**2) < threshold).
    """

    @tf.custom_gradient
    def _identity(v):
        def grad(dy):
            keep = tf.less(tf.reduce_max(tf.square(dy), axis=axes, keepdims=True), threshold)
            return tf.where(tf.logical_and(keep, tf.ones_like(dy, dtype=tf.bool)), dy, tf.zeros_like(dy))

        return tf.identity(v), grad

    return _identity(x)


class LinearLayer(ConcatInputLayer):
    """y = activation(x W + b) on the feature axis; sparse inputs are embedded (row lookup of W).

    :param activation: activation function name (e.g. "relu", "tanh", "softmax") or None for linear output
    :param with_bias: add a bias vector b (default True)
    :param grad_filter: if set (float threshold): in backprop, zero the gradient of sequences whose max square is
        >= it (the original's filter_grad: large gradients are removed)
    :param forward_weights_init: initializer of W (default "glorot_uniform"; name, number or init string)
    :param bias_init: initializer of b (default 0.0)
    :param use_transposed_weights: store W as [n_out, n_in] and transpose it (default False)
    """

    layer_class = "linear"

    def __init__(self, activation=None, with_bias=True, grad_filter=None, forward_weights_init="glorot_uniform",
                 bias_init=0.0, use_transposed_weights=False, **kwargs):
        super().__init__(**kwargs)
        inp = self.input_data
        n_in, n_out = inp.dim, self.output.dim
        w_shape = (n_out, n_in) if use_transposed_weights else (n_in, n_out)
        weights = self.create_param("W", w_shape, forward_weights_init)
        if use_transposed_weights:
            weights = tf.transpose(weights)
        if inp.sparse:
            idx = inp.placeholder
            if idx.dtype not in (tf.int32, tf.int64):  # e.g. uint8 byte inputs
                idx = tf.cast(idx, tf.int32)
            x = tf.gather(tf.convert_to_tensor(weights), idx)  # a read + gather: graph freezing keeps loop frames
            f = self.output.batch_ndim - 1
        else:
            f = inp.feature_dim_axis
            x = inp.placeholder
            # one MatMul (batch dims broadcast) instead of tensordot's ~20 shape ops
            if f == inp.batch_ndim - 1:
                x = matmul_by_weights(x, weights)
            else:
                x = matmul_by_weights(inp.copy_with_feature_last().placeholder, weights)
                perm = list(range(inp.batch_ndim - 1))
                perm.insert(f, inp.batch_ndim - 1)
                x = tf.transpose(x, perm)
        if with_bias:
            b = self.create_param("b", (n_out,), bias_init)
            if f != self.output.batch_ndim - 1:
                x = x + tf.reshape(b, [n_out] + [1] * (self.output.batch_ndim - 1 - f))
            elif x.shape.rank is not None and x.shape.rank >= 2:
                x = tf.nn.bias_add(x, b)  # its gradient is one BiasAddGrad (x + b: a broadcast reduction)
            else:
                x = x + b
        if grad_filter:
            x = _filter_grad(x, grad_filter, [i for i in range(self.output.batch_ndim) if i != self.output.batch_dim_axis])
        self.output_before_activation = OutputWithActivation(self.output.copy(placeholder=x), activation)
        if activation:
            func = get_activation_function(activation)
            f_out = self.output.feature_dim_axis
            if func in (tf.nn.softmax, tf.nn.log_softmax) and f_out is not None and f_out != self.output.batch_ndim - 1:
                x = func(x, axis=f_out)  # as the original: over the feature axis where it is not last
            else:
                x = func(x)
        self.output.placeholder = x

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, out_type=None, **kwargs):
        if (n_out is NotSpecified or n_out is None) and not (out_type and out_type.get("dim")):
            raise ValueError("n_out (or a target with a loss) must be given for the output dim")
        return cls._base_out_data(name, sources, n_out, out_type)


register_layer_class(LinearLayer, "hidden")
register_layer_class(LinearLayer, "forward")


class SoftmaxLayer(LinearLayer):
    """Linear with softmax activation.

    :param activation: the activation (default "softmax"); the linear output stays available for losses
    """

    layer_class = "softmax"

    def __init__(self, activation="softmax", **kwargs):
        super().__init__(activation=activation, **kwargs)


class ActivationLayer(CopyLayer):
    """Elementwise activation of the input (names or expressions of x).

    :param activation: activation name (e.g. "relu", "exp", "log_softmax"), also chained with "+" as in RETURNN
    :param opts: extra keyword options for the activation function (dict or None)
    """

    layer_class = "activation"

    def __init__(self, activation, opts=None, **kwargs):
        super().__init__(**kwargs)
        func = get_activation_function(activation)
        inp = self.input_data
        if activation and "softmax" in activation and inp.feature_dim_axis not in (None, inp.batch_ndim - 1):
            inp = inp.copy_with_feature_last()  # the output has the feature axis last (see the template)
        x = inp.placeholder
        if self.output.dtype != inp.dtype and not inp.dtype.startswith("complex"):
            x = tf.cast(x, self.output.dtype)
        self.output_before_activation = OutputWithActivation(self.output.copy(placeholder=x), activation)
        self.output.placeholder = func(x, **opts) if opts else func(x)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), activation=None, opts=None, **kwargs):
        get_activation_function(activation)  # fail early on unknown names
        # as the original: the input's template (a sparse input stays sparse), except for these:
        out = super().get_out_data_from_opts(name=name, sources=sources, **kwargs)
        if activation in ("abs", "angle") and out.dtype.startswith("complex"):  # complex -> real magnitude/phase
            out.dtype = "float64" if out.dtype == "complex128" else "float32"
        if activation and "softmax" in activation and out.feature_dim_axis not in (None, out.batch_ndim - 1):
            out = out.copy_with_feature_last()  # softmax over the feature axis, moved last
        return out


def _sources_broadcast(name, sources, out_type=None, tf_broadcast=True, allow_broadcast_all=NotSpecified):
    """Common template of all sources (broadcasting), and their placeholders made compatible to it."""
    outputs = [s.output for s in sources]
    if allow_broadcast_all is True or (allow_broadcast_all is NotSpecified and _only_features_differ(outputs)):
        common = _common_data_by_dims(outputs, "%s_output" % name)
        return common, [_compatible_by_dims(o, common) for o in outputs]
    common = Data.get_common_data(outputs, name="%s_output" % name)
    if allow_broadcast_all is False and common is not None and len(outputs) > 1 and all(
            o.batch_ndim < common.batch_ndim for o in outputs):
        raise ValueError("layer %r: no source has all dims of the output %s (sources %s): this needs "
                         "allow_broadcast_all_sources=True" % (name, common.short_repr(),
                                                               ", ".join(o.short_repr() for o in outputs)))
    if common is None:  # no sources (e.g. an eval without sources)
        return common, []
    n = common.batch_ndim
    if tf_broadcast and any(o.batch_ndim == n for o in outputs):
        # one source has the full shape: the others broadcast by TF rules where their axes are the trailing axes
        # of the common layout in order (no expand_dims needed)
        return common, [o.placeholder if o.batch_ndim == 0 or list(o.dims) == list(common.dims[n - o.batch_ndim:])
                        else o.copy_compatible_to(common).placeholder for o in outputs]
    return common, [o.copy_compatible_to(common).placeholder for o in outputs]


def _only_features_differ(outputs):
    """
    Sources whose feature dims differ in size (e.g. a linear with n_out 3 and data of dim 5) but whose other dims
    are all dims of the largest source: the original broadcasts them against each other (the output has both
    feature dims, [B,T,3,5]); any other mismatch stays an error.
    """
    if len(outputs) < 2 or any(o.feature_dim_axis is None or o.sparse for o in outputs):
        return False
    sizes = {o.dims[o.feature_dim_axis].dimension for o in outputs}
    if None in sizes or 1 in sizes or len(sizes) < 2:  # a size-1 feature broadcasts along the other's
        return False
    base = max(outputs, key=lambda o: o.batch_ndim)
    others = [d for o in outputs for i, d in enumerate(o.dims) if i != o.feature_dim_axis]
    return all(d in base.dims for d in others)


def _common_data_by_dims(outputs, name):
    """
    allow_broadcast_all_sources=True: the output has the union of the sources' dims, matched by Dim only (no
    feature-axis or size matching), in the order of the source with most dims, then the dims only others have.
    """
    base = max(outputs, key=lambda o: o.batch_ndim)
    common = base.copy_template(name=name)
    for o in outputs:
        for d in o.dims:
            if d not in common.dims:
                common = common.copy_add_dim_by_tag(d, unbroadcast=True, axis=common.batch_ndim)
    common.placeholder = None
    return common


def _compatible_by_dims(data, common):
    """data's placeholder transposed to common's dim order, with size-1 axes where data lacks common's dims."""
    x = data.placeholder
    idx = [list(common.dims).index(d) for d in data.dims]
    order = sorted(range(len(idx)), key=lambda i: idx[i])
    if order != list(range(len(idx))):
        x = tf.transpose(x, order)
    present = set(idx)
    for j in range(common.batch_ndim):
        if j not in present:
            x = tf.expand_dims(x, j)
    return x


_COMBINE_KINDS = {
    "add": lambda xs: _fold(tf.add, xs),
    "sub": lambda xs: _fold(tf.subtract, xs),
    "mul": lambda xs: _fold(tf.multiply, xs),
    "truediv": lambda xs: _fold(tf.truediv, xs),
    "floordiv": lambda xs: _fold(tf.math.floordiv, xs),
    "mod": lambda xs: _fold(tf.math.floormod, xs),
    "pow": lambda xs: _fold(tf.pow, xs),
    "maximum": lambda xs: _fold(tf.maximum, xs),
    "minimum": lambda xs: _fold(tf.minimum, xs),
    "squared_difference": lambda xs: _fold(tf.math.squared_difference, xs),
    "logical_and": lambda xs: _fold(tf.logical_and, xs),
    "logical_or": lambda xs: _fold(tf.logical_or, xs),
    "average": lambda xs: _fold(tf.add, xs) / len(xs),
}


def _combine_tf_func(kind):
    """Other kinds: any binary function of tf.math or tf by that name (as the original)."""
    kind_ = {"sub": "subtract", "mul": "multiply"}.get(kind, kind)
    func = getattr(tf.math, kind_, None) or getattr(tf, kind_, None)
    if not callable(func) or isinstance(func, type):
        raise ValueError("unknown combine kind %r (not eval nor a function of tf.math or tf); e.g. %s" % (
            kind, sorted(_COMBINE_KINDS)))
    return func


def _fold(op, xs):
    res = xs[0]
    for x in xs[1:]:
        res = op(res, x)
    return res


class CombineLayer(LayerBase):
    """Elementwise combination of the sources with broadcasting (add, sub, mul, ..., eval).

    :param kind: "add", "sub", "mul", "truediv", "maximum", "minimum", "logical_and", ... or "eval"
    :param sources: the input layers (from "from"), broadcast against each other by their dim tags
    :param activation: activation applied to the combined result (default None)
    :param with_bias: add a trainable bias on the feature axis after combining (default False)
    :param eval: for kind="eval": a Python expression string (source(i), x) or a callable
    :param eval_locals: extra local names (dict) for the eval expression
    :param eval_for_output_loss: kind="eval": also apply the eval to the sources' ``output_loss`` (e.g. of fast_bw
        layers), giving this layer's ``output_loss`` (for a ``via_layer`` loss with this layer as align_layer)
    :param allow_broadcast_all_sources: True: the sources broadcast by their dims only (the output has the union of
        their dims; no feature-axis / size matching), also where no source has all dims; False: refuse that no source
        has all dims of the output; not given: broadcast as the classic configs (feature axes match)
    """

    layer_class = "combine"

    def __init__(self, kind, sources, activation=None, with_bias=False, eval=None, eval_locals=None,
                 eval_for_output_loss=False, allow_broadcast_all_sources=NotSpecified, **kwargs):
        super().__init__(sources=sources, **kwargs)
        if kind == "eval" and callable(self.out_type) and not isinstance(self.out_type, dict):
            xs = [s.output.placeholder for s in self.sources]  # (out_type a function: the sources as they are)
        else:
            _, xs = _sources_broadcast(self.name, self.sources, tf_broadcast=kind != "eval",
                                       allow_broadcast_all=allow_broadcast_all_sources)
        if kind == "eval":
            x = _run_eval(eval, self, xs, eval_locals)
        else:
            if len({x.dtype.base_dtype for x in xs}) > 1:  # mixed int/float sources: in the template's dtype
                xs = [tf.cast(x, self.output.dtype) for x in xs]
            x = _COMBINE_KINDS[kind](xs) if kind in _COMBINE_KINDS else _fold(_combine_tf_func(kind), xs)
        if with_bias:
            b = self.create_param("b", (self.output.dim,), 0.0)
            f = self.output.feature_dim_axis
            x = x + (b if f == self.output.batch_ndim - 1 else tf.reshape(
                b, [-1] + [1] * (self.output.batch_ndim - 1 - f)))
        if activation:
            x = get_activation_function(activation)(x)
        if x.dtype.base_dtype.name != self.output.dtype:
            x = tf.cast(x, self.output.dtype)
        self.output.placeholder = x
        if eval_for_output_loss:
            losses = [getattr(s, "output_loss", None) for s in self.sources]
            if kind != "eval" or any(v is None for v in losses):
                raise ValueError("eval_for_output_loss needs kind 'eval' and sources with an output_loss (e.g. "
                                 "fast_bw); these have none: %s" % [s.name for s, v in zip(self.sources, losses)
                                                                    if v is None])
            self.output_loss = _run_eval(eval, self, losses, eval_locals)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), kind=None, out_type=None, n_out=NotSpecified,
                               allow_broadcast_all_sources=NotSpecified, **kwargs):
        if callable(out_type) and not isinstance(out_type, dict):
            # a function making the template (as the original calls it; the sources need not be combinable)
            kwargs = dict(kwargs, **(kwargs.get("eval_locals") or {}))
            kwargs.pop("eval_locals", None)
            out = out_type(name=name, sources=sources, n_out=n_out, **kwargs)
            if not isinstance(out, Data):
                raise TypeError("layer %r: out_type function %r must return a Data, got %r" % (name, out_type, out))
            return out
        if not sources:
            if kind == "eval" and out_type and any(k in out_type for k in ("shape", "dims", "dim_tags")):
                return _apply_out_type(None, out_type, name)  # e.g. a constant condition: no sources needed
            raise ValueError("needs at least one source (an eval layer without sources needs an out_type "
                             "with the shape, e.g. {'shape': (), 'batch_dim_axis': None, 'dtype': 'bool'})")
        outputs = [s.output for s in sources]
        if allow_broadcast_all_sources is True or (
                allow_broadcast_all_sources is NotSpecified and _only_features_differ(outputs)):
            common = _common_data_by_dims(outputs, "%s_output" % name)
        else:
            common = Data.get_common_data(outputs, name="%s_output" % name)
        if any(s.output.dtype != sources[0].output.dtype for s in sources) and kind != "eval":
            dtypes = sorted({s.output.dtype for s in sources})
            common.dtype = "float32" if "float32" in dtypes else dtypes[0]
        if kind in ("truediv",) and not tf.as_dtype(common.dtype).is_floating and kind != "eval":
            common.dtype = "float64" if common.dtype in ("int32", "int64") else common.dtype
        if out_type:
            return _apply_out_type(common, out_type, name)
        if n_out is not NotSpecified and n_out is not None and common.dim != n_out and not common.sparse:
            raise ValueError("n_out=%r does not match the combined dim %r" % (n_out, common.dim))
        return common


def _apply_out_type(template, out_type, name):
    """out_type dict (dim, sparse, dtype, shape, ...) applied to a derived template."""
    out_type = dict(out_type)
    if callable(out_type.get("__call__")):
        return out_type["__call__"](template)
    if any(k in out_type for k in ("shape", "dims", "dim_tags")):
        out_type.setdefault("name", "%s_output" % name)
        out = Data(**out_type)
        if template is not None:
            # dynamic axes given as None take the derived template's tags (their sequence lengths), in order
            own_dyn = [i for i, d in enumerate(out.dims) if d.is_dynamic()]
            tpl_dyn = [d for d in template.dims if d.is_dynamic()]
            if own_dyn and len(own_dyn) == len(tpl_dyn):
                dims = list(out.dims)
                for i, d in zip(own_dyn, tpl_dyn):
                    dims[i] = d
                out = out.copy_template_new_dim_tags(dims, keep_special_axes=True)
        return out
    out = template.copy_template(name="%s_output" % name)
    if "dtype" in out_type:
        out.dtype = tf.as_dtype(out_type["dtype"]).name
    sparse = out_type.get("sparse", out.sparse)
    dim = out_type.get("dim", out.dim)
    if sparse and not out.sparse:
        out.sparse_dim = Dim(dim, kind=Dim.Types.Feature, description="%s:sparse" % name)
    elif not sparse and out.sparse:
        out.sparse_dim = None
    elif sparse and dim != out.dim:
        out.sparse_dim = Dim(dim, kind=Dim.Types.Feature, description="%s:sparse" % name)
    elif not sparse and dim != out.dim and dim is not None and out.feature_dim_axis is not None:
        out = out.copy_template_replace_dim_tag(
            out.feature_dim_axis, Dim(dim, kind=Dim.Types.Feature, description="%s:feature" % name))
    if "time_dim_axis" in out_type:
        out.time_dim_axis = out_type["time_dim_axis"]
    if "feature_dim_axis" in out_type:
        out.feature_dim_axis = out_type["feature_dim_axis"]
    return out


def _run_eval(code, layer, xs, eval_locals=None):
    """Evaluate an eval string with source(i), self, tf, np in scope."""
    used = set()

    def source(i, auto_convert=True, enforce_batch_major=False, as_data=False, as_layer=False):
        if not (0 <= i < len(xs)):
            raise IndexError("eval layer %r: source(%i) but there are %i sources" % (layer.name, i, len(xs)))
        used.add(i)
        if as_layer:  # the source layer itself, no conversion (as the original)
            if as_data:
                raise ValueError("eval layer %r: source(%i, as_layer=True) excludes as_data" % (layer.name, i))
            return layer.sources[i]
        if auto_convert and not enforce_batch_major and not as_data:
            return xs[i]
        out = layer.sources[i].output
        if auto_convert:
            out = out.copy_compatible_to(layer.output, check_sparse=False, check_dtype=False)
        if enforce_batch_major:
            out = out.copy_as_batch_major()
        return out if as_data else out.placeholder

    if callable(code):  # as the original: called with the eval namespace as keyword args (tf, the TF util helpers,
        from ..compat.eval_namespace import get_eval_namespace  # source, self, eval_locals)

        ns = get_eval_namespace()
        ns.pop("__builtins__", None)
        ns.update({"source": source, "self": layer})
        ns.update(eval_locals or {})
        res = code(**_kwargs_for(code, ns))
    else:
        res = _eval_str(code, layer, source, eval_locals)
    if used != set(range(len(xs))):  # as the original: every source must be used
        raise ValueError("eval layer %r: sources %s are not used by eval %r" % (
            layer.name, sorted(set(range(len(xs))) - used), code))
    return res


def _kwargs_for(func, namespace):
    """All names for a function taking **kwargs; else only those it names (a lambda source, self, k: ...)."""
    import inspect

    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):  # e.g. a builtin: all names
        return namespace
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return namespace
    return {k: v for k, v in namespace.items() if k in params}


def _eval_str(code, layer, source, eval_locals):
    from ..compat.eval_namespace import get_eval_namespace

    ns = get_eval_namespace()  # the original's TF util helpers, tf with TF1 names, np (see returnn_lite.tf_util)
    ns.update({"source": source, "self": layer, "layer": layer})
    ns.update(eval_locals or {})
    try:
        compiled = compile(code, "<eval layer %r>" % layer.name, "eval")
    except SyntaxError as exc:
        raise SyntaxError("eval %r: %s" % (code, exc)) from exc
    return eval(compiled, ns)  # noqa: S307 (user config code, as in the original)


class EvalLayer(CombineLayer):
    """combine with kind "eval": ``eval`` is a Python expression using source(i).

    :param eval: Python expression string using source(i) (or a callable), e.g. "source(0) * 2"
    """

    layer_class = "eval"

    def __init__(self, eval, **kwargs):
        super().__init__(kind="eval", eval=eval, **kwargs)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), eval=None, out_type=None, **kwargs):
        if isinstance(eval, str):
            try:
                compile(eval, "<eval layer %r>" % name, "eval")
            except SyntaxError as exc:
                raise SyntaxError("eval %r of layer %r: %s" % (eval, name, exc)) from exc
        out = super().get_out_data_from_opts(name=name, sources=sources, kind="eval", out_type=out_type, **kwargs)
        return out


_COMPARE_KINDS = {
    "equal": tf.equal, "not_equal": tf.not_equal, "less": tf.less, "less_equal": tf.less_equal,
    "greater": tf.greater, "greater_equal": tf.greater_equal,
}


class CompareLayer(LayerBase):
    """Elementwise comparison of the sources (or of one source against ``value``); bool output.

    :param kind: tf comparison: "equal" (default), "not_equal", "less", "less_equal", "greater", "greater_equal"
    :param value: compare the (last) source against this constant instead of a second source (default None)
    :param allow_broadcast_all_sources: as for ``combine``: True: broadcast by dims only; False: refuse that no
        source has all dims of the output
    """

    layer_class = "compare"

    def __init__(self, kind="equal", value=None, allow_broadcast_all_sources=NotSpecified, **kwargs):
        super().__init__(**kwargs)
        op = _COMPARE_KINDS.get(kind) or getattr(tf, kind, None)  # as the original: getattr(tf, kind)
        if not callable(op):
            raise ValueError("unknown compare kind %r; known: %s" % (kind, sorted(_COMPARE_KINDS)))
        if value is None and len(self.sources) < 2:
            raise ValueError("compare layer %r: needs two sources or a value" % self.name)
        _, xs = _sources_broadcast(self.name, self.sources, allow_broadcast_all=allow_broadcast_all_sources)
        if value is not None:
            xs.append(tf.constant(value, dtype=xs[-1].dtype))
        # a chain: x0 op x1 and x1 op x2 and ... and x_last op value
        res = None
        for a, b in zip(xs[:-1], xs[1:]):
            r = op(a, b)
            res = r if res is None else tf.logical_and(res, r)
        self.output.placeholder = res

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, allow_broadcast_all_sources=NotSpecified,
                               **kwargs):
        if allow_broadcast_all_sources is True:
            common = _common_data_by_dims([s.output for s in sources], "%s_output" % name)
        else:
            common = Data.get_common_data([s.output for s in sources], name="%s_output" % name)
        common.sparse_dim = None
        common.dtype = "bool"
        return common


class SwitchLayer(LayerBase):
    """where(condition, true_from, false_from); true/false may be layers or constants.

    :param condition: bool layer (or constant bool) selecting true_from or false_from elementwise
    :param true_from: layer or constant used where condition is True
    :param false_from: layer or constant used where condition is False
    """

    layer_class = "switch"
    default_from = ()
    layer_options = ("condition", "true_from", "false_from")  # each a layer name, or a constant

    def __init__(self, condition, true_from, false_from, **kwargs):
        super().__init__(**kwargs)
        out = self.output

        def value(v):
            if isinstance(v, LayerBase):
                return v.output.copy_compatible_to(out).placeholder
            return tf.constant(v, dtype=out.dtype)

        if isinstance(condition, LayerBase):
            cond = condition.output.copy_compatible_to(out).placeholder
            # tf.where broadcasts: every output axis is in one of condition, true_from, false_from (common data)
            y = tf.where(cond, value(true_from), value(false_from))
            self.output.placeholder = y
        else:  # static condition: just the chosen source
            chosen = true_from if condition else false_from
            if isinstance(chosen, LayerBase):
                self.output.placeholder = chosen.output.copy_compatible_to(out).placeholder
            else:
                self.output.placeholder = tf.constant(chosen, dtype=out.dtype)

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        if callable(d.get("condition")):  # (network=..., get_layer=..., **opts) -> bool, decided statically
            opts = dict(d)
            opts.update(network=network, get_layer=get_layer)
            d["condition"] = bool(d["condition"](**opts))
        if isinstance(d.get("condition"), bool):  # static: only the chosen source is resolved (and a dependency)
            d["false_from" if d["condition"] else "true_from"] = None
        super().transform_config_dict(d, network=network, get_layer=get_layer)

    @staticmethod
    def _source_template(x, name):
        if isinstance(x, LayerBase):
            return x.output.copy_template(name=name)
        return _template_from_constant(x, name)

    @classmethod
    def get_out_data_from_opts(cls, name, condition, true_from, false_from, **kwargs):
        if isinstance(condition, bool):
            return cls._source_template(true_from if condition else false_from, "%s_output" % name)
        true_data = cls._source_template(true_from, "%s_true" % name)
        false_data = cls._source_template(false_from, "%s_false" % name)
        out = Data.get_common_data([true_data, false_data, condition.output], name="%s_output" % name)
        out.dtype = true_data.dtype  # the true branch defines dtype and sparse dim, as the original
        out.sparse_dim = true_data.sparse_dim
        return out


def _template_from_constant(value, name):
    """Template of a Python scalar constant (bool, int -> int32, float -> float32)."""
    if isinstance(value, bool):
        dtype = "bool"
    elif isinstance(value, int):
        dtype = "int32"
    elif isinstance(value, float):
        dtype = "float32"
    elif isinstance(value, np.ndarray) and value.ndim == 0:
        dtype = value.dtype.name
    else:
        raise TypeError("%s: expected a layer or a scalar constant, got %r" % (name, value))
    return Data(name=name, dims=[], dtype=dtype)


class ConstantLayer(LayerBase):
    """A constant (scalar or array), optionally with a batch axis.

    :param value: the constant: scalar or (nested) list/array (default 0.0)
    :param dtype: output dtype (default None: from value, float32 for floats and int32 for ints)
    :param with_batch_dim: tile the constant over a new batch axis in front (default False)
    :param shape: output shape as ints or Dims; a scalar value is filled into it (default None: the value's shape)
    :param sparse_dim: the output is sparse with this Dim (int values)
    :param feature_dim: the Dim of ``shape`` that is the feature axis (default: the last static one)

    ``shape`` may contain dynamic Dims (a scalar value is filled to their padded lengths): their sequence lengths must
    be known when the layer is constructed; ``from`` (not read) names layers to construct first, e.g. one with such a
    Dim.
    """

    layer_class = "constant"
    default_from = ()

    def __init__(self, value=0.0, dtype=None, with_batch_dim=False, shape=None, sparse_dim=None, feature_dim=None,
                 **kwargs):
        super().__init__(**kwargs)
        out = self.output
        x = tf.constant(value, dtype=out.dtype)
        if with_batch_dim and x.shape.rank != 0:
            x = tf.tile(tf.expand_dims(x, 0), [self.network.get_data_batch_dim()] + [1] * x.shape.rank)
        elif with_batch_dim or (shape is not None and x.shape.rank == 0):
            x = tf.fill([self.network.get_data_batch_dim() if d.is_batch_dim() else d.get_dim_value() for d in out.dims],
                        x)
        self.output.placeholder = x

    @classmethod
    def get_out_data_from_opts(cls, name, value=0.0, dtype=None, with_batch_dim=False, shape=None, sparse_dim=None,
                               feature_dim=None, **kwargs):
        arr = np.asarray(value)
        if dtype is None:
            dtype = {"f": "float32", "i": "int32", "b": "bool", "u": "int32"}.get(arr.dtype.kind, arr.dtype.name)
        dims = []
        if shape is not None:
            for i, s in enumerate(shape):
                dims.append(s if isinstance(s, Dim) else Dim(s, kind=Dim.Types.Spatial,
                                                              description="%s:static:%i" % (name, i)))
        else:
            for i, s in enumerate(arr.shape):
                dims.append(Dim(s, kind=Dim.Types.Feature if i == arr.ndim - 1 else Dim.Types.Spatial,
                                description="%s:static:%i" % (name, i)))
        if with_batch_dim:
            from ..data import batch_dim

            dims.insert(0, batch_dim)
        if feature_dim is not None and feature_dim not in dims:
            raise ValueError("constant layer %r: option feature_dim=%s is not in the shape %s" % (
                name, feature_dim.short_repr() if isinstance(feature_dim, Dim) else feature_dim, dims))
        if sparse_dim is not None and dtype.startswith("float"):
            raise ValueError("constant layer %r: option sparse_dim needs an int value or dtype, got %s" % (name, dtype))
        out = Data(name="%s_output" % name, dims=dims, dtype=dtype, sparse_dim=sparse_dim)
        if feature_dim is not None:
            out.feature_dim_axis = dims.index(feature_dim)
        return out


class CastLayer(CopyLayer):
    """Cast to dtype (a sparse int input becomes dense when cast to float).

    :param dtype: the target dtype, e.g. "float32" (a sparse input becomes dense when cast to non-int)
    :param output: the output template (usually derived, as for copy)
    """

    layer_class = "cast"

    def __init__(self, dtype, output=None, **kwargs):
        super().__init__(output=output, **kwargs)
        self.output.placeholder = tf.cast(self.input_data.placeholder, dtype)

    @classmethod
    def get_out_data_from_opts(cls, name, dtype, sources=(), **kwargs):
        out = super().get_out_data_from_opts(name=name, sources=sources, **kwargs)
        out.dtype = tf.as_dtype(dtype).name
        if out.sparse and not out.dtype.startswith("int"):
            out.sparse_dim = None
        return out


class LengthLayer(LayerBase):
    """Sequence lengths of an axis ([B]); axis "B" gives the batch size (scalar).

    :param axis: axis whose sequence lengths are returned (default "T"); "B" gives the batch size
    :param add_time_axis: append a time axis of size 1 ([B,1]; needs a dynamic axis) (default False)
    :param dtype: dtype of a batch-size/static-size output (default "int32"; dynamic lengths stay int32)
    :param sparse: mark a batch-size/static-size output as sparse (default False)
    """

    layer_class = "length"

    def __init__(self, axis="T", add_time_axis=False, dtype="int32", sparse=False, **kwargs):
        super().__init__(**kwargs)
        data = self.sources[0].output
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        if a == data.batch_dim_axis:
            x = data.get_batch_dim()
        elif tag.dyn_size is None:  # static: a scalar
            x = tf.constant(tag.dimension, dtype=dtype)
        else:
            x = tag.dyn_size
        if add_time_axis:
            x = tf.expand_dims(x, 1)
        self.output.placeholder = tf.cast(x, self.output.dtype) if x.dtype.base_dtype.name != self.output.dtype else x

    @classmethod
    def get_out_data_from_opts(cls, name, sources, axis="T", add_time_axis=False, dtype="int32", sparse=False,
                               **kwargs):
        from ..data import batch_dim

        data = sources[0].output
        a = data.get_axis_from_description(axis)
        tag = data.dims[a]
        sparse_dim = Dim(None, kind=Dim.Types.Feature, description="%s:length-sparse" % name) if sparse else None
        if add_time_axis:
            if tag.dyn_size is None or a == data.batch_dim_axis:
                raise ValueError("length %r: add_time_axis needs a dynamic axis with [B] lengths, got axis %r of %s" % (
                    name, axis, data.short_repr()))
            out = Data(name="%s_output" % name, dims=[batch_dim, Dim(1, kind=Dim.Types.Spatial, description="%s:time1" % name)],
                       dtype=dtype, sparse_dim=sparse_dim)
            out.time_dim_axis = 1
            return out
        if a == data.batch_dim_axis or tag.dimension is not None:  # batch size or static dim: a scalar
            return Data(name="%s_output" % name, dims=[], dtype=dtype, sparse_dim=sparse_dim)
        # dynamic axis: the sequence lengths as they are ([B], int32; dtype and sparse are ignored, as the original)
        return Data(name="%s_output" % name, dims=[batch_dim], dtype="int32")


@tf.custom_gradient
def _scale_gradient(x, scale):
    def grad(dy):
        return dy * tf.cast(scale, dy.dtype), None

    return tf.identity(x), grad


class ScaledGradientLayer(CopyLayer):
    """Identity forward; gradient scaled by ``scale`` (0 stops it, -1 reverses it).

    :param scale: gradient factor: 0 stops the gradient, -1 reverses it (gradient reversal), 1 is identity
    :param shift: refused unless None (not supported)
    :param scale_shift_by_sum_over_axis: refused unless None (not supported)
    :param clip_max_axis: refused unless None (not supported)
    """

    layer_class = "scaled_grad"

    def __init__(self, scale, shift=None, scale_shift_by_sum_over_axis=None, clip_max_axis=None, **kwargs):
        super().__init__(**kwargs)
        for opt, v in (("shift", shift), ("scale_shift_by_sum_over_axis", scale_shift_by_sum_over_axis),
                       ("clip_max_axis", clip_max_axis)):
            if v is not None:
                raise NotImplementedError("scaled_grad layer %r: option %s=%r is not supported" % (self.name, opt, v))
        x = self.output.placeholder
        if scale == 0:
            x = tf.stop_gradient(x)
        elif scale != 1:
            x = _scale_gradient(x, tf.constant(scale, dtype=x.dtype))
        self.output.placeholder = x


__all__ = [
    "SourceLayer", "DropoutLayer", "LinearLayer", "SoftmaxLayer", "ActivationLayer", "CombineLayer", "EvalLayer",
    "CompareLayer", "SwitchLayer", "ConstantLayer", "CastLayer", "LengthLayer", "ScaledGradientLayer",
    "OutputWithActivation", "concat_sources_template", "as_list",
]
