"""
The run context of a step: train flag, epoch/step, the marked outputs and losses.

``rf.init_train_step_run_ctx(train_flag=, step=, epoch=)`` / ``rf.init_forward_step_run_ctx(epoch=, step=)`` set
it up before ``train_step`` / ``forward_step``; ``Tensor.mark_as_loss`` / ``mark_as_output`` fill it;
``rf.get_run_ctx().losses[name].get_summed_loss() / get_mean_loss() / get_inv_norm_factor()`` and
``total_loss()`` give the loss values with the original's normalization: the inverse norm factor of a loss is
its number of elements (frames within the sequence lengths), or ``custom_inv_norm_factor``; the total loss sums
``scale * (mean if use_normalized_loss else summed)`` over the losses that are not ``as_error``.
"""

from __future__ import annotations

from ._utils import FrontendError, call_site, dims_str

_run_ctx = [None]


class Loss:
    """One loss marked via ``Tensor.mark_as_loss``."""

    def __init__(self, loss, name, *, scale=1.0, as_error=False, use_normalized_loss=False, use_flatten_frames=True,
                 custom_inv_norm_factor=None, call_site_=None):
        self.loss = loss
        self.name = name
        self.scale = scale
        self.as_error = as_error
        self.use_normalized_loss = use_normalized_loss
        self.use_flatten_frames = use_flatten_frames
        self.custom_inv_norm_factor = custom_inv_norm_factor
        self.call_site = call_site_
        self._summed = None
        self._inv_norm = None

    def get_summed_loss(self):
        from . import math_ as _math

        if self._summed is None:
            self._summed = _math.reduce_sum(self.loss, axis=self.loss.dims) if self.loss.dims else self.loss
        return self._summed

    def get_inv_norm_factor(self):
        """Number of elements of the loss (frames within the lengths), or the custom factor (summed)."""
        from . import math_ as _math
        from ._utils import is_tensor

        if self._inv_norm is None:
            if self.custom_inv_norm_factor is not None:
                f = self.custom_inv_norm_factor
                if is_tensor(f) and f.dims:
                    f = _math.reduce_sum(f, axis=f.dims)
                self._inv_norm = f
            else:
                self._inv_norm = _math.num_elements_of_shape(self.loss.dims)
        return self._inv_norm

    def get_mean_loss(self):
        from . import math_ as _math

        inv = self.get_inv_norm_factor()
        if isinstance(inv, int):
            return self.get_summed_loss() / float(inv)
        return self.get_summed_loss() / _math.cast(inv, self.loss.dtype)

    def get_scaled_reduced_loss(self):
        loss = self.get_mean_loss() if self.use_normalized_loss else self.get_summed_loss()
        return loss * self.scale if self.scale != 1 else loss


class RunCtx:
    """Per step: ``stage`` ("train_step" or "forward_step"), ``train_flag``, ``epoch``, ``step``, outputs, losses."""

    def __init__(self, *, stage, train_flag=False, epoch=1, step=0, expected_outputs=None):
        from ..tensor.tensor_dict import TensorDict

        self.stage = stage
        self.train_flag = train_flag
        self.epoch = epoch
        self.step = step
        self.outputs = TensorDict()
        self.losses = {}
        self.expected_outputs = expected_outputs

    def mark_as_loss(self, loss, name, *, scale=1.0, as_error=False, use_normalized_loss=False,
                     use_flatten_frames=True, custom_inv_norm_factor=None):
        from ._backend import get_backend_for_tensor
        from ._utils import is_tensor

        site = call_site()
        if not is_tensor(loss) and _is_raw_tensor(loss):
            loss = _raw_to_tensor(loss, name, float_=as_error)
        if not is_tensor(loss):
            raise FrontendError("mark_as_loss(%r) at %s: expects an rf Tensor, got %r" % (name, site, loss))
        if self.stage != "train_step":
            raise FrontendError("mark_as_loss(%r) at %s: only in train_step (run ctx stage is %r)" % (
                name, site, self.stage))
        if name in self.losses:
            prev = self.losses[name]
            raise FrontendError("mark_as_loss at %s: loss %r was already marked at %s (dims %s); now again with dims "
                                "%s: each loss needs its own name" % (
                                    site, name, prev.call_site, dims_str(prev.loss.dims), dims_str(loss.dims)))
        if loss.dtype not in ("float16", "float32", "float64", "bfloat16"):
            raise FrontendError("mark_as_loss(%r) at %s: loss must be float, got dtype %s" % (name, site, loss.dtype))
        obj = Loss(loss, name, scale=scale, as_error=as_error, use_normalized_loss=use_normalized_loss,
                   use_flatten_frames=use_flatten_frames, custom_inv_norm_factor=custom_inv_norm_factor,
                   call_site_=site)
        self.losses[name] = obj
        get_backend_for_tensor(loss).mark_as_loss(obj)

    def mark_as_output(self, tensor, name, *, dims=None):
        from ._backend import get_backend_for_tensor
        from ._utils import is_tensor

        site = call_site()
        if not is_tensor(tensor) and _is_raw_tensor(tensor):
            tensor = self._raw_output(tensor, name, dims, site)
            dims = None
        if not is_tensor(tensor):
            raise FrontendError("mark_as_output(%r) at %s: expects an rf Tensor, got %r" % (name, site, tensor))
        if name in self.outputs.data:
            raise FrontendError("mark_as_output at %s: output %r was already marked" % (site, name))
        if dims is None:
            dims = list(tensor.dims)
        dims = list(dims)
        if len(dims) != len(tensor.dims) or set(dims) != set(tensor.dims):
            raise FrontendError("mark_as_output(%r) at %s: shape %s does not match the dims %s of the tensor" % (
                name, site, dims_str(dims), dims_str(tensor.dims)))
        out = get_backend_for_tensor(tensor).make_output_tensor(tensor, dims, name=name)
        self.outputs.data[name] = out

    def _raw_output(self, raw, name, dims, site):
        """A raw backend tensor as output: its dims from ``dims`` or the expected output (config model_outputs)."""
        from .array_ import convert_to_tensor

        if dims is None and self.expected_outputs is not None and name in self.expected_outputs.data:
            dims = self.expected_outputs.data[name].dims
        if dims is None:
            raise FrontendError("mark_as_output(%r) at %s: a raw tensor needs dims (shape=...) or an entry %r in the "
                                "config's model_outputs" % (name, site, name))
        return convert_to_tensor(raw, dims=dims, name=name)

    def mark_as_default_output(self, tensor, *, shape=None):
        self.mark_as_output(tensor, "output", dims=shape)

    def total_loss(self):
        """Sum of the scaled (normalized where asked) losses, as a Tensor (or 0.0 without losses)."""
        total = None
        for loss in self.losses.values():
            if loss.as_error:
                continue
            v = loss.get_scaled_reduced_loss()
            total = v if total is None else total + v
        return 0.0 if total is None else total


def _is_raw_tensor(x):
    """A tensor of a backend (e.g. a torch.Tensor in a plain PyTorch train_step), not a Python number."""
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (int, float, bool))


def _raw_to_tensor(raw, name, *, float_=False):
    """A raw loss tensor as Tensor with static dims (as the original's mark_as_loss does); a bool/int error
    (e.g. frame errors) as float32, so that it sums to the number of errors."""
    from ..tensor import Dim
    from . import math_ as _math
    from .array_ import convert_to_tensor

    dims = [Dim(int(n), name="%s_dim%i" % (name, i)) for i, n in enumerate(raw.shape)]
    t = convert_to_tensor(raw, dims=dims, name=name)
    if float_ and t.dtype not in ("float16", "float32", "float64", "bfloat16"):
        t = _math.cast(t, "float32")
    return t


def init_train_step_run_ctx(*, train_flag=True, step=0, epoch=1):
    _run_ctx[0] = RunCtx(stage="train_step", train_flag=train_flag, step=step, epoch=epoch)


def init_forward_step_run_ctx(*, epoch=1, step=0, expected_outputs=None):
    _run_ctx[0] = RunCtx(stage="forward_step", train_flag=False, step=step, epoch=epoch,
                         expected_outputs=expected_outputs)


def get_run_ctx():
    if _run_ctx[0] is None:
        _run_ctx[0] = RunCtx(stage="init")
    return _run_ctx[0]
