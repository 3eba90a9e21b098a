"""rf parametrizations of params (as torch.nn.utils.parametrize): ``module.<name>`` then reads as
``parametrization(orig_param)`` (keep_existing_param=True: the param stays, under its name) or as
``parametrization()`` (a submodule that replaces the param). Used by rf.weight_dropout / rf.weight_noise."""

from __future__ import annotations

import weakref

from ._utils import FrontendError
from .module import Module, Parameter

__all__ = ["register_parametrization", "remove_parametrization", "is_parametrized"]


class _ParametrizedMeta(type):
    """The type of the per-instance subclasses that carry the parametrized properties."""


class _Property:
    def __init__(self, module, param_name, parametrization, orig_param):
        self.module_ref = weakref.ref(module)
        self.param_name = param_name
        self.parametrization = parametrization
        self.orig_param = orig_param

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        if self.orig_param is not None:
            return self.parametrization(self.orig_param)
        return self.parametrization()

    def __set__(self, obj, value):
        if self.orig_param is not None:
            self.orig_param.assign(value)
        elif hasattr(self.parametrization, "assign"):
            self.parametrization.assign(value)
        else:
            raise AttributeError("cannot assign to the parametrized %s" % self.param_name)


def is_parametrized(module, param_name=None):
    """Whether module has a parametrization (of param_name, if given)."""
    if type(type(module)) is not _ParametrizedMeta:
        return False
    return param_name is None or isinstance(type(module).__dict__.get(param_name), _Property)


def register_parametrization(module, param_name, parametrization, *, keep_existing_param=True):
    """``module.<param_name>`` reads through parametrization from now on; returns module."""
    if not isinstance(module, Module):
        raise FrontendError("rf.register_parametrization: expects an rf.Module, got %r" % (module,))
    if is_parametrized(module, param_name):
        raise FrontendError("rf.register_parametrization: %s.%s is already parametrized" % (
            type(module).__name__, param_name))
    orig_param = vars(module).get(param_name)
    if not isinstance(orig_param, Parameter):
        raise FrontendError("rf.register_parametrization: %s.%s is not an rf.Parameter, got %r" % (
            type(module).__name__, param_name, orig_param))
    if keep_existing_param:
        if isinstance(parametrization, Module) and list(parametrization.parameters()):
            raise FrontendError("rf.register_parametrization: with keep_existing_param=True the parametrization "
                                "must not have params of its own")
    else:
        if hasattr(parametrization, "assign"):
            parametrization.assign(orig_param)
        orig_param = None
        vars(module)[param_name] = parametrization  # a submodule: its params are found under this name
    if not is_parametrized(module):
        cls = type(module)
        module.__class__ = _ParametrizedMeta("Parametrized" + cls.__name__, (cls,), {})
    setattr(type(module), param_name, _Property(module, param_name, parametrization, orig_param))
    return module


def remove_parametrization(module, param_name):
    """Undoes :func:`register_parametrization` for param_name (the module's class is restored after the last)."""
    if not is_parametrized(module, param_name):
        raise FrontendError("rf.remove_parametrization: %s.%s is not parametrized" % (
            type(module).__name__, param_name))
    prop = type(module).__dict__[param_name]
    delattr(type(module), param_name)
    if prop.orig_param is None:
        vars(module)[param_name] = Parameter(prop.parametrization())
    if not any(isinstance(v, _Property) for v in vars(type(module)).values()):
        module.__class__ = type(module).__bases__[0]
    return module
