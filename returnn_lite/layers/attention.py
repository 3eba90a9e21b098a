"""
Attention family: self_attention, positional_encoding, relative_positional_encoding, cum_concat,
generic_attention, dot_attention, concat_attention, gauss_window_attention.

Rec-loop interface (what the rec layer calls / provides), the same hooks as the original:

* Inside a loop, the per-step network has ``network.is_inside_rec_layer()`` true and
  ``network.get_rec_step_info().step`` is the scalar int32 index of the current step.
* A layer that keeps state over steps implements the classmethods
  ``get_rec_initial_extra_outputs(batch_dim, rec_layer, **layer_kwargs) -> {name: tensor}`` (the state
  before the first step; ``layer_kwargs`` are the transformed layer options: ``name``, ``network``,
  ``sources``, ``n_out``, ``output`` (the template), ...) and
  ``get_rec_initial_extra_outputs_shape_invariants(**layer_kwargs) -> {name: tf.TensorShape}`` (for
  ``tf.while_loop``; axes that grow over the steps are None).
* The rec layer builds the layer of each step with ``rec_previous_layer=<obj>`` where
  ``obj.rec_vars_outputs`` is the state dict of the previous step (the initial dict in the first step);
  after construction, ``layer.rec_vars_outputs`` (same keys) is the state after this step.

State per layer: self_attention (attention_left_only): ``k_left`` [B,heads,t,key_dim//heads] and
``v_left`` [B,heads,t,n_out//heads]; cum_concat: ``state`` [B,t,...] (batch-major, the accumulated
frames). positional_encoding and relative_positional_encoding use only the step index.
"""

from __future__ import annotations

import math

import numpy
import tensorflow as tf

from ..fast_grads import matmul_same_batch
from ..data import Data, Dim, graph_cached, shape_vector, single_step_dim
from ..util import NotSpecified
from .base import ConcatInputLayer, concat_sources_template



def _in_rec_loop(network, data=None):
    """True if we are built per step inside a rec loop (the data, if given, has no rec time axis)."""
    if not network.is_inside_rec_layer():
        return False
    if data is None:
        return True
    rec_time = network.get_inside_rec_time_dim(inside_loop=True)
    if rec_time is not None and isinstance(rec_time, Dim):
        return rec_time not in data.dims
    return data.time_dim_axis is None


def get_positional_encoding(num_channels, position, min_timescale=1.0, max_timescale=1.0e4):
    """
    Sinusoidal encoding as in "Attention is all you need" (tensor2tensor layout: sin half, then cos half).
    :param int num_channels:
    :param tf.Tensor position: any shape, int or float
    :return: position.shape + [num_channels], float32
    """
    position = tf.cast(position, tf.float32)
    num_timescales = num_channels // 2
    log_timescale_increment = math.log(float(max_timescale) / float(min_timescale)) / (float(num_timescales) - 1)
    inv_timescales = min_timescale * tf.exp(
        tf.range(num_timescales, dtype=tf.float32) * -log_timescale_increment)
    scaled_time = tf.expand_dims(position, -1) * inv_timescales
    signal = tf.concat([tf.sin(scaled_time), tf.cos(scaled_time)], axis=-1)
    if num_channels % 2:
        signal = tf.pad(signal, [[0, 0]] * (signal.shape.rank - 1) + [[0, 1]])
    return signal


# ---------------------------------------------------------------------------------------------------------------
# self_attention


def _causal_mask(n):
    """[n, n] bool, True on and below the diagonal (frame i attends to frames <= i); once per graph and length."""
    if isinstance(n, int):
        return graph_cached(("causal_mask", n), lambda: tf.constant(numpy.tril(numpy.ones((n, n), dtype=bool))))
    return graph_cached(("causal_mask", n.ref()), lambda: tf.linalg.band_part(tf.ones([n, n], tf.bool), -1, 0))


def _neg_inf(dtype):
    """The scalar -inf (masked energies), once per graph and dtype."""
    return graph_cached(("neg_inf", dtype.name), lambda: tf.constant(float("-inf"), dtype))


class SelfAttentionLayer(ConcatInputLayer):
    """
    Multi-head dot-product self-attention (Transformer style) with one fused Q/K/V projection ``QKV``
    [n_in, 2*total_key_dim + n_out]. Padded key frames are masked (unless attention_left_only, which masks
    future frames). Inside a rec loop (attention_left_only required) the keys/values of all previous steps
    are kept as state. Output is batch-major.
    :param num_heads: number of attention heads (must divide total_key_dim and n_out) (required)
    :param total_key_dim: key/query dim summed over all heads (required)
    :param key_shift: layer with relative position embeddings added to the keys (see relative_positional_encoding)
    :param forward_weights_init: initializer of the fused QKV projection
    :param attention_dropout: dropout on the attention weights, in training
    :param attention_left_only: causal masking: each frame attends only to itself and the past (required inside rec)
    :param initial_state: initial keys/values state inside a rec loop: only None/"zeros" (empty history)
    :param restrict_state_to_last_seq: keep only the last sequence's keys/values as state; refused
    :param state_var_lengths: lengths of the initial state's keys/values; refused (only None)
    """

    layer_class = "self_attention"
    layer_options = ("key_shift",)
    unsupported_options = {"restrict_state_to_last_seq": (False,)}
    recurrent = True

    def __init__(self, num_heads, total_key_dim, key_shift=None, forward_weights_init="glorot_uniform",
                 attention_dropout=0.0, attention_left_only=False, initial_state=None,
                 restrict_state_to_last_seq=False, state_var_lengths=None, **kwargs):
        super().__init__(**kwargs)
        self.rec_vars_outputs = {}
        inp = self.input_data
        n_out = self.output.dim
        if total_key_dim % num_heads:
            raise ValueError("total_key_dim %i must be divisible by num_heads %i" % (total_key_dim, num_heads))
        if n_out % num_heads:
            raise ValueError("n_out %i must be divisible by num_heads %i" % (n_out, num_heads))
        if initial_state not in (None, "zeros", 0):  # zeros: an empty k/v history, the same as none
            raise NotImplementedError("self_attention: initial_state %r not supported" % (initial_state,))
        if state_var_lengths is not None:
            raise NotImplementedError("self_attention: state_var_lengths not supported")
        key_dim, value_dim = total_key_dim // num_heads, n_out // num_heads
        mat_n_out = 2 * total_key_dim + n_out
        in_loop = inp.time_dim_axis is None  # one frame per step: attend over the keys/values of all steps so far
        if in_loop:
            if not attention_left_only:
                raise ValueError("self_attention: input %s has no time axis; inside a rec loop, "
                                 "attention_left_only=True is needed" % inp.short_repr())
            prev = getattr(self.rec_previous_layer, "rec_vars_outputs", None) or {}
            if "k_left" not in prev:
                raise ValueError("self_attention: input %s has no time axis and there is no k_left/v_left state "
                                 "(expected inside a rec loop)" % inp.short_repr())
        mat = self.create_param("QKV", (inp.dim, mat_n_out), forward_weights_init)
        data = inp.copy_as_batch_major() if inp.have_batch_axis() else inp
        if not data.sparse:
            data = data.copy_with_feature_last()
        if in_loop:
            if data.batch_ndim - (0 if data.sparse else 1) != 1:
                raise ValueError("self_attention in loop: expected input [B,F], got %s" % data.short_repr())
        else:
            data = data.copy_with_time_dim_axis(1)
            if data.batch_ndim - (0 if data.sparse else 1) != 2 or (not data.sparse and data.feature_dim_axis != 2):
                raise ValueError("self_attention: expected input [B,T,F], got %s" % inp.short_repr())
        x = data.placeholder
        if data.sparse:
            x = tf.nn.embedding_lookup(mat, x)
        else:
            x = tf.matmul(x, mat)
        if in_loop:
            x = tf.expand_dims(x, 1)  # (B,1,qkv)
            t = 1
        else:
            t = data.get_dim(1)  # static, or the length of the time tag, shared by all layers on it
        x = tf.reshape(x, shape_vector(-1, t, num_heads, mat_n_out // num_heads))
        x = tf.transpose(x, [0, 2, 1, 3])  # (B,H,T|1,qkv/H)
        q, k, v = tf.split(x, [key_dim, key_dim, value_dim], axis=-1)
        q = q * (key_dim ** -0.5)
        if in_loop:
            prev = self.rec_previous_layer.rec_vars_outputs
            k = tf.concat([prev["k_left"], k], axis=2)  # (B,H,t+1,key_dim)
            v = tf.concat([prev["v_left"], v], axis=2)
            # restrict_state_to_last_seq only affects the final state after the loop, not the steps
            self.rec_vars_outputs["k_left"] = k
            self.rec_vars_outputs["v_left"] = v
        energy = matmul_same_batch(q, k, transpose_b=True)  # (B,H,T|1,T)
        if key_shift is not None:
            ks = key_shift.output
            if ks.have_batch_axis() or ks.dim != key_dim:
                raise ValueError("self_attention: key_shift %s must be (T,T,%i) without batch" % (
                    ks.short_repr(), key_dim))
            ks_x = ks.copy_with_feature_last().placeholder  # (queries|1, keys, key_dim)
            energy += tf.einsum("bhqd,qkd->bhqk", q, ks_x)
        if attention_left_only:
            if in_loop:
                pass  # all accumulated keys are to the left of (or at) the current step
            else:
                energy = tf.where(_causal_mask(data.get_dim(1)), energy, _neg_inf(energy.dtype))
        else:
            tag = data.dims[1]
            if tag.dyn_size is not None:
                mask = tag.get_mask(data.get_dim(1))  # (B,T), one per graph and time tag
                mask = graph_cached(("mask_b11t", mask.ref()), lambda: mask[:, None, None, :])
                energy = tf.where(mask, energy, _neg_inf(energy.dtype))
        weights = tf.nn.softmax(energy)
        if attention_dropout:
            seed = self.network.random_seed_for(self, "attention_dropout")
            noise_shape = None if in_loop else [data.get_dim(0), num_heads, data.get_dim(1), data.get_dim(1)]
            weights = self.network.dropout_on_train(weights, attention_dropout, noise_shape=noise_shape, seed=seed)
        out = matmul_same_batch(weights, v)  # (B,H,T|1,value_dim)
        out = tf.transpose(out, [0, 2, 1, 3])  # (B,T|1,H,value_dim)
        if in_loop:
            out = tf.reshape(out, [-1, n_out])
        else:
            out = tf.reshape(out, shape_vector(-1, data.get_dim(1), n_out))
        self.output.placeholder = out

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, **kwargs):
        """Batch-major [B,T,n_out] (in a loop [B,n_out]) with the input's time tag and a new feature tag."""
        if n_out is NotSpecified or n_out is None:
            raise ValueError("self_attention needs n_out")
        src = concat_sources_template(sources, name="%s_output" % name)
        if src.have_batch_axis():
            src = src.copy_as_batch_major()
        feat = Dim(n_out, kind=Dim.Types.Feature, description="%s_self_att_feat" % name)
        if src.sparse or src.feature_dim_axis is None:
            dims = src.dims + (feat,)
        else:
            src = src.copy_with_feature_last()
            dims = src.dims[:-1] + (feat,)
        out = Data(name="%s_output" % name, dims=dims, dtype="float32")
        if len(dims) == 3 and src.have_batch_axis():
            out.time_dim_axis = 1
        return out

    @classmethod
    def rec_move_out_ok(cls, attention_left_only=False, key_shift=None, initial_state=None, **kwargs):
        """
        In a rec unit: built over the whole sequence (causal mask), frame t attends to the frames <= t, the same keys
        and values as at step t in the loop (an empty initial history). Dropout on the weights draws other random
        numbers than per step (the same distribution). With key_shift (positions per step) it stays in the loop.
        """
        return bool(attention_left_only) and key_shift is None and initial_state in (None, "zeros", 0)

    @classmethod
    def _state_dims(cls, num_heads, total_key_dim, n_out, sources):
        """(key_dim, value_dim) per head, or None if the input has a time axis (then there is no state)."""
        if sources and concat_sources_template(sources).time_dim_axis is not None:
            return None
        return total_key_dim // num_heads, n_out // num_heads

    @classmethod
    def get_rec_initial_extra_outputs(cls, batch_dim, rec_layer, num_heads, total_key_dim, n_out, sources=(),
                                      **kwargs):
        dims = cls._state_dims(num_heads, total_key_dim, n_out, sources)
        if dims is None:
            return {}
        return {"k_left": tf.zeros((batch_dim, num_heads, 0, dims[0])),
                "v_left": tf.zeros((batch_dim, num_heads, 0, dims[1]))}

    @classmethod
    def get_rec_initial_extra_outputs_shape_invariants(cls, num_heads, total_key_dim, n_out, sources=(), **kwargs):
        dims = cls._state_dims(num_heads, total_key_dim, n_out, sources)
        if dims is None:
            return {}
        return {"k_left": tf.TensorShape((None, num_heads, None, dims[0])),
                "v_left": tf.TensorShape((None, num_heads, None, dims[1]))}


# ---------------------------------------------------------------------------------------------------------------
# positional encodings


class PositionalEncodingLayer(ConcatInputLayer):
    """
    Sinusoidal positional encoding (sin half, cos half) of the frame index on the time axis, or of the rec step
    index inside a loop; ``constant`` > -1 fixes the position, ``offset`` (a layer) is added to it.
    With add_to_input, the encoding is added to the input (output dim = input dim), else n_out gives the dim.
    :param axis: the axis to encode positions of (default: the time axis)
    :param add_to_input: add the sinusoidal encoding to the input instead of outputting it alone
    :param constant: if not -1, encode this constant position for all frames
    :param offset: layer with a position offset added to the positions (e.g. inside a rec loop)
    """

    layer_class = "positional_encoding"
    layer_options = ("offset",)
    recurrent = True

    def __init__(self, axis=NotSpecified, add_to_input=False, constant=-1, offset=None, **kwargs):
        super().__init__(**kwargs)
        self.rec_vars_outputs = {}
        if len(self.sources) != 1:
            raise ValueError("positional_encoding expects a single source, got %i" % len(self.sources))
        source = self.input_data
        out = self.output
        if add_to_input and source.dim != out.dim:
            raise ValueError("add_to_input: input dim %r != output dim %r" % (source.dim, out.dim))
        f = out.feature_dim_axis
        if f is None:
            raise ValueError("positional_encoding: output %s has no feature axis" % out.short_repr())
        templ_wo_feat = out.copy_template_excluding_axis(f)
        if axis is NotSpecified or axis is None:
            in_loop = source.time_dim_axis is None  # else the frames of the time axis (also inside a loop)
        else:
            in_loop = isinstance(axis, Dim) and axis == single_step_dim
        if constant > -1:
            position = tf.constant(constant, dtype=tf.int32)
        elif in_loop:
            position = self.network.get_rec_step_info().step
        else:
            if axis is NotSpecified or axis is None:
                t_axis = source.time_dim_axis
            else:
                t_axis = source.get_axis_from_description(axis, allow_int=False)
            position = tf.range(source.get_dim(t_axis))
            t_out = templ_wo_feat.get_axis_by_tag(source.dims[t_axis])
            shape = [1] * templ_wo_feat.batch_ndim
            shape[t_out] = -1
            if templ_wo_feat.batch_ndim > 1:
                position = tf.reshape(position, shape)
        if offset is not None:
            off = offset.output.copy_compatible_to(templ_wo_feat, check_dtype=False)
            off_x = off.placeholder
            position = tf.cast(position, off_x.dtype) + off_x
        signal = get_positional_encoding(num_channels=out.dim, position=position)  # (...,F)
        if signal.shape.rank != out.batch_ndim:  # scalar position (step or constant): (F,)
            signal = tf.reshape(signal, [1] * (out.batch_ndim - 1) + [out.dim])
        if f != out.batch_ndim - 1:
            perm = list(range(out.batch_ndim - 1))
            perm.insert(f, out.batch_ndim - 1)
            signal = tf.transpose(signal, perm)
        if add_to_input:
            x = source.copy_compatible_to(out).placeholder if source.dims != out.dims else source.placeholder
            signal = x + signal
        else:
            full = [d.dimension if d.dimension is not None else
                    self.network.get_data_batch_dim() if d.is_batch_dim() else
                    source.get_dim(source.get_axis_by_tag(d)) for d in out.dims]
            signal = tf.broadcast_to(signal, full)
        self.output.placeholder = signal

    @classmethod
    def rec_move_out_ok(cls, axis=NotSpecified, offset=None, **kwargs):
        """In a rec unit: over the whole sequence, the position of frame t is t, the step index in the loop."""
        return (axis is NotSpecified or axis is None) and offset is None

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), add_to_input=False, n_out=NotSpecified, out_type=None,
                               **kwargs):
        if add_to_input:
            out = concat_sources_template(sources, name="%s_output" % name)
            if n_out is not NotSpecified and n_out is not None and n_out != out.dim:
                raise ValueError("add_to_input: n_out %r != input dim %r" % (n_out, out.dim))
            return out
        return cls._base_out_data(name, sources, n_out, out_type)


class RelativePositionalEncodingLayer(ConcatInputLayer):
    """
    Learned relative positional encoding (Shaw et al. 2018) for self_attention's key_shift:
    output [T_query, T_key, n_out] (no batch) = encoding_matrix[clip(key - query, -clipping, clipping) + clipping],
    both axes with the input's time tag. Inside a loop: [t+1 keys, n_out] for the current query t.
    :param forward_weights_init: initializer of the learned position embeddings
    :param clipping: relative distances are clipped to [-clipping, clipping]
    :param fixed: use fixed sinusoidal encodings instead of learned embeddings
    """

    layer_class = "relative_positional_encoding"
    recurrent = True

    def __init__(self, n_out, forward_weights_init="glorot_uniform", clipping=16, fixed=False, **kwargs):
        super().__init__(n_out=n_out, **kwargs)
        self.rec_vars_outputs = {}
        self.clipping = clipping
        if fixed:
            encoding_matrix = get_positional_encoding(num_channels=n_out, position=tf.range(2 * clipping + 1))
        else:
            encoding_matrix = self.create_param("encoding_matrix", (2 * clipping + 1, n_out), forward_weights_init)
        out = self.output
        if out.dims[0] is not out.dims[1]:  # in loop: [1 (query t), t+1 keys, n_out]
            step = self.network.get_rec_step_info().step
            distance = tf.expand_dims(tf.range(step + 1) - step, 0)
            out.dims[1].dyn_size = tf.fill([self.network.get_data_batch_dim()], step + 1)
        else:
            inp = self.input_data
            length = inp.get_dim(inp.time_dim_axis)
            r = tf.range(length)
            distance = r[None, :] - r[:, None]  # [query, key] -> key - query
        indices = tf.clip_by_value(distance, -clipping, clipping) + clipping
        self.output.placeholder = tf.gather(encoding_matrix, indices)

    @classmethod
    def get_out_data_from_opts(cls, name, network, sources=(), n_out=NotSpecified, **kwargs):
        if n_out is NotSpecified or not n_out:
            raise ValueError("relative_positional_encoding layer %r needs n_out" % name)
        src = concat_sources_template(sources, name="%s_output" % name)
        feat = Dim(n_out, kind=Dim.Types.Feature, description="%s:rel-pos-feature" % name)
        if src.time_dim_axis is None:  # per step in a rec loop
            dummy = Dim(1, kind=Dim.Types.Spatial, description="%s_rel_pos_enc_dummy" % name)
            keys = Dim(None, kind=Dim.Types.Spatial, description="%s_rel_pos_enc_time" % name)
            return Data(name="%s_output" % name, dims=(dummy, keys, feat))
        if src.time_dim_axis is None:
            raise ValueError("relative_positional_encoding: input %s has no time axis" % src.short_repr())
        tag = src.dims[src.time_dim_axis]
        out = Data(name="%s_output" % name, dims=(tag, tag, feat))
        if tag.dimension is not None:
            out.time_dim_axis = 0
        return out


# ---------------------------------------------------------------------------------------------------------------
# cum_concat


class CumConcatLayer(ConcatInputLayer):
    """
    Inside a rec loop: concatenates the frame of every step so far on a new axis ``out_spatial_dim``
    (batch-major output [B, t+1, ...], state ``state``). Outside the loop (optimized out): the input over the
    whole sequence, with the rec time axis replaced by ``out_spatial_dim``.
    :param out_spatial_dim: the Dim of the accumulated axis (required inside a rec loop)
    :param axis: outside a rec loop: the input axis that becomes out_spatial_dim; refused (only None)
    """

    layer_class = "cum_concat"
    unsupported_options = {"axis": (None,)}
    recurrent = True

    def __init__(self, out_spatial_dim=None, axis=None, **kwargs):
        super().__init__(**kwargs)
        self.rec_vars_outputs = {}
        out = self.output
        new_axis = self._new_axis(out, out_spatial_dim, self.name)
        new_tag = out.dims[new_axis]
        if _in_rec_loop(self.network, self.input_data):
            cur = self.input_data.copy_as_batch_major()
            if cur.sparse or cur.dims != tuple(d for i, d in enumerate(out.dims) if i != new_axis):
                cur = cur.copy_compatible_to(out.copy_template_excluding_axis(new_axis))
            frame = tf.expand_dims(cur.placeholder, new_axis)
            prev = self.rec_previous_layer.rec_vars_outputs["state"]
            x = tf.concat([prev, frame], axis=new_axis)
            self.rec_vars_outputs["state"] = x
            if new_tag.dyn_size is None:
                step = self.network.get_rec_step_info().step
                new_tag.dyn_size = tf.fill([self.network.get_data_batch_dim()], step + 1)
            out.placeholder = x
        else:
            inp = self.input_data
            t_axis = self._rec_time_axis(self.network, inp)
            if new_tag.dyn_size is None:
                new_tag.dyn_size = inp.dims[t_axis].dyn_size
            out.placeholder = inp.copy_compatible_to(
                out.copy_template_replace_dim_tag(new_axis, inp.dims[t_axis])).placeholder if inp.dims[
                t_axis] not in out.dims else inp.placeholder

    @staticmethod
    def _new_axis(out, out_spatial_dim, name):
        if out_spatial_dim is not None:
            return out.get_axis_by_tag(out_spatial_dim)
        return [i for i, d in enumerate(out.dims) if d.description == "%s:cum-concat" % name][0]

    @staticmethod
    def _rec_time_axis(network, data):
        tag = network.get_inside_rec_time_dim(inside_loop=False)
        if isinstance(tag, Dim) and tag in data.dims:
            return data.get_axis_by_tag(tag)
        if data.time_dim_axis is None:
            raise ValueError("cum_concat: input %s has no time axis" % data.short_repr())
        return data.time_dim_axis

    @classmethod
    def get_out_data_from_opts(cls, name, network, sources=(), out_spatial_dim=None, axis=None, **kwargs):
        src = concat_sources_template(sources, name="%s_output" % name)
        if out_spatial_dim is None:
            out_spatial_dim = Dim(None, kind=Dim.Types.Spatial, description="%s:cum-concat" % name)
        if _in_rec_loop(network, src):
            out = src.copy_as_batch_major() if src.have_batch_axis() else src
            return out.copy_add_dim_by_tag(out_spatial_dim, unbroadcast=True, axis=1 if src.have_batch_axis() else 0)
        t_axis = cls._rec_time_axis(network, src)
        out = src.copy_template_replace_dim_tag(t_axis, out_spatial_dim)
        return out

    @classmethod
    def get_rec_initial_extra_outputs(cls, batch_dim, rec_layer, output=None, name=None, network=None,
                                      out_spatial_dim=None, **kwargs):
        if output is None:
            output = cls.get_out_data_from_opts(name=name, network=network, out_spatial_dim=out_spatial_dim, **kwargs)
        new_axis = cls._new_axis(output, out_spatial_dim, name)
        shape = [batch_dim if d.is_batch_dim() else 0 if i == new_axis else d.dimension
                 for i, d in enumerate(output.dims)]
        return {"state": tf.zeros(shape, dtype=output.dtype)}

    @classmethod
    def get_rec_initial_extra_outputs_shape_invariants(cls, output=None, name=None, network=None,
                                                       out_spatial_dim=None, **kwargs):
        if output is None:
            output = cls.get_out_data_from_opts(name=name, network=network, out_spatial_dim=out_spatial_dim, **kwargs)
        new_axis = cls._new_axis(output, out_spatial_dim, name)
        return {"state": tf.TensorShape([None if i == new_axis else d.dimension for i, d in enumerate(output.dims)])}


# ---------------------------------------------------------------------------------------------------------------
# attention over a base (encoder)


class AttentionBaseLayer(ConcatInputLayer):
    """Common base: ``base`` is the layer attended over; the output is base without its time axis."""

    layer_options = ("base",)
    required_options = ("base",)

    def __init__(self, base, **kwargs):
        super().__init__(**kwargs)
        self.base = base
        self.base_weights = None  # (B, base_time) after construction, if the layer computes them

    def get_base_weights(self):
        return self.base_weights

    @classmethod
    def get_out_data_from_opts(cls, name, base, n_out=NotSpecified, sources=(), **kwargs):
        out = base.output.copy_template_excluding_time_dim().copy(name="%s_output" % name)
        if n_out is not NotSpecified and n_out is not None and out.dim != n_out:
            raise ValueError("n_out %r does not match base dim %r" % (n_out, out.dim))
        return out


class GlobalAttentionContextBaseLayer(AttentionBaseLayer):
    """Attention where the energies come from ``base_ctx`` [B, base_time, inner] and the source [B, inner]."""

    layer_options = ("base", "base_ctx")
    required_options = ("base", "base_ctx")

    def __init__(self, base_ctx, **kwargs):
        super().__init__(**kwargs)
        self.base_ctx = base_ctx

    def _inputs(self):
        """base [B,T,n_out], base_ctx [B,T,inner], source [B,inner] (batch-major placeholders)."""
        base = self.base.output.copy_as_batch_major()
        base_ctx = self.base_ctx.output.copy_as_batch_major()
        source = self.input_data.copy_as_batch_major()
        for d, what in ((base, "base"), (base_ctx, "base_ctx")):
            if d.batch_ndim != 3 or d.time_dim_axis is None:
                raise ValueError("%s: %s %s must be [B,T,F]" % (self.layer_class, what, d.short_repr()))
        if source.batch_ndim != 2:
            raise ValueError("%s: source %s must be [B,F] (one step)" % (self.layer_class, source.short_repr()))
        if source.dim != base_ctx.dim:
            raise ValueError("%s: source dim %r != base_ctx dim %r" % (self.layer_class, source.dim, base_ctx.dim))
        base = base.copy_with_time_dim_axis(1)
        base_ctx = base_ctx.copy_with_time_dim_axis(1)
        return base, base_ctx, source

    def _attend(self, energy, base):
        """energy [B,T] -> masked softmax -> weighted sum of base [B,T,F] -> [B,F]."""
        tag = base.dims[1]
        if tag.dyn_size is not None:
            mask = tag.get_mask(tf.shape(energy)[1])
            energy = tf.where(mask, energy, float("-inf"))
        self.base_weights = tf.nn.softmax(energy)  # (B,T)
        out = tf.matmul(tf.expand_dims(self.base_weights, 1), base.placeholder)  # (B,1,F)
        return tf.squeeze(out, axis=1)


class DotAttentionLayer(GlobalAttentionContextBaseLayer):
    """energy = <base_ctx, source> (times energy_factor), softmax over the base time (masked), sum of base.
    :param energy_factor: scale the energies by this factor before the softmax (e.g. 1/sqrt(key dim))
    """

    layer_class = "dot_attention"

    def __init__(self, energy_factor=None, **kwargs):
        super().__init__(**kwargs)
        base, base_ctx, source = self._inputs()
        energy = tf.squeeze(tf.matmul(base_ctx.placeholder, tf.expand_dims(source.placeholder, 2)), axis=2)
        if energy_factor:
            energy *= energy_factor
        self.output.placeholder = self._attend(energy, base)


class ConcatAttentionLayer(GlobalAttentionContextBaseLayer):
    """Additive attention: energy = v . tanh(base_ctx + source), param ``v`` [inner]."""

    layer_class = "concat_attention"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        base, base_ctx, source = self._inputs()
        v = self.create_param("v", (source.dim,))
        concat_in = tf.tanh(base_ctx.placeholder + tf.expand_dims(source.placeholder, 1))  # (B,T,inner)
        energy = tf.reduce_sum(concat_in * v, axis=2)
        self.output.placeholder = self._attend(energy, base)


class GaussWindowAttentionLayer(AttentionBaseLayer):
    """
    The source is a location t [B] (float, shape () or (1,)); the output is a Gauss-window-weighted sum
    (std ``std``) of the ``window_size`` base frames around round(t) (indices clipped to the sequence).
    With ``inner_size``, the window center is shifted by i * inner_size_step - inner_size / 2 for each of
    inner_size outputs: [B, inner_size, F].
    :param window_size: size of the window around the center position (required)
    :param std: standard deviation of the Gaussian weights
    :param inner_size: if set, the window axis is split into an inner axis of this size
    :param inner_size_step: step between inner window positions
    """

    layer_class = "gauss_window_attention"

    def __init__(self, window_size, std=1.0, inner_size=None, inner_size_step=0.5, **kwargs):
        super().__init__(**kwargs)
        base = self.base.output.copy_as_time_major()  # (T,B,F)
        seq_lens = base.dims[0].dyn_size
        src = self.input_data.copy_as_batch_major()
        t = src.placeholder
        if src.batch_ndim == 2:
            t = tf.squeeze(t, axis=1)
        elif src.batch_ndim != 1:
            raise ValueError("gauss_window_attention: source %s must be [B] or [B,1]" % src.short_repr())
        t = tf.cast(t, tf.float32)
        start = tf.cast(tf.round(t), tf.int32) - window_size // 2  # (B,)
        idxs = tf.range(window_size)[:, None] + start[None, :]  # (W,B)
        cidxs = tf.clip_by_value(idxs, 0, tf.shape(base.placeholder)[0] - 1)
        if seq_lens is not None:
            cidxs = tf.where(cidxs < seq_lens[None, :], cidxs, tf.broadcast_to(seq_lens[None, :] - 1, tf.shape(cidxs)))
        gathered = tf.gather(tf.transpose(base.placeholder, [1, 0, 2]), tf.transpose(cidxs), batch_dims=1)  # (B,W,F)
        offs = [0.0] if not inner_size else [i * inner_size_step - inner_size / 2.0 for i in range(inner_size)]
        center = t[:, None, None] + tf.constant(offs, tf.float32)[None, None, :]  # (B,1,I)
        dist = center - tf.cast(tf.transpose(idxs), tf.float32)[:, :, None]  # (B,W,I)
        w = tf.exp(-dist ** 2 / (2 * std ** 2)) * (1.0 / (std * math.sqrt(2.0 * math.pi)))
        att = tf.matmul(w, gathered, transpose_a=True)  # (B,I,F)
        self.output.placeholder = att if inner_size else tf.squeeze(att, axis=1)

    @classmethod
    def get_out_data_from_opts(cls, name, base, inner_size=None, **kwargs):
        out = super().get_out_data_from_opts(name=name, base=base, **kwargs)
        if inner_size:
            tag = Dim(inner_size, kind=Dim.Types.Spatial, description="%s:gauss-window-inner" % name)
            out = out.copy_add_dim_by_tag(tag, unbroadcast=True, axis=out.feature_dim_axis)
        return out


class GenericAttentionLayer(AttentionBaseLayer):
    """
    Weighted sum of ``base`` over its time axis with explicit ``weights`` (e.g. from softmax_over_spatial);
    no masking here. Like a dot: reduced are the weights' time axis (the dynamic axis matching base's time tag)
    and base's time axis; base axes other than batch/time/feature are common with weights axes (matched by
    size from the last); other weights axes are kept (static size-1 ones squeezed with auto_squeeze), base's
    feature axis is kept. Output: [weights' batch+common axes, weights' kept axes, base feature].
    :param weights: layer with the attention weights over the base's spatial axis (required)
    :param auto_squeeze: squeeze a remaining dim-1 axis of the weights
    """

    layer_class = "generic_attention"
    recurrent = True
    layer_options = ("base", "weights")
    required_options = ("base", "weights")
    default_from = ()

    @classmethod
    def rec_move_out_ok(cls, base=None, network=None, **kwargs):
        """
        In a rec unit: over the whole sequence, the loop's time axis is one more kept axis of the weights, where base
        is an outer layer (``base:``) without the loop's time axis whose other axes are static (they are matched to
        weights axes by size, which a dynamic loop time axis could match too).
        """
        if base is None or network is None or base.network is network:
            return False
        b = base.output
        if network.get_inside_rec_time_dim() in b.dims:
            return False
        return all(d.dimension is not None for i, d in enumerate(b.dims)
                   if i not in (b.batch_dim_axis, b.time_dim_axis, b.feature_dim_axis))

    def __init__(self, weights, auto_squeeze=True, **kwargs):
        super().__init__(**kwargs)
        if self.sources:
            raise ValueError("generic_attention takes no sources, only base and weights")
        self.weights = weights
        w, b, w_red, common, w_keep, squeezed = self._plan(weights.output, self.base.output, auto_squeeze)
        letters = iter("acdefghijklmnopqstuvwxyz")
        w_sub = [next(letters) for _ in range(w.batch_ndim)]
        b_sub = [None] * b.batch_ndim
        b_sub[b.time_dim_axis] = w_sub[w_red]
        for wi, bi in common:
            b_sub[bi] = w_sub[wi]
        b_sub[b.feature_dim_axis] = next(letters)
        w_out = sorted(wi for wi, _ in common) + w_keep
        out_sub = [w_sub[i] for i in w_out] + [b_sub[b.feature_dim_axis]]
        x = tf.einsum("%s,%s->%s" % ("".join(w_sub), "".join(b_sub), "".join(out_sub)),
                      w.placeholder, b.placeholder)
        tr = w.copy_move_axis(w_red, 1) if w.batch_ndim > 1 else w
        self.base_weights = tr.placeholder
        self.output.placeholder = x

    @staticmethod
    def _weights_axis_to_reduce(w, b):
        dyn = w.get_dynamic_axes()
        if w.time_dim_axis not in dyn or len(dyn) == 1:
            if w.time_dim_axis is None:
                raise ValueError("generic_attention: weights %s have no time axis" % w.short_repr())
            return w.time_dim_axis
        b_time = b.dims[b.time_dim_axis]
        matched = [i for i in dyn if w.dims[i] == b_time]
        if len(matched) > 1:
            return w.time_dim_axis if w.time_dim_axis in matched else matched[-1]
        if len(matched) == 1:
            return matched[0]
        raise ValueError("generic_attention: no axis of weights %s matches the base time axis %s" % (
            w.short_repr(), b_time.short_repr()))

    @classmethod
    def _plan(cls, weights, base, auto_squeeze):
        """
        :return: weights (batch-major), base, weights axis to reduce, common [(weights axis, base axis)],
          kept weights axes (without batch/common), squeezed weights axes
        """
        w = weights.copy_as_batch_major()
        b = base
        if not w.have_batch_axis() or not b.have_batch_axis():
            raise ValueError("generic_attention: weights %s and base %s need a batch axis" % (
                w.short_repr(), b.short_repr()))
        if b.time_dim_axis is None or b.feature_dim_axis is None:
            raise ValueError("generic_attention: base %s needs a time and a feature axis" % b.short_repr())
        w_red = cls._weights_axis_to_reduce(w, b)
        if w.batch_shape[w_red] != b.batch_shape[b.time_dim_axis]:
            raise ValueError("generic_attention: weights axis %i of %s does not match base time of %s" % (
                w_red, w.short_repr(), b.short_repr()))
        b_rem = [i for i in range(b.batch_ndim) if i not in (b.batch_dim_axis, b.time_dim_axis, b.feature_dim_axis)]
        w_rem = [i for i in range(w.batch_ndim) if i not in (w.batch_dim_axis, w_red)]
        common = [(w.batch_dim_axis, b.batch_dim_axis)]
        squeezed = []
        for wi in reversed(list(w_rem)):
            if b_rem and w.batch_shape[wi] == b.batch_shape[b_rem[-1]]:
                common.append((wi, b_rem.pop(-1)))
                w_rem.remove(wi)
            elif auto_squeeze and w.batch_shape[wi] == 1:
                w_rem.remove(wi)
                squeezed.append(wi)
        if b_rem:
            raise ValueError("generic_attention: base %s axes %s have no counterpart in weights %s" % (
                b.short_repr(), b_rem, w.short_repr()))
        return w, b, w_red, common, w_rem, squeezed

    @classmethod
    def get_out_data_from_opts(cls, name, base, weights, auto_squeeze=True, sources=(), **kwargs):
        w, b, w_red, common, w_keep, squeezed = cls._plan(weights.output, base.output, auto_squeeze)
        w_out = sorted(wi for wi, _ in common) + w_keep  # like dot: common axes, then kept weights axes
        dims = [w.dims[i] for i in w_out] + [b.dims[b.feature_dim_axis]]
        out = Data(name="%s_output" % name, dims=dims, dtype=b.dtype)
        if out.feature_dim_axis != len(dims) - 1:
            out.feature_dim_axis = len(dims) - 1
        return out
