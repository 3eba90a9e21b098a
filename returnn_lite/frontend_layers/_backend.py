"""
ReturnnLayersBackend: the rf backend whose raw tensors are layers (seed 000).

Every method emits one layer dict into the net dict under construction (:class:`NetDictBuilder`) and returns a
Tensor whose raw tensor is that :class:`Layer`. Params are ``variable`` layers named by the rf param name
(``lstm.ff_weight`` -> layer ``lstm/ff_weight`` with the TF variable ``lstm/ff_weight/param``); the other ops are
``frontend_op`` layers (:mod:`._layer`) whose output template is the frontend's.
"""

from __future__ import annotations

from ..data import Data, Dim, batch_dim
from ..frontend._backend import Backend
from ..frontend._utils import FrontendError, broadcast_dims, call_site, concat_out_dims, dims_str, is_tensor
from ._emit import _make, _operands, _raw_name
from ._net import Layer, get_current_builder


class ReturnnLayersBackend(Backend):
    """rf backend whose raw tensor is a :class:`Layer` of the net dict under construction."""

    name = "returnn_layers_tf"
    RawTensorType = Layer
    is_tensorflow = True
    is_backend_raw_tensor_dim_tag_independent = False

    @staticmethod
    def executing_eagerly():
        return False

    @staticmethod
    def module_name_scope(module):
        return get_current_builder().module_scope(module)

    @staticmethod
    def set_random_seed(seed):
        ReturnnLayersBackend._random_seed = seed

    # ---- creation ----
    @staticmethod
    def convert_to_tensor(value, *, dims, dtype, sparse_dim=None, name=None, device=None):
        if hasattr(value, "tolist"):
            value = value.tolist()
        return _make("constant", [], dims, dtype, sparse_dim=sparse_dim, opts={"value": value}, name=name)

    @staticmethod
    def full(dims, fill_value, *, dtype, sparse_dim=None, feature_dim=None, device=None):
        if is_tensor(fill_value):
            return _make("full", [fill_value], dims, dtype, sparse_dim=sparse_dim, opts={"value": None})
        return _make("full", [], dims, dtype, sparse_dim=sparse_dim, opts={"value": fill_value})

    @staticmethod
    def range_over_dim(dim, *, dtype="int32", device=None):
        return _make("range_over_dim", [], [dim], dtype, sparse_dim=dim if dtype.startswith("int") else None,
                     opts={"dim": dim}, name="range")

    @staticmethod
    def dim_value_tensor(dim):
        if dim.dimension is not None:
            return ReturnnLayersBackend.convert_to_tensor(dim.dimension, dims=[], dtype="int32")
        return _make("dim_value", [], [], "int32", opts={"dim": dim}, name="dim_value")

    @staticmethod
    def dim_size_tensor(dim):
        if dim.dimension is not None:
            return ReturnnLayersBackend.convert_to_tensor(dim.dimension, dims=[], dtype="int32")
        if dim.is_batch_dim():
            return ReturnnLayersBackend.dim_value_tensor(dim)
        return _make("dim_size", [], [batch_dim], "int32", opts={"dim": dim}, name="dim_size")

    # ---- params ----
    @staticmethod
    def create_parameter_raw(param, *, name):
        builder = get_current_builder()
        d = {"class": "variable", "shape": list(param.dims), "dtype": param.dtype, "param_name": "param",
             "init": ReturnnLayersBackend._init_value(param.initial), "is_output_layer": True}
        if not param.trainable:
            d["trainable"] = False
        layer = builder.add_layer(name, d, absolute=True)
        param.placeholder = layer
        return layer

    @staticmethod
    def _init_value(initial):
        from ..frontend.module import ParamInit

        if initial is None:
            return 0.0
        if isinstance(initial, ParamInit):
            return initial.get_tf_init()
        if isinstance(initial, (int, float)):
            return float(initial)
        if hasattr(initial, "tolist"):
            return initial
        raise FrontendError("rf.Parameter.initial: unsupported value %r" % (initial,))

    @staticmethod
    def set_parameter_initial_value(param, value):
        param.placeholder.layer_dict["init"] = ReturnnLayersBackend._init_value(value)

    @staticmethod
    def set_parameter_trainable(param, trainable):
        param.placeholder.layer_dict["trainable"] = trainable

    # ---- elementwise ----
    @classmethod
    def combine(cls, a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
        dims = broadcast_dims("combine", [a, b], bool(allow_broadcast_all_sources), dim_order)
        t = a if is_tensor(a) else b
        dtype = t.dtype
        sources, (sa, sb) = _operands([a, b])
        sparse = t.sparse_dim if dtype.startswith("int") else None
        return _make("combine", sources, dims, dtype, sparse_dim=sparse,
                     opts={"kind": kind, "a": sa, "b": sb, "dtype": dtype}, name=kind)

    @classmethod
    def compare(cls, a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
        dims = broadcast_dims("compare", [a, b], bool(allow_broadcast_all_sources), dim_order)
        t = a if is_tensor(a) else b
        sources, (sa, sb) = _operands([a, b])
        return _make("combine", sources, dims, "bool", opts={"kind": kind, "a": sa, "b": sb, "dtype": t.dtype},
                     name=kind)

    @staticmethod
    def activation(tensor, func):
        return _make("activation", [tensor], tensor.dims, tensor.dtype if func != "logical_not" else "bool",
                     sparse_dim=tensor.sparse_dim, opts={"func": func}, name=func)

    @staticmethod
    def cast(tensor, dtype):
        return _make("cast", [tensor], tensor.dims, dtype,
                     sparse_dim=tensor.sparse_dim if dtype.startswith("int") else None, opts={"dtype": dtype})

    @staticmethod
    def copy(tensor):
        return _make("copy", [tensor], tensor.dims, tensor.dtype, sparse_dim=tensor.sparse_dim)

    @staticmethod
    def transpose(tensor, dims):
        return _make("transpose", [tensor], dims, tensor.dtype, sparse_dim=tensor.sparse_dim)

    @staticmethod
    def stop_gradient(tensor):
        return _make("stop_gradient", [tensor], tensor.dims, tensor.dtype, sparse_dim=tensor.sparse_dim)

    @staticmethod
    def where(cond, true_, false_, *, allow_broadcast_all_sources=False):
        dims = broadcast_dims("where", [cond, true_, false_], bool(allow_broadcast_all_sources))
        t = true_ if is_tensor(true_) else false_ if is_tensor(false_) else None
        dtype = t.dtype if t is not None else ("float32" if isinstance(true_, float) else "int32")
        sources, (sc, st, sf) = _operands([cond, true_, false_])
        return _make("where", sources, dims, dtype, opts={"cond": sc, "true_": st, "false_": sf})

    @staticmethod
    def clip_by_value(x, clip_value_min, clip_value_max, *, allow_broadcast_all_sources=False):
        dims = broadcast_dims("clip_by_value", [x, clip_value_min, clip_value_max], bool(allow_broadcast_all_sources))
        sources, (sx, slo, shi) = _operands([x, clip_value_min, clip_value_max])
        return _make("clip_by_value", sources, dims, x.dtype, opts={"x": sx, "lo": slo, "hi": shi})

    # ---- reductions, softmax, matmul ----
    @staticmethod
    def reduce(source, *, mode, axis, use_mask=True):
        axes = [axis] if isinstance(axis, Dim) else list(axis)
        rest = [d for d in source.dims if d not in axes]
        if mode in ("argmax", "argmin"):
            dtype, sparse = "int32", axes[0]
        elif mode in ("any", "all"):
            dtype, sparse = "bool", None
        else:
            dtype, sparse = source.dtype, None
        return _make("reduce", [source], rest, dtype, sparse_dim=sparse,
                     opts={"mode": mode, "axes": axes, "use_mask": use_mask}, name="reduce_" + mode)

    @staticmethod
    def softmax(tensor, *, axis, use_mask=True):
        return _make("softmax", [tensor], tensor.dims, tensor.dtype,
                     opts={"axis": axis, "use_mask": use_mask, "log": False})

    @staticmethod
    def log_softmax(tensor, *, axis, use_mask=True):
        return _make("softmax", [tensor], tensor.dims, tensor.dtype,
                     opts={"axis": axis, "use_mask": use_mask, "log": True}, name="log_softmax")

    @staticmethod
    def matmul(a, b, *, reduce, use_mask=True):
        reduce = [reduce] if isinstance(reduce, Dim) else list(reduce)
        dims = [d for d in a.dims if d not in reduce] + [d for d in b.dims if d not in reduce and d not in a.dims]
        return _make("matmul", [a, b], dims, a.dtype, opts={"reduce": reduce, "use_mask": use_mask}, name="dot")

    @staticmethod
    def linear(source, *, weight, bias, in_dim):
        """Fused x . weight + bias (one layer)."""
        dims = [d for d in source.dims if d != in_dim] + [d for d in weight.dims if d != in_dim]
        return _make("matmul", [source, weight] + ([bias] if bias is not None else []), dims, source.dtype,
                     opts={"reduce": [in_dim], "use_mask": False}, name="linear")

    @staticmethod
    def layer_norm(x, *, in_dim, scale, bias, eps):
        """Fused layer norm over in_dim (one layer)."""
        return _make("layer_norm", [x, scale] + ([bias] if bias is not None else []), x.dims, x.dtype,
                     opts={"in_dim": in_dim, "eps": eps})

    # ---- shapes ----
    @staticmethod
    def concat(*sources, allow_broadcast=False, out_dim):
        dims = concat_out_dims(sources, out_dim)
        if any(a.dimension is None for _, a in sources):
            if out_dim.dimension is None and out_dim.complete_dyn_size() is None and \
                    out_dim.__dict__.get("_derived_from") is None:
                total = sources[0][1]
                for _, a in sources[1:]:
                    total = total + a
                out_dim.__dict__["_derived_from"] = ("add", (total, 0))
        return _make("concat", [x for x, _ in sources], dims, sources[0][0].dtype,
                     opts={"axes": [a for _, a in sources], "out_dim": out_dim})

    @staticmethod
    def pad(source, *, axes, padding, out_dims, handle_dynamic_dims, mode="constant", value=None):
        if is_tensor(value):
            raise FrontendError("rf.pad at %s: a Tensor pad value is not supported" % call_site())
        dims = [out_dims[axes.index(d)] if d in axes else d for d in source.dims]
        return _make("pad", [source], dims, source.dtype, sparse_dim=source.sparse_dim,
                     opts={"axes": list(axes), "padding": list(padding), "out_dims": list(out_dims),
                           "handle_dynamic_dims": handle_dynamic_dims, "mode": mode, "value": value})

    @staticmethod
    def gather(source, *, indices, axis, clip_to_valid=False):
        if isinstance(indices, int):
            dims = [d for d in source.dims if d != axis]
            return _make("gather", [source], dims, source.dtype, sparse_dim=source.sparse_dim,
                         opts={"axis": axis, "clip_to_valid": clip_to_valid, "index_value": indices})
        common = [d for d in indices.dims if d in source.dims]
        src_rest = [d for d in source.dims if d not in common and d != axis]
        idx_rest = [d for d in indices.dims if d not in common]
        # natural order: source dims with axis replaced by the (new) index dims
        dims = []
        for d in source.dims:
            if d == axis:
                dims.extend(idx_rest)
            else:
                dims.append(d)
        assert set(dims) == set(common + src_rest + idx_rest)
        return _make("gather", [source, indices], dims, source.dtype, sparse_dim=source.sparse_dim,
                     opts={"axis": axis, "clip_to_valid": clip_to_valid})

    @staticmethod
    def slice(source, *, axis, start=None, end=None, step=None, size=None, out_dim):
        dims = [out_dim if d == axis else d for d in source.dims]
        return _make("slice", [source], dims, source.dtype, sparse_dim=source.sparse_dim,
                     opts={"axis": axis, "start": start, "end": end, "step": step})

    @staticmethod
    def split(source, *, axis, out_dims):
        outs, start = [], 0
        for d in out_dims:
            outs.append(ReturnnLayersBackend.slice(source, axis=axis, start=start, end=start + d.dimension,
                                                   out_dim=d))
            start += d.dimension
        return outs

    @staticmethod
    def split_dims(source, *, axis, dims, pad_to_multiples=None, pad_value=None):
        out = []
        for d in source.dims:
            out.extend(dims if d == axis else [d])
        for d in dims:
            if d.dimension is None and d.complete_dyn_size() is None and axis.dimension is None:
                others = 1
                for o in dims:
                    if o is not d:
                        others *= o.dimension
                d.__dict__.setdefault("_derived_from", ("ceildiv", (axis, others)))
        return _make("split_dims", [source], out, source.dtype, sparse_dim=source.sparse_dim,
                     opts={"axis": axis, "dims": list(dims)})

    @staticmethod
    def merge_dims(source, *, dims, out_dim=None):
        out = []
        for d in source.dims:
            if d == dims[0]:
                out.append(out_dim)
            elif d not in dims:
                out.append(d)
        return _make("merge_dims", [source], out, source.dtype, sparse_dim=source.sparse_dim,
                     opts={"dims": list(dims), "out_dim": out_dim})

    @staticmethod
    def expand_dim(source, dim):
        return _make("expand_dim", [source], list(source.dims) + [dim], source.dtype, sparse_dim=source.sparse_dim,
                     opts={"dim": dim})

    @staticmethod
    def squeeze(source, axis):
        return _make("squeeze", [source], [d for d in source.dims if d != axis], source.dtype,
                     sparse_dim=source.sparse_dim, opts={"axis": axis})

    @staticmethod
    def replace_dim(source, *, in_dim, out_dim):
        return _make("replace_dim", [source], [out_dim if d == in_dim else d for d in source.dims], source.dtype,
                     sparse_dim=source.sparse_dim, opts={"in_dim": in_dim, "out_dim": out_dim})

    # ---- losses ----
    @staticmethod
    def softmax_cross_entropy_with_logits(*, logits, targets, axis):
        dims = [d for d in logits.dims if d != axis]
        return _make("softmax_ce", [logits, targets], dims, logits.dtype, opts={"axis": axis},
                     name="cross_entropy")

    @staticmethod
    def ctc_loss(*, logits, targets, input_spatial_dim, targets_spatial_dim, blank_index, max_approx=False):
        class_dims = [d for d in logits.dims if d not in (batch_dim, input_spatial_dim)]
        if len(class_dims) != 1 or set(logits.dims) != {batch_dim, input_spatial_dim, class_dims[0]}:
            raise FrontendError("rf.ctc_loss at %s: logits must have dims [batch, time, classes], got %s" % (
                call_site(), dims_str(logits.dims)))
        return _make("ctc_loss", [logits, targets], [batch_dim], logits.dtype,
                     opts={"input_spatial_dim": input_spatial_dim, "targets_spatial_dim": targets_spatial_dim,
                           "blank_index": blank_index, "class_dim": class_dims[0]})

    # ---- random ----
    @staticmethod
    def dropout(source, drop_prob, *, axis=None, on_forward=False):
        return _make("dropout", [source], source.dims, source.dtype,
                     opts={"rate": drop_prob, "axes": axis, "on_forward": on_forward})

    @staticmethod
    def random(*, dims, dtype, distribution, mean=None, stddev=None, bound=None, minval=None, maxval=None,
               seed=None, sparse_dim=None):
        if bound is not None:
            minval, maxval = -bound, bound
        return _make("random", [], dims, dtype, sparse_dim=sparse_dim,
                     opts={"distribution": distribution, "mean": mean, "stddev": stddev, "minval": minval,
                           "maxval": maxval, "seed": seed})

    # ---- nn ----
    @staticmethod
    def batch_norm(source, *, in_dim, running_mean, running_variance, gamma, beta, epsilon, momentum, affine,
                   use_mask):
        sources = [source, running_mean, running_variance] + ([gamma, beta] if affine else [])
        return _make("batch_norm", sources, source.dims, source.dtype,
                     opts={"in_dim": in_dim, "epsilon": epsilon, "momentum": momentum, "use_mask": use_mask,
                           "affine": affine})

    @staticmethod
    def conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter, filter_size,  # noqa
             padding, strides=1, dilation_rate=1, groups=None, bias=None):
        n = len(in_spatial_dims)
        strides = tuple(strides) if isinstance(strides, (list, tuple)) else (strides or 1,) * n
        dilation_rate = tuple(dilation_rate) if isinstance(dilation_rate, (list, tuple)) else (dilation_rate,) * n
        dims = [out_spatial_dims[in_spatial_dims.index(d)] if d in in_spatial_dims else
                (out_dim if d == in_dim else d) for d in source.dims]
        return _make("conv", [source, filter] + ([bias] if bias is not None else []), dims, source.dtype,
                     opts={"in_dim": in_dim, "out_dim": out_dim, "in_spatial_dims": list(in_spatial_dims),
                           "out_spatial_dims": list(out_spatial_dims), "filter_size": list(filter_size),
                           "padding": padding.lower(), "strides": strides, "dilation_rate": dilation_rate})

    @staticmethod
    def pool(source, *, mode, pool_size, padding="valid", dilation_rate=1, strides, in_spatial_dims,
             out_spatial_dims=None):
        rest = [d for d in source.dims if d not in in_spatial_dims]
        feat = source.feature_dim if source.feature_dim in rest and not source.feature_dim.is_batch_dim() else None
        if feat is None:
            raise FrontendError("rf.pool at %s: the input %s needs a feature dim" % (call_site(), dims_str(source.dims)))
        dims = [out_spatial_dims[in_spatial_dims.index(d)] if d in in_spatial_dims else d for d in source.dims]
        return _make("pool", [source], dims, source.dtype,
                     opts={"mode": mode, "pool_size": tuple(pool_size), "padding": padding.lower(),
                           "dilation_rate": tuple(dilation_rate), "strides": tuple(strides),
                           "in_spatial_dims": list(in_spatial_dims), "out_spatial_dims": list(out_spatial_dims),
                           "in_dim": feat}, name=mode + "_pool")

    @staticmethod
    def lstm(source, *, state_h, state_c, ff_weight, rec_weight, bias, spatial_dim, in_dim, out_dim):
        from ..data import single_step_dim

        single = spatial_dim is single_step_dim
        dims = [out_dim if d == in_dim else d for d in source.dims]
        gates_dim = [d for d in ff_weight.dims if d != in_dim][0]
        out = _make("lstm", [source, state_h, state_c, ff_weight, rec_weight, bias], dims, source.dtype,
                    opts={"spatial_dim": spatial_dim, "in_dim": in_dim, "out_dim": out_dim, "gates_dim": gates_dim,
                          "single_step": single})
        state_dims = [d for d in dims if d != spatial_dim]
        h = _make("extra", [out], state_dims, source.dtype, opts={"key": "h", "dims": _lstm_state_dims(state_dims, out_dim)},
                  name="state_h")
        c = _make("extra", [out], state_dims, source.dtype, opts={"key": "c", "dims": _lstm_state_dims(state_dims, out_dim)},
                  name="state_c")
        return out, (h, c)

    # ---- control flow ----
    @staticmethod
    def scan(*, spatial_dim, initial, xs, ys, body):
        from ._loop import scan

        return scan(spatial_dim=spatial_dim, initial=initial, xs=xs, ys=ys, body=body)

    @staticmethod
    def while_loop(cond, body, initial):
        from ._loop import while_loop

        return while_loop(cond, body, initial)

    @staticmethod
    def loop(*, axis=None, max_seq_len=None):
        from ._loop import Loop

        return Loop(axis=axis, max_seq_len=max_seq_len)

    @staticmethod
    def cond(pred, true_fn, false_fn):
        """A ``cond`` layer per result Tensor, the branches as subnetworks (see _cond.py)."""
        from ._cond import cond

        return cond(pred, true_fn, false_fn)

    @staticmethod
    def cum_concat_step(source, *, prev_accum, axis, out_spatial_dim):
        """Inside a loop body: a ``cum_concat`` sub-layer of the rec unit (see _loop.py)."""
        from ._loop import cum_concat_step

        return cum_concat_step(source, prev_accum=prev_accum, axis=axis, out_spatial_dim=out_spatial_dim)

    # ---- outputs and losses ----
    @staticmethod
    def make_output_tensor(tensor, dims, *, name):
        builder = get_current_builder()
        template = Data(name, dims=list(dims), dtype=tensor.dtype, sparse_dim=tensor.sparse_dim)
        d = {"class": "frontend_op", "op": "copy", "from": [_raw_name(tensor)], "out": template,
             "is_output_layer": True}
        layer = builder.add_layer(name, d, absolute=True)
        return Data(layer.name, dims=list(dims), dtype=tensor.dtype, sparse_dim=tensor.sparse_dim, placeholder=layer)

    @staticmethod
    def mark_as_loss(loss):
        builder = get_current_builder()
        if loss.name in builder.net_dict:
            raise FrontendError("mark_as_loss(%r) at %s: the name is already taken by a layer" % (
                loss.name, loss.call_site))
        x = loss.loss
        opts = {}
        if loss.use_normalized_loss:
            opts["use_normalized_loss"] = True
        if loss.custom_inv_norm_factor is not None:
            f = loss.custom_inv_norm_factor
            if not is_tensor(f):
                from ..frontend import array_

                f = array_.convert_to_tensor(f)
            opts["custom_inv_norm_factor"] = _raw_name(f)
        extra = {"loss": "as_is_error" if loss.as_error else "as_is", "loss_scale": loss.scale}
        if opts:
            extra["loss_opts"] = opts
        builder.add_layer(loss.name, {"class": "frontend_op", "op": "copy", "from": [_raw_name(x)],
                                      "out": Data(loss.name, dims=list(x.dims), dtype=x.dtype), **extra},
                          absolute=True)


def _lstm_state_dims(state_dims, out_dim):
    return [d for d in state_dims if d != out_dim] + [out_dim]
