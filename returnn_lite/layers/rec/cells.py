"""
Cell units of the rec layer: one small class per cell (NativeLstm2-style LSTM and our own implementations
of TF's rnn cells with their checkpoint layouts). Each cell splits its work into an input projection that is
computed once for all frames (``project``) and a recurrent step (``step``) that only does the state part.
"""

from __future__ import annotations

import tensorflow as tf

from ...registry import Registry

tf1 = tf.compat.v1


def _layer_norm(x, gamma, beta, eps):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    y = (x - mean) * tf.math.rsqrt(var + eps) * gamma
    return y + beta if beta is not None else y


def lstm_update(z, rec, c_prev, order):
    """
    One LSTM frame with sigmoid gates and tanh: (c, h) from the pre-activation z + rec [B, 4n] (gates in ``order``,
    e.g. "ijfo") and c_prev [B, n]. With a hand-written gradient: about a dozen elementwise ops and 6 saved tensors
    per frame, where autodiff gives ~100 ops in a loop (each Mul/Add of unknown batch size gets its own
    shape/reduce/reshape ops) and ~20 saved tensors.
    """
    k = {g: order.index(g) for g in "ijfo"}

    @tf.custom_gradient
    def update(z, rec, c_prev):
        parts = tf.split(z + rec, 4, axis=-1)
        i, f, o = tf.sigmoid(parts[k["i"]]), tf.sigmoid(parts[k["f"]]), tf.sigmoid(parts[k["o"]])
        j = tf.tanh(parts[k["j"]])
        c = f * c_prev + i * j
        tanh_c = tf.tanh(c)
        h = o * tanh_c

        def grad(dc_next, dh):
            from tensorflow.python.ops import gen_math_ops

            dc = gen_math_ops.tanh_grad(tanh_c, dh * o)
            if dc_next is not None:
                dc = dc + dc_next
            dparts = [None] * 4
            dparts[k["i"]] = gen_math_ops.sigmoid_grad(i, dc * j)
            dparts[k["j"]] = gen_math_ops.tanh_grad(j, dc * i)
            dparts[k["f"]] = gen_math_ops.sigmoid_grad(f, dc * c_prev)
            dparts[k["o"]] = gen_math_ops.sigmoid_grad(o, dh * tanh_c)
            dz = tf.concat(dparts, axis=-1)
            return dz, dz, dc * f

        return (c, h), grad

    return update(z, rec, c_prev)


class CellBase:
    """
    :ivar list[str] state_names: parts of the state (e.g. ["c", "h"]), each [B, state_dims[k]]
    """

    state_names = ("h",)
    scope = None  # variable scope of the params below "<layer>/rec/" (TF cells), or None
    default_opts = {}
    # The output of a frame is the new state "h" (False: zoneout, whose state differs from its output).
    output_is_h = True
    # W_rec [n_h, k] where a frame's pre-activation is z[t] + h_prev @ W_rec (see rec_part) and the output is h; set
    # by cells whose step has that form, so that run_cell_loop can take its gradient outside the loop
    rec_weight = None
    _loop_rec_weight = None  # what rec_part multiplies with inside run_cell_loop (W_rec without gradient)

    def __init__(self, layer, n_in, n_out, param_prefix="rec/", **opts):
        unknown = set(opts) - set(self.default_opts)
        if unknown:
            raise TypeError("%s: unknown unit_opts %s; known: %s" % (
                self.__class__.__name__, sorted(unknown), sorted(self.default_opts)))
        self.opts = dict(self.default_opts, **opts)
        self.layer = layer
        self.n_in = n_in
        self.n_out = n_out
        self.prefix = param_prefix + (self.scope + "/" if self.scope else "")
        self.create_params()

    def param(self, name, shape, init="glorot_uniform"):
        return self.layer.create_param(self.prefix + name, shape, init)

    @property
    def state_dims(self):
        return {k: self.n_out for k in self.state_names}

    @classmethod
    def get_output_dim(cls, n_out, unit_opts=None):
        """Feature dim of the output, for n_out units (e.g. num_proj of LSTMCell)."""
        return n_out

    @property
    def out_dim(self):
        return self.get_output_dim(self.n_out, self.opts)

    def create_params(self):
        raise NotImplementedError

    def project(self, x):
        """Input part of the step for all frames at once: x [..., n_in] -> [..., *] (x is dense or int ids)."""
        raise NotImplementedError

    def step(self, z, state):
        """:return: (output [B, n_out], new state dict)"""
        raise NotImplementedError

    def act(self, x):
        """The cell's activation (unit_opts "activation": None -> tanh, a name or a callable)."""
        a = self.opts.get("activation")
        if a is None:
            return tf.tanh(x)
        if callable(a):
            return a(x)
        from ...activations import get_activation_function

        return get_activation_function(a)(x)

    def rec_part(self, h):
        """h_prev @ W_rec (see rec_weight); in run_cell_loop with a gradient for h_prev only."""
        if self._loop_rec_weight is None:
            return tf.matmul(h, self.rec_weight)
        _register_matmul_grad_a_only()
        # (TF's MatMul gradient would also push h_prev per frame for W_rec's gradient, which is taken outside)
        with tf1.get_default_graph().gradient_override_map({"MatMul": _MATMUL_GRAD_A_ONLY}):
            return tf.matmul(h, self._loop_rec_weight)

    def _affine_in(self, x, w, b):
        """x @ w + b (BiasAdd: its gradient is one fast reduction, the broadcasting add's a generic Sum)."""
        return tf.nn.bias_add(self._matmul_in(x, w), b)

    def _matmul_in(self, x, w):
        if x.dtype.is_integer:
            return tf.gather(w, x)
        if x.shape.rank == 2:
            return tf.matmul(x, w)
        return tf.tensordot(x, w, [[x.shape.rank - 1], [0]])


class NativeLstm2Cell(CellBase):
    """LSTM as the original's NativeLstm2: z = x W + b + h W_re, gates (cell-in, input, forget, output)."""

    state_names = ("c", "h")
    # unit_opts as the original's NativeLstm2: dropout on the recurrent weights (one mask per run, in training,
    # optionally broadcast along axes given as 1 in rec_weight_dropout_shape), a constant forget gate bias
    default_opts = {"rec_weight_dropout": 0.0, "rec_weight_dropout_shape": None, "forget_bias": 0.0}

    def create_params(self):
        n = self.n_out
        self.W = self.param("W", (self.n_in, 4 * n))
        self.W_re = self.param("W_re", (n, 4 * n))
        self.b = self.param("b", (4 * n,), 0.0)
        rate = self.opts["rec_weight_dropout"]
        if rate:
            shape = self.opts["rec_weight_dropout_shape"]
            noise = [d if s is None else s for s, d in zip(shape, (n, 4 * n))] if shape else None
            w_re = self.W_re
            self.W_re = self.layer.network.dropout_on_train(w_re, rate, noise_shape=noise)

    @property
    def rec_weight(self):
        return self.W_re

    def project(self, x):
        b = self.b
        if self.opts["forget_bias"]:  # gates j, i, f, o: added to the f part (of the bias, not of every frame)
            n = self.n_out
            b = b + tf.concat([tf.zeros([2 * n], b.dtype), tf.fill([n], tf.cast(self.opts["forget_bias"], b.dtype)),
                               tf.zeros([n], b.dtype)], 0)
        return self._affine_in(x, self.W, b)

    def step(self, z, state):
        c, h = lstm_update(z, self.rec_part(state["h"]), state["c"], "jifo")
        return h, {"c": c, "h": h}


class _KernelCell(CellBase):
    """TF rnn cell with kernel [n_in + n_rec, k] on concat(x, h) and bias [k]; x part projected ahead."""

    n_gates = 4

    def create_params(self):
        self.kernel = self.param("kernel", (self.n_in + self.n_rec, self.n_gates * self.n_out))
        self.bias = self.param("bias", (self.n_gates * self.n_out,), 0.0)
        # split once, outside the loop: a slice of the variable inside the loop body would be read and sliced per
        # step, and its gradient would be a dense [n_in + n_rec, k] tensor per step
        self.kernel_in, self.kernel_rec = self.kernel[:self.n_in], self.kernel[self.n_in:]

    @property
    def rec_weight(self):
        return self.kernel_rec

    @property
    def n_rec(self):
        return self.n_out

    def project(self, x):
        return self._affine_in(x, self.kernel_in, self.bias)

    def _bias_with_forget_bias(self):
        """bias + forget_bias on the f part (gates i, j, f, o): added once to the projection, not per frame."""
        fb = self.opts["forget_bias"]
        if not fb:
            return self.bias
        n = self.n_out
        return self.bias + tf.concat([tf.zeros([2 * n], self.bias.dtype), tf.fill([n], tf.cast(fb, self.bias.dtype)),
                                      tf.zeros([n], self.bias.dtype)], 0)


class BasicLSTMCell(_KernelCell):
    """TF BasicLSTMCell: gates (i, j, f, o), forget_bias added to f."""

    scope = "basic_lstm_cell"
    state_names = ("c", "h")
    default_opts = {"forget_bias": 1.0, "state_is_tuple": True, "activation": None}

    def project(self, x):
        return self._affine_in(x, self.kernel_in, self._bias_with_forget_bias())

    def step(self, z, state):  # (z includes the forget bias)
        if self.opts["activation"] is None:
            c, h = lstm_update(z, self.rec_part(state["h"]), state["c"], "ijfo")
            return h, {"c": c, "h": h}
        i, j, f, o = tf.split(z + self.rec_part(state["h"]), 4, axis=-1)
        c = state["c"] * tf.sigmoid(f) + tf.sigmoid(i) * self.act(j)
        h = self.act(c) * tf.sigmoid(o)
        return h, {"c": c, "h": h}


class LSTMCell(_KernelCell):
    """TF LSTMCell (standardlstm): gates (i, j, f, o), optional peepholes, cell clipping, projection."""

    scope = "lstm_cell"
    state_names = ("c", "h")
    default_opts = {"forget_bias": 1.0, "use_peepholes": False, "cell_clip": None, "num_proj": None,
                    "proj_clip": None, "state_is_tuple": True, "activation": None, "initializer": None}

    @property
    def n_rec(self):
        return self.opts.get("num_proj") or self.n_out  # (a subclass' opts may lack it, e.g. ZoneoutLSTMCell)

    @classmethod
    def get_output_dim(cls, n_out, unit_opts=None):
        return (unit_opts or {}).get("num_proj") or n_out

    @property
    def state_dims(self):
        return {"c": self.n_out, "h": self.n_rec}

    def create_params(self):
        super().create_params()
        n = self.n_out
        if self.opts["use_peepholes"]:
            self.w_f_diag = self.param("w_f_diag", (n,))
            self.w_i_diag = self.param("w_i_diag", (n,))
            self.w_o_diag = self.param("w_o_diag", (n,))
        if self.opts["num_proj"]:
            self.proj = self.layer.create_param(self.prefix + "projection/kernel", (n, self.opts["num_proj"]))

    def project(self, x):
        return self._affine_in(x, self.kernel_in, self._bias_with_forget_bias())

    def _step_with_options(self, z, state):
        """(c, h) before the projection, with peepholes, cell clipping or another activation."""
        c_prev = state["c"]
        i, j, f, o = tf.split(z + self.rec_part(state["h"]), 4, axis=-1)
        if self.opts["use_peepholes"]:
            c = tf.sigmoid(f + self.w_f_diag * c_prev) * c_prev + tf.sigmoid(
                i + self.w_i_diag * c_prev) * self.act(j)
        else:
            c = tf.sigmoid(f) * c_prev + tf.sigmoid(i) * self.act(j)
        if self.opts["cell_clip"] is not None:
            c = tf.clip_by_value(c, -self.opts["cell_clip"], self.opts["cell_clip"])
        if self.opts["use_peepholes"]:
            h = tf.sigmoid(o + self.w_o_diag * c) * self.act(c)
        else:
            h = tf.sigmoid(o) * self.act(c)
        return c, h

    def step(self, z, state):  # (z includes the forget bias)
        opts, c_prev = self.opts, state["c"]
        if opts["activation"] is None and not opts["use_peepholes"] and opts["cell_clip"] is None:
            c, h = lstm_update(z, self.rec_part(state["h"]), c_prev, "ijfo")
        else:
            c, h = self._step_with_options(z, state)
        if self.opts["num_proj"]:
            h = tf.matmul(h, self.proj)
            if self.opts["proj_clip"] is not None:
                h = tf.clip_by_value(h, -self.opts["proj_clip"], self.opts["proj_clip"])
        return h, {"c": c, "h": h}


class GRUCell(CellBase):
    """TF GRUCell: gates/kernel [n_in+n, 2n] (r, u), candidate/kernel [n_in+n, n] on concat(x, r*h)."""

    scope = "gru_cell"
    default_opts = {"activation": None, "kernel_initializer": None, "bias_initializer": None}

    def create_params(self):
        n, n_in = self.n_out, self.n_in
        self.gk = self.param("gates/kernel", (n_in + n, 2 * n))
        self.gb = self.param("gates/bias", (2 * n,), 1.0)
        self.ck = self.param("candidate/kernel", (n_in + n, n))
        self.cb = self.param("candidate/bias", (n,), 0.0)
        # input parts (projected once for all frames) and recurrent parts, split once outside the loop
        self.w_in = tf.concat([self.gk[:n_in], self.ck[:n_in]], axis=1)
        self.b_in = tf.concat([self.gb, self.cb], axis=0)
        self.gk_rec, self.ck_rec = self.gk[n_in:], self.ck[n_in:]

    def project(self, x):
        return self._affine_in(x, self.w_in, self.b_in)

    def step(self, z, state):
        n = self.n_out
        h = state["h"]
        zg, zc = z[:, :2 * n], z[:, 2 * n:]
        r, u = tf.split(tf.sigmoid(zg + tf.matmul(h, self.gk_rec)), 2, axis=-1)
        c = self.act(zc + tf.matmul(r * h, self.ck_rec))
        h = u * h + (1 - u) * c
        return h, {"h": h}


class BasicRNNCell(_KernelCell):
    """TF BasicRNNCell: h = tanh([x, h] kernel + bias)."""

    scope = "basic_rnn_cell"
    n_gates = 1
    default_opts = {"activation": None}

    def step(self, z, state):
        h = self.act(z + self.rec_part(state["h"]))
        return h, {"h": h}


class ZoneoutLSTMCell(LSTMCell):
    """LSTMCell with zoneout on c and h (in eval: expectation, in training: random keep of the old value)."""

    default_opts = {"zoneout_factor_cell": 0.0, "zoneout_factor_output": 0.0}
    output_is_h = False

    def __init__(self, layer, n_in, n_out, param_prefix="rec/", **opts):
        unknown = set(opts) - set(self.default_opts)
        if unknown:  # the original's ZoneoutLSTMCell takes only the two zoneout factors
            raise TypeError("ZoneoutLSTMCell: unknown unit_opts %s; known: %s" % (
                sorted(unknown), sorted(self.default_opts)))
        zo = {k: opts.pop(k) for k in list(opts) if k in self.default_opts}
        self.opts = dict(LSTMCell.default_opts)
        self.layer, self.n_in, self.n_out = layer, n_in, n_out
        self.prefix = param_prefix + self.scope + "/"
        self.opts.update(opts)
        self.zo = dict(self.default_opts, **zo)
        self.create_params()

    def step(self, z, state):
        y, new = super().step(z, state)
        net = self.layer.network
        out = {}
        for k, factor in (("c", self.zo["zoneout_factor_cell"]), ("h", self.zo["zoneout_factor_output"])):
            old, cur = state[k], new[k]
            if not factor:
                out[k] = cur
                continue

            def train(old=old, cur=cur, factor=factor):
                return (1 - factor) * tf.nn.dropout(cur - old, rate=factor) + old

            out[k] = net.cond_on_train(train, lambda old=old, cur=cur, factor=factor: factor * old + (1 - factor) * cur)
        return y, out  # the output is the plain LSTM output; zoneout only applies to the state


class LayerNormVariantsLSTMCell(CellBase):
    """
    LSTM with layer norm variants (the original's unit_opts): by default layer norm on the input and recurrent
    projections (``global_norm``) and on the new cell (``cell_norm``); ``global_norm_joined`` normalizes their sum
    instead, ``per_gate_norm`` each gate, ``hidden_norm`` the output; ``with_concat`` uses one weight matrix on
    [x, h]; ``dropout``/``dropout_h`` drop input/recurrent units in training. Norm params are ``gamma_<part>`` and
    ``beta_<part>``: ``input_below``/``state_below`` (separate), ``lstm_in`` (joined or with_concat), ``i``/``j``/``f``/``o``,
    ``new_c``, ``new_h``.
    """

    state_names = ("c", "h")
    default_opts = {"norm_gain": 1.0, "norm_shift": 0.0, "forget_bias": 0.0, "activation": None,
                    "is_training": None, "dropout": 0.0, "dropout_h": 0.0, "dropout_seed": None,
                    "with_concat": False, "global_norm": True, "global_norm_joined": False,
                    "per_gate_norm": False, "cell_norm": True, "cell_norm_in_output": True,
                    "hidden_norm": False, "variance_epsilon": 1e-12}

    def create_params(self):
        n, o = self.n_out, self.opts
        self._norms = {}
        if o["with_concat"]:
            self.W = self.param("W", (self.n_in + n, 4 * n))
        else:
            self.W_ff = self.param("W_ff", (self.n_in, 4 * n))
            self.W_re = self.param("W_re", (n, 4 * n))
        if o["global_norm_joined"] or (o["with_concat"] and o["global_norm"]):
            self._add_norm("lstm_in", 4 * n)  # one norm of the summed projections (the original's name)
        elif o["global_norm"]:
            self._add_norm("input_below", 4 * n)
            self._add_norm("state_below", 4 * n, with_beta=False)
        if o["per_gate_norm"]:
            for gate in ("i", "j", "f", "o"):
                self._add_norm(gate, n)
        if o["cell_norm"]:
            self._add_norm("new_c", n)
        if o["hidden_norm"]:
            self._add_norm("new_h", n)
        self._h_mask = None

    def _add_norm(self, part, dim, with_beta=True):
        gamma = self.param("gamma_" + part, (dim,), self.opts["norm_gain"])
        beta = self.param("beta_" + part, (dim,), self.opts["norm_shift"]) if with_beta else None
        self._norms[part] = (gamma, beta)

    def _norm(self, x, part):
        gamma, beta = self._norms[part]
        return _layer_norm(x, gamma, beta, self.opts["variance_epsilon"])

    def _dropout(self, x, rate, batch_axis):
        """Dropout in training with one mask per sequence (broadcast over time for time-major input)."""
        if not rate or self.layer.network.train_flag is False:
            return x
        shape = tf.shape(x)
        noise = tf.concat([tf.ones([x.shape.rank - 2], tf.int32), shape[-2:]], 0) if x.shape.rank > 2 else None
        return self.layer.network.dropout_on_train(x, rate, noise_shape=noise, seed=self.opts["dropout_seed"])

    def project(self, x):
        o = self.opts
        if o["dropout_h"] and self.layer.network.train_flag is not False:
            batch = tf.shape(x)[-2]
            ones = tf.ones([batch, self.n_out])
            self._h_mask = self.layer.network.dropout_on_train(ones, o["dropout_h"], seed=o["dropout_seed"])
        if x.dtype.is_integer:
            if o["dropout"]:
                raise NotImplementedError("layernormvariantslstm: unit_opts dropout on sparse input is not supported")
        else:
            x = self._dropout(x, o["dropout"], batch_axis=-2)
        if o["with_concat"]:
            return x  # the matmul is on [x, h], in the step
        z = self._matmul_in(x, self.W_ff)
        if o["global_norm"] and not o["global_norm_joined"]:
            z = self._norm(z, "input_below")
        return z

    def step(self, z, state):
        o = self.opts
        h_prev = state["h"] if self._h_mask is None else state["h"] * self._h_mask
        if o["with_concat"]:
            x = z if not z.dtype.is_integer else tf.one_hot(z, self.n_in)
            lstm_in = tf.matmul(tf.concat([x, h_prev], axis=-1), self.W)
            if o["global_norm"] or o["global_norm_joined"]:
                lstm_in = self._norm(lstm_in, "lstm_in")
        else:
            r = tf.matmul(h_prev, self.W_re)
            if o["global_norm_joined"]:
                lstm_in = self._norm(z + r, "lstm_in")
            else:
                lstm_in = z + (self._norm(r, "state_below") if o["global_norm"] else r)
        i, j, f, g_o = tf.split(lstm_in, 4, axis=-1)
        if o["per_gate_norm"]:
            i, j, f, g_o = (self._norm(i, "i"), self._norm(j, "j"), self._norm(f, "f"), self._norm(g_o, "o"))
        c = tf.sigmoid(f + o["forget_bias"]) * state["c"] + tf.sigmoid(i) * self.act(j)
        if o["cell_norm"]:
            c_norm = self._norm(c, "new_c")
            h = self.act(c_norm if o["cell_norm_in_output"] else c) * tf.sigmoid(g_o)
            c = c_norm
        else:
            h = self.act(c) * tf.sigmoid(g_o)
        if o["hidden_norm"]:
            h = self._norm(h, "new_h")
        return h, {"c": c, "h": h}


class RHNCell(CellBase):
    """
    Recurrent highway network (Zilly et al. 2016, https://arxiv.org/abs/1607.03474) as the original's ``rhn`` unit:
    ``depth`` highway steps per frame with the carry gate coupled to the transform gate (C = 1 - T). Params: input
    projection ``rec/W`` [n_in, 2n] and ``rec/b`` [2n] (transform part initialized to ``transform_bias``), per depth
    ``rec/rhn_cell/depth_<i>/W`` [n, 2n] (first half: candidate h, second half: transform gate t). ``dropout``: in
    training, one mask per sequence (the same for all frames and depths) on the state entering each depth step;
    the state update itself uses the unmasked state (as an ``rnn_cell`` inside a rec loop, the mask is drawn per
    frame). The state is one tensor (key ``var`` for initial_state params).
    """

    state_names = ("h",)
    default_opts = {"is_training": None, "depth": 5, "dropout": 0.0, "dropout_seed": None, "transform_bias": None,
                    "batch_size": None}

    def create_params(self):
        n, depth = self.n_out, self.opts["depth"]
        if not isinstance(depth, int) or depth < 1:
            raise ValueError("rhn unit: unit_opts depth must be an int >= 1, got %r" % (depth,))
        tb = float(self.opts["transform_bias"] or 0.0)
        self.W = self.param("W", (self.n_in, 2 * n))
        self.b = self.param("b", (2 * n,), tf.constant_initializer([0.0] * n + [tb] * n))
        self.W_depth = [self.layer.create_param("%srhn_cell/depth_%i/W" % (self.prefix, i), (n, 2 * n))
                        for i in range(depth)]
        self._mask = None

    def _train_flag(self):
        flag = self.opts["is_training"]
        return self.layer.network.train_flag if flag is None else flag

    def project(self, x):
        rate = self.opts["dropout"]
        if rate and self._train_flag() is not False:
            batch = self.opts["batch_size"] or tf.shape(x)[-2]  # created here, outside the loop: one per sequence
            keep = 1.0 - rate
            seed = self.opts["dropout_seed"]

            def mask():
                return tf.floor(keep + tf1.random_uniform((batch, self.n_out), seed=seed)) / keep

            flag = self._train_flag()
            if isinstance(flag, bool):
                self._mask = mask()
            else:
                self._mask = tf.cond(flag, mask, lambda: tf.ones((batch, self.n_out)))
        return self._affine_in(x, self.W, self.b)

    def step(self, z, state):
        s = state["h"]
        for i, w in enumerate(self.W_depth):
            s_in = s * self._mask if self._mask is not None else s
            zt = tf.matmul(s_in, w)
            if i == 0:
                zt = zt + z
            h, t = tf.split(zt, 2, axis=-1)
            s = s + tf.sigmoid(t) * (tf.tanh(h) - s)
        return s, {"h": s}


# name (lower case) -> cell class, for the rec layer with a cell unit
NATIVE_LSTM_NAMES = ("lstm", "lstmp", "lstmblock", "lstmblockfused", "nativelstm", "nativelstm2", "nativelstmlowmem",
                     "vanillalstm")
CELLS = {
    "lstm": NativeLstm2Cell, "nativelstm": NativeLstm2Cell, "nativelstm2": NativeLstm2Cell,
    "nativelstmlowmem": NativeLstm2Cell, "lstmp": NativeLstm2Cell, "lstmblock": NativeLstm2Cell,
    "lstmblockfused": NativeLstm2Cell, "vanillalstm": NativeLstm2Cell,
    "standardlstm": LSTMCell, "basiclstm": BasicLSTMCell, "gru": GRUCell, "rnn": BasicRNNCell,
    "basicrnn": BasicRNNCell, "zoneoutlstm": ZoneoutLSTMCell, "layernormvariantslstm": LayerNormVariantsLSTMCell,
    "rhn": RHNCell,
    # tf.contrib's GRUBlockCell(V2) (gone in TF 2): the same GRU and param names as TF's GRUCell
    "grublock": GRUCell, "grublockv2": GRUCell,
}
# as a single-step cell (rnn_cell layer), the LSTM names are TF's LSTMCell
CELLS_STEP_ONLY = dict(CELLS, **{k: LSTMCell for k in ("lstm", "lstmp", "lstmblock", "lstmblockfused")})


def _cell_key(unit):
    name = unit.lower().replace("_", "")
    return name[:-len("cell")] if name.endswith("cell") else name


cell_registry = Registry("cell unit", normalize=_cell_key)
cell_registry_step_only = Registry("cell unit (rnn_cell)", normalize=_cell_key)
for _name, _cls in CELLS.items():
    cell_registry.register(_name, _cls)
for _name, _cls in CELLS_STEP_ONLY.items():
    cell_registry_step_only.register(_name, _cls)


def get_cell_class(unit, step_only=False):
    if isinstance(unit, str) and _cell_key(unit) in ("cudnnlstm", "cudnngru", "cudnnrnnrelu", "cudnnrnntanh"):
        raise ValueError("unit %r is the original's CuDNN RNN (GPU only, with its own opaque param layout); "
                         "returnn_lite has no CuDNN kernels: use unit 'nativelstm2' (or 'gru') instead" % unit)
    return (cell_registry_step_only if step_only else cell_registry).get(unit)


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, name="while"):
    """
    tf.while_loop (control flow v2) for the subnetwork unit, robust against gradients built after the graph has run
    once. Building a v2 gradient may otherwise add outputs to the existing While op (accumulators of intermediates,
    and TF's optimisation that moves Shape/Size/Rank/TensorListElementShape/TensorListLength ops of the gradient
    into the forward loop), which the session, holding the old node, cannot see ("Connecting to invalid output N of
    source node ..."). With TF's ``output_all_intermediates`` on, every intermediate is an output from the start,
    and that optimisation is off. The flag is read again when the gradient is built (possibly much later, outside
    of this function), so it is switched on for good (it only affects v2 while loops, which only this uses).
    """
    tf1.experimental.output_all_intermediates(True)
    return tf.while_loop(cond, body, loop_vars, shape_invariants=shape_invariants,
                         parallel_iterations=parallel_iterations, name=name)


class _ControlFlowV1:
    """
    Context: tf.while_loop / tf.TensorArray built with TF's v1 control flow (Enter/Exit frames, TensorArrayV3).
    With v2 (a While op whose body is a function), gradients built after the graph has already run once fail
    ("Connecting to invalid output N of source node .../while"): building the gradient adds outputs to the existing
    While op (accumulators of ops the gradient creates in the forward body, e.g. for TensorArray reads), which the
    session, holding the old node, cannot see. v1 gradients only add new nodes, which the session picks up.
    """

    def __enter__(self):
        from tensorflow.python.ops import control_flow_util

        self._old = control_flow_util.ENABLE_CONTROL_FLOW_V2
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
        return self

    def __exit__(self, *exc):
        from tensorflow.python.ops import control_flow_util

        control_flow_util.ENABLE_CONTROL_FLOW_V2 = self._old
        return False


def control_flow_v1():
    return _ControlFlowV1()


def native_lstm_module(cell, z):
    """The loaded NativeLstm2 op module if this cell runs as the fused op (see returnn_lite.native_op), else None."""
    if type(cell) is not NativeLstm2Cell or z.dtype not in (tf.float32, tf.float64) or z.dtype != cell.W_re.dtype:
        return None
    from ... import native_op

    net = getattr(cell.layer, "network", None)
    config = net.get_root_network().config if net is not None else None
    return native_op.lstm_module(config)


def _check_initial_state(cell, initial_state):
    for k in cell.state_names:
        dim = initial_state[k].shape[-1]
        if dim is not None and dim != cell.state_dims[k]:
            raise ValueError("layer %r: initial state %r has dim %i, the cell needs %i" % (
                getattr(cell.layer, "name", "?"), k, dim, cell.state_dims[k]))


def run_cell_loop(cell, z, seq_len, initial_state, reverse=False, native=None):
    """
    Runs cell.step over time-major projected inputs z [T, B, D]; frames at t >= seq_len keep the state (output 0).
    The NativeLstm2 cell runs as one fused op (returnn_lite.native_op) when that is available; native=False forces
    the pure-TF loop, a module (from native_lstm_module) the op.
    :return: (outputs [T, B, n_out], final state dict)
    """
    _check_initial_state(cell, initial_state)
    if native is None:
        native = native_lstm_module(cell, z)
    if native:
        from ... import native_op

        y, c, h = native_op.native_lstm2(native, z, cell.W_re, initial_state["c"], initial_state["h"], seq_len,
                                         reverse=reverse)
        return y, {"c": c, "h": h}
    with control_flow_v1():
        return _run_cell_loop(cell, z, seq_len, initial_state, reverse=reverse)


def _run_cell_loop(cell, z, seq_len, initial_state, reverse=False):
    """
    The loop does per frame only what depends on the previous frame. reverse: the frames are visited from T-1 down
    to 0; as frames past the length keep the state, that is each sequence reversed in place (no reverse_sequence of
    z and y). Frames past the length keep the state (copy-through, as tf.compat.v1.nn.dynamic_rnn); when the output
    is the state h, the loop writes that h and the output is zeroed past the length once, outside the loop. With
    cell.rec_weight, W_rec enters the loop without gradient: its gradient is one GEMM over all frames outside the
    loop (see _with_rec_weight_grad), not a matmul and an accumulation per frame.
    """
    _patch_tensor_array_grad()
    names = list(cell.state_names)
    n_time = tf.shape(z)[0]
    output_is_h = cell.output_is_h and "h" in names
    w_rec = cell.rec_weight if output_is_h else None
    hprev_holder = {}
    if w_rec is not None:
        z = _with_rec_weight_grad(z, w_rec, hprev_holder)
    z_ta = tf.TensorArray(z.dtype, size=n_time, element_shape=z.shape[1:]).unstack(z)
    out_ta = tf.TensorArray(z.dtype, size=n_time, element_shape=tf.TensorShape([z.shape[1], cell.out_dim]))

    def body(s, out_ta, *states):
        t = n_time - 1 - s if reverse else s
        state = dict(zip(names, states))
        y, new = cell.step(z_ta.read(t), state)
        # Select with a [B] condition (tf1.where): its gradient is 3 ops, SelectV2's (broadcasting) about 12
        mask = t < seq_len
        new_states = [tf1.where(mask, new[k], state[k]) for k in names]
        out = new_states[names.index("h")] if output_is_h else tf1.where(mask, y, tf.zeros_like(y))
        return [s + 1, out_ta.write(t, out)] + new_states

    cell._loop_rec_weight = tf.stop_gradient(w_rec) if w_rec is not None else None
    try:
        res = tf.while_loop(lambda s, *_: s < n_time, body,
                            [tf.constant(0), out_ta] + [initial_state[k] for k in names])
    finally:
        cell._loop_rec_weight = None
    y = res[1].stack()
    if output_is_h:
        if w_rec is not None:  # h before each frame: frames past the length hold h0 (see the docstring)
            h0 = tf.expand_dims(initial_state["h"], 0)
            hprev_holder["hprev"] = tf.concat([y[1:], h0] if reverse else [h0, y[:-1]], axis=0)
        mask = tf.range(n_time)[:, None, None] < seq_len[None, :, None]  # [T, B, 1]
        y = tf.where(mask, y, tf.zeros([], y.dtype))
    return y, dict(zip(names, res[2:]))


_MATMUL_GRAD_A_ONLY = "ReturnnLiteMatMulGradAOnly"
_matmul_grad_registered = False


def _register_matmul_grad_a_only():
    """Gradient of a @ b (no transposes) for a only: b is W_rec without gradient (see CellBase.rec_part)."""
    global _matmul_grad_registered
    if _matmul_grad_registered:
        return

    @tf.RegisterGradient(_MATMUL_GRAD_A_ONLY)
    def _grad(op, grad):
        return tf.matmul(grad, op.inputs[1], transpose_b=True), None

    _matmul_grad_registered = True


def _with_rec_weight_grad(z, w_rec, hprev_holder):
    """
    Identity on z [T, B, k] whose gradient also gives W_rec's: dW_rec = sum over frames of h_prev^T dz, as z[t] +
    h_prev[t] @ W_rec is the frame's pre-activation (dz is its gradient). hprev_holder["hprev"] [T, B, n_h] is set
    after the loop is built.
    """

    @tf.custom_gradient
    def identity(z, w):
        def grad(dz):
            hprev = hprev_holder["hprev"]
            n_h = tf.shape(hprev)[-1]
            dw = tf.matmul(tf.reshape(hprev, [-1, n_h]), tf.reshape(dz, [-1, tf.shape(dz)[-1]]), transpose_a=True)
            return dz, tf.reshape(dw, tf.shape(w))

        return tf.identity(z), grad

    return identity(z, w_rec)


_tensor_array_patched = False
_TA_V1_OPS = ("TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
              "TensorArrayConcatV3", "TensorArraySplitV3")


def _patch_tensor_array_grad():
    """
    TF's gradient functions of v1 TensorArray ops (TensorArray*V3: only built by v1 control flow) re-wrap the handle
    as ``tf.TensorArray(handle=, flow=)``, which with control flow v2 enabled globally fails (the v2 TensorArray
    cannot wrap a v1 handle). Run exactly these gradient functions with v1 control flow.
    """
    global _tensor_array_patched
    if _tensor_array_patched:
        return
    from tensorflow.python.framework import ops

    registry = ops._gradient_registry._registry  # noqa (TF internal: op type -> {"type": grad fn, ...})
    for op_type in _TA_V1_OPS:
        entry = registry.get(op_type)
        if not entry or getattr(entry["type"], "_returnn_lite_v1", False):
            continue

        def grad_fn(*args, _orig=entry["type"], **kwargs):
            with control_flow_v1():
                return _orig(*args, **kwargs)

        grad_fn._returnn_lite_v1 = True
        entry["type"] = grad_fn
    _tensor_array_patched = True
