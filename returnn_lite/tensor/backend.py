"""
What a backend implements: :class:`Backend`, the interface between the backend-independent code (the
:class:`~returnn_lite.tensor.Tensor` / :class:`~returnn_lite.tensor.Dim` classes and the rf functions) and the raw
tensors of one framework.

A backend subclasses :class:`Backend` and sets ``RawTensorType`` (it is then registered: :func:`backend_for_raw`
finds it by the type of a raw tensor). Two groups of methods:

- the rf ops (:data:`BACKEND_METHODS`: ``combine``, ``matmul``, ``reduce``, ``sequence_mask``, ...) on Tensors,
  called by rf after its dim checks;
- raw-tensor helpers (``*_raw``) on raw tensors, called by Tensor/Dim for layout changes and sequence lengths
  (transpose, expand, squeeze, reshape, tile, the size of an axis, the max of lengths, a sequence mask), and
  ``is_stale_raw`` (whether a raw tensor belongs to a finished graph, e.g. lengths of a TF graph rebuilt since).

Every method a backend does not implement raises :class:`NotImplementedError` naming the backend and the method.
The backends: the RETURNN-layers backend (:class:`returnn_lite.frontend_layers.ReturnnLayersBackend`, raw tensors
are layers of a net dict), PyTorch (:class:`returnn_lite.torch.frontend.TorchBackend`) and the TF compiler's raw
tensors (:class:`returnn_lite.data.TFCompilerBackend`: ``tf.Tensor``, raw-tensor helpers only). This module is pure
Python; the backends are loaded by the code that uses them (the frontend is loaded by name, :func:`frontend`).
"""

from __future__ import annotations

import importlib

_registry = []  # backend classes with a RawTensorType (subclasses register themselves)

# the rf ops of the interface (the stubs raise NotImplementedError)
BACKEND_METHODS = (
    "executing_eagerly", "set_random_seed", "get_random_state", "set_random_state",
    "convert_to_tensor", "full", "range_over_dim", "dim_value_tensor", "dim_size_tensor",
    "combine", "compare", "activation", "cast", "copy", "transpose", "stop_gradient", "scaled_gradient",
    "where", "clip_by_value", "reduce", "softmax", "log_softmax", "matmul",
    "concat", "pad", "gather", "slice", "split", "merge_dims", "split_dims", "expand_dim", "squeeze",
    "replace_dim", "reshape", "cum_concat_step", "sequence_mask",
    "softmax_cross_entropy_with_logits", "ctc_loss", "dropout", "random",
    "create_parameter_raw", "set_parameter_initial_value", "set_parameter_trainable",
    "batch_norm", "conv", "pool", "lstm", "cond", "while_loop", "scan", "loop",
    "make_output_tensor", "mark_as_loss",
)
# the raw-tensor helpers Tensor/Dim use (stubs raise NotImplementedError as well)
RAW_METHODS = (
    "get_dim_raw", "transpose_raw", "expand_dims_raw", "squeeze_raw", "reshape_raw", "tile_raw", "reduce_max_raw",
    "sequence_mask_raw",
)


def _stub(method):
    def _not_implemented(*_args, **_kwargs):
        raise NotImplementedError("rf backend: %s() is not implemented by this backend" % method)

    _not_implemented.__name__ = method
    return staticmethod(_not_implemented)


class Backend:
    """Base of the backends (abstract: every method of :data:`BACKEND_METHODS` and :data:`RAW_METHODS` raises)."""

    name = None
    RawTensorType = None
    is_tensorflow = False
    implements_rf_ops = True  # False: only the raw-tensor helpers (rf dispatch skips it)
    # raw tensors are layers of a net dict under construction (their values exist only once the net is compiled)
    builds_net_dict = False
    # optional fused implementations (None: rf composes them from the primitives)
    linear = None  # linear(source, *, weight, bias, in_dim)
    layer_norm = None  # layer_norm(x, *, in_dim, scale, bias, eps)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.RawTensorType is not None and cls not in _registry:
            _registry.append(cls)

    @staticmethod
    def is_stale_raw(raw):
        """Whether ``raw`` can no longer be used (e.g. it belongs to a TF graph that is not the current one)."""
        return False

    @staticmethod
    def get_device(tensor):
        """The device of the Tensor's raw tensor (a string), or None."""
        return None


for _m in BACKEND_METHODS + RAW_METHODS:
    setattr(Backend, _m, _stub(_m))


def backend_for_raw(raw):
    """The backend class of a raw tensor (by type), or None if no registered backend has that type."""
    for cls in _registry:
        if isinstance(raw, cls.RawTensorType):
            return cls
    return None


def get_backend_by_raw_tensor_type(raw_type):
    for cls in _registry:
        if issubclass(raw_type, cls.RawTensorType):
            return cls
    raise TypeError("rf: no backend for raw tensors of type %s" % raw_type.__name__)


def raw_backend(raw, what):
    """The backend of ``raw``; a clear error if there is none (``what``: the operation that needs it)."""
    cls = backend_for_raw(raw)
    if cls is None:
        raise TypeError("%s: no backend for raw tensors of type %s (import the backend first, e.g. "
                        "returnn_lite.torch.frontend or the TF compiler's returnn_lite.data)" % (what, type(raw).__name__))
    return cls


_frontend = []


def frontend():
    """The rf module (loaded by name on first use: the frontend sits above this package and imports it)."""
    if not _frontend:
        _frontend.append(importlib.import_module("returnn_lite.frontend"))
    return _frontend[0]
