"""
RecLayer (``rec``) with a cell unit or a subnetwork unit, and the single-step/state helper layers:
rnn_cell, get_last_hidden_state, get_rec_accumulated, rec_last_output, rec_unstack.
"""

from __future__ import annotations

import tensorflow as tf

from ...data import Data, Dim, batch_dim, single_step_dim
from ...layer_ref import LayerOption, is_layer_target
from ...util import NotSpecified
from ..base import ConcatInputLayer, LayerBase, concat_sources_template, last_hidden_state
from . import cells as _cells
from .subnet import RecSubnetLoop

tf1 = tf.compat.v1


_KEEP_OVER_EPOCH = ("keep_over_epoch", "keep_over_epoch_no_init")
_INITIAL_STATE_KEYWORDS = ("zeros", "ones", "var") + _KEEP_OVER_EPOCH


def _state_key(cell, k):
    """The key in the original's initial-state param names: the state part ("c", "h"), or "var" for a cell whose
    state is one tensor (GRU, RNN, RHN): e.g. ``initial_c``, ``initial_var``, ``keep_state_var``."""
    return k if len(cell.state_names) > 1 else "var"


def _initial_cell_state(layer, cell, initial_state, batch_dim, var_prefix):
    """
    State dict from initial_state: None/"zeros", "ones", "var" (params <var_prefix>initial_<key>), a layer, a dict,
    or "keep_over_epoch" (the last state of the previous batch, zeros at the first step of an epoch; see
    :func:`_keep_state`).
    """
    res = {}
    for k in cell.state_names:
        dim = cell.state_dims[k]
        v = initial_state.get(k, "zeros") if isinstance(initial_state, dict) else initial_state
        if v is None or v == "zeros" or v == 0:
            res[k] = tf.zeros([batch_dim, dim])
        elif v == "ones" or v == 1:
            res[k] = tf.ones([batch_dim, dim])
        elif v == "var":
            var = layer.create_param("%sinitial_%s" % (var_prefix, _state_key(cell, k)), (dim,), 0.0)
            res[k] = tf.tile(tf.expand_dims(var, 0), [batch_dim, 1])
        elif isinstance(v, str) and v in _KEEP_OVER_EPOCH:
            res[k] = _keep_state(layer, "%skeep_state_%s" % (var_prefix, _state_key(cell, k)), k, dim, batch_dim,
                                 reset_at_epoch_start=v == "keep_over_epoch")
        elif isinstance(v, LayerBase):
            res[k] = v.output.copy_as_batch_major().placeholder
        else:
            raise ValueError("layer %r: invalid initial_state %r" % (layer.name, v))
    return res


def _keep_state(layer, var_name, key, dim, batch_dim, reset_at_epoch_start):
    """
    initial_state "keep_over_epoch" (as the original): a non-trainable variable ``<layer>/<var_name>`` (a param of
    shape [None, dim], never saved nor loaded) holds the last state of the previous run ([B, dim]); the initial state is zeros when
    ``network.get_epoch_step()`` is 0 (the engine feeds the step within the epoch) or the batch size differs from
    the kept one, else that variable. "keep_over_epoch_no_init" never resets. The variable is assigned the final state
    after each run (:meth:`register_post_control_dependencies`, run with the train op and in evaluation).
    """
    graph = tf1.get_default_graph()
    ctx = graph._get_control_flow_context()  # noqa: SLF001 (the variable must be created outside of loops/conds)
    graph._set_control_flow_context(None)  # noqa: SLF001
    try:
        with layer.var_creation_scope(), tf.control_dependencies(None):
            # the initial value (a dummy, never used) has an unknown batch dim: the variable's static shape is
            # [None, dim], whatever batch size it holds later
            init = tf1.placeholder_with_default(tf.zeros([0, dim]), shape=[None, dim])
            var = tf1.get_variable(var_name, initializer=init, validate_shape=False, trainable=False,
                                   collections=[tf1.GraphKeys.GLOBAL_VARIABLES])
    finally:
        graph._set_control_flow_context(ctx)  # noqa: SLF001
    layer.__dict__.setdefault("_keep_state_vars", {})[key] = var
    layer.add_param(var, saveable=False)  # the original lists it as a param (e.g. rec/keep_state_c), never saved
    if reset_at_epoch_start:
        # zeros at the first step of an epoch, and also where the batch size changed (e.g. the last, smaller batch
        # of an epoch; the original fails there with a shape error)
        reset = tf.logical_or(tf.equal(layer.network.get_epoch_step(), 0),
                              tf.not_equal(tf.shape(var.value())[0], batch_dim))
        s = tf.cond(reset, lambda: tf.zeros([batch_dim, dim]), lambda: tf.identity(var.value()))
    else:
        s = tf.identity(var.value())
    s.set_shape([None, dim])
    return tf.stop_gradient(s)  # the kept state is data from the previous run (also: no gradient into the variable)


def _register_keep_state_updates(layer, final_state):
    """After each run: the keep_over_epoch variables get this run's final state."""
    keep = layer.__dict__.get("_keep_state_vars")
    if not keep:
        return
    ops = [tf1.assign(var, final_state[k], validate_shape=False, name="assign_last_state_%s" % k)
           for k, var in sorted(keep.items())]
    layer.network.register_post_control_dependencies(ops)


class _CellMixin:
    """Runs a cell unit over the time axis of self.input_data, or one step inside a rec loop."""

    # initial_state: a layer name, a keyword, or {state name: either} (read before the first frame: no dependency)
    layer_options = (LayerOption("initial_state", "dict", keywords=_INITIAL_STATE_KEYWORDS, dependency=False),)

    initial_output_from_state = "h"  # inside a rec loop, prev:layer at the first step is the initial h
    n_out_is_output_dim = False  # n_out is the number of units (the output dim differs e.g. with num_proj)

    def _build_cell(self, cell_class, unit_opts, initial_state, direction, var_prefix, step_only):
        inp = self.input_data
        n_in = inp.dim
        n_units = self.n_out if isinstance(self.n_out, int) else self.output.dim
        cell = cell_class(self, n_in, n_units, **(unit_opts or {}))
        self.cell = cell
        # the input's own batch size (time_chunking before the rec layer changes it), else the global one
        batch_dim = (tf.shape(inp.placeholder)[inp.batch_dim_axis] if inp.have_batch_axis()
                     else self.network.get_data_batch_dim())
        if inp.have_time_axis() and not self._is_per_step(inp):
            x = inp.copy_as_time_batch_major() if inp.have_batch_axis() else inp.copy_as_time_major()
            seq_len = inp.get_time_dim_tag().dyn_size
            z = cell.project(x.placeholder)
            if seq_len is None:
                seq_len = tf.fill([batch_dim], tf.shape(z)[0])
            init = _initial_cell_state(self, cell, initial_state, batch_dim, var_prefix)
            y, final = _cells.run_cell_loop(cell, z, seq_len, init, reverse=direction == -1)
            self.final_state = final
            _register_keep_state_updates(self, final)
            self.output.placeholder = y
        else:  # one step inside a rec loop: the state comes from the previous step
            prev = self.rec_previous_layer
            if prev is not None and getattr(prev, "rec_vars_outputs", None):
                state = {k: prev.rec_vars_outputs[k] for k in cell.state_names}
            else:
                state = _initial_cell_state(self, cell, initial_state, batch_dim, var_prefix)
            x = inp.copy_as_batch_major().placeholder
            y, new = cell.step(cell.project(x), state)
            self.final_state = new
            self.rec_vars_outputs = dict(new)
            self.output.placeholder = y

    def _is_per_step(self, inp):
        return False

    def get_last_hidden_state(self, key):
        return last_hidden_state(self.final_state, key)

    @classmethod
    def _cell_rec_initial_extra_outputs(cls, cell_class, batch_dim, rec_layer, n_out, unit_opts, initial_state,
                                        var_prefix, name):
        """Initial state inside a rec loop (created outside the loop; 'var' params are owned by the rec layer)."""
        dims = _dims_only(cell_class, n_out, unit_opts).state_dims
        res = {}
        for k in cell_class.state_names:
            v = initial_state.get(k, "zeros") if isinstance(initial_state, dict) else initial_state
            dim = dims[k]
            if v == "var":
                scope_name = rec_layer.get_subnet_scope_prefix() + name
                key = k if len(cell_class.state_names) > 1 else "var"
                with tf1.variable_scope(tf1.VariableScope(reuse=tf1.AUTO_REUSE, name=scope_name),
                                        auxiliary_name_scope=False):
                    var = tf1.get_variable("%sinitial_%s" % (var_prefix, key), shape=(dim,),
                                           initializer=tf1.zeros_initializer())
                rec_layer.add_extra_param(var)
                res[k] = tf.tile(tf.expand_dims(var, 0), [batch_dim, 1])
            elif isinstance(v, str) and v in _KEEP_OVER_EPOCH:
                raise NotImplementedError("layer %r inside the rec loop of %r: initial_state %r is not supported "
                                          "for a cell inside a rec loop (only for a rec layer over time)"
                                          % (name, rec_layer.name, v))
            elif isinstance(v, LayerBase):
                res[k] = v.output.copy_as_batch_major().placeholder
            elif v == "ones" or v == 1:
                res[k] = tf.ones([batch_dim, dim])
            else:
                res[k] = tf.zeros([batch_dim, dim])
        return res


def _dims_only(cell_class, n_out, unit_opts):
    obj = cell_class.__new__(cell_class)
    obj.n_out = n_out
    obj.opts = dict(getattr(cell_class, "default_opts", {}), **(unit_opts or {}))
    return obj


def _cell_out_template(name, sources, n_out, inside_loop_time_dim=None):
    inp = concat_sources_template(sources, name="%s_input" % name)
    feat = Dim(n_out, kind=Dim.Types.Feature, description="%s:feature" % name)
    if inp.have_time_axis() and inp.get_time_dim_tag() != inside_loop_time_dim:
        return Data(name="%s_output" % name, dims=(inp.get_time_dim_tag(), inp.dims[inp.batch_dim_axis], feat))
    return Data(name="%s_output" % name, dims=(inp.dims[inp.batch_dim_axis], feat) if inp.have_batch_axis() else
                (batch_dim, feat))


class RnnCellLayer(_CellMixin, ConcatInputLayer):
    """One step of a cell unit (inside a rec loop); outside a loop it runs over the time axis.
    :param unit: the cell name, e.g. "lstm", "nativelstm2", "gru" (required)
    :param unit_opts: dict of options for the cell
    :param initial_state: initial state: "zeros", "ones", "var", "keep_over_epoch", a layer, or a dict per state
    :param weights_init: initializer of the cell's params that have no own one (the weight matrices; default
        glorot_uniform = the original's "xavier"), as the original's variable-scope initializer
    """

    layer_class = "rnn_cell"
    recurrent = True

    @classmethod
    def rec_move_out_ok(cls, **kwargs):
        """In a rec unit without per-step deps it runs over the time axis (as the original), the same states."""
        return True

    def __init__(self, unit, unit_opts=None, initial_state=None, initial_output=None, weights_init=None,
                 **kwargs):
        super().__init__(**kwargs)
        self._weights_init = weights_init
        # over time (moved out of a rec loop), the state params are created in the "rec" scope as the original
        # ("<layer>/rec/initial_c"); inside the loop, the rec loop creates them ("<layer>/initial_c")
        self._build_cell(_cells.get_cell_class(unit, step_only=True), unit_opts, initial_state, 1, "rec/", True)

    def create_param(self, name, shape, initializer=None, **kwargs):
        """The option weights_init: for the params the cell creates with the default initializer (the weights)."""
        if getattr(self, "_weights_init", None) is not None and initializer in (None, "glorot_uniform"):
            initializer = self._weights_init
        return super().create_param(name, shape, initializer=initializer, **kwargs)

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        if not d.get("unit"):
            raise ValueError("rnn_cell needs the option 'unit' (a cell name, e.g. 'LSTMBlock', 'GRU')")
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if d.get("n_out", NotSpecified) in (NotSpecified, None):  # (after a loss's target gave its dim)
            raise ValueError("rnn_cell needs the option 'n_out' (the number of units)")

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, network=None, **kwargs):
        cell_class = _cells.get_cell_class(kwargs["unit"], step_only=True)
        return _cell_out_template(name, sources, cell_class.get_output_dim(n_out, kwargs.get("unit_opts")),
                                  network.get_inside_rec_time_dim() if network else None)

    @classmethod
    def get_rec_initial_extra_outputs(cls, batch_dim, rec_layer, n_out=None, unit=None, unit_opts=None,
                                      initial_state=None, name=None, **kwargs):
        return cls._cell_rec_initial_extra_outputs(
            _cells.get_cell_class(unit, step_only=True), batch_dim, rec_layer, n_out, unit_opts, initial_state,
            "", name)


class GetLastHiddenStateLayer(LayerBase):
    """The (last) state of a cell layer, all parts concatenated ([B, n_out]).
    :param combine: how several states are combined: only "concat" is supported
    :param key: which state of the source rec layer ("*" for all, or e.g. "h", "c")
    :param out_dim: the feature Dim of the output (alternative to n_out)
    """

    layer_class = "get_last_hidden_state"

    def __init__(self, n_out=NotSpecified, combine="concat", key="*", out_dim=None, **kwargs):
        n_out = out_dim.dimension if out_dim is not None and n_out in (NotSpecified, None) else n_out
        super().__init__(n_out=n_out, **kwargs)
        if combine != "concat":
            raise NotImplementedError("get_last_hidden_state: option combine=%r is not supported" % (combine,))
        src = self.sources[0]
        h = src.get_last_hidden_state(key)
        if h is None:
            raise ValueError("source %r has no hidden state" % src.name)
        if h.shape[-1] is not None and h.shape[-1] != n_out:
            raise ValueError("hidden state of %r has dim %s, n_out is %i" % (src.name, h.shape[-1], n_out))
        self.output.placeholder = h

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), n_out=NotSpecified, out_dim=None, **kwargs):
        if out_dim is not None:
            if n_out not in (NotSpecified, None) and n_out != out_dim.dimension:
                raise ValueError("get_last_hidden_state: n_out=%r does not match out_dim %s" % (n_out, out_dim))
            return Data(name="%s_output" % name, dims=(batch_dim, out_dim))
        if not isinstance(n_out, int):
            raise ValueError("get_last_hidden_state needs n_out (the total state dim) or out_dim")
        return Data(name="%s_output" % name, dims=(batch_dim,
                                                    Dim(n_out, kind=Dim.Types.Feature,
                                                        description="%s:feature" % name)))



def _rec_default_from(d):
    """The sources of a rec layer without "from": none for a subnetwork unit (it reads data:source), else "data"."""
    return () if isinstance(d.get("unit", "lstm"), dict) else "data"


class RecLayer(_CellMixin, ConcatInputLayer):
    """
    Recurrent layer: ``unit`` is a cell name (e.g. "lstm", "gru", "standardlstm") run over the time axis of the
    input (time-major output), or a dict: a subnetwork computed per frame (see subnet.py).
    :param unit: a cell name ("lstm", "nativelstm2", "gru", ...) or a dict (subnetwork run per frame)
    :param unit_opts: dict of options for the cell
    :param direction: 1 forward, -1 backward (reversed over time)
    :param input_projection: the cell projects its input (standard cells)
    :param initial_state: initial state: "zeros", "ones", "var", "keep_over_epoch" (kept over the batches of an epoch), a layer, or a dict per state
    :param max_seq_len: maximum number of loop steps when searching (int or "max_len_from('base:x') * 2")
    :param forward_weights_init: initializer of the input projection weights
    :param recurrent_weights_init: initializer of the recurrent weights
    :param bias_init: initializer of the bias
    :param optimize_move_layers_out: move layers out of the subnetwork loop when possible
    :param cheating: in search, keep the target label in the beam
    :param unroll: unroll the loop (static length)
    :param back_prop: allow gradients through the loop (default: in training)
    :param use_global_rec_step_offset: add the global rec step offset to the step counter
    :param include_eos: with a target, include the end-of-sequence frame
    :param debug: debug output of the loop
    :param axis: the time axis (Dim) to loop over (default: the input's time axis); with an 'end' sub-layer and
        no input: the Dim of the new time axis (subnetwork unit only); with a cell unit also single_step_dim (one
        step on [B, in_dim], the state from the option state)
    :param in_dim: the input feature Dim (default: the input's feature dim)
    :param out_dim: the output feature Dim (alternative to n_out)
    :param state: with a cell unit and axis=single_step_dim: the state of the step ({state name: layer})
    :param max_seq_len_via: (refused unless None) a layer giving the maximum number of loop steps
    """

    layer_class = "rec"
    default_from = staticmethod(_rec_default_from)
    # state (cell unit with axis=single_step_dim): the state of this one step, {state name: layer}
    layer_options = (LayerOption("state", "dict"),)
    unsupported_options = {"state": None, "max_seq_len_via": (None,)}  # (state: supported here, see __init__)
    options_read_elsewhere = dict(LayerBase.options_read_elsewhere, include_eos="the rec loop (layers/rec/subnet.py)")
    recurrent = True

    def __init__(self, unit="lstm", unit_opts=None, direction=None, input_projection=True, initial_state=None,
                 max_seq_len=None, forward_weights_init=None, recurrent_weights_init=None, bias_init=None,
                 optimize_move_layers_out=None, cheating=False, unroll=False, back_prop=None,
                 use_global_rec_step_offset=False, include_eos=False, debug=None, axis=None, in_dim=None,
                 out_dim=None, state=None, max_seq_len_via=None, **kwargs):
        if not isinstance(unit, str):  # a subnetwork unit: its template (RecSubnetTemplate, see construct_children)
            kwargs.setdefault("dropout", 0)
        super().__init__(**kwargs)
        self._extra_params = []
        self.final_state = None
        self.subnet = None
        self._param_inits = {"forward": forward_weights_init, "recurrent": recurrent_weights_init, "bias": bias_init}
        if unroll and not (isinstance(unit, str) and isinstance(max_seq_len, int) and max_seq_len > 0):
            raise NotImplementedError("rec layer %r: option unroll=True needs a cell unit and an int max_seq_len "
                                      "(got unit=%r, max_seq_len=%r)" % (self.name, unit, max_seq_len))
        if axis is not None and not isinstance(axis, Dim):
            raise NotImplementedError("rec layer %r: option axis=%r is only supported as a Dim" % (self.name, axis))
        subnet_unit = not isinstance(unit, str)
        for opt, value in (("debug", debug), ("in_dim", in_dim if subnet_unit else None),
                           ("out_dim", out_dim if subnet_unit else None), ("state", state if subnet_unit else None)):
            if value not in (None, False):
                raise NotImplementedError("rec layer %r: option %s=%r is not supported%s" % (
                    self.name, opt, value, " with a subnetwork unit" if opt != "debug" else ""))
        if not subnet_unit:
            _check_cell_axis_options(self.name, axis, state, initial_state, direction)
        if not isinstance(unit, str) and any(v is not None for v in self._param_inits.values()):
            raise NotImplementedError("rec layer %r: forward_weights_init/recurrent_weights_init/bias_init only apply "
                                      "to a cell unit, not to a subnetwork unit" % self.name)
        for opt, value, default in (("input_projection", input_projection, True),
                                    ("use_global_rec_step_offset", use_global_rec_step_offset, False),
                                    ("cheating", cheating, False)):
            if value != default:
                raise NotImplementedError("rec layer %r: option %s=%r is not supported" % (self.name, opt, value))
        if not isinstance(unit, str):
            if initial_state:  # the original asserts this too ("initial_state not supported currently for custom unit")
                raise NotImplementedError(
                    "rec layer %r: option initial_state=%r only applies to a cell unit (e.g. 'lstm'); with a "
                    "subnetwork unit, give its layers an initial_output instead" % (self.name, initial_state))
            if back_prop is False and self.network.train_flag is not False:
                # (without training, e.g. in search, no gradient is taken through the loop anyway)
                raise NotImplementedError("rec layer %r: option back_prop=False is not supported with a subnetwork "
                                          "unit in training" % self.name)
            if direction not in (None, 1):
                raise NotImplementedError("rec layer %r: option direction=%r is not supported with a subnetwork unit" %
                                          (self.name, direction))
            self.subnet = RecSubnetLoop(self, unit, max_seq_len=max_seq_len,
                                        optimize_move_layers_out=optimize_move_layers_out,
                                        template=unit)
            self.subnet.build()
        else:
            if direction not in (None, 1, -1):
                raise ValueError("direction must be 1 or -1, got %r" % (direction,))
            if axis is not None or in_dim is not None or out_dim is not None:
                self._build_cell_on_axis(unit, unit_opts, initial_state, state, axis, in_dim, direction or 1)
            else:
                self._build_cell(_cells.get_cell_class(unit), unit_opts, initial_state, direction or 1, "rec/",
                                 False)
            if unroll and self.output.time_dim_axis is not None and not self._is_per_step(self.output):
                # unroll: the original unrolls statically over max_seq_len steps; same numbers as the loop, and
                # (as there) a sequence longer than max_seq_len is an error
                n_time = tf.shape(self.output.placeholder)[self.output.time_dim_axis]
                check = tf.debugging.assert_less_equal(
                    n_time, max_seq_len, message="rec layer %r: unroll=True: time longer than max_seq_len=%i" % (
                        self.name, max_seq_len))
                with tf.control_dependencies([check]):
                    self.output.placeholder = tf.identity(self.output.placeholder)
            if back_prop is False:  # no gradient through the loop (as tf.while_loop(back_prop=False))
                self.output.placeholder = tf.stop_gradient(self.output.placeholder)
                self.final_state = {k: tf.stop_gradient(v) for k, v in self.final_state.items()}

    def _is_per_step(self, inp):
        return self.network.is_inside_rec_layer() and inp.get_time_dim_tag() == self.network.get_inside_rec_time_dim()

    def _build_cell_on_axis(self, unit, unit_opts, initial_state, state, axis, in_dim, direction):
        """
        Cell unit with the options axis / in_dim / out_dim (as the original's rec layer with Dims): over ``axis``
        (default: the input's time axis) of the input [axis, B, in_dim] (any order), output [axis, B, out_dim]; or,
        with axis=single_step_dim, one step on [B, in_dim] with the state from the option ``state``
        (``final_state``: the new state). No state is carried by a rec loop around it.
        """
        inp = self.input_data
        axis, feat, batch = _cell_axes(self.name, inp, axis, in_dim)
        out_feat = self.output.dims[-1]
        n_units = self.n_out if isinstance(self.n_out, int) else out_feat.dimension
        cell = _cells.get_cell_class(unit)(self, feat.dimension, n_units, **(unit_opts or {}))
        self.cell = cell
        if axis is single_step_dim:
            x = inp.copy_transpose([batch, feat]).placeholder
            st = _initial_cell_state(self, cell, state if state is not None else initial_state, tf.shape(x)[0],
                                     "rec/")
            _cells._check_initial_state(cell, st)
            y, self.final_state = cell.step(cell.project(x), st)
            self.output.placeholder = y
            return
        x = inp.copy_transpose([axis, batch, feat]).placeholder
        z = cell.project(x)
        if axis.dimension is None:
            seq_len = axis.complete_dyn_size()
            if seq_len is None:
                raise ValueError("rec layer %r: axis %s has no sequence lengths" % (self.name, axis))
        else:
            seq_len = tf.fill([tf.shape(z)[1]], tf.shape(z)[0])
        init = _initial_cell_state(self, cell, initial_state, tf.shape(z)[1], "rec/")
        y, final = _cells.run_cell_loop(cell, z, seq_len, init, reverse=direction == -1)
        self.final_state = final
        _register_keep_state_updates(self, final)
        self.output.placeholder = y

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        unit = d.get("unit", "lstm")
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if not isinstance(unit, dict):
            _cells.get_cell_class(unit)
            for t in ([d["target"]] if isinstance(d.get("target"), str) else []):
                if not is_layer_target(t):
                    network.get_extern_data(t)

    @classmethod
    def construct_children(cls, d, name, network, get_layer):
        """A subnetwork unit (dict): its per-step templates; ``unit`` becomes the RecSubnetTemplate."""
        if isinstance(d.get("unit", "lstm"), dict):
            d["unit"] = RecSubnetLoop.make_template(d, network, get_layer, name=name)

    @classmethod
    def get_out_data_from_opts(cls, name, network, sources=(), unit="lstm", n_out=NotSpecified, **kwargs):
        if not isinstance(unit, str):
            return unit.get_output_template(name)
        cell_class = _cells.get_cell_class(unit)
        if any(kwargs.get(k) is not None for k in ("axis", "in_dim", "out_dim")):
            return _cell_axis_template(name, sources, cell_class, n_out, kwargs.get("unit_opts"), kwargs.get("axis"),
                                       kwargs.get("in_dim"), kwargs.get("out_dim"))
        if n_out is NotSpecified or n_out is None:
            raise ValueError("n_out must be given for a rec layer with a cell unit")
        inside = network.get_inside_rec_time_dim() if network.is_inside_rec_layer() else None
        return _cell_out_template(name, sources, cell_class.get_output_dim(n_out, kwargs.get("unit_opts")), inside)

    @classmethod
    def get_rec_initial_extra_outputs(cls, batch_dim, rec_layer, unit="lstm", n_out=None, unit_opts=None,
                                      initial_state=None, name=None, axis=None, in_dim=None, out_dim=None,
                                      **kwargs):
        if not isinstance(unit, str) or any(x is not None for x in (axis, in_dim, out_dim)):
            return {}  # (with Dim options: over its own axis, or one step with the state as layers; no loop state)
        return cls._cell_rec_initial_extra_outputs(
            _cells.get_cell_class(unit), batch_dim, rec_layer, n_out, unit_opts, initial_state, "rec/", name)

    # cell param name (after "rec/") -> which of the options forward_weights_init/recurrent_weights_init/bias_init
    _PARAM_INIT_KIND = {"W": "forward", "W_ff": "forward", "kernel": "forward", "gates/kernel": "forward",
                        "candidate/kernel": "forward", "W_re": "recurrent", "b": "bias", "bias": "bias",
                        "gates/bias": "bias", "candidate/bias": "bias"}

    def create_param(self, name, shape, initializer=None, **kwargs):
        """The cell's params, with the initializers of the options forward_weights_init etc. where given."""
        kind = self._PARAM_INIT_KIND.get(name[len("rec/"):] if name.startswith("rec/") else name)
        custom = getattr(self, "_param_inits", {}).get(kind)
        if custom is not None:
            initializer = custom
        return super().create_param(name, shape, initializer=initializer, **kwargs)

    # ---- sub-layers (subnetwork unit) ----
    def get_subnet_scope_prefix(self):
        return self.get_absolute_name_scope_prefix() + self.name + "/rec/"

    def add_extra_param(self, var):
        self.params[var.op.name[len(self.get_absolute_name_scope_prefix() + self.name) + 1:]] = var

    def get_sub_layer(self, layer_name):
        if self.subnet is None:
            return None
        return self.subnet.get_accumulated_layer(layer_name)

    @classmethod
    def get_sub_layer_out_data_from_opts(cls, layer_name, parent_layer_kwargs):
        """A sub-layer's accumulated template, for a rec layer in the unit of another rec layer (its template phase,
        where this rec layer's ``unit`` is already the template of its own unit)."""
        unit = parent_layer_kwargs.get("unit")
        if not hasattr(unit, "templates") or layer_name not in unit.templates:
            return None
        out = unit.templates[layer_name].output.copy_template_adding_time_dim(
            0, unit.out_time_dim, name="%s/%s_output" % (parent_layer_kwargs.get("name"), layer_name))
        return out, parent_layer_kwargs.get("network"), None

    def get_sub_networks(self):
        return self.subnet.get_sub_networks() if self.subnet is not None else []

    def get_last_hidden_state(self, key):
        if self.final_state is None:
            return None
        return last_hidden_state(self.final_state, key)


def _check_cell_axis_options(name, axis, state, initial_state, direction):
    if axis is single_step_dim:
        if initial_state is not None and state is not None:
            raise ValueError("rec layer %r: axis=single_step_dim takes the option state (the state of the step), not "
                             "also initial_state" % name)
        if direction not in (None, 1):
            raise NotImplementedError("rec layer %r: option direction=%r with axis=single_step_dim" % (name, direction))
    elif state is not None:
        raise NotImplementedError("rec layer %r: option state is only supported with axis=single_step_dim (over an "
                                  "axis, use initial_state)" % name)


def _cell_axes(name, inp, axis, in_dim):
    """(axis, feature dim, batch dim) of the input of a cell unit with Dim options; refuses other input dims."""
    feat = in_dim if in_dim is not None else (inp.dims[inp.feature_dim_axis] if inp.feature_dim_axis is not None
                                              else None)
    if feat is None or feat not in inp.dims:
        raise ValueError("rec layer %r: option in_dim=%s: not a dim of the input %s" % (name, feat, inp))
    if axis is None:
        axis = inp.get_time_dim_tag()
        if axis is None:
            raise ValueError("rec layer %r: the input %s has no time axis; give the option axis" % (name, inp))
    rest = [d for d in inp.dims if d not in (axis, feat)]
    if (axis is not single_step_dim and axis not in inp.dims) or len(rest) != 1 or not rest[0].is_batch_dim():
        raise NotImplementedError("rec layer %r: a cell unit with axis=%s needs the input dims [axis, batch, in_dim] "
                                  "(any order), got %s" % (name, axis, inp))
    return axis, feat, rest[0]


def _cell_axis_template(name, sources, cell_class, n_out, unit_opts, axis, in_dim, out_dim):
    inp = concat_sources_template(sources, name="%s_input" % name)
    axis, feat, batch = _cell_axes(name, inp, axis, in_dim)
    if out_dim is not None:
        if n_out not in (NotSpecified, None) and cell_class.get_output_dim(n_out, unit_opts) != out_dim.dimension:
            raise ValueError("rec layer %r: n_out=%r does not match out_dim %s" % (name, n_out, out_dim))
    elif n_out in (NotSpecified, None):
        raise ValueError("rec layer %r: a cell unit needs n_out or out_dim" % name)
    else:
        out_dim = Dim(cell_class.get_output_dim(n_out, unit_opts), kind=Dim.Types.Feature,
                      description="%s:feature" % name)
    dims = (batch, out_dim) if axis is single_step_dim else (axis, batch, out_dim)
    return Data(name="%s_output" % name, dims=dims, dtype=inp.dtype if not inp.sparse else "float32")


class GetRecAccumulatedLayer(LayerBase):
    """The accumulated (over time) output of a sub-layer of a rec layer with a subnetwork unit.
    :param sub_layer: name of the sub layer of the rec layer (the source) whose accumulated output is taken
    """

    layer_class = "get_rec_accumulated"

    def __init__(self, sub_layer, **kwargs):
        super().__init__(**kwargs)
        self.output.placeholder = self.sources[0].get_sub_layer(sub_layer).output.placeholder

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), sub_layer=None, **kwargs):
        sub = sources[0].get_sub_layer(sub_layer) if sources and sub_layer else None
        if sub is None:
            raise ValueError("get_rec_accumulated: source %r has no accumulated sub-layer %r" % (
                sources[0].name if sources else None, sub_layer))
        return sub.output.copy_template(name="%s_output" % name)


class RecLastOutputLayer(LayerBase):
    """The last frame (within the sequence length) of a sub-layer of a rec layer (``need_last``).
    :param rec_layer: the rec layer
    :param sub_layer_name: the sub layer of it whose last frame output is taken
    """

    layer_class = "rec_last_output"
    default_from = ()
    layer_options = ("rec_layer",)
    required_options = ("rec_layer", "sub_layer_name")

    def __init__(self, rec_layer, sub_layer_name, **kwargs):
        kwargs.pop("sources", None)
        super().__init__(**kwargs)
        self.output.placeholder = rec_layer.subnet.get_last_frame(sub_layer_name)

    @classmethod
    def get_out_data_from_opts(cls, name, rec_layer, sub_layer_name, **kwargs):
        if getattr(rec_layer, "subnet", None) is None and hasattr(getattr(rec_layer, "kwargs", {}).get("unit"),
                                                                   "templates"):
            # a rec layer in the unit of another rec layer, at that unit's template phase: its unit's templates
            return rec_layer.kwargs["unit"].templates[sub_layer_name].output.copy_template(name="%s_output" % name)
        return rec_layer.subnet.get_step_template(sub_layer_name).copy_template(name="%s_output" % name)


class RecUnstackLayer(LayerBase):
    """
    Inside a rec loop: the current frame of a source with the loop's time axis (e.g. of ``base:X``, which is the
    outer layer as a whole). Outside the loop (moved out, or not in a rec layer): identity.
    :param axis: the axis to unstack (inside a rec loop: the frame of the current step)
    :param declare_rec_time: declare this axis as the rec loop's time axis
    """

    layer_class = "rec_unstack"
    unsupported_options = {"declare_rec_time": (NotSpecified, False)}

    def __init__(self, axis="T", declare_rec_time=NotSpecified, **kwargs):
        super().__init__(**kwargs)
        src = self.sources[0].output
        a = self._loop_axis(self.network, src, axis)
        if a is None:
            self.output.placeholder = src.placeholder
        else:
            self.output.placeholder = tf.gather(src.placeholder, self.network.rec_step_info.step, axis=a)

    @staticmethod
    def _loop_axis(network, src, axis):
        if network is None or not network.is_inside_rec_layer():
            return None
        time_dim = network.get_inside_rec_time_dim()
        if time_dim in src.dims:
            return src.dims.index(time_dim)
        raise NotImplementedError("rec_unstack: %s does not have the rec loop's time axis %s (axis=%r)" % (
            src, time_dim, axis))

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), network=None, axis="T", **kwargs):
        src = sources[0].output
        a = cls._loop_axis(network, src, axis)
        if a is None:
            return src.copy_template(name="%s_output" % name)
        return src.copy_template_excluding_axis(a).copy_template(name="%s_output" % name)


def as_list_first(x):
    return x[0] if isinstance(x, (list, tuple)) else x


class MaskedComputationLayer(LayerBase):
    """
    ``unit`` is computed only where ``mask`` is True. Inside a rec loop the rec unit is rewritten
    (see subnet.flatten_masked_computation): the unit becomes the sub-layer ``<name>/unit`` whose state updates are
    gated by the mask, and a selection keeps the previous output where the mask is False. Over a whole sequence
    (outside a loop), the masked frames form a new, shorter time axis and the unit runs over it (params named
    as this layer).
    :param mask: layer with a bool mask; the unit is computed only where it is True, else the previous output is kept
    :param unit: the layer dict computed at the masked frames (required)
    :param masked_from: layer whose output (already the masked frames) is the unit's input instead (the mask is
        then not used, as in the original)
    """

    layer_class = "masked_computation"
    recurrent = True
    layer_options = ("mask",)
    required_options = ("mask", "unit")

    def __init__(self, mask, unit, masked_from=None, **kwargs):
        super().__init__(**kwargs)
        self.unit_net = unit.network  # the Subnetwork built by construct_children
        self.unit_layer = unit
        self.output.placeholder = unit.output.placeholder

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        if network.is_inside_rec_layer():
            raise NotImplementedError("inside a rec loop, masked_computation must be a sub-layer of the unit")
        masked_from = d.pop("masked_from", None)
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if masked_from is not None:  # as the original: the unit runs over masked_from (already the masked frames)
            d["masked_from"] = get_layer(masked_from)

    @classmethod
    def construct_children(cls, d, name, network, get_layer):
        """The masked frames of the sources (a new time axis) and the unit over them; ``unit`` becomes that layer."""
        from ...subnetwork import Subnetwork

        if d.get("masked_from") is not None:
            masked = d["masked_from"].output
        elif len(d["sources"]) > 1:
            from ..base import concat_sources

            masked = _mask_frames(concat_sources(d["sources"], name="%s_masked_input" % name), d["mask"].output, name)
        else:
            masked = _mask_frames(d["sources"][0].output, d["mask"].output, name)
        # the unit layer has this layer's name (its params are this layer's), so the child shares our name prefix
        net = Subnetwork(network, name, own_data={"data": masked, "source": masked}, fallback_to_parent=True,
                         parent_get_layer=get_layer, absolute_name_prefix=network.get_absolute_name_prefix(),
                         eval_flag=False)
        d["unit"] = net.construct_layer({name: d["unit"]}, name)  # (without "from": its class's default, "data")

    @classmethod
    def get_out_data_from_opts(cls, name, unit, **kwargs):
        return unit.output.copy_template(name="%s_output" % name)

    def get_sub_networks(self):
        return [self.unit_net]


def _mask_frames(data, mask, name):
    """The frames of data (time axis) where mask [B, T] is True, in order, as a new time axis."""
    x = data.copy_as_batch_major()
    x = x.copy_move_axis(x.time_dim_axis, 1)
    m = mask.copy_as_batch_major().placeholder
    lens = tf.reduce_sum(tf.cast(m, tf.int32), axis=1)
    order = tf.argsort(tf.cast(tf.logical_not(m), tf.int32), axis=1, stable=True)
    order = order[:, :tf.reduce_max(lens)]
    new_dim = Dim(None, kind=Dim.Types.Spatial, description="%s:masked-time" % name, dyn_size=lens)
    out = x.copy_template_replace_dim_tag(1, new_dim)
    out.placeholder = tf.gather(x.placeholder, order, axis=1, batch_dims=1)
    return out


class MaskedSelectLayer(LayerBase):
    """Inside a rec loop: the source where mask is True, else this layer's previous output (masked_computation).
    :param mask: layer with a bool mask; the frames where it is True are selected
    """

    layer_class = "_masked_select"
    recurrent = True
    layer_options = ("mask",)
    required_options = ("mask",)
    needs_prev_output = True

    def __init__(self, mask, **kwargs):
        super().__init__(**kwargs)
        x = self.sources[0].output.copy_compatible_to(self.output).placeholder
        prev = self.rec_previous_layer.output.placeholder
        m = mask.output.copy_compatible_to(self.output.copy_template(), check_dtype=False).placeholder \
            if mask.output.batch_ndim else mask.output.placeholder
        y = tf.where(tf.broadcast_to(m, tf.shape(x)), x, prev)
        y.set_shape(x.shape)
        self.output.placeholder = y

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        return sources[0].output.copy_template(name="%s_output" % name)


class UnmaskLayer(LayerBase):
    """Inverse of masked_computation. Inside a rec loop the masked output is already kept on unmasked frames.
    :param mask: layer with the bool mask used by the masked computation
    :param skip_initial: the masked computation had no initial output: frames before the first masked one take the first masked output (not zeros)
    """

    layer_class = "unmask"
    layer_options = ("mask",)
    required_options = ("mask",)

    def __init__(self, mask, skip_initial=False, **kwargs):
        super().__init__(**kwargs)
        src = self.sources[0].output
        if self.network.is_inside_rec_layer() and not src.have_time_axis():
            self.output.placeholder = src.placeholder  # the masked output is already kept on unmasked frames
            return
        # over time: each frame takes the masked output of the last masked frame up to it
        x = src.copy_as_batch_major()
        x = x.copy_move_axis(x.time_dim_axis, 1)
        m = mask.output.copy_as_batch_major().placeholder
        idx = tf.cumsum(tf.cast(m, tf.int32), axis=1) - 1  # [B, T]
        if skip_initial:
            idx = tf.maximum(idx, 0)
        y = tf.gather(x.placeholder, tf.maximum(idx, 0), axis=1, batch_dims=1)
        valid = tf.reshape(idx >= 0, tf.concat([tf.shape(idx), tf.ones([x.batch_ndim - 2], tf.int32)], 0))
        y = tf.where(tf.broadcast_to(valid, tf.shape(y)), y, tf.zeros_like(y))
        out = x.copy_template_replace_dim_tag(1, self.output.get_time_dim_tag())
        out.placeholder = y
        self.output.placeholder = out.copy_compatible_to(self.output).placeholder

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), mask=None, network=None, **kwargs):
        src = sources[0].output
        if (network is not None and network.is_inside_rec_layer() and not src.have_time_axis()) or mask is None:
            return src.copy_template(name="%s_output" % name)
        out = src.copy_as_batch_major()
        out = out.copy_move_axis(out.time_dim_axis, 1)
        mask_out = mask.output
        return out.copy_template_replace_dim_tag(1, mask_out.get_time_dim_tag(), name="%s_output" % name)
