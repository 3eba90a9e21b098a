"""
The train op: optimizer by config, gradient clipping/noise, gradient accumulation, learning-rate warmup.

The learning rate comes in through a scalar placeholder (fed every step), so changing it between epochs
never changes the graph.

Optimizer config, as in the original:

* ``optimizer = {"class": "adam", "epsilon": 1e-8, ...}`` (class names: sgd/gradientdescent, momentum, adam,
  nadam, adamw, rmsprop, adadelta, adagrad; other keys are the optimizer's constructor arguments), or
* the old style ``adam = True`` / ``nadam = True`` / ``adadelta = True`` / ``adagrad = True`` /
  ``rmsprop = True`` / ``momentum = 0.9``, else plain SGD; ``optimizer_epsilon`` for Adam-like optimizers.

Gradients: ``gradient_clip`` (by value), ``gradient_clip_norm`` (per tensor), ``gradient_clip_global_norm``,
``gradient_noise`` (stddev of Gaussian noise), ``accum_grad_multiple_step`` (sum the gradients of N steps,
apply every N-th step). Learning rate per step: ``learning_rate_warmup_steps`` (linear warmup over the global
train step), or ``dynamic_learning_rate(network=, global_train_step=, learning_rate=, **kwargs)``.
"""

from __future__ import annotations

import inspect

import tensorflow as tf
from tensorflow.python.ops import math_ops
from tensorflow.python.ops import gen_training_ops

from .updater_errors import UpdaterError

tf1 = tf.compat.v1

__all__ = ["Updater", "get_optimizer_class", "NadamOptimizer", "AdamWOptimizer", "UpdaterError"]




class NadamOptimizer(tf1.train.AdamOptimizer):
    """Adam with Nesterov momentum (as TF contrib's NadamOptimizer)."""

    def _resource_apply_dense(self, grad, var):
        m = self.get_slot(var, "m")
        v = self.get_slot(var, "v")
        beta1_power, beta2_power = self._get_beta_accumulators()
        dtype = grad.dtype.base_dtype
        return gen_training_ops.resource_apply_adam(
            var.handle, m.handle, v.handle, math_ops.cast(beta1_power, dtype), math_ops.cast(beta2_power, dtype),
            math_ops.cast(self._lr_t, dtype), math_ops.cast(self._beta1_t, dtype), math_ops.cast(self._beta2_t, dtype),
            math_ops.cast(self._epsilon_t, dtype), grad, use_locking=self._use_locking, use_nesterov=True)

    def _apply_dense(self, grad, var):
        m = self.get_slot(var, "m")
        v = self.get_slot(var, "v")
        beta1_power, beta2_power = self._get_beta_accumulators()
        dtype = var.dtype.base_dtype
        return gen_training_ops.apply_adam(
            var, m, v, math_ops.cast(beta1_power, dtype), math_ops.cast(beta2_power, dtype),
            math_ops.cast(self._lr_t, dtype), math_ops.cast(self._beta1_t, dtype), math_ops.cast(self._beta2_t, dtype),
            math_ops.cast(self._epsilon_t, dtype), grad, use_locking=self._use_locking, use_nesterov=True)


class AdamWOptimizer(tf1.train.AdamOptimizer):
    """Adam with decoupled weight decay (as TF contrib's AdamWOptimizer): ``var -= weight_decay * var`` first."""

    def __init__(self, weight_decay=0.0, learning_rate=0.001, **kwargs):
        kwargs.setdefault("name", "AdamW")
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.weight_decay = weight_decay

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        if not self.weight_decay:
            return super().apply_gradients(grads_and_vars, global_step=global_step, name=name)
        decay_ops = [v.assign_sub(tf.cast(self.weight_decay, v.dtype.base_dtype) * v, read_value=False)
                     for _, v in grads_and_vars]
        with tf.control_dependencies(decay_ops):
            grads_and_vars = [(tf.identity(g) if not isinstance(g, tf.IndexedSlices) else g, v)
                              for g, v in grads_and_vars]
            return super().apply_gradients(grads_and_vars, global_step=global_step, name=name)


_OPTIMIZERS = {
    "sgd": tf1.train.GradientDescentOptimizer,
    "gradientdescent": tf1.train.GradientDescentOptimizer,
    "momentum": tf1.train.MomentumOptimizer,
    "adam": tf1.train.AdamOptimizer,
    "nadam": NadamOptimizer,
    "adamw": AdamWOptimizer,
    "rmsprop": tf1.train.RMSPropOptimizer,
    "adadelta": tf1.train.AdadeltaOptimizer,
    "adagrad": tf1.train.AdagradOptimizer,
}


def get_optimizer_class(name):
    key = name.lower()
    if key.endswith("optimizer"):
        key = key[:-len("optimizer")]
    if key not in _OPTIMIZERS:
        raise UpdaterError("unknown optimizer class %r; known: %s" % (name, ", ".join(sorted(_OPTIMIZERS))))
    return _OPTIMIZERS[key]


def _optimizer_from_config(config, learning_rate):
    opts = config.typed_value("optimizer", None)
    epsilon = config.float("optimizer_epsilon", 1e-8)
    if isinstance(opts, str):
        opts = {"class": opts}
    if opts:
        opts = dict(opts)
        cls = get_optimizer_class(opts.pop("class"))
        opts.pop("learning_rate", None)  # the rate is controlled per epoch
        if cls in (tf1.train.AdamOptimizer, NadamOptimizer, AdamWOptimizer):
            opts.setdefault("epsilon", epsilon)
        if cls is tf1.train.MomentumOptimizer:
            opts.setdefault("momentum", config.float("momentum", 0.9))
        try:
            return cls(learning_rate=learning_rate, **opts)
        except TypeError as exc:
            raise UpdaterError("optimizer %r: %s" % (config.typed_value("optimizer"), exc)) from None
    if config.bool("adam", False):
        return tf1.train.AdamOptimizer(learning_rate=learning_rate, epsilon=epsilon)
    if config.bool("nadam", False):
        return NadamOptimizer(learning_rate=learning_rate, epsilon=epsilon)
    if config.bool("adadelta", False):
        return tf1.train.AdadeltaOptimizer(learning_rate=learning_rate, rho=config.float("adadelta_decay", 0.95),
                                           epsilon=config.float("adadelta_offset", 1e-6))
    if config.bool("adagrad", False):
        return tf1.train.AdagradOptimizer(learning_rate=learning_rate)
    if config.bool("rmsprop", False):
        return tf1.train.RMSPropOptimizer(learning_rate=learning_rate, decay=config.float("rmsprop_decay", 0.9))
    momentum = config.float("momentum", 0.0)
    if momentum:
        return tf1.train.MomentumOptimizer(learning_rate=learning_rate, momentum=momentum)
    return tf1.train.GradientDescentOptimizer(learning_rate=learning_rate)


class Updater:
    """Builds the train op for a network's objective; ``learning_rate`` is a placeholder fed per step."""

    def __init__(self, config, network):
        self.config = config
        self.network = network
        self.global_train_step = network.get_global_train_step_var()
        with tf.name_scope("updater/"):
            self.learning_rate = tf1.placeholder(tf.float32, shape=(), name="learning_rate")
        self.optimizer = None
        self.train_op = None
        self.optim_vars = []
        self.grad_reducer = None  # distributed "grad" mode: grads -> grads summed over the workers

    def get_current_step_learning_rate(self):
        lr = self.learning_rate
        dyn = self.config.typed_value("dynamic_learning_rate", None)
        if callable(dyn):
            sig = inspect.signature(dyn)
            if not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
                raise UpdaterError("dynamic_learning_rate must accept **kwargs")
            with tf.name_scope("dynamic_learning_rate"):
                return tf.cast(dyn(network=self.network, global_train_step=self.global_train_step,
                                   learning_rate=lr), tf.float32)
        warmup = self.config.float("learning_rate_warmup_steps", 0)
        if warmup and warmup > 0:
            with tf.name_scope("learning_rate_warmup"):
                step = tf.cast(self.global_train_step, tf.float32) + 1.0
                lr = lr * tf.minimum(step / float(warmup), 1.0)
        return lr

    def create_optim_op(self):
        objective = self.network.get_objective()
        if isinstance(objective, (int, float)):
            raise UpdaterError("the network has no loss: set 'loss' on at least one layer "
                               "(e.g. \"output\": {\"class\": \"softmax\", \"loss\": \"ce\", ...}) to train it")
        var_list = self.network.get_trainable_params()
        if not var_list:
            raise UpdaterError("the network has no trainable parameters")
        config = self.config
        vars_before = set(v.ref() for v in tf1.global_variables())
        with tf.name_scope("updater/"):
            lr = self.get_current_step_learning_rate()
            self.optimizer = _optimizer_from_config(config, lr)
            grads_and_vars = self.optimizer.compute_gradients(objective, var_list=var_list)
            grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
            if not grads_and_vars:
                raise UpdaterError("the loss does not depend on any trainable parameter")
            grads_and_vars = self._post_process_grads(grads_and_vars)
            accum = config.int("accum_grad_multiple_step", 1) or 1
            step_inc = lambda: self.global_train_step.assign_add(1, read_value=False)  # noqa: E731
            post = self.network.get_post_control_dependencies()
            if accum > 1:
                apply_op = self._accum_apply(grads_and_vars, accum)
            else:
                apply_op = self.optimizer.apply_gradients(grads_and_vars)
            with tf.control_dependencies([apply_op] + list(post)):
                self.train_op = tf.group(step_inc(), name="train_op")
        self.optim_vars = [v for v in tf1.global_variables() if v.ref() not in vars_before]
        return self.train_op

    def _post_process_grads(self, grads_and_vars):
        config = self.config
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        if self.grad_reducer is not None:
            grads = self.grad_reducer(grads)
        noise = config.float("gradient_noise", 0.0)
        if noise:
            grads = [g + tf.random.truncated_normal(tf.shape(g), stddev=noise, dtype=g.dtype) for g in grads]
        clip_norm = config.float("gradient_clip_norm", 0.0)
        if clip_norm:
            grads = [tf.clip_by_norm(g, clip_norm) for g in grads]
        clip = config.float("gradient_clip", 0.0)
        if clip:
            grads = [tf.clip_by_value(g, -clip, clip) for g in grads]
        global_norm = config.float("gradient_clip_global_norm", 0.0)
        if global_norm:
            grads, _ = tf.clip_by_global_norm(grads, global_norm)
        return list(zip(grads, variables))

    def _accum_apply(self, grads_and_vars, accum):
        """Sum gradients in accumulators; apply (and reset) on every ``accum``-th step."""
        accums = []
        with tf1.variable_scope("accum_grad"):
            for _, v in grads_and_vars:
                accums.append(tf1.get_variable(
                    v.op.name.replace("/", "_") + "_accum", shape=v.shape, dtype=v.dtype.base_dtype,
                    initializer=tf1.zeros_initializer(), trainable=False))
        is_last = tf.equal(self.global_train_step % accum, accum - 1)
        add_ops = [a.assign_add(g, read_value=False) for a, (g, _) in zip(accums, grads_and_vars)]

        def apply():
            with tf.control_dependencies(add_ops):
                summed = [(a.read_value(), v) for a, (_, v) in zip(accums, grads_and_vars)]
                op = self.optimizer.apply_gradients(summed)
            with tf.control_dependencies([op]):
                return tf.group(*[a.assign(tf.zeros_like(a), read_value=False) for a in accums])

        def no_apply():
            with tf.control_dependencies(add_ops):
                return tf.no_op()

        return tf.cond(is_last, apply, no_apply)
