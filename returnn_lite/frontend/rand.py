"""rf random numbers: :func:`random` (uniform / normal / truncated normal), its shortcuts, the random state and the
static step-based seeds (``static=True``: the same numbers in each step, reset by :func:`reset_step_random_state`),
:func:`random_choice_without_replacement` (Gumbel top-k)."""

from __future__ import annotations

import numpy

from ._backend import get_selected_backend
from ._utils import error

__all__ = ["set_random_seed", "get_random_state", "set_random_state", "reset_step_random_state",
           "get_static_step_based_seed", "random", "random_uniform", "random_normal", "random_truncated_normal",
           "random_choice_without_replacement", "random_choice_with_replacement"]

_step_seed = [42]
_step_rnd = numpy.random.RandomState(42)


def set_random_seed(seed):
    """Seeds the backend's generator and the static step-based seeds."""
    from ._backend import _global_backend

    if _global_backend[0] is not None:
        _global_backend[0].set_random_seed(seed)
    _step_seed[0] = (seed * 5393 + 1187) % (2 ** 31)
    reset_step_random_state()


def get_random_state():
    return get_selected_backend().get_random_state()


def set_random_state(state):
    get_selected_backend().set_random_state(state)


def reset_step_random_state():
    """Back to the first static seed (call at the start of each step)."""
    _step_rnd.seed(_step_seed[0])


def get_static_step_based_seed(*, size=None):
    return _step_rnd.randint(2 ** 31, size=size)


def random(dims=None, *, dtype=None, device=None, sparse_dim=None, feature_dim=None, distribution, mean=None,
           stddev=None, bound=None, minval=None, maxval=None, seed=None, algorithm=None, explicit_state=None,
           auto_update_state=None, static=None, out=None, **kwargs):
    """Random numbers of the given dims: distribution "uniform" ([minval, maxval), or [-bound, bound)), "normal" or
    "truncated_normal" (cut at 2 stddev); seed / static=True: reproducible numbers."""
    if kwargs:
        raise error("random", "unsupported option(s) %s" % sorted(kwargs))
    if dims is None:
        raise error("random", "dims must be given")
    for name, value in (("algorithm", algorithm), ("explicit_state", explicit_state),
                        ("auto_update_state", auto_update_state), ("out", out)):
        if value is not None:
            raise error("random", "option %s=%r is not supported (the backend's own generator is used)" % (
                name, value))
    if distribution not in ("uniform", "normal", "truncated_normal"):
        raise error("random", "unknown distribution %r" % (distribution,))
    if distribution == "truncated_normal" and (minval is not None or maxval is not None):
        raise error("random", "truncated_normal with minval/maxval is not supported (cut at 2 stddev)")
    if static and seed is None:
        seed = get_static_step_based_seed()
    if dtype is None:
        dtype = "int32" if sparse_dim is not None else "float32"
    res = get_selected_backend().random(
        dims=list(dims), dtype=dtype, distribution=distribution, mean=mean, stddev=stddev, bound=bound,
        minval=minval, maxval=maxval, seed=seed, sparse_dim=sparse_dim, device=device)
    if feature_dim is not None:
        res.feature_dim = feature_dim
    return res


def random_uniform(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None, minval=0, maxval=1, seed=None,
                   algorithm=None, explicit_state=None, auto_update_state=None, static=None, out=None):
    """Uniform in [minval, maxval)."""
    return random(dims, dtype=dtype, device=device, sparse_dim=sparse_dim, feature_dim=feature_dim,
                  distribution="uniform", minval=minval, maxval=maxval, seed=seed, algorithm=algorithm,
                  explicit_state=explicit_state, auto_update_state=auto_update_state, static=static, out=out)


def random_normal(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None, mean=0.0, stddev=1.0,
                  seed=None, algorithm=None, explicit_state=None, auto_update_state=None, static=None, out=None):
    """Normal with mean and stddev."""
    return random(dims, dtype=dtype, device=device, sparse_dim=sparse_dim, feature_dim=feature_dim,
                  distribution="normal", mean=mean, stddev=stddev, seed=seed, algorithm=algorithm,
                  explicit_state=explicit_state, auto_update_state=auto_update_state, static=static, out=out)


def random_truncated_normal(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None, mean=0.0,
                            stddev=1.0, minval=None, maxval=None, seed=None, algorithm=None, explicit_state=None,
                            auto_update_state=None, static=None, out=None):
    """Normal cut at 2 stddev around the mean."""
    return random(dims, dtype=dtype, device=device, sparse_dim=sparse_dim, feature_dim=feature_dim,
                  distribution="truncated_normal", mean=mean, stddev=stddev, minval=minval, maxval=maxval, seed=seed,
                  algorithm=algorithm, explicit_state=explicit_state, auto_update_state=auto_update_state,
                  static=static, out=out)


def random_choice_without_replacement(*, log_probs, axis, num_samples_dim, noise_scale=1.0):
    """num_samples_dim indices drawn without replacement from the distribution log_probs over axis (Gumbel noise,
    then :func:`rf.top_k`; noise_scale 0 gives the top-k)."""
    from . import math_
    from .top_k import top_k

    u = random_uniform(log_probs.dims, dtype=log_probs.dtype)
    gumbel = -math_.log(-math_.log(u))
    if noise_scale != 1.0:
        gumbel = gumbel * noise_scale
    _, indices, _ = top_k(log_probs + gumbel, axis=axis, k_dim=num_samples_dim)
    return indices


def random_choice_with_replacement(dims, *, probs, axis):
    """Indices into axis drawn from probs [common..., axis] (independently, with replacement) for every entry of
    dims ([common..., new...]) -> int32 sparse over axis."""
    from ._backend import get_backend_for_tensor
    from ._utils import check_dims_in, dims_str

    check_dims_in("random_choice_with_replacement", probs, [axis])
    common = [d for d in probs.dims if d != axis]
    dims = list(dims)
    if not all(d in dims for d in common):
        raise error("random_choice_with_replacement", "dims %s must contain the other dims of probs %s" % (
            dims_str(dims), dims_str(common)))
    backend = get_backend_for_tensor(probs)
    method = getattr(backend, "random_choice_with_replacement", None)
    if method is None:
        raise error("random_choice_with_replacement", "not implemented by the %s backend" % backend.name)
    return method(dims, probs=probs, axis=axis, common=common)
