"""
rf.BatchNorm, rf.random, rf.ctc_loss and cross entropy against dense targets on the layers backend: ordinary layer
dicts (``batch_norm``, ``random``, ``ctc_loss``; softmax_over_spatial + dot), see :mod:`._backend`.
"""

from __future__ import annotations

from ..data import Dim, batch_dim
from ..frontend._utils import FrontendError, call_site, dims_str
from ._emit import _emit, _raw_name
from ._net import dim_source


def batch_norm(source, *, in_dim, running_mean, running_variance, gamma, beta, epsilon, momentum, affine, use_mask):
    """
    The ``batch_norm`` layer normalizing ``in_dim``, computing with the rf params (``variable`` layers) via
    ``reuse_params`` (the running stats are those variables, so the layer's update assigns them; it creates no
    params of its own). rf semantics as layer options: batch statistics in training (``use_sample`` 0), the running
    ones otherwise, running stats updated only in training with weight ``momentum`` for the batch statistics, masked
    frames of every dynamic dim (``in_dim``, ``masked_time``), stats shaped [in_dim] (``param_version`` 2).
    """
    if not isinstance(in_dim, Dim):
        raise FrontendError("rf.BatchNorm at %s: in_dim must be one Dim on the layers backend, got %r" % (
            call_site(), in_dim))
    params = {"mean": running_mean, "variance": running_variance}
    if affine:
        params.update(gamma=gamma, beta=beta)
    reuse = {"map": {"batch_norm/v2_" + key: {"reuse_layer": _raw_name(p), "param_name": "param"}
                     for key, p in params.items()}}
    return _emit("batch_norm", [source], source.dims, source.dtype, in_dim=in_dim, use_shift=bool(affine),
                 use_std=bool(affine), use_sample=0.0, momentum=momentum, epsilon=epsilon,
                 update_sample_only_in_training=True, masked_time=bool(use_mask), param_version=2,
                 reuse_params=reuse, name="batch_norm")


def random(*, dims, dtype, distribution, mean=None, stddev=None, bound=None, minval=None, maxval=None, seed=None,
           sparse_dim=None):
    """The ``random`` layer; its dynamic dims take their lengths from a layer that has them (``shape_deps``)."""
    deps = []
    for d in dims:
        if d.dimension is None and not d.is_batch_dim():
            src = dim_source(d)
            if src is None and d.complete_dyn_size() is None:
                raise FrontendError("rf.random at %s: no layer of this net dict has the dim %s yet" % (
                    call_site(), d))
            if src is not None and _raw_name(src) not in deps:
                deps.append(_raw_name(src))
    opts = {k: v for k, v in (("mean", mean), ("stddev", stddev), ("bound", bound), ("minval", minval),
                              ("maxval", maxval), ("seed", seed)) if v is not None}
    if deps:
        opts["shape_deps"] = deps
    return _emit("random", None, dims, dtype, sparse_dim=sparse_dim, sparse_dim_option=True, shape=list(dims),
                 distribution=distribution, dtype=dtype, name="random", **opts)


def ctc_loss(*, logits, targets, input_spatial_dim, targets_spatial_dim, blank_index, max_approx=False):
    """The ``ctc_loss`` layer with rf's named time dims and blank index: [batch]."""
    class_dims = [d for d in logits.dims if d not in (batch_dim, input_spatial_dim)]
    if len(class_dims) != 1 or set(logits.dims) != {batch_dim, input_spatial_dim, class_dims[0]}:
        raise FrontendError("rf.ctc_loss at %s: logits must have dims [batch, time, classes], got %s" % (
            call_site(), dims_str(logits.dims)))
    if set(targets.dims) != {batch_dim, targets_spatial_dim} or targets.sparse_dim is None:
        raise FrontendError("rf.ctc_loss at %s: targets must be sparse with dims [batch, targets_spatial_dim], got %s"
                            % (call_site(), dims_str(targets.dims)))
    if blank_index < 0:  # the layer's -1 means "targets have one class less"; rf's -1 only names the last class
        blank_index += class_dims[0].dimension
    return _emit("ctc_loss", None, [batch_dim], logits.dtype, logits=_raw_name(logits), targets=_raw_name(targets),
                 input_spatial_dim=input_spatial_dim, targets_spatial_dim=targets_spatial_dim,
                 blank_index=blank_index, max_approx=max_approx, name="ctc_loss")


def dense_cross_entropy(backend, *, logits, targets, axis):
    """-sum_axis targets * log_softmax(logits) (unmasked, as tf.nn.softmax_cross_entropy_with_logits)."""
    log_probs = backend.log_softmax(logits, axis=axis, use_mask=False)
    ce = backend.matmul(targets, log_probs, reduce=axis, use_mask=False)
    return backend.activation(ce, "neg")
