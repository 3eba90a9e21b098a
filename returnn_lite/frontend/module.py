"""rf.Module, rf.Parameter, containers (ModuleList, Sequential, Functional) and param initializers (rf.init)."""

from __future__ import annotations

import functools

from ..tensor import Tensor
from ._utils import FrontendError, call_site, dims_str


class Parameter(Tensor):
    """A trainable (or auxiliary) param: a Tensor whose raw tensor the backend creates (layers: a variable layer)."""

    def __init__(self, dims, dtype=None, *, trainable=None, auxiliary=False, initial=None, sparse_dim=None,
                 device=None):
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
            _global_backend[0].create_parameter_raw(self)  # eager backends (torch): the param exists right away

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
        raise FrontendError("rf.Parameter.assign at %s: not supported by returnn_lite" % call_site())

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
    """A list of modules, named "0", "1", ..."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and not isinstance(modules[0], Module):
            modules = tuple(modules[0])
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def _items(self):
        return [v for k, v in vars(self).items() if isinstance(v, Module) and k.isdigit()]

    def append(self, module):
        setattr(self, str(len(self._items())), module)
        return self

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter(self._items())

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(self._items()[i])
        return self._items()[i]


class Sequential(ModuleList):
    """Calls its modules one after the other."""

    def __call__(self, x):
        for m in self:
            x = m(x)
        return x


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

    def __init__(self, scale=None, mode=None, distribution=None):
        if scale is not None:
            self.scale = scale
        if mode is not None:
            self.mode = mode
        if distribution is not None:
            self.distribution = distribution

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
