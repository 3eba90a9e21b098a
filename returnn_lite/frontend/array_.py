"""rf array ops: constants, concat, pad, gather, slice/split, merge_dims/split_dims, expand_dim/squeeze, ranges."""

from __future__ import annotations

from ._backend import get_backend_for_tensor, get_selected_backend
from ._utils import as_dims, check_dims_in, dims_str, error, is_tensor


def convert_to_tensor(value, *, dims=None, dtype=None, sparse_dim=None, shape=None, device=None,
                      keep_scalar_on_cpu=False, name=None, _backend=None):
    """
    A Tensor from a Python/numpy value (dims must match its shape; ``shape`` is the old name of dims; a numpy
    array without dims gets a new static dim per axis); a Tensor is returned as it is. keep_scalar_on_cpu: a Python
    scalar stays on the CPU whatever the device.
    """
    if is_tensor(value):
        return value
    if dims is None:
        dims = shape
    if dims is None:
        from ..tensor import Dim

        dims = [Dim(int(n), name="%s_dim%i" % (name or "const", i)) for i, n in enumerate(getattr(value, "shape", ()))]
    if keep_scalar_on_cpu and isinstance(value, (int, float, bool)):
        device = "cpu"
    if dtype is None:
        dtype = "float32" if isinstance(value, float) else "bool" if isinstance(value, bool) else \
            "int32" if isinstance(value, int) else str(getattr(value, "dtype", "float32"))
    return (_backend or get_selected_backend()).convert_to_tensor(
        value, dims=list(dims), dtype=dtype, sparse_dim=sparse_dim, name=name, device=device)


constant = convert_to_tensor


def full(*, dims, fill_value, dtype=None, sparse_dim=None, feature_dim=None, device=None):
    if dtype is None:
        dtype = fill_value.dtype if is_tensor(fill_value) else "float32" if isinstance(fill_value, float) else \
            "bool" if isinstance(fill_value, bool) else "int32"
    return get_selected_backend().full(list(dims), fill_value, dtype=dtype, sparse_dim=sparse_dim,
                                       feature_dim=feature_dim, device=device)


def zeros(dims, *, dtype="float32", sparse_dim=None, feature_dim=None, device=None):
    return full(dims=dims, fill_value=0, dtype=dtype, sparse_dim=sparse_dim, feature_dim=feature_dim, device=device)


def ones(dims, *, dtype="float32", sparse_dim=None, feature_dim=None, device=None):
    return full(dims=dims, fill_value=1, dtype=dtype, sparse_dim=sparse_dim, feature_dim=feature_dim, device=device)


def zeros_like(x):
    return zeros(x.dims, dtype=x.dtype, sparse_dim=x.sparse_dim, device=x.device)


def ones_like(x):
    return ones(x.dims, dtype=x.dtype, sparse_dim=x.sparse_dim, device=x.device)


def copy(x):
    return get_backend_for_tensor(x).copy(x)


def stop_gradient(x):
    return get_backend_for_tensor(x).stop_gradient(x)


def range_over_dim(dim, *, dtype=None, device=None):
    """[dim] -> 0, 1, ..., (int32, sparse_dim=dim)."""
    return get_selected_backend().range_over_dim(dim, dtype=dtype or "int32", device=device)


def dim_value(dim):
    """Scalar Tensor: the size of a static dim, the padded length of a dynamic one, the batch size."""
    return get_selected_backend().dim_value_tensor(dim)


def sequence_mask(dims, *, device=None):
    """Bool Tensor, True within the sequence lengths of the dynamic dims among ``dims`` (on ``device``, default:
    rf's default device; the lengths are copied there)."""
    from . import math_

    mask = None
    for d in as_dims(dims):
        if d.dimension is not None or d.is_batch_dim():
            continue
        positions = range_over_dim(d, device=device)
        m = math_.compare(positions, "less", d.get_size_tensor(device=positions.device),
                          allow_broadcast_all_sources=True)
        mask = m if mask is None else math_.logical_and(mask, m, allow_broadcast_all_sources=True)
    return mask


def concat(*sources, allow_broadcast=False, out_dim=None):
    """concat((x, x_dim), (y, y_dim), ..., out_dim=) -> (Tensor, out_dim); out_dim defaults to the sum of dims."""
    if not sources:
        raise error("concat", "no sources")
    for src in sources:
        if not (isinstance(src, (tuple, list)) and len(src) == 2 and is_tensor(src[0])):
            raise error("concat", "sources must be (Tensor, Dim) pairs, got %r" % (src,))
        check_dims_in("concat", src[0], [src[1]])
    if out_dim is None:
        out_dim = sources[0][1]
        for _, d in sources[1:]:
            out_dim = out_dim + d
    else:
        total = sum(d.dimension for _, d in sources) if all(d.dimension is not None for _, d in sources) else None
        if out_dim.dimension is not None and total is not None and out_dim.dimension != total:
            raise error("concat", "out_dim %s does not match the sum %i of the concatenated dims %s" % (
                out_dim.short_repr(), total, dims_str([d for _, d in sources])))
    others = None
    for x, d in sources:
        rest = set(x.dims) - {d}
        if others is None:
            others = rest
        elif rest != others and not allow_broadcast:
            raise error("concat", "the other dims of the sources differ: %s (use allow_broadcast=True)" % (
                "; ".join("%s %s" % (x.name, dims_str(x.dims)) for x, _ in sources)))
    out = get_backend_for_tensor(sources[0][0]).concat(*sources, allow_broadcast=allow_broadcast, out_dim=out_dim)
    return out, out_dim


def concat_features(*sources, allow_broadcast=False):
    pairs = [(x, x.feature_dim) for x in sources]
    return concat(*pairs, allow_broadcast=allow_broadcast)[0]


def pad(source, *, axes, padding, out_dims=None, mode="constant", value=None, handle_dynamic_dims=None):
    """
    Pad each of ``axes`` by (left, right) ints; -> (Tensor, out_dims) with ``left + dim + right`` dims.
    handle_dynamic_dims (default: True from behavior version 21, else False, as the original): True puts the right
    padding after each sequence's end, False after the padded end (the frames in between keep the source's padding
    values).
    """
    axes = as_dims(axes)
    check_dims_in("pad", source, axes)
    padding = [tuple(p) for p in padding]
    if len(padding) != len(axes):
        raise error("pad", "%i axes but %i paddings" % (len(axes), len(padding)))
    for p in padding:
        if not all(isinstance(v, int) for v in p):
            raise error("pad", "only int paddings are supported, got %r" % (p,))
    if mode not in ("constant", "reflect", "replicate"):
        raise error("pad", "unknown mode %r" % mode)
    if handle_dynamic_dims is None:  # as the original: True from behavior version 21 on
        from ..compat.util_basic import BehaviorVersion

        handle_dynamic_dims = BehaviorVersion.get() >= 21
    if out_dims is None:
        # (handle_dynamic_dims=False with right padding of a dynamic dim: each sequence's length grows by
        # left + right, the pad values follow the padded end, as the original's torch backend)
        out_dims = [left + a + right if (left or right) else a for a, (left, right) in zip(axes, padding)]
    else:
        out_dims = list(out_dims)
        for a, (left, right), o in zip(axes, padding, out_dims):
            if a.dimension is not None and o.dimension is not None and o.dimension != a.dimension + left + right:
                raise error("pad", "out dim %s does not match %s padded by %r" % (
                    o.short_repr(), a.short_repr(), (left, right)))
            if o.dimension is None and o is not a and o.derived_from is None and \
                    o.dyn_size is None and a.dimension is None:
                o.derived_from = ("add", (a, left + right))
    out = get_backend_for_tensor(source).pad(
        source, axes=axes, padding=padding, out_dims=out_dims, handle_dynamic_dims=handle_dynamic_dims, mode=mode,
        value=0 if value is None else value)
    return out, out_dims


def gather(source, *, indices, axis=None, clip_to_valid=False):
    """
    source[..., indices, ...] along axis: the axis is replaced by the dims of indices that the source lacks, or the
    axis itself (int indices: the axis is removed); the other common dims are batch dims.
    clip_to_valid: indices clipped into [0, size - 1], per sequence for a dynamic axis (as the original).
    """
    if axis is None:
        if is_tensor(indices) and indices.sparse_dim is not None and indices.sparse_dim in source.dims:
            axis = indices.sparse_dim
        else:
            raise error("gather", "axis not given and indices have no sparse dim of the source")
    check_dims_in("gather", source, [axis])
    if is_tensor(indices) and not indices.dtype.startswith(("int", "uint")):
        raise error("gather", "indices must be int, got dtype %s" % indices.dtype)
    if clip_to_valid and isinstance(indices, int) and axis.dimension is None and not axis.is_batch_dim():
        raise error("gather", "clip_to_valid with the int index %i on the dynamic axis %s: the per-sequence "
                    "lengths need indices with their dims (e.g. a Tensor with the batch dim)" % (
                        indices, axis.short_repr()))
    # indices may have the gathered axis itself (e.g. range_over_dim(axis) + 1): the output keeps it from there
    return get_backend_for_tensor(source).gather(source, indices=indices, axis=axis, clip_to_valid=clip_to_valid)


def slice(source, *, axis, start=None, end=None, step=None, size=None, out_dim=None):  # noqa: A001
    """Static slice [start:end:step] of axis -> (Tensor, out_dim)."""
    from ..tensor import Dim

    check_dims_in("slice", source, [axis])
    if is_tensor(start):  # e.g. a learned rel-pos table cut around its center: [start:start + size]
        if start.dims or not start.dtype.startswith(("int", "uint")) or not isinstance(size, Dim) or \
                end is not None or step not in (None, 1):
            raise error("slice", "a Tensor start must be a scalar int Tensor with size given as a Dim (no end/step), "
                        "got start=%r size=%r end=%r step=%r" % (start, size, end, step))
        out = get_backend_for_tensor(source).slice(source, axis=axis, start=start, end=None, step=None, size=size,
                                                   out_dim=size)
        return out, size
    for v in (start, end, step):
        if v is not None and not isinstance(v, int):
            raise error("slice", "only int start/end/step (or a scalar Tensor start with a Dim size) are supported, "
                        "got %r" % (v,))
    if isinstance(size, Dim):
        out_dim = size
        end = (start or 0) + size.dimension if size.dimension is not None else end
    elif isinstance(size, int):
        end = (start or 0) + size
    if axis.dimension is None or (isinstance(size, Dim) and size.dimension is None):
        return _slice_dynamic(source, axis=axis, start=start, end=end, step=step, size=size, out_dim=out_dim)
    n = len(range(axis.dimension)[start:end:step])
    if out_dim is None:
        out_dim = Dim(n, name="%s:slice" % axis.description)
    elif out_dim.dimension != n:
        raise error("slice", "out_dim %s does not match the slice size %i" % (out_dim.short_repr(), n))
    out = get_backend_for_tensor(source).slice(source, axis=axis, start=start, end=end, step=step, size=None,
                                               out_dim=out_dim)
    return out, out_dim


def _slice_dynamic(source, *, axis, start, end, step, size, out_dim):
    """Slices of a dynamic axis: ``[start:]`` (-> axis - start) or ``[start:start + size]`` with a Dim size (padded
    lengths; the size Dim keeps its own lengths)."""
    from ..tensor import Dim

    start = start or 0
    if step not in (None, 1) or start < 0:
        raise error("slice", "a dynamic axis %s supports start >= 0 and step 1 only, got start=%r step=%r" % (
            axis.short_repr(), start, step))
    backend = get_backend_for_tensor(source)
    if isinstance(size, Dim):
        out = backend.slice(source, axis=axis, start=start, end=None, step=None, size=size, out_dim=size)
        return out, size
    if end is not None or size is not None:
        raise error("slice", "a dynamic axis %s supports end/size only as a Dim size, got end=%r size=%r" % (
            axis.short_repr(), end, size))
    if out_dim is None:
        out_dim = axis - start if start else axis.copy(same_as_self=False, description="%s:slice" % axis.description)
        if not start:
            out_dim.derived_from = ("add", (axis, 0))
    return backend.slice(source, axis=axis, start=start, end=None, step=None, size=None, out_dim=out_dim), out_dim


def split(source, *, axis, out_dims):
    """Split axis into consecutive parts of the sizes of out_dims (which must sum up to it)."""
    check_dims_in("split", source, [axis])
    out_dims = list(out_dims)
    if any(d.dimension is None for d in out_dims) or axis.dimension is None:
        raise error("split", "only static dims are supported: %s -> %s" % (axis.short_repr(), dims_str(out_dims)))
    if sum(d.dimension for d in out_dims) != axis.dimension:
        raise error("split", "out dims %s do not sum up to %s" % (dims_str(out_dims), axis.short_repr()))
    return tuple(get_backend_for_tensor(source).split(source, axis=axis, out_dims=out_dims))


def merge_dims(source, *, dims, out_dim=None):
    """Flatten ``dims`` (in this order) into one dim -> (Tensor, out_dim)."""
    dims = list(dims)
    check_dims_in("merge_dims", source, dims)
    if out_dim is None:  # the product dim, as the original: merging [a, b] gives a * b (the same Dim each time)
        out_dim = dims[0]
        for d in dims[1:]:
            out_dim = out_dim * d
    out = get_backend_for_tensor(source).merge_dims(source, dims=dims, out_dim=out_dim)
    return out, out_dim


def split_dims(source, *, axis, dims, pad_to_multiples=None, pad_value=None):
    """Split ``axis`` into ``dims`` (row-major); at most one of dims may be dynamic. pad_to_multiples: a static axis
    is padded at the end (with pad_value, default 0) to the product of the (static) dims first."""
    dims = list(dims)
    check_dims_in("split_dims", source, [axis])
    static = [d.dimension for d in dims if d.dimension is not None]
    if pad_to_multiples and axis.dimension is not None:
        # (a static axis padded at the end, with pad_value (default 0), to the product of the static dims)
        n = 1
        for v in static:
            n *= v
        if len(static) < len(dims) or n < axis.dimension:
            raise error("split_dims", "pad_to_multiples of %s: dims %s must be static and multiply to at least its size"
                        % (axis.short_repr(), dims_str(dims)))
        if n > axis.dimension:
            source, (axis,) = pad(source, axes=[axis], padding=[(0, n - axis.dimension)],
                                  value=0 if pad_value is None else pad_value)
    elif pad_value is not None:
        raise error("split_dims", "pad_value is only used with pad_to_multiples=True on a static axis (axis %s)" %
                    axis.short_repr())
    if axis.dimension is not None:
        n = 1
        for s in static:
            n *= s
        if len(static) == len(dims) and n != axis.dimension:
            raise error("split_dims", "dims %s do not multiply to %s" % (dims_str(dims), axis.short_repr()))
    elif len(static) < len(dims) - 1:
        raise error("split_dims", "at most one of the dims %s may be dynamic" % dims_str(dims))
    return get_backend_for_tensor(source).split_dims(source, axis=axis, dims=dims)


def reshape(source, in_dims, out_dims):
    check_dims_in("reshape", source, list(in_dims))
    return get_backend_for_tensor(source).reshape(source, list(in_dims), list(out_dims))


def expand_dim(source, dim):
    """Add ``dim`` (broadcast: the values are repeated along it)."""
    if dim in source.dims:
        raise error("expand_dim", "%s already has dim %s" % (dims_str(source.dims), dim.short_repr()))
    return get_backend_for_tensor(source).expand_dim(source, dim)


def expand_dims(source, dims):
    for d in dims:
        source = expand_dim(source, d)
    return source


def squeeze(source, axis):
    check_dims_in("squeeze", source, [axis])
    if axis.dimension != 1:
        raise error("squeeze", "axis %s has not size 1" % axis.short_repr())
    return get_backend_for_tensor(source).squeeze(source, axis)


def replace_dim(source, *, in_dim, out_dim=None):
    """The same values with ``in_dim`` replaced by ``out_dim`` (same size; new dim by default) -> (Tensor, out_dim)."""
    from ..tensor import Dim

    check_dims_in("replace_dim", source, [in_dim])
    if out_dim is None:
        out_dim = in_dim.copy(same_as_self=False, description="%s:replaced" % in_dim.description)
        if in_dim.dimension is None:
            out_dim.derived_from = ("add", (in_dim, 0))
    if not isinstance(out_dim, Dim):
        raise error("replace_dim", "out_dim must be a Dim")
    return get_backend_for_tensor(source).replace_dim(source, in_dim=in_dim, out_dim=out_dim), out_dim


def cum_concat_step(source, *, prev_accum, axis, out_spatial_dim=None):
    """prev_accum (with axis) and the frame source appended -> (accumulated, its new axis); default new axis:
    ``axis + 1`` (the layers backend: inside a loop body, a new dynamic dim growing per step)."""
    check_dims_in("cum_concat_step", prev_accum, [axis])
    if out_spatial_dim is None:
        out_spatial_dim = axis + 1
    res = get_backend_for_tensor(prev_accum).cum_concat_step(source, prev_accum=prev_accum, axis=axis,
                                                             out_spatial_dim=out_spatial_dim)
    return res, res.dims[list(prev_accum.dims).index(axis)]


def stack(sources, *, out_dim=None):
    """Tensors with the same dims stacked along a new (static) dim -> (Tensor, out_dim)."""
    from ..tensor import Dim

    sources = list(sources)
    if not sources or not all(is_tensor(s) for s in sources):
        raise error("stack", "expects a non-empty sequence of Tensors, got %r" % (sources,))
    if out_dim is None:
        out_dim = Dim(len(sources), name="stack")
    elif out_dim.dimension != len(sources):
        raise error("stack", "out_dim %s does not match the number of sources %i" % (
            out_dim.short_repr(), len(sources)))
    parts = []
    for i, s in enumerate(sources):
        one = Dim(1, name="stack%i" % i)
        parts.append((expand_dim(s, one), one))
    out, _ = concat(*parts, allow_broadcast=True, out_dim=out_dim)
    return out, out_dim


def last_frame_position_of_dim(dim, *, device=None, allow_scalar_on_cpu=True):
    """Index of the last frame of ``dim``: an int for a static dim (0 if empty), else size - 1 (at least 0)."""
    from . import math_

    if dim.dimension is not None:
        return max(dim.dimension - 1, 0)
    return math_.maximum(dim.get_size_tensor() - 1, 0)


def shift_right(source, *, axis, pad_value, amount=1):
    """source shifted right by amount frames along axis (the first frames are pad_value); the same dims."""
    padded, (padded_dim,) = pad(source, axes=[axis], padding=[(amount, 0)], value=pad_value)
    return slice(padded, axis=padded_dim, size=axis)[0]


def reverse_sequence(tensor, *, axis, handle_dynamic_dims=True):
    """
    tensor reversed along axis; for a dynamic axis per sequence within its length (``a b c <pad>`` -> ``c b a <pad>``)
    with handle_dynamic_dims, else over the padded length (-> ``<pad> c b a``).
    """
    from . import math_

    check_dims_in("reverse_sequence", tensor, [axis])
    positions = range_over_dim(axis)
    if handle_dynamic_dims and axis.dimension is None and not axis.is_batch_dim():
        size = axis.get_size_tensor()
        indices = math_.combine(size - 1, "-", positions, allow_broadcast_all_sources=True)
        return gather(tensor, indices=indices, axis=axis, clip_to_valid=True)
    return gather(tensor, indices=axis.get_dim_value_tensor() - 1 - positions, axis=axis)


def sparse_to_dense(labels, *, label_value, other_value, axis=None):
    """Dense over ``axis`` (default: the labels' sparse dim): label_value where the position is the label, else
    other_value (one_hot is label_value 1.0, other_value 0.0)."""
    from . import math_

    labels = convert_to_tensor(labels)
    if axis is None:
        if labels.sparse_dim is None:
            raise error("sparse_to_dense", "needs axis= or labels with a sparse dim, got %r" % (labels,))
        axis = labels.sparse_dim
    hit = math_.compare(labels, "equal", range_over_dim(axis, dtype=labels.dtype), allow_broadcast_all_sources=True)
    return math_.where(hit, label_value, other_value, allow_broadcast_all_sources=True)


def one_hot(source):
    """float32 one-hot of the sparse source over its sparse dim."""
    return sparse_to_dense(source, label_value=1.0, other_value=0.0)


def window(source, *, spatial_dim, window_dim, window_right=None, window_left=None, padding="same", pad_value=None,
           stride=1):
    """
    -> (windows, out_spatial_dim): windows[t, w] = source[t * stride + w - window_left] over ``window_dim`` frames,
    pad_value (default 0) outside the sequence (its length for a dynamic dim). padding "same": out_spatial_dim is
    spatial_dim (ceil(len / stride) with a stride), window_left/right default to the window centered (left gets
    the smaller half); "valid": no padding, out_spatial_dim = spatial_dim - window + 1 (then strided).
    """
    from . import math_

    check_dims_in("window", source, [spatial_dim])
    if window_dim.dimension is None:
        raise error("window", "window_dim must be static, got %s" % window_dim.short_repr())
    size = window_dim.dimension
    as_int = [v.dimension if hasattr(v, "dimension") else v for v in (window_left, window_right)]
    if any(v is not None and not isinstance(v, int) for v in as_int):
        raise error("window", "window_left/window_right must be ints or static Dims, got %r" % (as_int,))
    left, right = as_int
    if padding == "same":
        if left is None:
            left = (size - 1) // 2 if right is None else size - right - 1
        out_dim = spatial_dim
    elif padding == "valid":
        if left not in (None, 0) or right not in (None, size - 1):
            raise error("window", "padding='valid' takes no window_left/window_right")
        left, out_dim = 0, spatial_dim - (size - 1)
    else:
        raise error("window", "padding must be 'same' or 'valid', got %r" % (padding,))
    if stride > 1:
        out_dim = out_dim.ceildiv_right(stride)
    starts = range_over_dim(out_dim) * stride if stride > 1 else range_over_dim(out_dim)
    positions = math_.combine(starts - left, "+", range_over_dim(window_dim), allow_broadcast_all_sources=True)
    frames = gather(source, indices=positions, axis=spatial_dim, clip_to_valid=True)
    within = math_.compare(positions, "less", spatial_dim.get_size_tensor(), allow_broadcast_all_sources=True)
    valid = math_.logical_and(positions >= 0, within, allow_broadcast_all_sources=True)
    return math_.where(valid, frames, 0 if pad_value is None else pad_value, allow_broadcast_all_sources=True), out_dim

