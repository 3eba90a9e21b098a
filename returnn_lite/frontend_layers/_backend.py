"""
ReturnnLayersBackend: the rf backend whose raw tensors are layers (seed 000).

Every method emits layer dicts of the ordinary layer classes into the net dict under construction
(:class:`NetDictBuilder`) and returns a Tensor whose raw tensor is that :class:`Layer`, so that the net dict reads
like a hand-written one: ``dot`` (rf.matmul; rf.Linear = ``dot`` + ``combine`` add), ``combine``, ``compare``,
``activation``, ``cast``, ``copy``, ``scaled_grad`` (stop_gradient), ``switch`` (where), ``reduce``,
``softmax_over_spatial`` (softmax/log_softmax over a Dim), ``norm`` (rf.LayerNorm with its params as layers),
``constant``, ``range_in_axis``, ``length``, ``concat``, ``pad``, ``gather``, ``slice`` (also rf.split),
``split_dims``, ``merge_dims``, ``expand_dims``, ``squeeze``, ``reinterpret_data`` (replace_dim), ``dropout``,
``conv``, ``pool``, ``sparse_softmax_cross_entropy_with_logits``, ``transpose`` (outputs: the rf dim order), ``copy``
with ``loss`` (mark_as_loss). The frontend's Dims go into the options (``out_dim``, ``axis``/``axes``, ``reduce``,
``dims``, ``out_dims``, ...), and every op layer gets ``out_shape`` (:class:`returnn_lite.layers.base.OutShape`: the
rf Tensor's dims, dtype, sparse dim and the rf call site), so construction fails with an error naming the rf call if
a layer's output does not have exactly the frontend's dims. The dim order of a layer's output is the layer class'
choice; rf Tensors address dims by Dim, and the output layers (make_output_tensor) transpose to the asked order.

:mod:`._norm`: ``batch_norm`` (rf.BatchNorm, with the rf params via ``reuse_params``), ``random``, ``ctc_loss``,
cross entropy against dense targets (log-softmax + ``dot``).

Params are ``variable`` layers named by the rf param name (``lstm.ff_weight`` -> layer ``lstm/ff_weight`` with the TF
variable ``lstm/ff_weight/param``). Scalar operands are shared ``constant`` layers (``const``, ``const_1``, ...).

rf.LSTM (``lstm``) is a ``rec`` layer with the ``nativelstm2`` unit (``axis``: the spatial dim or single_step_dim,
``initial_state``/``state`` and ``get_last_hidden_state`` layers for the state) whose params are the rf params,
reordered to the unit's gate order by ``slice``/``concat`` layers and handed over by ``reuse_params`` (see _lstm.py).

Operands of mixed dtypes (combine, compare, where) get a ``cast`` layer first, to the dtype the torch backend gives
(int with float -> the float; int truediv -> float32). Where neither operand of combine/compare has all dims, the layer
gets ``allow_broadcast_all_sources=True`` (it then broadcasts by dims only, as rf). Fills (rf.full/zeros, also with a
Tensor value, and expand_dim by a dynamic dim: ``combine`` with a fill) over dynamic dims are ``constant`` layers with
those Dims in ``shape`` and, as ``from``, a layer with the dims (constructed first, so the lengths are known). rf.concat
along dynamic dims is ``concat`` with ``handle_dynamic_dims`` (per sequence). reduce prod is the reduce mode ``prod``;
any/all on numbers are ``compare`` != 0 first. gather clip_to_valid with an int index clips it here (static axis).

``frontend_op`` (:mod:`._layer`, the frontend computes the output template) remains only where no layer class fits:

- rf.LSTM with batch dims other than [batch] (or states without exactly [batch, out_dim]): the rec layer's cell
  units run on [time, batch, feature].
- cross entropy with sparse targets of a float dtype or with dims the logits lack (dense targets are log-softmax +
  ``dot``, see :mod:`._norm`).
- concat along dynamic dims without a batch dim (per-sequence lengths need one), or of sources with other dims.
- dims no layer of this net dict has (range_over_dim / dim sizes / fills over such a dynamic dim, also inside a loop
  body): a layer needs a source that has the dim.
- operands the layer classes do not take: pad paddings given as Dims (a Tensor pad value is refused), Tensor
  dropout rates (the dropout layer takes a float), array constants over dynamic dims, fills with a Tensor of another
  dtype or sparse dim, casting a sparse non-int (the cast layer drops the sparse dim), where with scalars of another
  sparse dim, reduce of a sparse input (the reduce layer refuses it), kinds the combine layer lacks.
- grouped conv, conv/pool with extra batch-like dims (the conv/pool layers take [batch, spatial..., feature]).
- Tensor slice bounds: rf.slice refuses them before (int bounds only), so the backend never sees them.
"""

from __future__ import annotations

from ..data import Data, Dim, batch_dim
from ..frontend._backend import Backend
from ..frontend._utils import (
    FrontendError, axes_of, broadcast_dims, call_site, concat_out_dims, dims_str, has_repeated_dim, is_tensor)
from . import _norm
from ._emit import _const, _emit, _make, _operands, _raw_name, _sources
from ._net import Layer, dim_source as _dim_source, get_current_builder


def _dim_sources_of(dims, source):
    """Tensors that carry the lengths of these dynamic dims (extra inputs: constructed before the op needs them)."""
    res = []
    for d in dims:
        if d.dimension is None and not d.is_batch_dim() and d not in source.dims:
            t = _dim_source(d)
            if t is not None and t is not source and all(t is not r for r in res):
                res.append(t)
    return res


class ReturnnLayersBackend(Backend):
    """rf backend whose raw tensor is a :class:`Layer` of the net dict under construction."""

    name = "returnn_layers_tf"
    RawTensorType = Layer
    is_tensorflow = True
    builds_net_dict = True
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
        if any(d.dimension is None for d in dims):
            return _make("constant", [], dims, dtype, sparse_dim=sparse_dim, opts={"value": value}, name=name)
        return _emit("constant", None, dims, dtype, sparse_dim=sparse_dim, sparse_dim_option=True, value=value,
                     dtype=dtype, shape=list(dims), name=name or "constant")

    @staticmethod
    def full(dims, fill_value, *, dtype, sparse_dim=None, feature_dim=None, device=None):
        if is_tensor(fill_value):
            if fill_value.dtype == dtype and fill_value.sparse_dim is None and sparse_dim is None:
                res = _broadcast_to(fill_value, dims)
                if res is not None:
                    return res
            return _make("full", [fill_value], dims, dtype, sparse_dim=sparse_dim, opts={"value": None})
        static = [d for d in dims if not d.is_batch_dim()]
        # dynamic dims: their lengths come from a layer with the dim, constructed first ("from")
        dyn_srcs = list({id(t): t for t in (_dim_source(d) for d in static if d.dimension is None)}.values())
        if hasattr(fill_value, "tolist") and len(getattr(fill_value, "shape", ())) == 0:
            fill_value = fill_value.tolist()
        if None in dyn_srcs or (dyn_srcs and get_current_builder().parent is not None) or \
                hasattr(fill_value, "tolist"):
            return _make("full", [], dims, dtype, sparse_dim=sparse_dim, opts={"value": fill_value})
        opts = {"with_batch_dim": True} if len(static) < len(dims) else {}
        return _emit("constant", dyn_srcs or None, dims, dtype, sparse_dim=sparse_dim, sparse_dim_option=True,
                     value=fill_value, dtype=dtype, shape=static, name="full", **opts)

    @staticmethod
    def range_over_dim(dim, *, dtype="int32", device=None):
        src = _dim_source(dim)
        if src is not None:
            return _emit("range_in_axis", [src], [dim], dtype, sparse_dim=dim if dtype.startswith("int") else None,
                         axis=dim, dtype=dtype, sparse=dtype.startswith("int"), name="range")
        return _make("range_over_dim", [], [dim], dtype, sparse_dim=dim if dtype.startswith("int") else None,
                     opts={"dim": dim}, name="range")

    @staticmethod
    def dim_value_tensor(dim):
        if dim.dimension is not None:
            return ReturnnLayersBackend.convert_to_tensor(dim.dimension, dims=[], dtype="int32")
        src = _dim_source(dim)
        if src is not None and dim.is_batch_dim():
            return _emit("length", [src], [], "int32", axis="B", name="dim_value")
        if src is not None:
            size = _emit("length", [src], [batch_dim], "int32", axis=dim, name="dim_size")
            return _emit("reduce", [size], [], "int32", mode="max", axes=[batch_dim], name="dim_value")
        return _make("dim_value", [], [], "int32", opts={"dim": dim}, name="dim_value")

    @staticmethod
    def dim_size_tensor(dim, *, device=None):  # (device: no meaning for layers)
        if dim.dimension is not None:
            return ReturnnLayersBackend.convert_to_tensor(dim.dimension, dims=[], dtype="int32")
        if dim.is_batch_dim():
            return ReturnnLayersBackend.dim_value_tensor(dim)
        src = _dim_source(dim)
        if src is not None:
            return _emit("length", [src], [batch_dim], "int32", axis=dim, name="dim_size")
        return _make("dim_size", [], [batch_dim], "int32", opts={"dim": dim}, name="dim_size")

    # ---- params ----
    @staticmethod
    def create_parameter_raw(param, *, name):
        builder = get_current_builder()
        d = {"class": "variable", "shape": list(param.dims), "dtype": param.dtype, "param_name": "param",
             "is_output_layer": True}
        d.update(ReturnnLayersBackend._init_opts(param.initial))
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
        if hasattr(initial, "tolist"):  # a numpy value (e.g. PiecewiseLinear's points)
            value = initial.tolist()
            return float(value) if isinstance(value, (int, float)) else {"class": "constant", "value": value}
        raise FrontendError("rf.Parameter.initial: unsupported value %r" % (initial,))

    @staticmethod
    def _init_opts(initial):
        """The variable layer's init option: an rf Tensor (a layer of the model) initializes it via init_by_layer."""
        if is_tensor(initial):
            return {"init_by_layer": _raw_name(initial)}
        return {"init": ReturnnLayersBackend._init_value(initial)}

    @staticmethod
    def set_parameter_initial_value(param, value):
        layer_dict = param.placeholder.layer_dict
        layer_dict.pop("init", None)
        layer_dict.pop("init_by_layer", None)
        layer_dict.update(ReturnnLayersBackend._init_opts(value))

    @staticmethod
    def set_parameter_trainable(param, trainable):
        param.placeholder.layer_dict["trainable"] = trainable

    # ---- elementwise ----
    @classmethod
    def combine(cls, a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
        dims = broadcast_dims("combine", [a, b], bool(allow_broadcast_all_sources), dim_order)
        a, b, dtype = _promoted(cls, a, b, kind)  # mixed dtypes / int truediv: a cast layer first
        t = a if is_tensor(a) else b
        sparse = t.sparse_dim if dtype.startswith("int") else None
        if kind in _COMBINE_LAYER_KINDS:
            other_sparse = any(is_tensor(x) and x.sparse_dim is not None for x in (a, b))
            if (sparse is not None or (other_sparse and dtype.startswith("int"))) and (
                    not is_tensor(a) or not is_tensor(b) or a.sparse_dim != b.sparse_dim):
                # the combine layer keeps a sparse dim only where both operands have it; rf keeps the first
                # tensor operand's (also None, e.g. ``scalar + range_over_dim(T)``), as on the torch backend
                return _combine_op(a, kind, b, dims, dtype, sparse)
            return _emit("combine", _sources([a, b], dtype), dims, dtype, sparse_dim=sparse, kind=kind, name=kind,
                         **_broadcast_all_opts(a, b))
        return _combine_op(a, kind, b, dims, dtype, sparse)

    @classmethod
    def compare(cls, a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
        dims = broadcast_dims("compare", [a, b], bool(allow_broadcast_all_sources), dim_order)
        if not is_tensor(b):
            return _emit("compare", [a], dims, "bool", kind=kind, value=_scalar(b), name=kind)
        if not is_tensor(a):
            return _emit("compare", [b], dims, "bool", kind=_SWAPPED.get(kind, kind), value=_scalar(a), name=kind)
        a, b, _ = _promoted(cls, a, b, kind)
        return _emit("compare", [a, b], dims, "bool", kind=kind, name=kind, **_broadcast_all_opts(a, b))

    @staticmethod
    def activation(tensor, func):
        dtype = tensor.dtype if func != "logical_not" else "bool"
        if func == "abs" and dtype.startswith("complex"):  # the magnitude (as torch.abs / tf.abs)
            dtype = {"complex64": "float32", "complex128": "float64"}[dtype]
        act = _ACTIVATIONS.get(func, func)
        return _emit("activation", [tensor], tensor.dims, dtype, sparse_dim=tensor.sparse_dim, activation=act,
                     name=func)

    @staticmethod
    def cast(tensor, dtype):
        sparse = tensor.sparse_dim if dtype.startswith("int") else None
        if sparse is not None and not tensor.dtype.startswith("int"):  # the cast layer keeps no sparse dim here
            return _make("cast", [tensor], tensor.dims, dtype, sparse_dim=sparse, opts={"dtype": dtype})
        return _emit("cast", [tensor], tensor.dims, dtype, sparse_dim=sparse, dtype=dtype)

    @staticmethod
    def copy(tensor):
        return _emit("copy", [tensor], tensor.dims, tensor.dtype, sparse_dim=tensor.sparse_dim)

    @staticmethod
    def transpose(tensor, dims):
        return _transposed(tensor, dims, "transpose")

    @staticmethod
    def stop_gradient(tensor):
        return _emit("scaled_grad", [tensor], tensor.dims, tensor.dtype, sparse_dim=tensor.sparse_dim, scale=0,
                     name="stop_gradient")

    @staticmethod
    def scaled_gradient(tensor, scale):
        if not is_tensor(scale):  # the scaled_grad layer class
            return _emit("scaled_grad", [tensor], tensor.dims, tensor.dtype, sparse_dim=tensor.sparse_dim,
                         scale=float(scale), name="scaled_gradient")
        return ReturnnLayersBackend.scaled_gradient_ext(tensor, scale=scale)

    @staticmethod
    def scaled_gradient_ext(tensor, *, scale=1.0, shift=None, scale_shift_by_sum_over_axis=None):
        """frontend_op: the scaled_grad layer class takes neither Tensor scales nor shift."""
        values = [tensor, scale] + ([shift] if shift is not None else [])
        for v in values[1:]:
            if is_tensor(v) and not set(v.dims) <= set(tensor.dims):
                raise FrontendError("rf.scaled_gradient_ext at %s: scale/shift dims %s are not all in %s" % (
                    call_site(), dims_str(v.dims), dims_str(tensor.dims)))
        sources, specs = _operands(values)
        return _make("scaled_gradient", sources, tensor.dims, tensor.dtype, sparse_dim=tensor.sparse_dim,
                     opts={"scale": specs[1], "shift": specs[2] if shift is not None else None,
                           "axis": scale_shift_by_sum_over_axis})

    @staticmethod
    def where(cond, true_, false_, *, allow_broadcast_all_sources=False):
        dims = broadcast_dims("where", [cond, true_, false_], bool(allow_broadcast_all_sources))
        if is_tensor(true_) and is_tensor(false_) and true_.dtype != false_.dtype:  # as torch: a cast layer first
            true_, false_, _ = _promoted(ReturnnLayersBackend, true_, false_, None)
        t = true_ if is_tensor(true_) else false_ if is_tensor(false_) else None
        dtype = t.dtype if t is not None else ("float32" if isinstance(true_, float) else "int32")
        if is_tensor(cond) and all(not is_tensor(v) or v.dtype == dtype for v in (true_, false_)) and \
                _switch_layer_fits(dims, [true_, false_, cond]):
            sparse = t.sparse_dim if t is not None and dtype.startswith("int") else None
            if (is_tensor(true_) and true_.sparse_dim == sparse) or (not is_tensor(true_) and sparse is None):
                return _emit("switch", None, dims, dtype, sparse_dim=sparse, condition=_raw_name(cond),
                             true_from=_switch_value(true_, dtype), false_from=_switch_value(false_, dtype),
                             name="where")
        sources, (sc, st, sf) = _operands([cond, true_, false_])
        return _make("where", sources, dims, dtype, opts={"cond": sc, "true_": st, "false_": sf})

    @classmethod
    def clip_by_value(cls, x, clip_value_min, clip_value_max, *, allow_broadcast_all_sources=False):
        dims = broadcast_dims("clip_by_value", [x, clip_value_min, clip_value_max], bool(allow_broadcast_all_sources))
        y = cls.combine(x, "maximum", clip_value_min, allow_broadcast_all_sources=True)
        return cls.combine(y, "minimum", clip_value_max, allow_broadcast_all_sources=True, dim_order=dims)

    # ---- reductions, softmax, matmul ----
    @staticmethod
    def reduce(source, *, mode, axis, use_mask=True):
        axes = [axis] if isinstance(axis, Dim) else list(axis)
        if has_repeated_dim(source.dims):  # the reduce layer resolves the axes by match priority as well
            idx = axes_of(source.dims, axes)
            rest = [d for i, d in enumerate(source.dims) if i not in idx]
        else:
            rest = [d for d in source.dims if d not in axes]
        if mode in ("argmax", "argmin"):
            dtype, sparse = "int32", axes[0]
        elif mode in ("any", "all"):
            dtype, sparse = "bool", None
        else:
            dtype, sparse = source.dtype, None
        if mode in ("any", "all") and source.dtype != "bool" and source.sparse_dim is None:
            source = _emit("compare", [source], source.dims, "bool", kind="not_equal", value=0, name="nonzero")
        if mode not in _REDUCE_LAYER_MODES or (mode in ("any", "all")) != (source.dtype == "bool") or \
                source.sparse_dim is not None:  # the reduce layer refuses sparse inputs
            return _make("reduce", [source], rest, dtype, sparse_dim=sparse,
                         opts={"mode": mode, "axes": axes, "use_mask": use_mask}, name="reduce_" + mode)
        return _emit("reduce", [source], rest, dtype, sparse_dim=sparse, mode=mode, axes=axes,
                     use_time_mask=use_mask, name="reduce_" + mode)

    @staticmethod
    def softmax(tensor, *, axis, use_mask=True):
        return _emit("softmax_over_spatial", [tensor], tensor.dims, tensor.dtype, axis=axis, use_time_mask=use_mask,
                     name="softmax")

    @staticmethod
    def log_softmax(tensor, *, axis, use_mask=True):
        return _emit("softmax_over_spatial", [tensor], tensor.dims, tensor.dtype, axis=axis, use_time_mask=use_mask,
                     log_space=True, name="log_softmax")

    @classmethod
    def matmul(cls, a, b, *, reduce, use_mask=True):
        reduce = [reduce] if isinstance(reduce, Dim) else list(reduce)
        if has_repeated_dim(a.dims) or has_repeated_dim(b.dims):  # (the dot layer: axes by match priority too)
            ra, rb = axes_of(a.dims, reduce), axes_of(b.dims, reduce)
            a_rest = [d for i, d in enumerate(a.dims) if i not in ra]
            b_rest = [d for j, d in enumerate(b.dims) if j not in rb]
        else:
            a_rest = [d for d in a.dims if d not in reduce]
            b_rest = [d for d in b.dims if d not in reduce]
        dims = a_rest + [d for d in b_rest if d not in a_rest]
        if not reduce:  # an outer product (the dot layer needs axes to reduce)
            return cls.combine(a, "mul", b, allow_broadcast_all_sources=True, dim_order=dims)
        var1 = [d for d in a_rest if d not in b_rest]
        var2 = [d for d in b_rest if d not in a_rest]
        return _emit("dot", [a, b], dims, a.dtype, reduce=reduce, var1=var1, var2=var2, add_var2_if_empty=False,
                     use_mask=use_mask, name="dot")

    @classmethod
    def linear(cls, source, *, weight, bias, in_dim):
        """x . weight (``dot``) + bias (``combine``), as rf.Linear."""
        y = cls.matmul(source, weight, reduce=in_dim, use_mask=False)
        if bias is None:
            return y
        return cls.combine(y, "add", bias)

    @classmethod
    def layer_norm(cls, x, *, in_dim, scale, bias, eps):
        """``norm`` over in_dim with the params scale and bias (layers: no params of its own), as rf.LayerNorm."""
        if set(scale.dims) <= set(x.dims) and (bias is None or set(bias.dims) <= set(x.dims)):
            return _emit("norm", [x], x.dims, x.dtype, axis=in_dim, param_shape=(), scale=_raw_name(scale),
                         bias=_raw_name(bias) if bias is not None else False, epsilon=eps, name="norm")
        y = _emit("norm", [x], x.dims, x.dtype, axis=in_dim, param_shape=(), scale=False, bias=False, epsilon=eps,
                  name="norm")
        y = cls.combine(y, "mul", scale, allow_broadcast_all_sources=True)
        return cls.combine(y, "add", bias, allow_broadcast_all_sources=True) if bias is not None else y

    # ---- shapes ----
    @staticmethod
    def concat(*sources, allow_broadcast=False, out_dim):
        dims = concat_out_dims(sources, out_dim)
        if any(a.dimension is None for _, a in sources):
            if out_dim.dimension is None and out_dim.complete_dyn_size() is None and out_dim.derived_from is None:
                total = sources[0][1]
                for _, a in sources[1:]:
                    total = total + a
                out_dim.derived_from = ("add", (total, 0))
        x0, a0 = sources[0]
        dynamic = any(a.dimension is None for _, a in sources)
        if all(x.dtype == x0.dtype and x.sparse_dim == x0.sparse_dim and
               set(x.dims) - {a} == set(x0.dims) - {a0} for x, a in sources[1:]) and (
                not dynamic or batch_dim in x0.dims):
            opts = {"handle_dynamic_dims": True} if dynamic else {}  # rf concatenates per sequence
            return _emit("concat", None, dims, x0.dtype, sparse_dim=x0.sparse_dim,
                         out_dim=out_dim, name="concat", **{"from": [(_raw_name(x), a) for x, a in sources]}, **opts)
        # without the batch dim (e.g. a rel-pos table [T - k + 33 + T - k, F]) the sources are concatenated as
        # padded (each at its max length), as on the torch backend: there are no per-sequence lengths to pack by
        padded = dynamic and batch_dim not in dims
        return _make("concat", [x for x, _ in sources], dims, sources[0][0].dtype,
                     opts={"axes": [a for _, a in sources], "out_dim": out_dim, "padded": padded})

    @staticmethod
    def pad(source, *, axes, padding, out_dims, handle_dynamic_dims, mode="constant", value=None):
        if is_tensor(value):
            raise FrontendError("rf.pad at %s: a Tensor pad value is not supported" % call_site())
        dims = [out_dims[axes.index(d)] if d in axes else d for d in source.dims]
        if all(isinstance(p, int) for lr in padding for p in lr):
            return _emit("pad", [source], dims, source.dtype, sparse_dim=source.sparse_dim, axes=list(axes),
                         padding=[tuple(lr) for lr in padding], out_dims=list(out_dims),
                         handle_dynamic_dims=handle_dynamic_dims, mode=mode, value=0 if value is None else value)
        return _make("pad", [source], dims, source.dtype, sparse_dim=source.sparse_dim,
                     opts={"axes": list(axes), "padding": list(padding), "out_dims": list(out_dims),
                           "handle_dynamic_dims": handle_dynamic_dims, "mode": mode, "value": value})

    @staticmethod
    def gather(source, *, indices, axis, clip_to_valid=False):
        if isinstance(indices, int):
            dims = [d for d in source.dims if d != axis]
            if not clip_to_valid:
                return _emit("gather", [source], dims, source.dtype, sparse_dim=source.sparse_dim, position=indices,
                             axis=axis)
            if axis.dimension is None:  # rf.gather refuses this before
                raise FrontendError("rf.gather at %s: clip_to_valid with an int index needs a static axis, not %s" % (
                    call_site(), axis))
            return _emit("gather", [source], dims, source.dtype, sparse_dim=source.sparse_dim,
                         position=min(max(indices, 0), axis.dimension - 1), axis=axis)  # clipped here
        common = [d for d in indices.dims if d in source.dims and d != axis]
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
        return _emit("gather", [source], dims, source.dtype, sparse_dim=source.sparse_dim,
                     position=_raw_name(indices), axis=axis, clip_to_valid=clip_to_valid)

    @staticmethod
    def slice(source, *, axis, start=None, end=None, step=None, size=None, out_dim):
        dims = [out_dim if d == axis else d for d in source.dims]
        if isinstance(size, Dim) and isinstance(start, Data):  # a scalar Tensor start: the 2nd source
            return _make("slice", [source, start] + _dim_sources_of([size], source), dims, source.dtype,
                         sparse_dim=source.sparse_dim, opts={"axis": axis, "start": None, "end": None, "step": None,
                                                             "size": size, "start_from_input": True})
        if isinstance(size, Dim):  # [start:start + size] with a (maybe dynamic) size Dim
            return _make("slice", [source] + _dim_sources_of([size], source), dims, source.dtype,
                         sparse_dim=source.sparse_dim,
                         opts={"axis": axis, "start": start, "end": None, "step": None, "size": size})
        if all(v is None or isinstance(v, int) for v in (start, end, step)):
            return _emit("slice", [source], dims, source.dtype, sparse_dim=source.sparse_dim, axis=axis,
                         slice_start=start, slice_end=end, slice_step=step, out_dim=out_dim)
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
                if d.derived_from is None:
                    d.derived_from = ("ceildiv", (axis, others))
        return _emit("split_dims", [source], out, source.dtype, sparse_dim=source.sparse_dim, axis=axis,
                     dims=list(dims), pad_to_multiples=pad_to_multiples, pad_value=pad_value or 0)

    @staticmethod
    def merge_dims(source, *, dims, out_dim=None):
        out = []
        for d in source.dims:
            if d == dims[0]:
                out.append(out_dim)
            elif d not in dims:
                out.append(d)
        return _emit("merge_dims", [source], out, source.dtype, sparse_dim=source.sparse_dim, axes=list(dims),
                     keep_order=True, out_dim=out_dim)

    @staticmethod
    def expand_dim(source, dim):
        if dim.dimension is None:
            res = _broadcast_to(source, list(source.dims) + [dim]) if source.sparse_dim is None else None
            if res is not None:
                return res
            return _make("expand_dim", [source], list(source.dims) + [dim], source.dtype,
                         sparse_dim=source.sparse_dim, opts={"dim": dim})
        return _emit("expand_dims", [source], list(source.dims) + [dim], source.dtype, sparse_dim=source.sparse_dim,
                     axis="spatial", dim=dim, name="expand_dim")

    @staticmethod
    def squeeze(source, axis):
        return _emit("squeeze", [source], [d for d in source.dims if d != axis], source.dtype,
                     sparse_dim=source.sparse_dim, axis=axis)

    @staticmethod
    def reshape(source, in_dims, out_dims):
        rest = [d for d in source.dims if d not in in_dims]
        return _make("reshape", [source] + _dim_sources_of(out_dims, source), rest + list(out_dims), source.dtype,
                     sparse_dim=source.sparse_dim,
                     opts={"in_dims": list(in_dims), "out_dims": list(out_dims)})

    @staticmethod
    def replace_dim(source, *, in_dim, out_dim):
        return _emit("reinterpret_data", [source], [out_dim if d == in_dim else d for d in source.dims],
                     source.dtype, sparse_dim=source.sparse_dim, set_dim_tags={in_dim: out_dim}, name="replace_dim")

    # ---- losses ----
    @classmethod
    def softmax_cross_entropy_with_logits(cls, *, logits, targets, axis):
        dims = [d for d in logits.dims if d != axis]
        if targets.sparse_dim is not None and set(targets.dims) <= set(dims) and targets.dtype.startswith("int"):
            return _emit("sparse_softmax_cross_entropy_with_logits", None, dims, logits.dtype,
                         logits=_raw_name(logits), targets=_raw_name(targets), axis=axis, name="cross_entropy")
        if targets.sparse_dim is None and axis in targets.dims:
            return _norm.dense_cross_entropy(cls, logits=logits, targets=targets, axis=axis)
        return _make("softmax_ce", [logits, targets], dims, logits.dtype, opts={"axis": axis},
                     name="cross_entropy")

    @staticmethod
    def ctc_loss(*, logits, targets, input_spatial_dim, targets_spatial_dim, blank_index, max_approx=False):
        return _norm.ctc_loss(logits=logits, targets=targets, input_spatial_dim=input_spatial_dim,
                              targets_spatial_dim=targets_spatial_dim, blank_index=blank_index, max_approx=max_approx)

    # ---- random ----
    @staticmethod
    def dropout(source, drop_prob, *, axis=None, on_forward=False):
        if not isinstance(drop_prob, (float, int)):  # e.g. a Tensor
            return _make("dropout", [source], source.dims, source.dtype,
                         opts={"rate": drop_prob, "axes": axis, "on_forward": on_forward})
        axes = [axis] if isinstance(axis, Dim) else list(axis or ())
        opts = {}
        if axes and any(d not in axes and not d.is_batch_dim() for d in source.dims):
            opts["dropout_noise_shape"] = {"*": None, **{d: 1 for d in source.dims
                                                          if d not in axes and not d.is_batch_dim()}}
        return _emit("dropout", [source], source.dims, source.dtype, sparse_dim=source.sparse_dim,
                     dropout=drop_prob, dropout_on_forward=on_forward, **opts)

    @staticmethod
    def random(*, dims, dtype, distribution, mean=None, stddev=None, bound=None, minval=None, maxval=None,
               seed=None, sparse_dim=None, device=None):  # (device: no meaning for layers)
        return _norm.random(dims=dims, dtype=dtype, distribution=distribution, mean=mean, stddev=stddev, bound=bound,
                            minval=minval, maxval=maxval, seed=seed, sparse_dim=sparse_dim)

    # ---- nn ----
    @staticmethod
    def batch_norm(source, *, in_dim, running_mean, running_variance, gamma, beta, epsilon, momentum, affine,
                   use_mask):
        return _norm.batch_norm(source, in_dim=in_dim, running_mean=running_mean, running_variance=running_variance,
                                gamma=gamma, beta=beta, epsilon=epsilon, momentum=momentum, affine=affine,
                                use_mask=use_mask)

    @staticmethod
    def conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter, filter_size,  # noqa
             padding, strides=1, dilation_rate=1, groups=None, bias=None):
        n = len(in_spatial_dims)
        strides = tuple(strides) if isinstance(strides, (list, tuple)) else (strides or 1,) * n
        dilation_rate = tuple(dilation_rate) if isinstance(dilation_rate, (list, tuple)) else (dilation_rate,) * n
        dims = [out_spatial_dims[in_spatial_dims.index(d)] if d in in_spatial_dims else
                (out_dim if d == in_dim else d) for d in source.dims]
        if _conv_layer_fits(source, in_dim, in_spatial_dims) and not groups and isinstance(padding, str) and \
                in_dim != out_dim:  # (a filter [d, d, k]: its axes by position, in the conv op)
            perm = {i: d for i, d in enumerate(list(filter_size) + [in_dim, out_dim])}
            opts = {"filter": _raw_name(filter), "filter_perm": perm, "filter_size": [d.dimension for d in filter_size],
                    "padding": padding.lower(), "strides": list(strides), "dilation_rate": list(dilation_rate),
                    "out_dim": out_dim, "in_spatial_dims": list(in_spatial_dims),
                    "out_spatial_dims": list(out_spatial_dims), "with_bias": bias is not None}
            if bias is not None:
                opts["bias"] = _raw_name(bias)
            return _emit("conv", [source], dims, source.dtype, **opts)
        return _make("conv", [source, filter] + ([bias] if bias is not None else []), dims, source.dtype,
                     opts={"in_dim": in_dim, "out_dim": out_dim, "in_spatial_dims": list(in_spatial_dims),
                           "out_spatial_dims": list(out_spatial_dims), "filter_size": list(filter_size),
                           "padding": padding.lower() if isinstance(padding, str) else list(padding),
                           "strides": strides, "dilation_rate": dilation_rate, "groups": groups or 1})

    @staticmethod
    def transposed_conv(source, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims, filter,  # noqa: A002
                        filter_size, padding, remove_padding, output_padding, strides, bias=None):
        """frontend_op: the transposed_conv layer class takes no filter layer in the rf param's layout."""
        dims = [out_spatial_dims[in_spatial_dims.index(d)] if d in in_spatial_dims else
                (out_dim if d == in_dim else d) for d in source.dims]
        return _make("transposed_conv", [source, filter] + ([bias] if bias is not None else []), dims, source.dtype,
                     opts={"in_dim": in_dim, "out_dim": out_dim, "in_spatial_dims": list(in_spatial_dims),
                           "out_spatial_dims": list(out_spatial_dims), "filter_size": list(filter_size),
                           "padding": padding, "remove_padding": list(remove_padding),
                           "output_padding": list(output_padding), "strides": list(strides)})

    @staticmethod
    def stft(x, *, in_spatial_dim, frame_step, frame_size, fft_length, frame_pad_left, window, out_spatial_dim,
             out_dim):
        """frontend_op: the stft layer class has no window placement / frame size options of rf.stft."""
        dims = [d for d in x.dims if d != in_spatial_dim] + [out_spatial_dim, out_dim]
        return _make("stft", [x], dims, "complex64",
                     opts={"in_spatial_dim": in_spatial_dim, "out_spatial_dim": out_spatial_dim, "out_dim": out_dim,
                           "frame_step": frame_step, "frame_size": frame_size, "fft_length": fft_length,
                           "frame_pad_left": frame_pad_left, "window": [float(v) for v in window]})

    @staticmethod
    def top_k(source, *, axis, k, k_dim, sorted=True):
        """frontend_op: the top_k layer class takes one axis (rf.top_k also flattens several)."""
        rest = [d for d in source.dims if d not in axis]
        values = _make("top_k", [source], rest + [k_dim], source.dtype,
                       opts={"axes": list(axis), "k": k, "k_dim": k_dim, "sorted": sorted})
        indices = [_make("extra", [values], rest + [k_dim], "int32", sparse_dim=d,
                         opts={"key": "indices%i" % i, "dims": rest + [k_dim]}, name="top_k_indices")
                   for i, d in enumerate(axis)]
        return values, indices

    @staticmethod
    def edit_distance(a, a_spatial_dim, b, b_spatial_dim, *, batch_dims, dtype):
        """frontend_op: the edit_distance layer class takes [B, T] sparse inputs only."""
        return _make("edit_distance", [a, b], batch_dims, dtype,
                     opts={"a_spatial_dim": a_spatial_dim, "b_spatial_dim": b_spatial_dim,
                           "batch_dims": list(batch_dims)})

    @staticmethod
    def random_choice_with_replacement(dims, *, probs, axis, common):
        """frontend_op: tf.random.categorical (no layer class samples from given probs)."""
        return _make("random_choice", [probs], list(dims), "int32", sparse_dim=axis,
                     opts={"axis": axis, "common": list(common)})

    @staticmethod
    def pool(source, *, mode, pool_size, padding="valid", dilation_rate=1, strides, in_spatial_dims,
             out_spatial_dims=None):
        rest = [d for d in source.dims if d not in in_spatial_dims]
        feat = source.feature_dim if source.feature_dim in rest and not source.feature_dim.is_batch_dim() else None
        if feat is None:
            raise FrontendError("rf.pool at %s: the input %s needs a feature dim" % (call_site(), dims_str(source.dims)))
        dims = [out_spatial_dims[in_spatial_dims.index(d)] if d in in_spatial_dims else d for d in source.dims]
        if _conv_layer_fits(source, feat, in_spatial_dims) and isinstance(padding, str):
            return _emit("pool", [source], dims, source.dtype, mode=mode, pool_size=list(pool_size),
                         padding=padding.lower(), dilation_rate=list(dilation_rate), strides=list(strides),
                         in_spatial_dims=list(in_spatial_dims), out_spatial_dims=list(out_spatial_dims),
                         name=mode + "_pool")
        return _make("pool", [source], dims, source.dtype,
                     opts={"mode": mode, "pool_size": tuple(pool_size),
                           "padding": padding.lower() if isinstance(padding, str) else list(padding),
                           "dilation_rate": tuple(dilation_rate), "strides": tuple(strides),
                           "in_spatial_dims": list(in_spatial_dims), "out_spatial_dims": list(out_spatial_dims),
                           "in_dim": feat}, name=mode + "_pool")

    @staticmethod
    def lstm(source, *, state_h, state_c, ff_weight, rec_weight, bias, spatial_dim, in_dim, out_dim):
        """A ``rec`` layer with the nativelstm2 unit and the rf params (see _lstm.py); frontend_op for other dims."""
        from ..data import single_step_dim
        from ._lstm import lstm_layers

        res = lstm_layers(source, state_h=state_h, state_c=state_c, ff_weight=ff_weight, rec_weight=rec_weight,
                          bias=bias, spatial_dim=spatial_dim, in_dim=in_dim, out_dim=out_dim)
        if res is not None:
            return res
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
    def scan(*, spatial_dim, initial, xs, ys, body, cond=None, cond_dims=None, cond_before_body=True, max_seq_len=None):
        from ._loop import scan, scan_cond

        if cond is not None:
            return scan_cond(spatial_dim=spatial_dim, initial=initial, ys=ys, body=body, cond=cond,
                             cond_dims=cond_dims, cond_before_body=cond_before_body, max_seq_len=max_seq_len)
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
        if get_current_builder().parent is not None:  # in a loop body: the per-frame layers are not output layers
            return _transposed(tensor, dims, "transpose", name=name, absolute=True)
        return _transposed(tensor, dims, "transpose", name=name, absolute=True, is_output_layer=True)

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
        elif not _loss_norm_is_frames(x.dims):
            # the loss layer normalizes by the number of frames; rf by the number of elements (all dims, masked)
            from ..frontend import array_, math_

            n = math_.num_elements_of_shape(x.dims)
            opts["custom_inv_norm_factor"] = _raw_name(n if is_tensor(n) else array_.convert_to_tensor(n))
        extra = {"loss": "as_is_error" if loss.as_error else "as_is", "loss_scale": loss.scale}
        if opts:
            extra["loss_opts"] = opts
        d = {"class": "copy", "from": [_raw_name(x)], **extra}
        from ..layers.base import OutShape

        d["out_shape"] = OutShape(x.dims, x.dtype, x.sparse_dim, loss.call_site)
        builder.add_layer(loss.name, d, absolute=True)


def _loss_norm_is_frames(dims):
    """Whether the loss layer's own norm (frames: batch x the lengths of one dynamic dim) is rf's element count."""
    rest = [d for d in dims if not d.is_batch_dim()]
    return len(rest) < len(dims) and (not rest or (len(rest) == 1 and rest[0].dimension is None))


def _lstm_state_dims(state_dims, out_dim):
    return [d for d in state_dims if d != out_dim] + [out_dim]


# combine kinds of the combine layer with the rf semantics; others (and mixed dtypes) stay frontend_op
_COMBINE_LAYER_KINDS = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "maximum", "minimum", "logical_and",
                        "logical_or", "squared_difference"}
_SWAPPED = {"less": "greater", "greater": "less", "less_equal": "greater_equal", "greater_equal": "less_equal"}
_REDUCE_LAYER_MODES = {"sum", "max", "min", "mean", "logsumexp", "prod", "any", "all", "argmax", "argmin"}
_ACTIVATIONS = {"relu_square": "tf.square(tf.nn.relu(x))", "gelu": "tf.nn.gelu(x, approximate=False)"}


def _scalar(v):
    return v.tolist() if hasattr(v, "tolist") else v


def _broadcast_all_opts(a, b):
    """
    ``allow_broadcast_all_sources`` where neither operand has all dims of the result: the combine/compare layer then
    broadcasts by dims only, as rf (without it, the layer matches the sources' feature axes).
    """
    if not (is_tensor(a) and is_tensor(b)):
        return {}
    sa, sb = set(a.dims), set(b.dims)
    return {} if sa <= sb or sb <= sa else {"allow_broadcast_all_sources": True}


_DTYPE_RANK = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _promoted(backend, a, b, kind):
    """
    Operands of one dtype (as the torch backend: int with float -> the float dtype, the wider of two ints or floats;
    int truediv -> float32), the others cast by a ``cast`` layer; and that dtype.
    """
    ta, tb, orig_a = is_tensor(a), is_tensor(b), a
    dtype = (a if ta else b).dtype
    if ta and tb and a.dtype != b.dtype and a.dtype in _DTYPE_RANK and b.dtype in _DTYPE_RANK:
        dtype = max(a.dtype, b.dtype, key=_DTYPE_RANK.index)
    if kind == "truediv" and not dtype.startswith("float"):
        dtype = "float32"
    if ta and a.dtype != dtype:
        a = backend.cast(a, dtype)
    if tb and b.dtype != dtype:
        b = a if b is orig_a else backend.cast(b, dtype)
    return a, b, dtype


def _combine_op(a, kind, b, dims, dtype, sparse, operand_dtype=None):
    sources, (sa, sb) = _operands([a, b])
    return _make("combine", sources, dims, dtype, sparse_dim=sparse,
                 opts={"kind": kind, "a": sa, "b": sb, "dtype": operand_dtype or dtype}, name=kind)


def _broadcast_to(x, dims):
    """
    x broadcast to dims (a superset): ``combine`` (add, logical_or for bool) with a fill of the neutral value over the
    missing dims (a ``constant`` layer, see ``full``); None where that fill would not be a constant layer.
    """
    missing = [d for d in dims if d not in x.dims]
    if not missing:
        return ReturnnLayersBackend.copy(x)
    if any(d.dimension is None and not d.is_batch_dim() and _dim_source(d) is None for d in missing) or \
            get_current_builder().parent is not None:
        return None
    neutral = False if x.dtype == "bool" else 0
    zeros = ReturnnLayersBackend.full(missing, neutral, dtype=x.dtype)
    return _emit("combine", [x, zeros], dims, x.dtype, kind="logical_or" if x.dtype == "bool" else "add",
                 name="broadcast", **_broadcast_all_opts(x, zeros))


def _switch_layer_fits(dims, values):
    """
    Whether the switch layer gives rf.where's dims: its output is the common data of its inputs, matched the
    classic way (e.g. two feature axes of other sizes are refused, axes of equal static size may pair); else the
    ``frontend_op`` where, which matches by Dim only.
    """
    try:
        common = Data.get_common_data([v for v in values if is_tensor(v)])
    except ValueError:
        return False
    return common is not None and len(common.dims) == len(dims) and set(common.dims) == set(dims)


def _switch_value(v, dtype):
    """A layer name, or a Python scalar of dtype (the switch layer takes constants as they are)."""
    if is_tensor(v):
        return _raw_name(v)
    v = _scalar(v)
    if dtype == "float32" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if dtype == "int32" and isinstance(v, int) and not isinstance(v, bool) or dtype == "bool" and isinstance(v, bool):
        return v
    return _const(v, dtype)


def _transposed(tensor, dims, name_, name=None, **kwargs):
    """
    tensor with exactly the dim order ``dims`` (a ``transpose`` layer): the layers' outputs have the rf Tensor's
    dims, but not necessarily in its order (the layer classes choose it), so the order is made explicit here.
    """
    dims = list(dims)
    return _emit("transpose", [tensor], dims, tensor.dtype, sparse_dim=tensor.sparse_dim,
                 perm={i: d for i, d in enumerate(dims)}, name=name or name_, **kwargs)


def _conv_layer_fits(source, in_dim, in_spatial_dims):
    """
    Whether the conv/pool layer sees in_dim as the input's feature axis: the input is [batch, spatial..., in_dim]
    and in_dim is its only static axis (the layer takes the last static axis as the feature axis; its ``in_dim``
    option is refused).
    """
    return set(source.dims) == {batch_dim, in_dim, *in_spatial_dims} and len(source.dims) == len(in_spatial_dims) + 2 \
        and all(d.dimension is None for d in in_spatial_dims)

