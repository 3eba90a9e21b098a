"""rf.hooks: :func:`setup_post_hook_on_method` runs ``hook(obj, args, kwargs, result)`` after ``obj.<attr>(...)``
(its return value, if not None, replaces the result); the returned :class:`RemovableHandle` removes it again."""

from __future__ import annotations

import itertools
import types
from collections import OrderedDict

__all__ = ["setup_post_hook_on_method", "RemovableHandle"]

_handle_ids = itertools.count()


class _HookedMethod:
    """Replaces ``obj.<attr>``: the class' method, then the post hooks in order."""

    def __init__(self, obj, attr):
        self.obj = obj
        self.attr = attr
        self.post_hooks = OrderedDict()

    def __call__(self, *args, **kwargs):
        func = getattr(type(self.obj), self.attr)
        if isinstance(func, _CallDispatch):
            func = func.orig_call
        result = func(self.obj, *args, **kwargs)
        for hook in list(self.post_hooks.values()):
            res = hook(self.obj, args, kwargs, result)
            if res is not None:
                result = res
        return result

    def uninstall(self):
        del vars(self.obj)[self.attr]
        if self.attr == "__call__":
            cls = type(self.obj)
            dispatch = cls.__dict__.get("__call__")
            if isinstance(dispatch, _CallDispatch):
                dispatch.users -= 1
                if not dispatch.users:
                    cls.__call__ = dispatch.orig_call


class _CallDispatch:
    """``obj(...)`` looks ``__call__`` up on the class: this class-level wrapper sends it to the instance's hooks."""

    def __init__(self, orig_call):
        self.orig_call = orig_call
        self.users = 0

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __call__(self, obj, *args, **kwargs):
        hooked = vars(obj).get("__call__")
        if isinstance(hooked, _HookedMethod):
            return hooked(*args, **kwargs)
        return self.orig_call(obj, *args, **kwargs)


def setup_post_hook_on_method(obj, attr, hook, *, prepend=False):
    """After each ``obj.<attr>(*args, **kwargs)``: ``hook(obj, args, kwargs, result)``; -> a RemovableHandle."""
    method = vars(obj).get(attr)
    if not isinstance(method, _HookedMethod):
        if not callable(getattr(type(obj), attr, None)):
            raise TypeError("setup_post_hook_on_method: %r has no method %r" % (type(obj).__name__, attr))
        method = _HookedMethod(obj, attr)
        vars(obj)[attr] = method
        if attr == "__call__":
            cls = type(obj)
            dispatch = cls.__dict__.get("__call__")
            if not isinstance(dispatch, _CallDispatch):
                dispatch = _CallDispatch(getattr(cls, "__call__"))
                cls.__call__ = dispatch
            dispatch.users += 1
    handle = RemovableHandle(method)
    method.post_hooks[handle.id] = hook
    if prepend:
        method.post_hooks.move_to_end(handle.id, last=False)
    return handle


class RemovableHandle:
    """Removes its hook (and the method wrapper with the last hook)."""

    def __init__(self, method):
        self.method = method
        self.id = next(_handle_ids)

    def remove(self):
        hooks = self.method.post_hooks
        if self.id in hooks:
            del hooks[self.id]
            if not hooks:
                self.method.uninstall()
