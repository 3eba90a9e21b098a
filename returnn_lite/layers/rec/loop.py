"""
The real construction of a rec layer's subnetwork unit, after its templates and the move-out split
(``RecSubnetLoop``, subnet.py): ``RecLoopConstruction`` runs named passes over the state it holds, and
``_LoopStep`` is one step of the ``tf.while_loop`` body (see the class docs and docs/design.md).
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib

import tensorflow as tf

from ...data import Data, SearchBeam
from ...errors import LayerNotFound
from ...layer_ref import parse_layer_ref
from ...subnetwork import Subnetwork
from ..base import InternalLayer, LayerBase, last_hidden_state
from ..search import select_beam_tensor, tile_batch

tf1 = tf.compat.v1


class RecStepInfo:
    """Per-step info inside the loop (``network.rec_step_info``): ``step`` is the int32 frame index."""

    def __init__(self, step, seq_lens, time_dim, prev_end_flag=None, prev_seq_lens=None, prev_beam=None):
        self.step = step
        self.seq_lens = seq_lens
        self.time_dim = time_dim
        self.prev_end_flag = prev_end_flag  # under search: [B*beam] of the hypotheses before this step's choice
        self.prev_seq_lens = prev_seq_lens
        self.prev_beam = prev_beam  # under search: the beam of prev_end_flag (the previous step's)

    def get_end_flag(self, target_search_choices=None):
        return tf.logical_not(self.step < self.seq_lens)


def _SubNet(parent_net, rec_name, scope_prefix, **flags):
    """Child network of a rec layer: layer names 'rec/sub', params under 'rec/rec/sub/...'."""
    # eval_flag False: losses are registered on the accumulated outputs by the rec layer
    return Subnetwork(parent_net, rec_name, name_scope_prefix=scope_prefix, eval_flag=False, **flags)


class _PrevLayer(InternalLayer):
    """``prev:X`` inside the loop: X's output (and state) of the previous step."""

    def __init__(self, name, network, output, rec_vars_outputs):
        super().__init__(name=name, network=network, output=output)
        self.rec_vars_outputs = rec_vars_outputs

    def get_last_hidden_state(self, key):
        return last_hidden_state(self.rec_vars_outputs, key) if self.rec_vars_outputs else None


def _in_outer_net(ref):
    """A reference of the unit to the rec layer's network, as the name there ("base:x" -> "x")."""
    r = parse_layer_ref(ref)
    return r.name if r.kind == "base" else ref


def _frame_template(data, time_dim):
    """data without the loop's time axis (if it has it), else None."""
    for i, d in enumerate(data.dims):
        if d == time_dim:
            return data.copy_template_excluding_axis(i)
    return None


def _extern_data_on_loop_time(layer, time_dim, net):
    """
    Extern data (``data:X``) in a rec unit is seen per frame of the loop (as the original: the subnetwork's extern
    data are the templates without time axis, unstacked along the loop), also where its time axis has another tag
    than the loop (e.g. a target of the same length): its time axis is taken as the loop's.
    """
    data = layer.output
    if not data.have_time_axis() or time_dim in data.dims:
        return layer
    out = data.copy_template_replace_dim_tag(data.time_dim_axis, time_dim, name=data.name)
    out.placeholder = data.placeholder
    return InternalLayer(name=layer.name, network=net, output=out)


def _time_major(data, time_dim):
    return data.copy_move_axis(data.get_axis_by_tag(time_dim), 0)


def _while_loop_all_intermediates(cond, body, init, invariants):
    from .cells import while_loop

    return while_loop(cond, body, init, shape_invariants=invariants, parallel_iterations=1, name="rec_loop")


class LoopState(collections.namedtuple("LoopState", ["i", "prev", "extra", "acc", "logits", "end", "search"])):
    """
    The variables of the rec loop, by name: ``i`` the step; ``prev`` sub-layer -> its output of the previous step;
    ``extra`` (sub-layer, state name) -> its state (e.g. an LSTM's c and h); ``acc`` sub-layer -> TensorArray of
    its outputs; ``logits`` sub-layer -> TensorArray of its logits (for its loss); ``end`` {"ended", "lens"} per
    sequence or hypothesis where the loop tracks ends; ``search`` {"scores" [B, beam], "src_beams" TensorArray}
    under search.
    """

    __slots__ = ()


class RecLoopConstruction:
    """
    Builds the real layers of a rec unit, given which sub-layers stay in the loop and which move out, in passes
    (``run``), each reading what the earlier ones left in the attributes below:

    1. ``build_moved_out``: the moved-out layers over the whole sequence in ``outside_net`` (``full``); ``prev:X`` of
       a moved-out X is X shifted by one frame (``prev_full``).
    2. ``plan_loop_state``: what the loop carries (``prev_names``, ``extra_keys``, ``acc_names``, ``loss_layers``)
       and the initial values of ``prev:`` outputs and per-step states (tiled for the beam under search).
    3. ``repeat_base_for_beam``: under search, outer layers used only by layers on the beam, repeated per
       hypothesis once, outside the loop (``pretiled``).
    4. ``run_loop``: the ``tf.while_loop``; each step (``_LoopStep``) builds the in-loop layers in ``loop_net``.
    5. ``collect_loop_outputs`` / ``collect_moved_out``: the outputs over all frames (``accumulated``; backtracked
       under search), the sequence ends, the beam's final scores, the rec layer's output.
    6. ``register_losses``: losses of sub-layers on their accumulated outputs, through the network's one route.

    The passes create their TF ops in a fixed order (op-level random seeds depend on it).
    """

    def __init__(self, rec_layer, template, unit, outside_unit, in_loop, moved_out, max_seq_len):
        self.rec = rec_layer
        self.net = rec_layer.network
        self.tpl = template
        self.unit = unit  # the unit's layer dicts, for the loop
        self.outside_unit = outside_unit  # the same, for the construction over the whole sequence
        self.in_loop = in_loop
        self.in_loop_set = set(in_loop)
        self.moved_out = moved_out
        self.max_seq_len = max_seq_len
        self.time_dim = template.time_dim
        self.scope = rec_layer.get_subnet_scope_prefix()
        self.batch_dim = self.net.get_data_batch_dim()
        self.seq_len = self._seq_len()
        self.input_full = rec_layer.input_data if template.input_data is not None else None
        self.dynamic = template.dynamic_end  # ended by the unit's 'end' layer
        self.beam = template.beam  # the search beam of the unit (None without search)
        self.k_beam = self.beam.beam_size if self.beam is not None else 1
        self.has_beam = {x for x in template.templates if template.templates[x].output.beam is not None}
        self.track_end = self.dynamic or self.beam is not None
        # pass 1
        self.outside_net = None
        self.extern_cache = {}  # "data:X" -> its layer on the loop's time
        self.prev_full = {}  # "prev:X" -> X (moved out) shifted by one frame
        self.full = {}  # moved-out name -> its layer over the whole sequence
        self.n_time = None
        # pass 2
        self.extra_init = {}  # in-loop name -> its initial per-step state {state name: value}
        self.prev_names = []  # in-loop layers whose previous output the loop carries
        self.prev_init = []  # (in the order of prev_names)
        self.extra_keys = []
        self.acc_names = []  # in-loop layers whose outputs are accumulated (used from outside)
        self.loss_layers = []  # accumulated in-loop layers with a loss: their logits are accumulated too
        # pass 3
        self.pretiled = {}
        # pass 4
        self.frame_tas = {}  # key -> (frame template, TensorArray of its frames), built outside the loop body
        self.no_logits = set()  # loss layers without logits (e.g. eval): their loss takes the output
        self.loop_net = None  # the network of the (last traced) loop body
        # pass 5
        self.accumulated = _LazyLayers()  # sub-layer name -> its output over all frames (time-major)

    def run(self):
        self.build_moved_out()
        self.n_time = self._n_time()
        self.plan_loop_state()
        self.repeat_base_for_beam()
        if self.in_loop:
            self.collect_loop_outputs(self.run_loop())
        self.collect_moved_out()
        self.set_rec_output()
        if self.net.eval_flag:
            self.register_losses()

    # ---- inputs ----
    def _seq_len(self):
        time_dim = self.time_dim
        seq_len = time_dim.dyn_size if time_dim.dyn_size is not None else time_dim.complete_dyn_size()
        if seq_len is None and time_dim.dimension is not None:  # a loop over a static axis (option axis)
            seq_len = tf.fill([self.batch_dim], time_dim.dimension)
        return seq_len

    def _n_time(self):
        if self.dynamic and (self.max_seq_len is not None or self.seq_len is None):
            return self._max_seq_len()
        return tf.reduce_max(self.seq_len) if self.seq_len is not None else None

    def _max_seq_len(self):
        """max_seq_len option: an int or an expression such as "max_len_from('base:encoder')"."""
        v = self.max_seq_len
        if isinstance(v, str):
            def max_len_from(src):
                layer = self.net.get_layer(_in_outer_net(src))
                return tf.reduce_max(layer.output.get_time_dim_tag().dyn_size)

            v = eval(v, {"max_len_from": max_len_from, "tf": tf})  # noqa: S307 (config expression)
        return tf.convert_to_tensor(v, tf.int32)

    def outer(self, ref):
        """Outer layers / data over the whole sequence, by the names used in the unit."""
        r = parse_layer_ref(ref)
        if r.kind == "data" and r.name in (None, "source"):
            return InternalLayer(name="data:source", network=self.net, output=self.input_full)
        if r.kind == "data":
            if ref not in self.extern_cache:
                self.extern_cache[ref] = _extern_data_on_loop_time(self.net.get_layer(ref), self.time_dim, self.net)
            return self.extern_cache[ref]
        return self.net.get_layer(_in_outer_net(ref))

    # ---- pass 1: moved out ----
    def build_moved_out(self):
        self.outside_net = _SubNet(self.net, self.rec.name, self.scope, over_rec_time_dim=self.time_dim)
        self.outside_net.parent_layer = self.rec
        for x in self.moved_out:
            self.full[x] = self.get_outside(x)
        for x in self.in_loop:  # prev: of moved-out layers used in the loop: their frames of the shifted sequence
            for r in sorted(self.tpl.deps.get(x, ())):
                if r.startswith("prev:") and r[len("prev:"):] not in self.in_loop_set:
                    self.get_outside(r)

    def get_outside(self, ref):
        """The get_layer of the construction over the whole sequence."""
        r = parse_layer_ref(ref)
        if r.kind == "prev":  # (only of moved-out layers, see RecSubnetLoop._classify)
            if ref not in self.prev_full:
                self.prev_full[ref] = self._shifted_prev(r.name, self.get_outside(r.name))
            return self.prev_full[ref]
        if r.kind == "layer":
            if r.name in self.tpl.templates or (r.name in self.unit and r.sub_name is not None):  # (S/X: a
                # flattened subnetwork layer)
                return self.outside_net.construct_layer(self.outside_unit, r.name, get_layer=self.get_outside)
            if r.sub_name is not None and r.base_name in self.tpl.templates:  # e.g. split/0
                return self.get_sub_layer(self.get_outside, r.name)
        return self.outer(ref)

    def _shifted_prev(self, x, layer):
        """prev:x over the whole sequence, x moved out: x shifted by one frame, its initial output at frame 0."""
        data = layer.output
        if _frame_template(data, self.time_dim) is None:  # the same in every frame
            data = data.copy_add_dim_by_tag(self.time_dim, unbroadcast=True, axis=0)
        tm = _time_major(data, self.time_dim)
        init = self.initial_output(x, tm.copy_template_excluding_axis(0))
        out = tm.copy_template(name="prev:%s" % x)
        out.placeholder = tf.concat([tf.expand_dims(tf.cast(init, tm.placeholder.dtype), 0), tm.placeholder[:-1]], 0)
        return InternalLayer(name="prev:" + x, network=self.outside_net, output=out)

    def get_sub_layer(self, get_layer, ref):
        base_name, sub_name = ref.split("/", 1)
        sub = get_layer(base_name).get_sub_layer(sub_name)
        if sub is None:
            raise LayerNotFound("rec layer %r: layer %r has no sub-layer %r" % (
                self.rec.name, base_name, sub_name), ref, self.net)
        return sub

    # ---- pass 2: the loop's state ----
    def plan_loop_state(self):
        tpl, batch_dim, k_beam = self.tpl, self.batch_dim, self.k_beam
        self.prev_names = sorted(
            {r[len("prev:"):] for x in self.in_loop for r in tpl.deps.get(x, ())
             if r.startswith("prev:") and r[len("prev:"):] in self.in_loop_set}
            | {x for x in self.in_loop if getattr(tpl.templates[x].cls, "needs_prev_output", False)})
        for x in self.in_loop:
            t = tpl.templates[x]
            kw = dict(t.kwargs)
            kw.pop("name", None)
            kw.pop("rec_layer", None)  # the option of rec_last_output (of a rec layer in this unit), not this rec
            res = t.cls.get_rec_initial_extra_outputs(batch_dim=batch_dim, rec_layer=self.rec, name=x,
                                                      network=t.network, **kw)
            if res:
                self.extra_init[x] = res
        for x in self.prev_names:
            from_state = getattr(tpl.templates[x].cls, "initial_output_from_state", None)
            if from_state and x in self.extra_init and self.unit[x].get("initial_output") is None:
                self.prev_init.append(self.extra_init[x][from_state])  # cells: the output part of the initial state
            else:
                self.prev_init.append(self.initial_output(x))
        if self.beam is not None:  # initial hypotheses: the same for every beam entry (the first step searches one)
            self.prev_init = [tile_batch(v, k_beam) if x in self.has_beam else v
                              for x, v in zip(self.prev_names, self.prev_init)]
            self.extra_init = {x: {k: tile_batch(v, k_beam) if x in self.has_beam else v for k, v in st.items()}
                               for x, st in self.extra_init.items()}
        self.acc_names = [x for x in self.in_loop if x in tpl.needed and not any(  # used from outside; same shape
            d.is_dynamic() and d.dyn_size is None for d in tpl.templates[x].output.dims if not d.is_batch_dim())]
        self.extra_keys = [(x, k) for x in sorted(self.extra_init) for k in sorted(self.extra_init[x])]
        if self.net.eval_flag:
            self.loss_layers = [x for x in self.acc_names if tpl.templates[x].kwargs.get("loss") is not None]

    def initial_output(self, x, out=None):
        """x's output before the first frame, in the layout of out (default: x's per-step template)."""
        if out is None:
            out = self.tpl.templates[x].output
        init = self.unit[x].get("initial_output", 0)
        if isinstance(init, LayerBase):
            init = init.name
        if isinstance(init, str) and init == "var":  # trainable, zero-initialized [dim] (as the original)
            if out.sparse or out.batch_ndim != 2 or out.dim is None:
                raise ValueError("rec layer %r: initial_output='var' of %r needs a dense [B, dim] output, got %s" % (
                    self.rec.name, x, out))
            with self.rec.var_creation_scope():
                var = tf1.get_variable("init_%s" % x, shape=(out.dim,), dtype=out.dtype,
                                       initializer=tf1.zeros_initializer())
            self.rec.add_extra_param(var)
            return as_template_layout(Data(name="init_%s" % x, dims=(out.dims[out.batch_dim_axis],
                                                                     out.dims[out.feature_dim_axis]),
                                           dtype=out.dtype, placeholder=tf.tile(var[None], [self.batch_dim, 1])),
                                      out, "rec layer %r: initial_output='var' of %r" % (self.rec.name, x))
        if isinstance(init, str) and init not in ("zeros", "ones"):
            if init in ("apply(0)", "keep_over_epoch", "keep_over_epoch_no_init"):
                raise NotImplementedError("rec layer %r: option initial_output=%r of %r is not supported" % (
                    self.rec.name, init, x))
            layer = self.net.get_layer(_in_outer_net(init))
            return as_template_layout(layer.output, out, "rec layer %r: initial_output=%r of %r" % (
                self.rec.name, init, x))
        value = {"zeros": 0, "ones": 1, None: 0}.get(init, init)
        if out.dtype == "string" and value == 0:
            value = ""  # zeros of a string output: empty strings (as tf.zeros)
        shape = [self.batch_dim if d.is_batch_dim() else (d.dimension if d.dimension is not None or d.dyn_size is None
                                                          else tf.reduce_max(d.dyn_size)) for d in out.dims]
        if any(s is None for s in shape):
            raise ValueError("rec layer %r: cannot create the initial output of %r with shape %s" % (
                self.rec.name, x, out))
        return tf.fill(shape, tf.constant(value, dtype=out.dtype))

    # ---- pass 3: outer layers repeated for the beam ----
    def repeat_base_for_beam(self):
        if self.beam is None:
            return
        root_beam = SearchBeam(self.k_beam, name="%s/repeated" % self.rec.get_absolute_name(), invariant=True)
        # repeated axes get the tags the templates got (a loop state over the encoder time, e.g. accumulated
        # attention weights, must match the repeated encoder in the loop)
        root_beam._tiled_dims = self.beam._tiled_dims
        users = {}
        for x in self.in_loop:
            for ref in self.tpl.deps.get(x, ()):
                if ref.startswith("base:"):
                    users.setdefault(ref, set()).add(x)
        for ref, xs in sorted(users.items()):
            layer = self.outer(ref)
            # (a user on a beam of another size, e.g. after a first choice with a smaller beam, repeats the layer
            # for its own beam, as every layer does with a source without beam)
            on_root_size = all(self.tpl.templates[x].output.beam.beam_size == self.k_beam for x in xs & self.has_beam)
            if xs <= self.has_beam and on_root_size and layer.output.beam is None and layer.output.have_batch_axis():
                self.pretiled[ref] = InternalLayer(
                    name=ref, network=self.net,
                    output=layer.output.copy_as_batch_major().copy_extend_with_beam(root_beam))

    # ---- pass 4: the loop ----
    def run_loop(self):
        tpl, batch_dim, k_beam, dynamic, beam = self.tpl, self.batch_dim, self.k_beam, self.dynamic, self.beam
        ta_size = 0 if dynamic else self.n_time
        int_shape = tf.TensorShape([None])
        init = LoopState(
            i=tf.constant(0),
            prev=dict(zip(self.prev_names, self.prev_init)),
            extra={(x, k): self.extra_init[x][k] for x, k in self.extra_keys},
            acc={x: tf.TensorArray(tf.as_dtype(tpl.templates[x].output.dtype), size=ta_size, dynamic_size=dynamic,
                                   element_shape=tf.TensorShape(tpl.templates[x].output.batch_shape))
                 for x in self.acc_names},
            logits={x: tf.TensorArray(tf.float32, size=ta_size, dynamic_size=dynamic, infer_shape=False)
                    for x in self.loss_layers},
            end={"ended": tf.zeros([batch_dim * k_beam], tf.bool), "lens": tf.zeros([batch_dim * k_beam], tf.int32)}
            if self.track_end else {},
            search={"scores": tf.zeros([batch_dim, k_beam]), "src_beams": tf.TensorArray(
                tf.int32, size=ta_size, dynamic_size=dynamic, element_shape=tf.TensorShape([None, k_beam]))}
            if beam is not None else {})
        invariants = LoopState(
            i=tf.TensorShape([]),
            prev={x: tf.TensorShape(tpl.templates[x].output.batch_shape) for x in self.prev_names},
            extra={key: tf.TensorShape([None] * v.shape.rank) for key, v in init.extra.items()},
            acc={x: tf.TensorShape(None) for x in init.acc}, logits={x: tf.TensorShape(None) for x in init.logits},
            end={k: int_shape for k in init.end},
            search={"scores": tf.TensorShape([None, k_beam]), "src_beams": tf.TensorShape(None)}
            if beam is not None else {})
        return LoopState(*_while_loop_all_intermediates(self._cond, self._body, init, invariants))

    def _cond(self, *state):
        state = LoopState(*state)
        if self.dynamic:
            return tf.logical_and(state.i < self.n_time, tf.logical_not(tf.reduce_all(state.end["ended"])))
        return state.i < self.n_time

    def _body(self, *state):
        return _LoopStep(self, LoopState(*state)).next_state()

    def frame_source(self, key, data):
        """(frame template, TensorArray of the frames) of data over the loop's time, built once per key."""
        if key not in self.frame_tas:
            # built in the graph of the full sequence (outside the loop body), once, not in every step
            with data.placeholder.graph.as_default(), tf.control_dependencies(None):
                tm = _time_major(data, self.time_dim)
                self.frame_tas[key] = (tm.copy_template_excluding_axis(0), tf.TensorArray(
                    tm.dtype, size=tf.shape(tm.placeholder)[0], element_shape=tm.placeholder.shape[1:],
                    infer_shape=True).unstack(tm.placeholder))
        return self.frame_tas[key]

    def frame_layer(self, ref, data, i, loop):
        """Frame i of data (over the loop's time) as a layer of the loop body."""
        template, ta = self.frame_source(ref, data)
        out = template.copy_template(name=ref)
        out.placeholder = ta.read(i)
        return InternalLayer(name=ref, network=loop, output=out)

    def gate(self, loop, x, new, old):
        """Layers of a masked_computation unit keep their state and output where the mask is False."""
        mask_name = next((m for prefix, m in self.tpl.gates.items() if x == prefix or x.startswith(prefix + "/")), None)
        if mask_name is None:
            return new
        mask = loop.layers[mask_name].output if mask_name in loop.layers else None
        if mask is None:
            return new
        if not mask.have_batch_axis():
            raise ValueError("masked_computation %r: option 'mask' %r is %s, without a batch axis" % (
                x.split("/")[0], mask_name, mask.short_repr()))
        m = mask.copy_as_batch_major().placeholder
        m = tf.reshape(m, tf.concat([tf.shape(m), tf.ones([new.shape.rank - m.shape.rank], tf.int32)], 0))
        res = tf.where(tf.broadcast_to(m, tf.shape(new)), new, old)
        res.set_shape(new.shape)
        return res

    # ---- pass 5: outputs ----
    def collect_loop_outputs(self, res):
        tpl, k_beam, beam, dynamic, rec = self.tpl, self.k_beam, self.beam, self.dynamic, self.rec
        n_steps = res.i
        backtrack = None
        if beam is not None:
            src_beams = res.search["src_beams"].stack()  # [T, B, K]
            beam.beam_scores = self._final_beam_scores(res.search["scores"], n_steps,
                                                       res.end["ended"] if dynamic else None)
            beam.src_beams = src_beams[-1]
            backtrack = _backtrack_indices(src_beams)
        if self.track_end:
            ended, lens = res.end["ended"], res.end["lens"]
            if dynamic:
                tpl.out_time_dim.dyn_size = tf.where(ended, lens, tf.fill(tf.shape(lens), n_steps))
                if beam is not None:  # per sequence: its best hypothesis did not end (cut at max_seq_len)
                    rec.search_unfinished = tf.logical_not(tf.reshape(ended, [-1, k_beam])[:, 0])
        if beam is not None and not dynamic:
            tpl.out_time_dim.dyn_size = tile_batch(self.seq_len, k_beam)
        for x, ta in sorted(res.acc.items()):
            step_tpl = tpl.templates[x].output
            out = step_tpl.copy_template_adding_time_dim(
                0, tpl.out_time_dim if x in self.has_beam or dynamic else self.time_dim, name="%s/%s" % (rec.name, x))
            out.placeholder = ta.stack()
            if x in self.has_beam:
                out.placeholder = _apply_backtrack(out.placeholder, backtrack, k_beam)
            self.accumulated[x] = _AccumulatedLayer(x, self.loop_net, out, self.loop_net.layers[x])
        for x, ta in sorted(res.logits.items()):
            if x not in self.no_logits:
                self.accumulated[x].set_logits(ta.stack())

    def _final_beam_scores(self, scores, n_steps, ended):
        """
        As the original: a length-normalized search that ran to its maximal length (max_seq_len, or the known
        length of the loop) reports its final scores times T**exponent / (T + 1) (T: the number of steps).
        """
        kwargs = self.tpl.templates[self.tpl.choice_names[0]].kwargs
        if not kwargs.get("length_normalization", True) or self.tpl.include_eos:
            return scores
        exponent = kwargs.get("length_normalization_exponent", 1.0)
        t = tf.cast(n_steps, tf.float32)
        factor = t ** exponent / (t + 1.)
        if ended is not None:
            factor = tf.where(tf.reduce_all(ended), 1., factor)
        return scores * factor

    def collect_moved_out(self):
        """
        Moved-out layers as seen from outside (time-major): built on first lookup, as most are never looked up
        (issue #30: a transpose per moved-out layer). They are built in the graph, control flow context and name
        scope of this pass, wherever the lookup comes from.
        """
        here = _BuildContext.capture()
        for x in self.moved_out:
            layer = self.full[x]
            constant = _frame_template(layer.output, self.time_dim) is None  # the same in every frame
            if constant and x != "output":
                continue

            def build(x=x, layer=layer, constant=constant):
                with here:
                    if constant:
                        out = layer.output.copy_add_dim_by_tag(self.time_dim, unbroadcast=True, axis=0)
                    else:
                        out = _time_major(layer.output, self.time_dim)
                    return _AccumulatedLayer(x, self.outside_net, out, layer)

            self.accumulated.add_lazy(x, build, loss=layer.loss)

    def set_rec_output(self):
        rec = self.rec
        if self.accumulated.is_lazy("output") and self.time_dim in self.full["output"].output.dims:
            out = self.full["output"].output  # straight to the rec layer's layout (no time-major copy in between)
        else:
            out = self.accumulated["output"].output
        rec.output.placeholder = out.copy_compatible_to(rec.output).placeholder if out.dims != rec.output.dims \
            else out.placeholder

    # ---- pass 6: losses ----
    def register_losses(self):
        for x in sorted(self.accumulated):
            if self.accumulated.loss_of(x) is None:
                continue
            layer = self.accumulated[x]
            if layer.output.beam is not None and layer.loss.need_target:
                raise NotImplementedError(
                    "rec layer %r: sub-layer %r has a loss, which is not computed on the search beam (the "
                    "hypotheses do not follow the target); set loss_only_on_non_search=True on it, or build "
                    "the search network without eval_flag" % (self.rec.name, x))
            name = self.rec.name + "/" + x
            try:
                self.net._register_loss(name, layer)
            except ValueError as exc:  # (the dim checks of output vs target)
                raise ValueError("rec unit layer %r: %s" % (self.net.get_absolute_name_prefix() + name, exc)) \
                    from None


class _LoopStep:
    """
    One step of the loop body: the in-loop layers built in a fresh ``loop`` network on the previous step's state
    (``get_loop`` is the get_layer of that construction), and the state for the next step (``next_state``).
    """

    def __init__(self, build, state):
        self.build = build
        self.state = state
        self.i = state.i
        self.extras = {}
        for (x, k), v in state.extra.items():
            self.extras.setdefault(x, {})[k] = v
        self.ended, self.lens = state.end.get("ended"), state.end.get("lens")
        rec, beam, k_beam = build.rec, build.beam, build.k_beam
        self.beam_in = None
        self.beam_out = None  # the beam of this step's choice (set once the layers are built)
        loop = _SubNet(build.net, rec.name, build.scope, inside_rec_time_dim=build.time_dim)
        loop.parent_layer = rec
        if beam is not None:
            self.beam_in = SearchBeam(k_beam, name="%s/prev:%s" % (rec.get_absolute_name(), build.tpl.choice_names[0]))
            self.beam_in.beam_scores = state.search["scores"]
            self.beam_in.active_size = tf.where(self.i > 0, k_beam, 1)
        loop.rec_step_info = RecStepInfo(self.i, build.seq_len, build.time_dim,
                                         prev_end_flag=self.ended if beam is not None else None,
                                         prev_seq_lens=self.lens, prev_beam=self.beam_in)
        build.loop_net = loop
        self.loop = loop
        self.cache = {}
        self.prev_layers = {}
        self.unit = {}
        for x in build.in_loop:
            desc = dict(build.unit[x])
            if x in self.extras or x in build.prev_names:
                desc["rec_previous_layer"] = self.get_prev(x)
            self.unit[x] = desc

    def get_prev(self, x):
        if x not in self.prev_layers:
            out = self.build.tpl.templates[x].output.copy_template(name="prev:%s" % x)
            out.beam = self.beam_in if x in self.build.has_beam else None
            out.placeholder = self.state.prev.get(x)
            self.prev_layers[x] = _PrevLayer("prev:" + x, self.loop, out, self.extras.get(x, {}))
        return self.prev_layers[x]

    def get_loop(self, ref):
        """The get_layer of the construction inside the loop body."""
        if ref in self.cache:
            return self.cache[ref]
        build, loop, i, unit = self.build, self.loop, self.i, self.unit
        r = parse_layer_ref(ref)
        if r.canonical != ref:  # e.g. "layer:x" -> "x"
            return self.get_loop(r.canonical)
        # a sub-layer "B/S" of a layer B (flattened subnetwork layers "S/X" are unit layers themselves)
        sub_of = r.base_name if r.kind == "layer" and r.sub_name is not None and ref not in build.unit else None
        if ref in build.prev_full:  # prev: of a moved-out layer
            res = build.frame_layer(ref, build.prev_full[ref].output, i, loop)
        elif r.kind == "prev":
            return self.get_prev(r.name)
        elif r.kind == "step":
            res = InternalLayer(name=":i", network=loop, output=Data(name=":i", dims=(), dtype="int32", placeholder=i))
        elif r.kind == "layer" and ref in unit:
            return loop.construct_layer(unit, ref, get_layer=self.get_loop)
        elif sub_of in build.full:  # sub-layer of a moved-out layer: its frame
            sub = build.get_sub_layer(lambda x: build.full[x], ref)
            res = self._frame_or_layer(ref, sub)
        elif sub_of in unit:  # e.g. split/0
            res = build.get_sub_layer(self.get_loop, ref)
        elif r.kind == "layer" and ref in build.full:  # moved out: its frame (or itself, without the loop's time)
            res = self._frame_or_layer(ref, build.full[ref])
        elif ref in build.pretiled:
            res = build.pretiled[ref]
        else:
            layer = build.outer(ref)
            res = layer if r.kind == "base" else self._frame_or_layer(ref, layer)
        self.cache[ref] = res
        return res

    def _frame_or_layer(self, ref, layer):
        """The frame of layer at this step, or the layer itself where it has not the loop's time axis."""
        if _frame_template(layer.output, self.build.time_dim) is None:
            return layer
        return self.build.frame_layer(ref, layer.output, self.i, self.loop)

    # everything that goes to the next step is brought to the beam of this step's choice
    def _on_beam(self, x, data):
        return data.copy_select_beam(self.beam_out) if self.build.beam is not None and x in self.build.has_beam \
            else data

    def _state_on_beam(self, x, value):
        if self.build.beam is None or x not in self.build.has_beam:
            return value
        return select_beam_tensor(value, self.loop.layers[x].output.beam, self.beam_out)

    def _old_on_beam(self, x, value):
        if self.build.beam is None or x not in self.build.has_beam:
            return value
        return select_beam_tensor(value, self.beam_in, self.beam_out)

    def _as_step_template(self, x):
        return as_template_layout(self._on_beam(x, self.loop.layers[x].output), self.build.tpl.templates[x].output,
                                  "rec layer %r: sub-layer %r in the loop" % (self.build.rec.name, x))

    def next_state(self):
        build, loop, state, i = self.build, self.loop, self.state, self.i
        for x in build.in_loop:
            self.get_loop(x)
        if build.beam is not None:
            self.beam_out = loop.layers[build.tpl.choice_names[0]].output.beam
        new_prev = {x: build.gate(loop, x, self._as_step_template(x), self._old_on_beam(x, state.prev[x]))
                    for x in build.prev_names}
        new_extra = {(x, k): build.gate(loop, x, self._state_on_beam(x, loop.layers[x].rec_vars_outputs[k]),
                                        self._old_on_beam(x, self.extras[x][k])) for x, k in build.extra_keys}
        new_acc = {x: ta.write(i, self._as_step_template(x)) for x, ta in state.acc.items()}
        new_logits = {x: ta.write(i, _logits_or_none(loop.layers[x], build.no_logits))
                      for x, ta in state.logits.items()}
        new_end = self._next_end() if build.track_end else {}
        new_search = {}
        if build.beam is not None:
            new_search = {"scores": self.beam_out.beam_scores,
                          "src_beams": state.search["src_beams"].write(i, self._src_beams_of_step())}
        return LoopState(i + 1, new_prev, new_extra, new_acc, new_logits, new_end, new_search)

    def _src_beams_of_step(self):
        """[B, K]: for each hypothesis of this step's beam, the one of the previous step it extends (through the
        beams of the choices in between, where several choices in the step chose one after the other)."""
        beam = self.beam_out
        src = beam.src_beams
        while beam.dependency is not None and beam.dependency is not self.beam_in:
            beam = beam.dependency
            src = tf.gather(beam.src_beams, src, batch_dims=1)
        return src

    def _next_end(self):
        """A sequence ends with the first frame where 'end' is True."""
        build, loop, i = self.build, self.loop, self.i
        beam, dynamic, k_beam = build.beam, build.dynamic, build.k_beam
        ended, lens = self.ended, self.lens
        if beam is not None:
            ended, lens = (select_beam_tensor(v, self.beam_in, self.beam_out) for v in (ended, lens))
        if "end" in loop.layers and dynamic:  # (a loop over known lengths ignores it, as the original)
            end = loop.layers["end"].output
            if beam is not None and (end.beam is not None or end.have_batch_axis()):
                end = end.copy_select_beam(self.beam_out)
            end = end.copy_as_batch_major().placeholder if end.have_batch_axis() else end.placeholder
            end = tf.reshape(end, [-1]) if end.shape.rank != 1 else end
        else:
            end = tf.zeros_like(ended)
        if beam is not None:
            end = tf.broadcast_to(end, tf.shape(ended))
            if not dynamic:  # a loop over known lengths: the frame at the length ends the hypothesis
                end = tf.logical_or(end, i >= tile_batch(build.seq_len, k_beam))
        # (without search the end frame is part of the sequence; under search only with include_eos)
        last = i + 1 if beam is None or build.tpl.include_eos else i
        return {"ended": tf.logical_or(ended, end),
                "lens": tf.where(ended, lens, tf.where(end, tf.fill(tf.shape(lens), last),
                                                       tf.fill(tf.shape(lens), i + 1)))}


def as_template_layout(data, template, what):
    """
    data's placeholder in the layout of template (its dims' order; the static dims the template knows). Axes that
    have no counterpart in the template (tags of their own, e.g. a dim created anew in each step) are taken by
    position, where their static sizes agree (else an error naming ``what``).
    """
    x = data.placeholder
    if data.dims != template.dims and data.batch_ndim == template.batch_ndim:
        mapping = data.find_matching_axes(template)
        if all(i in mapping or d.dimension == 1 for i, d in enumerate(data.dims)):
            x = data.copy_compatible_to(template).placeholder
        elif not x.shape.is_compatible_with(template.batch_shape):
            raise ValueError("%s: %s does not match its per-step template %s (axes without counterpart: %s)" % (
                what, data.short_repr(), template.short_repr(),
                ", ".join(d.short_repr() for i, d in enumerate(data.dims) if i not in mapping)))
    if (x.shape.rank == template.batch_ndim and x.shape.is_compatible_with(template.batch_shape)
            and x.shape.merge_with(template.batch_shape) != x.shape):
        x = tf.identity(x)
        x.set_shape(template.batch_shape)  # static dims the template knows
    return x


def _backtrack_indices(src_beams):
    """
    src_beams [T, B, K] (per step, the hypothesis of the previous step each one extends) -> [T, B, K]: for each
    final hypothesis k, the index of its ancestor at step t (the last step: k itself).
    """
    k = tf.shape(src_beams)[2]
    last = tf.tile(tf.range(k)[None, :], [tf.shape(src_beams)[1], 1])

    def step(idx_t, src_t):  # idx of step t -> idx of step t-1
        return tf.gather(src_t, idx_t, batch_dims=1)

    earlier = tf.scan(step, src_beams[1:][::-1], initializer=last)  # steps T-2 ... 0
    return tf.concat([earlier[::-1], last[None]], axis=0)


def _logits_or_none(layer, no_logits):
    """The logits of a loss layer in the loop for its TensorArray; a layer without them: recorded in no_logits."""
    oba = getattr(layer, "output_before_activation", None)
    if oba is None:
        no_logits.add(layer.name)
        return tf.zeros([0])
    return oba.data.placeholder


def _apply_backtrack(x, idx, k):
    """x [T, B*K, ...] as accumulated per step -> the full hypotheses [T, B*K, ...] of the final beam."""
    shape = tf.shape(x)
    x = tf.reshape(x, tf.concat([[shape[0], shape[1] // k, k], shape[2:]], 0))
    x = tf.gather(x, idx, axis=2, batch_dims=2)
    return tf.reshape(x, shape)


class _BuildContext:
    """Where TF ops are being created (graph, v1 control flow context, name scope), to create more there later."""

    def __init__(self, graph, flow_context, name_scope):
        self.graph, self.flow_context, self.name_scope = graph, flow_context, name_scope
        self._stack = []

    @classmethod
    def capture(cls):
        graph = tf1.get_default_graph()
        return cls(graph, graph._get_control_flow_context(), graph.get_name_scope())  # noqa: SLF001 (no public API)

    def __enter__(self):
        stack = contextlib.ExitStack()
        stack.enter_context(self.graph.as_default())
        stack.enter_context(self.graph.control_dependencies(None))  # (also leaves the current control flow context)
        stack.enter_context(self.graph.name_scope(self.name_scope + "/" if self.name_scope else ""))
        old = self.graph._get_control_flow_context()  # noqa: SLF001
        self.graph._set_control_flow_context(self.flow_context)  # noqa: SLF001
        stack.callback(self.graph._set_control_flow_context, old)  # noqa: SLF001
        self._stack.append(stack)

    def __exit__(self, *exc):
        return self._stack.pop().__exit__(*exc)


class _LazyLayers(collections.abc.Mapping):
    """Name -> layer; a layer added with ``add_lazy`` is built on its first lookup (its loss known before)."""

    def __init__(self):
        self._layers = {}
        self._builders = {}  # name -> (build, loss)

    def __setitem__(self, name, layer):
        self._layers[name] = layer

    def add_lazy(self, name, build, loss):
        self._builders[name] = (build, loss)

    def is_lazy(self, name):
        return name in self._builders

    def loss_of(self, name):
        return self._builders[name][1] if name in self._builders else self._layers[name].loss

    def __getitem__(self, name):
        if name in self._builders:
            self._layers[name] = self._builders.pop(name)[0]()
        return self._layers[name]

    def __iter__(self):
        return iter(list(self._layers) + list(self._builders))

    def __len__(self):
        return len(self._layers) + len(self._builders)

    def __contains__(self, name):
        return name in self._layers or name in self._builders


class _AccumulatedLayer(InternalLayer):
    """A sub-layer's output over all frames (time-major), as seen from outside the rec layer."""

    def __init__(self, name, network, output, step_layer):
        super().__init__(name=name, network=network, output=output, loss=step_layer.loss,
                         target=step_layer.target)
        self.step_layer = step_layer
        self.layer_class = step_layer.layer_class
        self.output_before_activation = None
        oba = getattr(step_layer, "output_before_activation", None)
        if oba is not None and oba.data.dims == step_layer.output.dims and step_layer.output.have_time_axis():
            self.output_before_activation = oba  # moved-out layer: same layout as the output

    def set_logits(self, logits):
        from ..basic import OutputWithActivation

        oba = self.step_layer.output_before_activation
        self.output_before_activation = OutputWithActivation(self.output.copy(placeholder=logits), oba.act_name)

    def get_last_hidden_state(self, key):
        return self.step_layer.get_last_hidden_state(key)
