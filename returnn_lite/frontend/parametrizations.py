"""rf.weight_dropout and rf.weight_noise (variational noise): parametrizations of a module's param that apply only
in training (see :mod:`.parametrize`)."""

from __future__ import annotations

from .parametrize import register_parametrization

__all__ = ["weight_dropout", "WeightDropout", "weight_noise", "WeightNoise"]


def _train_flag():
    from .run_ctx import get_run_ctx

    return get_run_ctx().train_flag


def weight_dropout(module, param_name, *, drop_prob):
    """Dropout on module.<param_name> in training (the original's param_dropout); returns module."""
    return register_parametrization(module, param_name, WeightDropout(drop_prob))


class WeightDropout:
    """Parametrization: dropout of the param in training."""

    def __init__(self, drop_prob):
        self.drop_prob = drop_prob

    def __call__(self, param):
        from .nn import cond, dropout

        return cond(_train_flag(), lambda: dropout(param, drop_prob=self.drop_prob, on_forward=True), lambda: param)


def weight_noise(module, param_name, *, std):
    """Gaussian noise (stddev std) added to module.<param_name> in training; returns module."""
    return register_parametrization(module, param_name, WeightNoise(std))


class WeightNoise:
    """Parametrization: param + N(0, std^2) noise in training."""

    def __init__(self, std):
        self.std = std

    def __call__(self, param):
        from .nn import cond, random_normal

        return cond(_train_flag(), lambda: param + random_normal(param.dims, dtype=param.dtype, stddev=self.std),
                    lambda: param)
