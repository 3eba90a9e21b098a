"""
The random layer: random numbers of a given shape (normal, truncated normal, uniform; float or int).
"""

from __future__ import annotations

import tensorflow as tf

from ..data import Data, Dim
from ..layer_ref import LayerOption
from .base import LayerBase

_DISTRIBUTIONS = ("normal", "truncated_normal", "uniform")
_ALGORITHMS = ("philox", "threefry", "auto_select")


class RandomLayer(LayerBase):
    """Random numbers of the given ``shape``; new numbers every run (unless ``static``).

    :param shape: output shape: a sequence of Dims or ints (alias ``dims``; dynamic Dims take their padded length
        from ``shape_deps`` or their sequence lengths)
    :param distribution: "normal", "truncated_normal" (cut at 2 stddev around the mean) or "uniform"
    :param mean: mean of normal/truncated_normal (default 0)
    :param stddev: stddev of normal/truncated_normal (default 1)
    :param bound: uniform in [-bound, bound) (instead of minval/maxval)
    :param minval: lower bound of uniform (default 0)
    :param maxval: upper bound (exclusive) of uniform (default 1; required for int dtypes)
    :param dtype: output dtype (default "float32"); ints only with "uniform"
    :param sparse_dim: Dim to mark an int output as sparse (default None)
    :param seed: random seed (default None: derived from the network's random seed)
    :param algorithm: with ``static``: the stateless RNG algorithm ("philox", "threefry", "auto_select")
    :param static: True: a stateless draw from the seed (the same numbers every run); default False
    :param shape_deps: layers whose outputs have the dynamic Dims of shape (dependencies, for their lengths)
    :param explicit_state: not supported (refused): the random state is TF's op state
    :param auto_update_state: not supported (refused), see explicit_state
    """

    layer_class = "random"
    layer_options = (LayerOption("shape_deps", "layers"),)
    default_from = ()

    def __init__(self, shape=None, distribution=None, mean=None, stddev=None, bound=None, minval=None, maxval=None,
                 dtype="float32", sparse_dim=None, seed=None, algorithm=None, explicit_state=None,
                 auto_update_state=None, static=None, shape_deps=(), dims=None, **kwargs):
        super().__init__(**kwargs)
        self.shape_deps = list(shape_deps or ())
        out = self.output
        sizes = [self._size(d) for d in out.dims]
        if seed is None:
            seed = self.network.random_seed_for(self, "random")
        if bound is not None:
            minval, maxval = -bound, bound
        mean = 0.0 if mean is None else mean
        stddev = 1.0 if stddev is None else stddev
        minval = 0 if minval is None else minval
        maxval = 1 if maxval is None else maxval  # (int dtypes require maxval: see get_out_data_from_opts)
        if static:
            seed2 = tf.constant([seed, 0], dtype=tf.int64)
            alg = algorithm or "auto_select"
            if distribution == "normal":
                x = tf.random.stateless_normal(sizes, seed2, mean=mean, stddev=stddev, dtype=out.dtype, alg=alg)
            elif distribution == "truncated_normal":
                x = tf.random.stateless_truncated_normal(sizes, seed2, mean=mean, stddev=stddev, dtype=out.dtype,
                                                         alg=alg)
            else:
                x = tf.random.stateless_uniform(sizes, seed2, minval=minval, maxval=maxval, dtype=out.dtype, alg=alg)
        elif distribution == "normal":
            x = tf.random.normal(sizes, mean=mean, stddev=stddev, dtype=out.dtype, seed=seed)
        elif distribution == "truncated_normal":
            x = tf.random.truncated_normal(sizes, mean=mean, stddev=stddev, dtype=out.dtype, seed=seed)
        else:
            x = tf.random.uniform(sizes, minval=minval, maxval=maxval, dtype=out.dtype, seed=seed)
        out.placeholder = x

    def _size(self, d):
        if d.is_batch_dim():
            return self.network.get_data_batch_dim()
        if d.dimension is not None:
            return d.dimension
        for dep in self.shape_deps:
            if d in dep.output.dims:
                return dep.output.get_dim(dep.output.dims.index(d))
        size = d.complete_dyn_size()
        if size is None:
            raise ValueError("random layer %r: dim %s of 'shape' has no lengths (add a layer with it to 'shape_deps')"
                             % (self.name, d))
        return tf.reduce_max(size)

    @classmethod
    def get_out_data_from_opts(cls, name, shape=None, distribution=None, dtype="float32", sparse_dim=None,
                               explicit_state=None, auto_update_state=None, algorithm=None, static=None, maxval=None,
                               bound=None, dims=None, **kwargs):
        if (shape is None) == (dims is None):
            raise ValueError("random layer %r: give exactly one of the options 'shape' and 'dims'" % name)
        shape = dims if shape is None else shape
        for opt, v in (("explicit_state", explicit_state), ("auto_update_state", auto_update_state)):
            if v is not None:
                raise ValueError("random layer %r: option %r is not supported by returnn_lite (the random state is "
                                 "TF's op state; use 'seed' or 'static')" % (name, opt))
        if distribution not in _DISTRIBUTIONS:
            raise ValueError("random layer %r: option 'distribution' must be one of %s, got %r" % (
                name, ", ".join(_DISTRIBUTIONS), distribution))
        if algorithm is not None and (not static or algorithm not in _ALGORITHMS):
            raise ValueError("random layer %r: option 'algorithm' (%r) is only supported with static=True and one of "
                             "%s" % (name, algorithm, ", ".join(_ALGORITHMS)))
        if not dtype.startswith("float") and (distribution != "uniform" or (maxval is None and bound is None)):
            raise ValueError("random layer %r: dtype %r needs distribution 'uniform' and option 'maxval'" % (
                name, dtype))
        if sparse_dim is not None and not dtype.startswith("int"):
            raise ValueError("random layer %r: option 'sparse_dim' needs an int dtype, got %r" % (name, dtype))
        out_dims = []
        for i, s in enumerate(shape):
            if isinstance(s, Dim):
                out_dims.append(s)
            elif isinstance(s, int) and not isinstance(s, bool):
                out_dims.append(Dim(s, kind=Dim.Types.Feature if i == len(shape) - 1 else Dim.Types.Spatial,
                                    description="%s:static:%i" % (name, i)))
            else:
                raise ValueError("random layer %r: option 'shape' entries must be Dims or ints, got %r" % (name, s))
        return Data(name="%s_output" % name, dims=out_dims, dtype=dtype, sparse_dim=sparse_dim)
