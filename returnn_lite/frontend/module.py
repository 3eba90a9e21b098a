"""rf.Module, rf.Parameter, containers (ModuleList, Sequential, Functional) and param initializers (rf.init)."""

from __future__ import annotations

import functools

from ..tensor import Tensor
from ._utils import FrontendError, call_site, dims_str


class Parameter(Tensor):
    """A trainable (or auxiliary) param: a Tensor whose raw tensor the backend creates (layers: a variable layer)."""

    def __init__(self, dims, dtype=None, *, trainable=None, auxiliary=False, initial=None, sparse_dim=None,
                 device=None, non_critical_for_restore=False, weight_decay=0.0):
        if weight_decay:
            raise FrontendError("rf.Parameter at %s: weight_decay=%r is not supported (use the optimizer's "
                                "weight_decay)" % (call_site(), weight_decay))
        self.non_critical_for_restore = non_critical_for_restore
        if isinstance(dims, Tensor):  # Parameter(tensor): its dims, dtype and sparse dim, and its value as initial
            value = dims
            dims, dtype = value.dims, dtype or value.dtype
            sparse_dim = sparse_dim or value.sparse_dim
            initial = value if initial is None else initial
        dims = list(dims)
        for d in dims:
            if d.dimension is None:
                raise FrontendError("rf.Parameter at %s: all dims must be static, got %s" % (call_site(), dims_str(dims)))
        super().__init__("parameter", dims=dims, dtype=dtype or "float32", sparse_dim=sparse_dim)
        self.trainable = (not auxiliary) if trainable is None else trainable
        self.auxiliary = auxiliary
        self._initial = initial
        self.rf_name = None  # set by the owner model (e.g. "lstm.ff_weight")
        from ._backend import _global_backend

        if _global_backend[0] is not None and _global_backend[0].executing_eagerly():
            # eager backends (torch): the param exists right away (on device, else rf's default device)
            _global_backend[0].create_parameter_raw(self, device=device)

    @property
    def initial(self):
        return self._initial

    @initial.setter
    def initial(self, value):
        self._initial = value
        if self.placeholder is not None:
            from ._backend import get_backend_for_tensor

            get_backend_for_tensor(self).set_parameter_initial_value(self, value)

    def assign(self, value):
        """Sets the param's value (eager backends: in place, outside autograd)."""
        self._assign("assign", value)

    def assign_add(self, value):
        """Adds value to the param (eager backends: in place, outside autograd)."""
        self._assign("assign_add", value)

    def _assign(self, what, value):
        from ._backend import get_backend_for_tensor
        from .array_ import stop_gradient

        backend = get_backend_for_tensor(self)
        if not backend.executing_eagerly() or self.placeholder is None:
            raise FrontendError("rf.Parameter.%s at %s: only on an eager backend (torch); the layers backend has no "
                                "param updates inside the net" % (what, call_site()))
        if what == "assign_add":
            value = stop_gradient(self + value)
        backend.set_parameter_initial_value(self, value)

    def __repr__(self):
        return "Parameter(%s, %s, %s)" % (self.rf_name or "?", dims_str(self.dims), self.dtype)


def _wrap_call(call):
    """Module calls run in the name scope of the module (layers backend: layer names mirror the hierarchy)."""

    @functools.wraps(call)
    def wrapper(self, *args, **kwargs):
        from ._backend import _global_backend

        backend = _global_backend[0]
        scope = getattr(backend, "module_name_scope", None) if backend is not None else None
        if scope is None:
            return call(self, *args, **kwargs)
        with scope(self):
            return call(self, *args, **kwargs)

    wrapper._rf_wrapped = True
    return wrapper


class Module:
    """Base of rf modules: sub-modules and params as attributes, named by attribute path (``a.b``)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is not None and not getattr(call, "_rf_wrapped", False):
            cls.__call__ = _wrap_call(call)

    def __init__(self):
        pass

    def named_children(self):
        for k, v in vars(self).items():
            if isinstance(v, Module):
                yield k, v

    def named_modules(self, *, recurse=True, prefix="", memo=None):
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for k, v in vars(self).items():
            if isinstance(v, Module):
                name = prefix + ("." if prefix else "") + k
                if recurse:
                    yield from v.named_modules(prefix=name, memo=memo)
                elif id(v) not in memo:
                    memo.add(id(v))
                    yield name, v

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, *, recurse=True):
        seen = set()
        for prefix, mod in (self.named_modules() if recurse else [("", self)]):
            for k, v in vars(mod).items():
                if isinstance(v, Parameter) and id(v) not in seen:
                    seen.add(id(v))
                    yield prefix + ("." if prefix else "") + k, v

    def parameters(self, *, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def apply(self, fn):
        for m in self.modules():
            fn(m)
        return self

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("%s has no __call__" % type(self).__name__)

    def default_initial_state(self, *, batch_dims):
        return None


class ModuleList(Module):
    """
    A list of modules, named "0", "1", ... (``ModuleList(a, b)``, ``ModuleList([a, b])``, ``ModuleList({"x": a})``
    or another ModuleList); plain callables become :class:`Functional`. Every Module attribute is an entry.
    """

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], dict):
            for i, (key, module) in enumerate(modules[0].items()):
                setattr(self, str(i) if _is_int_str(key) else key, _as_module(module))
        elif len(modules) == 1 and isinstance(modules[0], ModuleList):
            for key, module in modules[0].items():
                setattr(self, key, module)
        elif len(modules) == 1 and not isinstance(modules[0], Module) and not callable(modules[0]):
            for i, module in enumerate(modules[0]):
                setattr(self, str(i), _as_module(module))
        else:
            for i, module in enumerate(modules):
                setattr(self, str(i), _as_module(module))

    def _get_modules(self):
        return {k: v for k, v in vars(self).items() if isinstance(v, Module)}

    def items(self):
        """(name, module) pairs in order."""
        return self._get_modules().items()

    def append(self, module):
        setattr(self, str(len(self)), _as_module(module))
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __len__(self):
        return len(self._get_modules())

    def __iter__(self):
        return iter(self._get_modules().values())

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(dict(list(self._get_modules().items())[i]))
        return list(self._get_modules().values())[i]

    def __setitem__(self, i, module):
        if isinstance(i, slice):
            raise TypeError("%s: slice assignment is not supported" % type(self).__name__)
        setattr(self, list(self._get_modules().keys())[i], _as_module(module))

    def __delitem__(self, i):
        items = list(self._get_modules().items())
        removed = items[i] if isinstance(i, slice) else [items[i]]
        removed_keys = {k for k, _ in removed}
        for k, _ in items:
            delattr(self, k)
        for n, (k, v) in enumerate([(k, v) for k, v in items if k not in removed_keys]):
            setattr(self, str(n) if _is_int_str(k) else k, v)


class Sequential(ModuleList):
    """Calls its modules one after the other; extra keywords go to every module (``x = seq(x, spatial_dim=t)``)."""

    def __call__(self, inp, *, collected_outputs=None, **kwargs):
        for name, module in self.items():
            inp = module(inp, **kwargs)
            if collected_outputs is not None:
                collected_outputs[name] = inp
        return inp


def sequential(source, *modules):
    """``Sequential(*modules)(source)``."""
    return Sequential(*modules)(source)


class ParameterList(Module):
    """A list of params, named "0", "1", ..."""

    def __init__(self, *parameters):
        super().__init__()
        if len(parameters) == 1 and isinstance(parameters[0], dict):
            for i, (key, p) in enumerate(parameters[0].items()):
                setattr(self, str(i) if _is_int_str(key) else key, p)
        elif len(parameters) == 1 and not isinstance(parameters[0], Parameter):
            for i, p in enumerate(parameters[0]):
                setattr(self, str(i), p)
        else:
            for i, p in enumerate(parameters):
                setattr(self, str(i), p)

    def _get_parameters(self):
        return {k: v for k, v in vars(self).items() if isinstance(v, Parameter)}

    def append(self, parameter):
        setattr(self, str(len(self)), parameter)
        return self

    def extend(self, parameters):
        for p in parameters:
            self.append(p)
        return self

    def __len__(self):
        return len(self._get_parameters())

    def __iter__(self):
        return iter(self._get_parameters().values())

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(dict(list(self._get_parameters().items())[i]))
        return list(self._get_parameters().values())[i]


def _is_int_str(s):
    try:
        int(s)
        return True
    except ValueError:
        return False


def _as_module(obj):
    if isinstance(obj, Module):
        return obj
    if callable(obj):
        return Functional(obj)
    raise TypeError("ModuleList: expected an rf.Module or a callable, got %r" % (obj,))


class Functional(Module):
    """A module from a function (no params)."""

    def __init__(self, func):
        super().__init__()
        self.func = func

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)


# ---- param initializers (rf.init) ----
class ParamInit:
    """Initial value of a param: the layers backend maps it to the variable layer's ``init``."""

    def get_tf_init(self):
        raise NotImplementedError


class VarianceScaling(ParamInit):
    scale = 1.0
    mode = "fan_in"
    distribution = "truncated_normal"

    def __init__(self, scale=None, mode=None, distribution=None, dtype=None):
        self.dtype = dtype
        if scale is not None:
            self.scale = scale
        if mode is not None:
            self.mode = mode
        if distribution is not None:
            self.distribution = distribution
        if self.mode not in ("fan_in", "fan_out", "fan_avg"):
            raise FrontendError("rf.init.VarianceScaling: mode must be fan_in, fan_out or fan_avg, got %r" % (
                self.mode,))
        if self.distribution not in ("normal", "uniform", "truncated_normal", "untruncated_normal"):
            raise FrontendError("rf.init.VarianceScaling: distribution must be normal, uniform, truncated_normal or "
                                "untruncated_normal, got %r" % (self.distribution,))

    def get_tf_init(self):
        return "variance_scaling_initializer(scale=%r, mode=%r, distribution=%r)" % (
            self.scale, self.mode, self.distribution)


class Glorot(VarianceScaling):
    scale = 1.0
    mode = "fan_avg"
    distribution = "uniform"


class He(VarianceScaling):
    scale = 2.0
    mode = "fan_in"
    distribution = "normal"


HeNormal = He


class HeUniform(He):
    distribution = "uniform"


class init:  # noqa: N801 (rf.init namespace)
    ParamInit = ParamInit
    VarianceScaling = VarianceScaling
    Glorot = Glorot
    He = He
    HeNormal = HeNormal
    HeUniform = HeUniform
