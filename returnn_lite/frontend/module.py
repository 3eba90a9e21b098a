"""rf.Module, rf.Parameter, rf.State, containers (ModuleList, Sequential, Functional), initializers (rf.init)."""

from __future__ import annotations

import functools

from ..tensor import Dim, Tensor
from ._utils import FrontendError, call_site, dims_str, is_tensor


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

    def __repr__(self):
        return "<%s>" % type(self).__name__

    def get_default_name(self):
        """snake_case of the class name (without a leading underscore)."""
        import re

        name = type(self).__name__.lstrip("_")
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if name[:1].isupper() else name

    def get_deep(self, target):
        """The attribute at the dotted path target ("" is self)."""
        if target == "":
            return self
        mod = self
        atoms = target.split(".")
        for item in atoms[:-1]:
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("%r: %r is not an rf.Module" % (self, item))
        return getattr(mod, atoms[-1])

    def set_deep(self, target, value):
        """Sets the attribute at the dotted path target."""
        if target == "":
            raise AttributeError("cannot set the root module")
        prefix, _, name = target.rpartition(".")
        setattr(self.get_deep(prefix), name, value)

    def children(self):
        return self.modules(recurse=False, include_self=False)

    def named_children(self):
        return self.named_modules(recurse=False, include_self=False)

    def named_modules(self, *, recurse=True, include_self=True, memo=None, prefix=""):
        """(dotted name, module) of self and the sub-modules, breadth first (as the original), each once."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        memo.add(id(self))
        if include_self:
            yield prefix, self
        queue = [(prefix, self)]
        while queue:
            prefix, mod = queue.pop(0)
            for k, v in vars(mod).items():
                if not isinstance(v, Module) or id(v) in memo:
                    continue
                name = prefix + ("." if prefix else "") + k
                memo.add(id(v))
                yield name, v
                if recurse:
                    queue.append((name, v))

    def modules(self, *, recurse=True, include_self=True):
        for _, m in self.named_modules(recurse=recurse, include_self=include_self):
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

    @property
    def has_parameters(self):
        return any(True for _ in self.named_parameters())

    def apply(self, fn):
        """fn on every sub-module (children first, each applying to its own), then on self; returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("%s has no __call__" % type(self).__name__)

    def default_initial_state(self, *, batch_dims):
        """The children's initial states (an rf.State by attribute name), or None if none has one."""
        state = State()
        for key, mod in self.named_children():
            sub = mod.default_initial_state(batch_dims=batch_dims)
            if sub:
                state[key] = sub
        return state if state else None


class State(dict):
    """
    Nested state (attribute access to the dict entries), as rf.State: ``State(h=..., c=...)``, ``State({"h": ...})``,
    or ``State(x)`` for one non-dict value (``State(state=x)``).
    """

    def __init__(self, *args, **kwargs):
        if args and kwargs or len(args) > 1:
            raise TypeError("State(...): either keyword arguments or one positional argument, got %i and %s" % (
                len(args), sorted(kwargs)))
        if args:
            super().__init__(**args[0]) if isinstance(args[0], dict) else super().__init__(state=args[0])
        else:
            super().__init__(**kwargs)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % (k, v) for k, v in self.items()))

    def __getattr__(self, item):
        try:
            return self[item]
        except KeyError:
            raise AttributeError("%r has no %r" % (self, item)) from None

    def __setattr__(self, key, value):
        self[key] = value

    def deep_tensors(self):
        """All Tensors in this state and its nested dicts / lists / tuples (each once)."""
        return self.cls_deep_tensors(self)

    @classmethod
    def cls_deep_tensors(cls, obj):
        """All Tensors in obj and its nested dicts / lists / tuples (each once, in order)."""
        res, seen, queue = [], set(), [obj]
        while queue:
            x = queue.pop(0)
            if is_tensor(x):
                if id(x) not in seen:
                    seen.add(id(x))
                    res.append(x)
            elif isinstance(x, dict) or hasattr(x, "keys") and hasattr(x, "values"):
                queue[:0] = list(x.values())
            elif isinstance(x, (list, tuple)):
                queue[:0] = list(x)
            elif x is not None and not isinstance(x, (Dim, int, float, bool, str)):
                raise TypeError("State.cls_deep_tensors: unexpected %r" % (x,))
        return res


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
