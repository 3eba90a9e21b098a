"""rf math: combine/compare (and the operators), activations, reductions over dims (masked), softmax, matmul."""

from __future__ import annotations

from ._backend import get_backend_for_tensor, get_selected_backend
from ._utils import as_dims, broadcast_dims, check_dims_in, dims_str, error, is_tensor

COMBINE_KINDS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "maximum", "minimum", "logical_and",
                 "logical_or", "squared_difference")
COMPARE_KINDS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
_KIND_ALIASES = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
                 "==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater",
                 ">=": "greater_equal", "max": "maximum", "min": "minimum", "div": "truediv", "eq": "equal"}


def _backend_of(*values):
    for v in values:
        if is_tensor(v) and v.placeholder is not None:
            return get_backend_for_tensor(v)
    return get_selected_backend()


def combine(a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
    """Elementwise a <kind> b with broadcasting by dims (one operand must have all dims unless allowed)."""
    kind = _KIND_ALIASES.get(kind, kind)
    if kind not in COMBINE_KINDS:
        raise error("combine", "unknown kind %r (known: %s)" % (kind, ", ".join(COMBINE_KINDS)))
    if not is_tensor(a) and not is_tensor(b):
        raise error("combine", "one of the operands must be a Tensor, got %r and %r" % (a, b))
    broadcast_dims("combine(%r)" % kind, [a, b], bool(allow_broadcast_all_sources), dim_order)
    return _backend_of(a, b).combine(a, kind, b, allow_broadcast_all_sources=allow_broadcast_all_sources,
                                     dim_order=dim_order)


def compare(a, kind, b, *, allow_broadcast_all_sources=None, dim_order=None):
    kind = _KIND_ALIASES.get(kind, kind)
    if kind not in COMPARE_KINDS:
        raise error("compare", "unknown kind %r (known: %s)" % (kind, ", ".join(COMPARE_KINDS)))
    if not is_tensor(a) and not is_tensor(b):
        raise error("compare", "one of the operands must be a Tensor, got %r and %r" % (a, b))
    broadcast_dims("compare(%r)" % kind, [a, b], bool(allow_broadcast_all_sources), dim_order)
    return _backend_of(a, b).compare(a, kind, b, allow_broadcast_all_sources=allow_broadcast_all_sources,
                                     dim_order=dim_order)


def _bin(kind):
    def func(a, b, *, allow_broadcast_all_sources=None):
        return combine(a, kind, b, allow_broadcast_all_sources=allow_broadcast_all_sources)

    func.__name__ = kind
    return func


squared_difference = _bin("squared_difference")
logical_and = _bin("logical_and")
logical_or = _bin("logical_or")
add = _bin("add")
sub = _bin("sub")
mul = _bin("mul")
true_divide = _bin("truediv")
floor_divide = _bin("floordiv")
mod = _bin("mod")
pow = _bin("pow")  # noqa: A001 (the original's name)


def _bin_n(kind):
    def func(a, b, *others, allow_broadcast_all_sources=None):
        res = combine(a, kind, b, allow_broadcast_all_sources=allow_broadcast_all_sources)
        for t in others:
            res = combine(res, kind, t, allow_broadcast_all_sources=allow_broadcast_all_sources)
        return res

    func.__name__ = kind
    return func


maximum = _bin_n("maximum")
minimum = _bin_n("minimum")


def ceil_divide(a, b):
    """ceil(a / b) for ints: -(-a // b)."""
    return -(-a // b)


def opt_logical_or(a, b):
    """a or b, where either may be a Python bool (then no op is created where the result is known)."""
    if isinstance(a, bool):
        return True if a else b
    if isinstance(b, bool):
        return True if b else a
    return logical_or(a, b)


def opt_logical_and(a, b):
    """a and b, where either may be a Python bool."""
    if isinstance(a, bool):
        return b if a else False
    if isinstance(b, bool):
        return a if b else False
    return logical_and(a, b)


def lerp(start, end, weight, *, allow_broadcast_all_sources=False):
    """start + weight * (end - start)."""
    diff = combine(end, "sub", start, allow_broadcast_all_sources=allow_broadcast_all_sources)
    step = combine(diff, "mul", weight, allow_broadcast_all_sources=True)
    return combine(start, "add", step, allow_broadcast_all_sources=True)


def _cmp(kind):
    def func(a, b, *, allow_broadcast_all_sources=None):
        return compare(a, kind, b, allow_broadcast_all_sources=allow_broadcast_all_sources)

    func.__name__ = kind
    return func


equal = _cmp("equal")
not_equal = _cmp("not_equal")
less = _cmp("less")
less_equal = _cmp("less_equal")
greater = _cmp("greater")
greater_equal = _cmp("greater_equal")

ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "abs", "neg",
               "square", "sin", "cos", "softplus", "log_sigmoid", "silu", "elu", "selu", "sign", "floor", "ceil",
               "round", "logical_not", "reciprocal", "relu_square")


def activation(x, func):
    if func == "swish":
        func = "silu"
    if func not in ACTIVATIONS:
        raise error("activation", "unknown activation %r (known: %s)" % (func, ", ".join(ACTIVATIONS)))
    if not is_tensor(x):
        raise error(func, "expects a Tensor, got %r" % (x,))
    return get_backend_for_tensor(x).activation(x, func)


def _act(func):
    def f(x):
        return activation(x, func)

    f.__name__ = func
    return f


relu = _act("relu")
gelu = _act("gelu")
tanh = _act("tanh")
sigmoid = _act("sigmoid")
exp = _act("exp")
expm1 = _act("expm1")
log = _act("log")
log1p = _act("log1p")
sqrt = _act("sqrt")
rsqrt = _act("rsqrt")
abs = _act("abs")  # noqa: A001 (original's name)
neg = _act("neg")
square = _act("square")
sin = _act("sin")
cos = _act("cos")
softplus = _act("softplus")
log_sigmoid = _act("log_sigmoid")
silu = _act("silu")
swish = silu
elu = _act("elu")
selu = _act("selu")
sign = _act("sign")
floor = _act("floor")
ceil = _act("ceil")
round = _act("round")  # noqa: A001
logical_not = _act("logical_not")
reciprocal = _act("reciprocal")
relu_square = _act("relu_square")


def identity(x):
    return x


_SMALLEST_POSITIVE = {"float16": 6e-08, "bfloat16": 9.1835e-41, "float32": 1.4013e-45, "float64": 4.9407e-324}


def safe_log(x, *, eps=None):
    """log(max(x, eps)); eps defaults to the smallest positive number of x's dtype (as the original)."""
    if eps is None:
        eps = _SMALLEST_POSITIVE.get(x.dtype, 1.4013e-45)
    return log(maximum(x, eps))


def cast(x, dtype):
    if not is_tensor(x):
        raise error("cast", "expects a Tensor, got %r" % (x,))
    if x.dtype == dtype:
        return x
    return get_backend_for_tensor(x).cast(x, dtype)


def where(cond, true_, false_, *, allow_broadcast_all_sources=False):
    if not is_tensor(cond):
        raise error("where", "cond must be a Tensor, got %r" % (cond,))
    broadcast_dims("where", [cond, true_, false_], bool(allow_broadcast_all_sources))
    return _backend_of(cond, true_, false_).where(
        cond, true_, false_, allow_broadcast_all_sources=allow_broadcast_all_sources)


def clip_by_value(x, clip_value_min, clip_value_max, *, allow_broadcast_all_sources=False):
    broadcast_dims("clip_by_value", [x, clip_value_min, clip_value_max], bool(allow_broadcast_all_sources))
    return get_backend_for_tensor(x).clip_by_value(
        x, clip_value_min, clip_value_max, allow_broadcast_all_sources=allow_broadcast_all_sources)


# ---- reductions ----
REDUCE_MODES = ("sum", "mean", "max", "min", "logsumexp", "argmax", "argmin", "any", "all", "prod")


def reduce(source, *, mode, axis, use_mask=True):
    """Reduce over the dims ``axis``; padded frames of dynamic dims are masked (neutral element) if use_mask."""
    if mode not in REDUCE_MODES:
        raise error("reduce", "unknown mode %r (known: %s)" % (mode, ", ".join(REDUCE_MODES)))
    if not is_tensor(source):
        raise error("reduce_%s" % mode, "expects a Tensor, got %r" % (source,))
    axes = as_dims(axis)
    check_dims_in("reduce_%s" % mode, source, axes)
    if mode in ("argmax", "argmin") and len(axes) != 1:
        raise error("reduce_%s" % mode, "needs exactly one axis, got %s" % dims_str(axes))
    if not axes:
        return source
    return get_backend_for_tensor(source).reduce(source, mode=mode, axis=axes, use_mask=use_mask)


def _red(mode):
    def f(source, *, axis, use_mask=True):
        return reduce(source, mode=mode, axis=axis, use_mask=use_mask)

    f.__name__ = "reduce_" + mode
    return f


reduce_sum = _red("sum")
reduce_mean = _red("mean")
reduce_max = _red("max")
reduce_min = _red("min")
reduce_logsumexp = _red("logsumexp")
reduce_argmax = _red("argmax")
reduce_argmin = _red("argmin")
reduce_any = _red("any")
reduce_all = _red("all")
reduce_prod = _red("prod")


def num_elements_of_shape(dims, *, use_mask=True, device=None):
    """Number of elements of a tensor with these dims, counting only frames within the sequence lengths (with
    use_mask; else the padded lengths)."""
    dims = as_dims(dims)
    if not use_mask:
        n = 1
        for d in dims:
            n = n * (d.dimension if d.dimension is not None else get_selected_backend().dim_value_tensor(d))
        return n
    static = 1
    for d in dims:
        if d.dimension is not None:
            static *= d.dimension
    batch = [d for d in dims if d.dimension is None and d.is_batch_dim()]
    dyn_non_batch = [d for d in dims if d.dimension is None and not d.is_batch_dim()]
    if not batch and not dyn_non_batch:
        return static
    if dyn_non_batch:
        sizes = None
        for d in dyn_non_batch:
            s = d.get_size_tensor()
            sizes = s if sizes is None else sizes * s
        # summed over the lengths' dims that are among dims (e.g. batch); others (per sequence) stay
        summed = [d for d in sizes.dims if d in dims]
        n = reduce_sum(sizes, axis=summed) if summed else sizes
        if batch and not any(d.is_batch_dim() for d in sizes.dims):
            n = n * get_selected_backend().dim_value_tensor(batch[0])
    else:
        n = get_selected_backend().dim_value_tensor(batch[0])
    return n * static if static != 1 else n


# ---- softmax and matmul ----
def softmax(x, *, axis, use_mask=True):
    check_dims_in("softmax", x, [axis])
    return get_backend_for_tensor(x).softmax(x, axis=axis, use_mask=use_mask)


def log_softmax(x, *, axis, use_mask=True):
    check_dims_in("log_softmax", x, [axis])
    return get_backend_for_tensor(x).log_softmax(x, axis=axis, use_mask=use_mask)


def matmul(a, b, *, reduce, use_mask=True):  # noqa: A002 (original's name)
    """Dot product over the dims ``reduce`` (in both a and b); other common dims are kept (batched)."""
    if not is_tensor(a) or not is_tensor(b):
        raise error("matmul", "expects two Tensors, got %r and %r" % (a, b))
    reduce = as_dims(reduce)
    check_dims_in("matmul", a, reduce, what="reduce dim")
    check_dims_in("matmul", b, reduce, what="reduce dim")
    return _backend_of(a, b).matmul(a, b, reduce=reduce, use_mask=use_mask)


def dot(a, b, *, reduce, use_mask=True):  # noqa: A002
    return matmul(a, b, reduce=reduce, use_mask=use_mask)


def combine_bc(a, kind, b, *, dim_order=None):
    """combine with broadcasting of all sources allowed (e.g. [T] * [F] -> [T,F])."""
    return combine(a, kind, b, allow_broadcast_all_sources=True, dim_order=dim_order)


def compare_bc(a, kind, b, *, dim_order=None):
    """compare with broadcasting of all sources allowed."""
    return compare(a, kind, b, allow_broadcast_all_sources=True, dim_order=dim_order)

