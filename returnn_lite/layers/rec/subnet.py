"""
The per-step subnetwork of a rec layer (``"unit": {...}``).

1. Templates (once, in ``make_template``): every needed sub-layer's per-step output template, built with
   ``get_out_data_from_opts`` in a template network. ``prev:X`` resolves to X's template; where X is still being
   built (a recurrence), the referring layer is first built without that source (a guess), and after all
   templates exist those layers are derived once more with the full information.
2. Layers whose output over the whole sequence is, frame by frame, what the loop computes (``_classify``; e.g.
   in training a choice is its target and ``prev:`` of it the target shifted by one frame) are built once over the
   whole sequence ("moved out"), by the same construct_layer code path (``optimize_move_layers_out``).
3. The rest is built inside one tf.while_loop body; outputs are accumulated in TensorArrays and are reachable
   from outside as ``rec_layer/sub_layer``; losses of sub-layers are registered on the accumulated outputs.
"""

from __future__ import annotations

import collections

import tensorflow as tf

from ...data import Data, Dim, SearchBeam, batch_dim
from ...errors import LayerNotFound, LayerOptionError, NetworkConstructionDependencyLoopException
from ...layer_ref import is_layer_target, parse_layer_ref, target_ref
from ...network import assign_output_beam
from ...subnetwork import Subnetwork
from ...losses.holder import LossHolder
from ...util import as_list
from ..base import InternalLayer, LayerBase, apply_out_dim, get_layer_class, last_hidden_state
from ..search import select_beam_tensor, tile_batch

tf1 = tf.compat.v1


class _NeedPrev(NetworkConstructionDependencyLoopException):
    """prev:X was asked for while X's template is still being built."""

    def __init__(self, name, requester):  # noqa (no super init: no message formatting needed)
        Exception.__init__(self, "template of %r not ready (needed by %r)" % (name, requester))
        self.layer_name = name
        self.requester = requester


class RecStepInfo:
    """Per-step info inside the loop (``network.rec_step_info``): ``step`` is the int32 frame index."""

    def __init__(self, step, seq_lens, time_dim, prev_end_flag=None, prev_seq_lens=None):
        self.step = step
        self.seq_lens = seq_lens
        self.time_dim = time_dim
        self.prev_end_flag = prev_end_flag  # under search: [B*beam] of the hypotheses before this step's choice
        self.prev_seq_lens = prev_seq_lens

    def get_end_flag(self, target_search_choices=None):
        return tf.logical_not(self.step < self.seq_lens)


def _SubNet(parent_net, rec_name, scope_prefix, **flags):
    """Child network of a rec layer: layer names 'rec/sub', params under 'rec/rec/sub/...'."""
    # eval_flag False: losses are registered on the accumulated outputs by the rec layer
    return Subnetwork(parent_net, rec_name, name_scope_prefix=scope_prefix, eval_flag=False, **flags)


class _TemplateLayer(LayerBase):
    """A sub-layer's per-step template (no tensors)."""

    def __init__(self, name, network, output, layer_class, kwargs):
        super().__init__(name=name, network=network, output=output)
        self.layer_class = layer_class.layer_class
        self.cls = layer_class
        self.kwargs = kwargs
        self.rec_vars_outputs = {}

    def get_last_hidden_state(self, key):
        return None


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


def _outside_refs(network, rec_name, unit):
    """Sub-layers of the unit that layers of the outer network refer to ("rec/sub", get_rec_accumulated, ...)."""
    res = set()

    def visit(v):
        if isinstance(v, str):
            r = parse_layer_ref(v) if v.startswith(rec_name) or ":" in v else None  # (cheap pre-check: any string)
            if r is not None and r.kind == "base":
                r = parse_layer_ref(r.name)
            if r is not None and r.kind == "layer" and r.base_name == rec_name and r.sub_name in unit:
                res.add(r.sub_name)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            if v.get("rec_layer") == rec_name or v.get("from") in (rec_name, [rec_name]):
                for k in ("sub_layer", "sub_layer_name"):
                    if v.get(k) in unit:
                        res.add(v[k])
            for x in v.values():
                visit(x)

    net = network
    while net is not None:
        visit(getattr(net, "_net_dict", None) or {})
        net = net.parent_net
    return res


def flatten_masked_computation(unit):
    """
    masked_computation layers M in a rec unit -> ``M/unit`` (the unit layer, on M's sources) plus M = selection of
    ``M/unit`` where the mask is True, else prev:M. :return: (unit dict, {"M/unit": mask layer name})
    """
    if not any(isinstance(d, dict) and d.get("class") == "masked_computation" for d in unit.values()):
        return unit, {}
    res, gates = {}, {}
    for name, desc in unit.items():
        if not (isinstance(desc, dict) and desc.get("class") == "masked_computation"):
            res[name] = desc
            continue
        desc = dict(desc)
        sub = dict(desc.pop("unit"))
        mask = desc.pop("mask")
        sources = desc.pop("from", "data")
        if desc.pop("masked_from", None) is not None:
            raise NotImplementedError("masked_computation %r: masked_from" % name)
        if sub.get("from", "data") in ("data", ["data"]):
            sub["from"] = sources
        res[name + "/unit"] = sub
        gates[name + "/unit"] = mask
        desc.pop("class")
        res[name] = dict(desc, **{"class": "_masked_select", "from": name + "/unit", "mask": mask})
    return res, gates


class RecSubnetTemplate:
    """Result of the template phase: time dim, per-step templates, dependencies."""

    def __init__(self, rec_name, network, unit, sources, target, input_data, time_dim):
        self.rec_name = rec_name
        self.network = network
        self.unit = unit
        self.sources = sources
        self.target = target
        self.input_data = input_data
        self.time_dim = time_dim
        self.templates = {}
        self.deps = {}  # name -> set of refs (strings as in the dict, e.g. "prev:x", "base:y", ":i")
        self.net = None

    def get_output_template(self, name):
        out = self.templates["output"].output
        res = out.copy_template_adding_time_dim(0, self.out_time_dim, name="%s_output" % name)
        return res


class RecTemplateBuilder:
    """
    The template phase of a rec unit, as named passes (``run``):

    1. ``setup_time_axes``: the loop's time axis (input, target or a new one ended by 'end'), the output's;
    2. ``build_needed``: the template of every needed sub-layer (and of every layer referenced via prev:),
       guessing a prev: template that is still being built;
    3. ``refine``: derive all templates again from the previous pass until nothing changes (guesses resolved,
       search beams settled);
    4. ``find_search_beam``: the search beam of the unit (one choice with search), if any.
    """

    def __init__(self, d, network, get_layer, name):
        from ..structure import flatten_subnetworks_in_unit

        self.name = name
        self.d = d
        self.network = network
        self.get_layer = get_layer
        unit, self.gates = flatten_masked_computation(d["unit"])
        self.unit = flatten_subnetworks_in_unit(unit)  # subnetwork layers in the unit: prev: on their sub-layers
        if "output" not in self.unit:
            raise LayerNotFound("rec layer %r: its unit has no 'output' sub-layer (sub-layers: %s)" % (
                self.name, sorted(self.unit)), "output", network)
        self.searching = _searching_choices(self.unit, network)
        self.building = []  # names being built (innermost last)
        self.guess_only = set()  # prev: targets that cannot be built before the requesting layer
        self.subst = set()  # prev: targets replaced by a stand-in template in this pass
        self.guessed = set()  # names built with a guessed prev: template
        self.prev_fallback = {}  # templates of the previous pass
        self.cache = {}
        self.tpl = None
        self.net = None

    def run(self):
        self.setup_time_axes()
        self.build_needed()
        self.refine()
        self.find_search_beam()
        return self.tpl

    # ---- pass 1 ----
    def setup_time_axes(self):
        d, network, unit, name = self.d, self.network, self.unit, self.name
        sources = d.get("sources") or []
        input_data = None
        time_dim = None
        if sources:
            from ..base import concat_sources_template

            input_data = concat_sources_template(sources, name="%s_input" % name)
            if input_data.have_time_axis():
                time_dim = input_data.get_time_dim_tag()
        axis = d.get("axis")
        if axis is not None:  # the loop's time axis given as a Dim (with 'end' and no input: the new axis)
            if input_data is not None and axis not in input_data.dims:
                raise ValueError("rec layer %r: axis %s is not an axis of the input %s" % (
                    name, axis, input_data.short_repr()))
            time_dim = axis if input_data is not None or "end" not in unit else None
        target = d.get("size_target") or d.get("target")
        target = as_list(target)[0] if target else None
        cheating = any(unit[c].get("cheating") for c in self.searching)
        if time_dim is None and target and (not self.searching or cheating):
            tdata = network.get_extern_data(target) if not is_layer_target(target) else self.get_layer(
                target_ref(target)).output
            time_dim = tdata.get_time_dim_tag()
        dynamic_end = False
        out_time_dim = None
        if time_dim is None:
            if "end" not in unit:
                raise ValueError("rec layer %r: without input time axis and without target, the unit needs an 'end' "
                                 "layer" % name)
            if d.get("max_seq_len") is None:
                raise ValueError("rec layer %r: a loop ended by its 'end' layer needs max_seq_len" % name)
            time_dim = out_time_dim = axis if axis is not None else Dim(None, kind=Dim.Types.Spatial,
                                                                         description="%s:rec-time" % name)
            dynamic_end = True
        elif self.searching and "end" in unit and not cheating:
            dynamic_end = True  # a search over input frames still ends each hypothesis by its 'end' layer
            out_time_dim = Dim(None, kind=Dim.Types.Spatial, description="%s:rec-time" % name)
        tpl = RecSubnetTemplate(name, network, unit, sources, target, input_data, time_dim)
        tpl.dynamic_end = dynamic_end
        tpl.gates = self.gates
        tpl.include_eos = bool(d.get("include_eos"))
        tpl.out_time_dim = out_time_dim  # set in find_search_beam where None
        scope = network.get_absolute_name_scope_prefix() + name + "/rec/"
        self.net = _SubNet(network, name, scope, inside_rec_time_dim=time_dim)
        self.net.template_beams = {}  # one search beam per choice layer, the same in every template pass
        tpl.net = self.net
        self.tpl = tpl
        outside_refs = _outside_refs(network, name, unit)
        self.needed = ["output"] + [n for n in sorted(unit) if n != "output" and (
            n == "end" or unit[n].get("is_output_layer") or unit[n].get("need_last")
            or (unit[n].get("loss") and network.eval_flag) or n in outside_refs)]
        tpl.needed = set(self.needed)

    # ---- pass 2 ----
    def build_needed(self):
        tpl = self.tpl
        for x in self.needed:
            self.build(x)
        while True:  # every layer referenced via prev: is computed in the loop
            missing = sorted({r[len("prev:"):] for refs in list(tpl.deps.values()) for r in refs
                              if r.startswith("prev:") and r[len("prev:"):] not in tpl.templates})
            if not missing:
                break
            for x in missing:
                if x not in self.unit:  # (a typo in a prev: reference; not a layer outside: prev: is the unit's)
                    users = sorted(k for k, refs in tpl.deps.items() if "prev:" + x in refs)
                    raise ValueError("layer %r: source 'prev:%s': there is no layer %r in the rec unit of %r "
                                     "(its layers: %s)" % ("%s/%s" % (self.name, users[0]) if users else self.name,
                                                           x, x, self.name, ", ".join(sorted(self.unit))))
                self.build(x)

    # ---- pass 3 ----
    def refine(self):
        tpl = self.tpl
        changed = False
        for _ in range(5):  # derive once more where a prev: template was guessed, until nothing changes
            if not self.guessed and not changed:
                break
            earlier = dict(tpl.templates)
            self.prev_fallback = earlier
            self.guess_only.clear()
            self.subst.clear()
            self.guessed.clear()
            tpl.templates.clear()
            tpl.deps.clear()
            self.net.layers.clear()
            self.cache.clear()
            self.build_needed()
            changed = [x for x in tpl.templates if x not in earlier or not _same_template(
                earlier[x].output, tpl.templates[x].output)]
            if not changed:
                break

    # ---- pass 4 ----
    def find_search_beam(self):
        tpl, name = self.tpl, self.name
        tpl.beam = None
        beams = {}
        for x, t in tpl.templates.items():
            if t.output.beam is not None:
                beams.setdefault(id(t.output.beam), (t.output.beam, x))
        if len(beams) > 1:
            raise NotImplementedError("rec layer %r: several search beams in one unit (%s) are not supported" % (
                name, ", ".join(sorted(x for _, x in beams.values()))))
        if beams:
            tpl.beam = next(iter(beams.values()))[0]
            tpl.choice_names = [x for x in self.searching if x in tpl.templates]
            if not tpl.choice_names:
                raise NotImplementedError("rec layer %r: a search beam without a choice layer in the unit" % name)
        if tpl.out_time_dim is None:  # under search, each hypothesis has its own length: its own time axis
            tpl.out_time_dim = tpl.time_dim if tpl.beam is None else Dim(
                None, kind=Dim.Types.Spatial, description="%s:rec-time-beam" % name)

    # ---- building one template ----
    def build(self, x):
        tpl, net = self.tpl, self.net
        if x in tpl.templates:
            return tpl.templates[x]
        desc = dict(self.unit[x])
        self.building.append(x)
        tpl.deps[x] = set()
        try:
            while True:
                try:
                    layer = net.construct_layer({x: desc}, x, get_layer=self.resolve, add_layer=self._add_template)
                    break
                except _NeedPrev as exc:
                    if exc.requester != x:
                        raise
                    ref, srcs = "prev:" + exc.layer_name, as_list(desc.get("from", "data"))
                    if exc.layer_name not in self.guess_only:
                        self.guess_only.add(exc.layer_name)  # retry with a guess for it
                    elif ref in srcs and len(srcs) > 1:  # first guess: the layer without that source
                        desc["from"] = [s for s in srcs if s != ref]
                        self.guessed.add(x)
                    elif exc.layer_name not in self.subst:
                        self.subst.add(exc.layer_name)  # else a [B, n_out or 1] stand-in
                    else:
                        raise
                    net.layers.pop(x, None)
                except NetworkConstructionDependencyLoopException:
                    raise
                except Exception:  # noqa: BLE001 (re-raised unless a guessed input is to blame)
                    if not self._built_on_guess(x):
                        raise
                    # e.g. a reduce over axis 't' of a [B,F] stand-in of prev:att_weights: x gets a stand-in
                    # itself; the next pass derives it again from the real previous templates
                    net.layers.pop(x, None)
                    layer = self._stand_in(x, desc)
                    break
        finally:
            self.building.pop()
        tpl.templates[x] = layer
        return layer

    def _built_on_guess(self, x):
        """Whether x's inputs include a guessed prev: template (directly or via an input built on one)."""
        if x in self.guessed:
            return True
        for ref in self.tpl.deps.get(x, ()):
            r = parse_layer_ref(ref)
            if r.kind == "layer" and r.name in self.unit and r.name in self.tpl.templates and r.name != x \
                    and self.tpl.templates[r.name].output.name.endswith("_guess_output"):
                return True
        return False

    def _stand_in(self, x, desc):
        """A [B, n_out or 1] template for x (marked guessed: refined in the next pass)."""
        self.guessed.add(x)
        n_out = desc.get("n_out")
        out = Data(name="%s_guess_output" % x, dims=(batch_dim, Dim(
            n_out if isinstance(n_out, int) else 1, kind=Dim.Types.Feature, description="%s:guess" % x)))
        layer = _TemplateLayer(x, self.net, out, get_layer_class(desc.get("class", "copy")), dict(desc, name=x))
        self.net.layers[x] = layer
        return layer

    def _add_template(self, name, layer_class, **kwargs):
        out = layer_class.get_out_data_from_opts(name=name, network=self.net, **kwargs)
        out = apply_out_dim(layer_class, out, kwargs, name)  # the option out_dim of every layer
        assign_output_beam(layer_class, out, kwargs)
        layer = _TemplateLayer(name, self.net, out, layer_class, kwargs)
        self.net.layers[name] = layer
        return layer

    def resolve(self, ref):
        """A reference inside the unit -> its template layer (``get_layer`` of the template network)."""
        if ref in self.cache:
            return self.cache[ref]
        tpl, net, unit, name = self.tpl, self.net, self.unit, self.name
        r = parse_layer_ref(ref)
        if r.canonical != ref:  # e.g. "layer:x": resolved (and recorded as a dependency) as "x"
            return self.resolve(r.canonical)
        cur = self.building[-1] if self.building else None
        if cur is not None:
            tpl.deps.setdefault(cur, set()).add(ref)
        if r.kind == "prev":
            return self._resolve_prev(r.name, cur)
        if r.kind == "step":
            return InternalLayer(name=":i", network=net, output=Data(name=":i", dims=(), dtype="int32"))
        if r.kind == "data" and r.name in (None, "source"):  # the loop's input frame
            if tpl.input_data is None:
                raise LayerNotFound("rec layer %r has no input ('from'), so 'data:source' is undefined" % name,
                                    ref, net)
            res = InternalLayer(name="data:source", network=net, output=_frame_template(tpl.input_data, tpl.time_dim)
                                or tpl.input_data.copy_template())
        elif r.kind == "data":
            res = self._outer_frame_layer(ref)
        elif r.kind == "base":  # the outer layer as a whole (e.g. the encoder, with its time axis)
            res = self.get_layer(r.name)
        elif r.kind == "layer" and ref in unit:
            return self.build(ref)
        elif r.kind == "layer" and r.sub_name is not None and r.base_name in unit:  # a sub-layer, e.g. split/0
            parent = self.resolve(r.base_name)
            sub = parent.cls.get_sub_layer_out_data_from_opts(r.sub_name, dict(parent.kwargs, name=r.base_name,
                                                                               network=net))
            if sub is None:
                raise LayerNotFound("rec layer %r: layer %r has no sub-layer %r" % (name, r.base_name, r.sub_name),
                                    ref, net)
            return InternalLayer(name=ref, network=net, output=sub[0].copy_template(name="%s_output" % ref))
        else:
            raise LayerNotFound("rec layer %r: sub-layer %r not found in its unit (sub-layers: %s)" % (
                name, ref, sorted(unit)), ref, net)
        self.cache[ref] = res
        return res

    def _resolve_prev(self, x, cur):
        tpl, unit = self.tpl, self.unit
        if x not in unit:
            raise LayerNotFound("rec layer %r: 'prev:%s' refers to sub-layer %r which is not in the unit "
                                "(sub-layers: %s)" % (self.name, x, x, sorted(unit)), x, self.net)
        if x in tpl.templates:
            return tpl.templates[x]
        if x in self.prev_fallback:  # later passes: the template of the previous pass
            return self.prev_fallback[x]
        if x in self.building or x in self.guess_only:  # a guess, derived again once all templates exist
            init = unit[x].get("initial_output")
            if isinstance(init, str) and init.startswith("base:"):  # the initial output's template
                self.guessed.add(cur)
                return InternalLayer(name="prev:" + x, network=self.net, output=self.get_layer(
                    init[len("base:"):]).output.copy_template(name="%s_guess" % x))
            chained = self._guess_via_choice(x)
            if chained is not None:  # e.g. an eval/copy of the choice: the target's (sparse) frame
                self.guessed.add(cur)
                return InternalLayer(name="prev:" + x, network=self.net,
                                     output=chained.copy_template(name="%s_guess" % x))
            n_out = unit[x].get("n_out")
            if not isinstance(n_out, int) and x not in self.subst:
                raise _NeedPrev(x, cur)
            self.guessed.add(cur)
            return InternalLayer(name="prev:" + x, network=self.net, output=Data(
                name="%s_guess" % x, dims=(batch_dim, Dim(n_out if isinstance(n_out, int) else 1,
                                                          kind=Dim.Types.Feature, description="%s:guess" % x))))
        try:
            return self.build(x)
        except NetworkConstructionDependencyLoopException as exc:  # x needs cur: a recurrence via prev:
            if isinstance(exc, _NeedPrev) and exc.requester != cur:
                raise
            raise _NeedPrev(x, cur) from exc

    def _guess_via_choice(self, x):
        """
        The template of ``x`` when ``x`` is a chain of copy / eval (without out_type) / dropout layers (one source
        each) that ends in a choice on a data target: the target's frame (sparse), which is what the chain passes
        through. None where ``x`` is not such a chain.
        """
        seen = set()
        while x in self.unit and x not in seen:
            seen.add(x)
            d = self.unit[x]
            if not isinstance(d, dict):
                return None
            cls = d.get("class")
            if cls == "choice":
                target = d.get("target")
                if (not isinstance(target, str) or target.startswith("layer:")
                        or d.get("input_type", "prob") == "regression"):
                    return None
                if len(seen) == 1:  # x is the choice itself: its own (usual) handling
                    return None
                try:  # not via resolve: no dependency on the target is recorded for the requester
                    return self._outer_frame_layer("data:" + target).output
                except Exception:  # noqa: BLE001 (only a guess: the generic guess applies)
                    return None
            if cls not in ("copy", "eval", "dropout") or (cls == "eval" and d.get("out_type") is not None):
                return None
            src = d.get("from", "data")
            src = src if isinstance(src, (list, tuple)) else [src]
            if len(src) != 1 or not isinstance(src[0], str) or ":" in src[0]:
                return None
            x = src[0]
        return None

    def _outer_frame_layer(self, ref):
        layer = self.get_layer(ref)
        time_dim = self.tpl.time_dim
        if parse_layer_ref(ref).kind == "data":
            layer = _extern_data_on_loop_time(layer, time_dim, self.net)
        frame = _frame_template(layer.output, time_dim)
        if frame is None:
            return layer
        return InternalLayer(name=ref, network=self.net, output=frame)


class LoopState(collections.namedtuple("LoopState", ["i", "prev", "extra", "acc", "logits", "end", "search"])):
    """
    The variables of the rec loop, by name: ``i`` the step; ``prev`` sub-layer -> its output of the previous step;
    ``extra`` (sub-layer, state name) -> its state (e.g. an LSTM's c and h); ``acc`` sub-layer -> TensorArray of
    its outputs; ``logits`` sub-layer -> TensorArray of its logits (for its loss); ``end`` {"ended", "lens"} per
    sequence or hypothesis where the loop tracks ends; ``search`` {"scores" [B, beam], "src_beams" TensorArray}
    under search.
    """

    __slots__ = ()


class RecSubnetLoop:
    """Builds a rec layer with a subnetwork unit (see module doc)."""

    # ---- template phase ----
    @classmethod
    def make_template(cls, d, network, get_layer, name):
        return RecTemplateBuilder(d, network, get_layer, name).run()

    # ---- real construction ----
    def __init__(self, rec_layer, unit, max_seq_len=None, optimize_move_layers_out=None, template=None):
        self.rec_layer = rec_layer
        self.unit = template.unit
        self.tpl = template
        self.max_seq_len = max_seq_len
        self.move_out = True if optimize_move_layers_out is None else optimize_move_layers_out
        self.time_dim = template.time_dim
        self.outside_net = None
        self.loop_net = None
        self.accumulated = {}
        self.step_templates = {}

    def get_sub_networks(self):
        return [n for n in (self.outside_net, self.loop_net) if n is not None]

    def _classify(self):
        """
        (names computed inside the loop, names moved out). A sub-layer moves out only where its output over the
        whole sequence is, frame by frame, what the loop computes (docs/design.md, "move out"):

        - its class is frame-wise (not ``recurrent``, no per-step state), or says for these options that it computes
          the same over the whole sequence (``rec_move_out_ok``, e.g. causal self_attention, positional_encoding);
        - it does not use ``:i``, and every ``prev:X`` it uses is of a moved-out X (the shifted sequence of X, the
          initial output at frame 0) that no masked_computation gates (there prev: is the last unmasked frame);
        - everything it depends on moves out; a choice without search depends only on its target (its value);
        - it is not on a search beam and is not the ``end`` of a loop that ends by it (dynamic length or search);
        - in a loop of unknown length (ended by ``end``), it neither uses ``prev:`` nor is used via ``prev:``;
        - used via ``prev:``, it has no per-step state (``prev:X`` carries X's state too).
        """
        tpl = self.tpl
        names = list(tpl.templates)
        if not self.move_out:
            return names, []
        deps = {x: sorted(self._value_deps(x)) for x in names}  # (sorted: the same order in every process)
        gated = {x for x in names if any(x == p or x.startswith(p + "/") for p in tpl.gates)}
        loop_ends = tpl.dynamic_end or tpl.beam is not None
        # a loop of unknown length (ended by 'end'): no sequence to shift for prev:, those stay in the loop
        used_via_prev = {r[len("prev:"):] for x in names for r in deps[x] if r.startswith("prev:")}
        # a layer with per-step state used via prev: stays in the loop (prev:X also carries X's state, e.g. for
        # get_last_hidden_state; the shifted sequence does not)
        prev_referenced = used_via_prev if tpl.dynamic_end else {
            x for x in used_via_prev
            if tpl.templates[x].cls.get_rec_initial_extra_outputs.__func__ is not _BASE_EXTRA_OUTPUTS}
        varies = {}
        in_loop = {}

        def frame_varying(x):  # its full output has the loop's time axis (else a stateful class can not move out)
            if x not in varies:
                varies[x] = False  # (cycles only via prev:)
                varies[x] = any(r.startswith("prev:") or r == ":i" or (r in tpl.templates and frame_varying(r))
                                or (r.startswith("data") and self._outer_has_loop_time(r)) for r in deps[x])
            return varies[x]

        def frame_wise(x):
            t = tpl.templates[x]
            ok = getattr(t.cls, "rec_move_out_ok", None)
            if ok is not None:
                return ok(network=t.network, **{k: v for k, v in t.kwargs.items() if k not in ("name", "network")}) \
                    and frame_varying(x)
            return not t.cls.recurrent and t.cls.get_rec_initial_extra_outputs.__func__ is _BASE_EXTRA_OUTPUTS

        def dep(x):
            if x in in_loop:
                return in_loop[x]
            in_loop[x] = True  # (cycles only via prev:, which are in the loop anyway)
            refs = deps[x]
            res = ((x == "end" and loop_ends) or tpl.templates[x].output.beam is not None or not frame_wise(x)
                   or ":i" in refs or x in prev_referenced
                   or any(dep(r[len("prev:"):]) or r[len("prev:"):] in gated or tpl.dynamic_end
                          for r in refs if r.startswith("prev:"))
                   or any(dep(r) for r in refs if r in tpl.templates))
            in_loop[x] = res
            return res

        for x in names:
            dep(x)
        self._collocate(names, in_loop, deps)
        return [x for x in names if in_loop[x]], [x for x in names if not in_loop[x]]

    def _collocate(self, names, in_loop, deps):
        """collocate_with: a layer and the layers it names stay together (in the loop if one of them must; then
        also what depends on them)."""
        groups = []
        for x in names:
            other = self.tpl.templates[x].kwargs.get("collocate_with") or ()
            other = [other] if isinstance(other, str) else list(other)
            unknown = [y for y in other if y not in self.tpl.templates]
            if unknown:
                raise LayerOptionError("layer %r: collocate_with %s: no such layer in this rec unit (has: %s)" % (
                    x, unknown, ", ".join(sorted(self.tpl.templates))), "collocate_with")
            if other:
                groups.append([x] + other)
        changed = bool(groups)
        while changed:
            changed = False
            for group in groups:
                if any(in_loop[y] for y in group) and not all(in_loop[y] for y in group):
                    for y in group:
                        in_loop[y] = True
                    changed = True
            for x in names:
                if not in_loop[x] and any(in_loop.get(r) for r in deps[x] if r in self.tpl.templates):
                    in_loop[x] = True
                    changed = True

    def _value_deps(self, x):
        """The references x's value depends on: all it uses, except for a choice without search (its target)."""
        refs = self.tpl.deps.get(x, set())
        target = self._teacher_forced_target_ref(x)
        if target is None:
            return refs
        return {r for r in refs if r == target}

    def _teacher_forced_target_ref(self, x):
        """For a choice that does not search (training): the reference of its target, whose labels it outputs."""
        from ..search import ChoiceLayer

        t = self.tpl.templates[x]
        if t.cls is not ChoiceLayer or t.kwargs.get("input_type", "prob") == "regression":
            return None
        if ChoiceLayer.use_search(self.tpl.net, t.kwargs.get("search"), "prob"):
            return None
        target = as_list(self.unit[x].get("target"))
        if len(target) != 1 or not isinstance(target[0], str):
            return None
        target = target[0]
        return target_ref(target)

    def _outer_has_loop_time(self, ref):
        if ref in ("data", "data:source"):
            data = self.tpl.input_data
        else:
            data = self.tpl.network.get_extern_data(ref[len("data:"):])
        return data is not None and data.have_time_axis()

    def _outside_unit(self, moved_out):
        """The unit for the construction over the whole sequence: a moved-out choice without search is its target,
        its sources (which may use prev: of it) are not built for it."""
        unit = dict(self.unit)
        for x in moved_out:
            if self._teacher_forced_target_ref(x) is not None:
                unit[x] = dict(unit[x], **{"from": []})
                unit[x].pop("explicit_search_sources", None)
                unit[x].pop("explicit_search_source", None)
        return unit

    def _shifted_prev(self, x, layer, net, batch_dim):
        """prev:x over the whole sequence, x moved out: x shifted by one frame, its initial output at frame 0."""
        data = layer.output
        if _frame_template(data, self.time_dim) is None:  # the same in every frame
            data = data.copy_add_dim_by_tag(self.time_dim, unbroadcast=True, axis=0)
        tm = _time_major(data, self.time_dim)
        init = self._initial_output(x, batch_dim, tm.copy_template_excluding_axis(0))
        out = tm.copy_template(name="prev:%s" % x)
        out.placeholder = tf.concat([tf.expand_dims(tf.cast(init, tm.placeholder.dtype), 0), tm.placeholder[:-1]], 0)
        return InternalLayer(name="prev:" + x, network=net, output=out)

    def build(self):
        if self.tpl.beam is not None and self.rec_layer.network.train_flag is False:
            # a search is never differentiated: TF's v1 control flow (no function graph, no intermediates kept for
            # gradients) builds the loop about 3x faster
            from .cells import control_flow_v1

            with control_flow_v1():
                return self._build()
        return self._build()

    def _build(self):
        rec = self.rec_layer
        net = rec.network
        tpl = self.tpl
        time_dim = self.time_dim
        scope = rec.get_subnet_scope_prefix()
        in_loop, moved_out = self._classify()
        self.in_loop, self.moved_out = in_loop, moved_out
        batch_dim = net.get_data_batch_dim()
        seq_len = time_dim.dyn_size if time_dim.dyn_size is not None else time_dim.complete_dyn_size()
        if seq_len is None and time_dim.dimension is not None:  # a loop over a static axis (option axis)
            seq_len = tf.fill([batch_dim], time_dim.dimension)
        input_full = None
        if tpl.input_data is not None:
            input_full = rec.input_data if rec.input_data is not None else None

        # outer layers / data, full sequence, by the names used in the unit
        extern_cache = {}

        def outer(ref):
            r = parse_layer_ref(ref)
            if r.kind == "data" and r.name in (None, "source"):
                return InternalLayer(name="data:source", network=net, output=input_full)
            if r.kind == "data":
                if ref not in extern_cache:
                    extern_cache[ref] = _extern_data_on_loop_time(net.get_layer(ref), time_dim, net)
                return extern_cache[ref]
            return net.get_layer(_in_outer_net(ref))

        # moved out: over the whole sequence
        outside = _SubNet(net, rec.name, scope, over_rec_time_dim=time_dim)
        outside.parent_layer = rec
        self.outside_net = outside

        outside_unit = self._outside_unit(moved_out)
        prev_full = {}  # "prev:X" -> X (moved out) shifted by one frame

        def get_outside(ref):
            r = parse_layer_ref(ref)
            if r.kind == "prev":  # (only of moved-out layers, see _classify)
                if ref not in prev_full:
                    prev_full[ref] = self._shifted_prev(r.name, get_outside(r.name), outside, batch_dim)
                return prev_full[ref]
            if r.kind == "layer":
                if r.name in tpl.templates or (r.name in self.unit and r.sub_name is not None):  # (S/X: a flattened
                    return outside.construct_layer(outside_unit, r.name, get_layer=get_outside)  # subnetwork layer)
                if r.sub_name is not None and r.base_name in tpl.templates:  # e.g. split/0
                    return self._get_sub_layer(get_outside, r.name)
            return outer(ref)

        full = {}  # name -> time-major full Data of moved-out layers (and accumulated in-loop ones)
        for x in moved_out:
            layer = get_outside(x)
            full[x] = layer
        in_loop_set = set(in_loop)
        for x in in_loop:  # prev: of moved-out layers used in the loop: their frames of the shifted sequence
            for r in sorted(tpl.deps.get(x, ())):
                if r.startswith("prev:") and r[len("prev:"):] not in in_loop_set:
                    get_outside(r)

        # the loop
        dynamic = tpl.dynamic_end
        if dynamic and (self.max_seq_len is not None or seq_len is None):
            n_time = self._max_seq_len(net)
        else:
            n_time = tf.reduce_max(seq_len) if seq_len is not None else None
        frame_tas = {}

        def frame_source(key, data):
            if key not in frame_tas:
                # built in the graph of the full sequence (outside the loop body), once, not in every step
                with data.placeholder.graph.as_default(), tf.control_dependencies(None):
                    tm = _time_major(data, time_dim)
                    frame_tas[key] = (tm.copy_template_excluding_axis(0), tf.TensorArray(
                        tm.dtype, size=tf.shape(tm.placeholder)[0], element_shape=tm.placeholder.shape[1:],
                        infer_shape=True).unstack(tm.placeholder))
            return frame_tas[key]

        prev_names = sorted({r[len("prev:"):] for x in in_loop for r in tpl.deps.get(x, ())
                             if r.startswith("prev:") and r[len("prev:"):] in in_loop_set}
                            | {x for x in in_loop if getattr(tpl.templates[x].cls, "needs_prev_output", False)})
        extra_init = {}
        for x in in_loop:
            t = tpl.templates[x]
            kw = dict(t.kwargs)
            kw.pop("name", None)
            kw.pop("rec_layer", None)  # the option of rec_last_output (of a rec layer in this unit), not this rec
            res = t.cls.get_rec_initial_extra_outputs(batch_dim=batch_dim, rec_layer=rec, name=x, network=t.network,
                                                      **kw)
            if res:
                extra_init[x] = res
        beam = tpl.beam  # the search beam of the unit (None without search)
        k_beam = beam.beam_size if beam is not None else 1
        has_beam = {x for x in tpl.templates if tpl.templates[x].output.beam is not None}
        prev_init = []
        for x in prev_names:
            from_state = getattr(tpl.templates[x].cls, "initial_output_from_state", None)
            if from_state and x in extra_init and self.unit[x].get("initial_output") is None:
                prev_init.append(extra_init[x][from_state])  # cells: the output part of the initial state
            else:
                prev_init.append(self._initial_output(x, batch_dim))
        if beam is not None:  # initial hypotheses: the same for every beam entry (the first step searches one)
            prev_init = [tile_batch(v, k_beam) if x in has_beam else v for x, v in zip(prev_names, prev_init)]
            extra_init = {x: {k: tile_batch(v, k_beam) if x in has_beam else v for k, v in st.items()}
                          for x, st in extra_init.items()}
        acc_names = [x for x in in_loop if x in tpl.needed and not any(  # what is used from outside; same shape
            d.is_dynamic() and d.dyn_size is None for d in tpl.templates[x].output.dims if not d.is_batch_dim())]
        extra_keys = [(x, k) for x in sorted(extra_init) for k in sorted(extra_init[x])]
        loss_layers = [x for x in in_loop if tpl.templates[x].kwargs.get("loss") is not None and net.eval_flag]
        track_end = dynamic or beam is not None
        pretiled = {}  # base: layers used only by layers on the beam: repeated per hypothesis once, outside the loop
        if beam is not None:
            root_beam = SearchBeam(k_beam, name="%s/repeated" % rec.get_absolute_name(), invariant=True)
            users = {}
            for x in in_loop:
                for ref in tpl.deps.get(x, ()):
                    if ref.startswith("base:"):
                        users.setdefault(ref, set()).add(x)
            for ref, xs in sorted(users.items()):
                layer = outer(ref)
                if xs <= has_beam and layer.output.beam is None and layer.output.have_batch_axis():
                    pretiled[ref] = InternalLayer(name=ref, network=net,
                                                  output=layer.output.copy_as_batch_major().copy_extend_with_beam(
                                                      root_beam))

        def body(*state):
            state = LoopState(*state)
            i, prevs = state.i, state.prev
            extras = {}
            for (x, k), v in state.extra.items():
                extras.setdefault(x, {})[k] = v
            ended, lens = state.end.get("ended"), state.end.get("lens")
            beam_in = None
            loop = _SubNet(net, rec.name, scope, inside_rec_time_dim=time_dim)
            loop.parent_layer = rec
            if beam is not None:
                beam_in = SearchBeam(k_beam, name="%s/prev:%s" % (rec.get_absolute_name(), tpl.choice_names[0]))
                beam_in.beam_scores = state.search["scores"]
                beam_in.active_size = tf.where(i > 0, k_beam, 1)
            loop.rec_step_info = RecStepInfo(i, seq_len, time_dim, prev_end_flag=ended if beam is not None else None,
                                             prev_seq_lens=lens)
            self.loop_net = loop
            cache = {}
            prev_layers = {}

            def get_prev(x):
                if x not in prev_layers:
                    out = tpl.templates[x].output.copy_template(name="prev:%s" % x)
                    out.beam = beam_in if x in has_beam else None
                    out.placeholder = prevs.get(x)
                    prev_layers[x] = _PrevLayer("prev:" + x, loop, out, extras.get(x, {}))
                return prev_layers[x]

            unit = {}
            for x in in_loop:
                desc = dict(self.unit[x])
                if x in extras or x in prev_names:
                    desc["rec_previous_layer"] = get_prev(x)
                unit[x] = desc

            def get_loop(ref):
                if ref in cache:
                    return cache[ref]
                r = parse_layer_ref(ref)
                if r.canonical != ref:  # e.g. "layer:x" -> "x"
                    return get_loop(r.canonical)
                # a sub-layer "B/S" of a layer B (flattened subnetwork layers "S/X" are unit layers themselves)
                sub_of = r.base_name if r.kind == "layer" and r.sub_name is not None and ref not in self.unit else None
                if ref in prev_full:  # prev: of a moved-out layer
                    res = self._frame_layer(ref, prev_full[ref].output, frame_source, i, loop)
                elif r.kind == "prev":
                    return get_prev(r.name)
                elif r.kind == "step":
                    res = InternalLayer(name=":i", network=loop, output=Data(name=":i", dims=(), dtype="int32",
                                                                              placeholder=i))
                elif r.kind == "layer" and ref in unit:
                    return loop.construct_layer(unit, ref, get_layer=get_loop)
                elif sub_of in full:  # sub-layer of a moved-out layer: its frame
                    sub = self._get_sub_layer(lambda x: full[x], ref)
                    res = self._frame_layer(ref, sub.output, frame_source, i, loop) if _frame_template(
                        sub.output, time_dim) is not None else sub
                elif sub_of in unit:  # e.g. split/0
                    res = self._get_sub_layer(get_loop, ref)
                elif r.kind == "layer" and ref in full:  # moved out: its frame (or itself, without the loop's time)
                    res = self._frame_layer(ref, full[ref].output, frame_source, i, loop) if _frame_template(
                        full[ref].output, time_dim) is not None else full[ref]
                elif ref in pretiled:
                    res = pretiled[ref]
                else:
                    layer = outer(ref)
                    res = self._frame_layer(ref, layer.output, frame_source, i, loop) if _frame_template(
                        layer.output, time_dim) is not None and r.kind != "base" else layer
                cache[ref] = res
                return res

            for x in in_loop:
                get_loop(x)
            beam_out = None
            if beam is not None:  # everything that goes to the next step is brought to the beam of this step's choice
                beam_out = loop.layers[tpl.choice_names[0]].output.beam

                def on_beam(x, data):
                    if x not in has_beam:
                        return data
                    return data.copy_select_beam(beam_out)

                def state_on_beam(x, value):
                    if x not in has_beam:
                        return value
                    return select_beam_tensor(value, loop.layers[x].output.beam, beam_out)

                def old_on_beam(x, value):
                    return select_beam_tensor(value, beam_in, beam_out) if x in has_beam else value
            else:
                on_beam = lambda x, data: data  # noqa: E731
                state_on_beam = old_on_beam = lambda x, value: value  # noqa: E731
            new_prev = {x: self._gate(loop, x, self._as_template_layout(on_beam(x, loop.layers[x].output),
                                                                        tpl.templates[x].output),
                                      old_on_beam(x, prevs[x])) for x in prev_names}
            new_extra = {(x, k): self._gate(loop, x, state_on_beam(x, loop.layers[x].rec_vars_outputs[k]),
                                            old_on_beam(x, extras[x][k])) for x, k in extra_keys}
            new_acc = {x: ta.write(i, self._as_template_layout(on_beam(x, loop.layers[x].output),
                                                               tpl.templates[x].output))
                       for x, ta in state.acc.items()}
            new_logits = {x: ta.write(i, _logits_or_none(loop.layers[x], no_logits)) for x, ta in state.logits.items()}
            new_end, new_search = {}, {}
            if track_end:  # a sequence ends with the first frame where 'end' is True
                if beam is not None:
                    ended, lens = (select_beam_tensor(v, beam_in, beam_out) for v in (ended, lens))
                if "end" in loop.layers and dynamic:  # (a loop over known lengths ignores it, as the original)
                    end = loop.layers["end"].output
                    if beam is not None and (end.beam is not None or end.have_batch_axis()):
                        end = end.copy_select_beam(beam_out)
                    end = end.copy_as_batch_major().placeholder if end.have_batch_axis() else end.placeholder
                    end = tf.reshape(end, [-1]) if end.shape.rank != 1 else end
                else:
                    end = tf.zeros_like(ended)
                if beam is not None:
                    end = tf.broadcast_to(end, tf.shape(ended))
                    if not dynamic:  # a loop over known lengths: the frame at the length ends the hypothesis
                        end = tf.logical_or(end, i >= tile_batch(seq_len, k_beam))
                # (without search the end frame is part of the sequence; under search only with include_eos)
                last = i + 1 if beam is None or tpl.include_eos else i
                new_end = {"ended": tf.logical_or(ended, end),
                           "lens": tf.where(ended, lens, tf.where(end, tf.fill(tf.shape(lens), last),
                                                                  tf.fill(tf.shape(lens), i + 1)))}
            if beam is not None:
                new_search = {"scores": beam_out.beam_scores,
                              "src_beams": state.search["src_beams"].write(i, beam_out.src_beams)}
            return LoopState(i + 1, new_prev, new_extra, new_acc, new_logits, new_end, new_search)

        ta_size = 0 if dynamic else n_time
        no_logits = set()  # loss layers without logits (e.g. eval): their loss takes the output
        self._loss_logits = [x for x in loss_layers if x in acc_names]
        loss_layers[:] = self._loss_logits
        int_shape = tf.TensorShape([None])
        init = LoopState(
            i=tf.constant(0),
            prev=dict(zip(prev_names, prev_init)),
            extra={(x, k): extra_init[x][k] for x, k in extra_keys},
            acc={x: tf.TensorArray(tf.as_dtype(tpl.templates[x].output.dtype), size=ta_size, dynamic_size=dynamic,
                                   element_shape=tf.TensorShape(tpl.templates[x].output.batch_shape))
                 for x in acc_names},
            logits={x: tf.TensorArray(tf.float32, size=ta_size, dynamic_size=dynamic, infer_shape=False)
                    for x in loss_layers},
            end={"ended": tf.zeros([batch_dim * k_beam], tf.bool), "lens": tf.zeros([batch_dim * k_beam], tf.int32)}
            if track_end else {},
            search={"scores": tf.zeros([batch_dim, k_beam]), "src_beams": tf.TensorArray(
                tf.int32, size=ta_size, dynamic_size=dynamic, element_shape=tf.TensorShape([None, k_beam]))}
            if beam is not None else {})
        invariants = LoopState(
            i=tf.TensorShape([]),
            prev={x: tf.TensorShape(tpl.templates[x].output.batch_shape) for x in prev_names},
            extra={key: tf.TensorShape([None] * v.shape.rank) for key, v in init.extra.items()},
            acc={x: tf.TensorShape(None) for x in init.acc}, logits={x: tf.TensorShape(None) for x in init.logits},
            end={k: int_shape for k in init.end},
            search={"scores": tf.TensorShape([None, k_beam]), "src_beams": tf.TensorShape(None)}
            if beam is not None else {})

        def cond(*state):
            state = LoopState(*state)
            if dynamic:
                return tf.logical_and(state.i < n_time, tf.logical_not(tf.reduce_all(state.end["ended"])))
            return state.i < n_time

        res = LoopState(*_while_loop_all_intermediates(cond, body, init, invariants)) if in_loop else None
        backtrack = None
        if res is not None:
            n_steps = res.i
            if beam is not None:
                src_beams = res.search["src_beams"].stack()  # [T, B, K]
                beam.beam_scores = self._final_beam_scores(res.search["scores"], n_steps,
                                                           res.end["ended"] if dynamic else None)
                beam.src_beams = src_beams[-1]
                backtrack = _backtrack_indices(src_beams)
            if track_end:
                ended, lens = res.end["ended"], res.end["lens"]
                if dynamic:
                    tpl.out_time_dim.dyn_size = tf.where(ended, lens, tf.fill(tf.shape(lens), n_steps))
                    if beam is not None:  # per sequence: its best hypothesis did not end (cut at max_seq_len)
                        rec.search_unfinished = tf.logical_not(tf.reshape(ended, [-1, k_beam])[:, 0])
            if beam is not None and not dynamic:
                tpl.out_time_dim.dyn_size = tile_batch(seq_len, k_beam)
            for x, ta in sorted(res.acc.items()):
                step_tpl = tpl.templates[x].output
                out = step_tpl.copy_template_adding_time_dim(
                    0, tpl.out_time_dim if x in has_beam or dynamic else time_dim, name="%s/%s" % (rec.name, x))
                out.placeholder = ta.stack()
                if x in has_beam:
                    out.placeholder = _apply_backtrack(out.placeholder, backtrack, k_beam)
                self.accumulated[x] = _AccumulatedLayer(x, self.loop_net, out, self.loop_net.layers[x])
            for x, ta in sorted(res.logits.items()):
                if x in no_logits:
                    continue
                logits = ta.stack()
                layer = self.accumulated[x]
                layer.set_logits(logits)
        for x in moved_out:
            layer = full[x]
            if _frame_template(layer.output, time_dim) is None:  # the same in every frame
                if x != "output":
                    continue
                out = layer.output.copy_add_dim_by_tag(time_dim, unbroadcast=True, axis=0)
            else:
                out = _time_major(layer.output, time_dim)
            self.accumulated[x] = _AccumulatedLayer(x, outside, out, layer)
        out = self.accumulated["output"].output
        rec.output.placeholder = out.copy_compatible_to(rec.output).placeholder if out.dims != rec.output.dims \
            else out.placeholder
        if net.eval_flag:
            for x in sorted(self.accumulated):
                layer = self.accumulated[x]
                if layer.loss is not None:
                    if layer.output.beam is not None and layer.loss.need_target:
                        raise NotImplementedError(
                            "rec layer %r: sub-layer %r has a loss, which is not computed on the search beam (the "
                            "hypotheses do not follow the target); set loss_only_on_non_search=True on it, or build "
                            "the search network without eval_flag" % (rec.name, x))
                    key = net.get_absolute_name_prefix() + rec.name + "/" + x
                    _check_loss_dims(layer, key)
                    net.get_root_network().losses_dict[key] = LossHolder(
                        name=key, loss=layer.loss, layer_output=layer.output, layer=layer, network=net)

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

    def _get_sub_layer(self, get_layer, ref):
        base_name, sub_name = ref.split("/", 1)
        sub = get_layer(base_name).get_sub_layer(sub_name)
        if sub is None:
            raise LayerNotFound("rec layer %r: layer %r has no sub-layer %r" % (
                self.rec_layer.name, base_name, sub_name), ref, self.rec_layer.network)
        return sub

    def _max_seq_len(self, net):
        """max_seq_len option: an int or an expression such as "max_len_from('base:encoder')"."""
        v = self.max_seq_len
        if isinstance(v, str):
            def max_len_from(src):
                layer = net.get_layer(_in_outer_net(src))
                return tf.reduce_max(layer.output.get_time_dim_tag().dyn_size)

            v = eval(v, {"max_len_from": max_len_from, "tf": tf})  # noqa: S307 (config expression)
        return tf.convert_to_tensor(v, tf.int32)

    def _gate(self, loop, x, new, old):
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

    def _initial_output(self, x, batch_dim, out=None):
        """x's output before the first frame, in the layout of out (default: x's per-step template)."""
        if out is None:
            out = self.tpl.templates[x].output
        init = self.unit[x].get("initial_output", 0)
        if isinstance(init, LayerBase):
            init = init.name
        if isinstance(init, str) and init == "var":  # trainable, zero-initialized [dim] (as the original)
            if out.sparse or out.batch_ndim != 2 or out.dim is None:
                raise ValueError("rec layer %r: initial_output='var' of %r needs a dense [B, dim] output, got %s" % (
                    self.rec_layer.name, x, out))
            rec = self.rec_layer
            with rec.var_creation_scope():
                var = tf1.get_variable("init_%s" % x, shape=(out.dim,), dtype=out.dtype,
                                       initializer=tf1.zeros_initializer())
            rec.add_extra_param(var)
            return self._as_template_layout(Data(name="init_%s" % x, dims=(out.dims[out.batch_dim_axis],
                                                                                out.dims[out.feature_dim_axis]),
                                                 dtype=out.dtype, placeholder=tf.tile(var[None], [batch_dim, 1])), out)
        if isinstance(init, str) and init not in ("zeros", "ones"):
            if init in ("apply(0)", "keep_over_epoch", "keep_over_epoch_no_init"):
                raise NotImplementedError("rec layer %r: option initial_output=%r of %r is not supported" % (
                    self.rec_layer.name, init, x))
            layer = self.rec_layer.network.get_layer(_in_outer_net(init))
            return self._as_template_layout(layer.output, out)
        value = {"zeros": 0, "ones": 1, None: 0}.get(init, init)
        shape = [batch_dim if d.is_batch_dim() else (d.dimension if d.dimension is not None or d.dyn_size is None
                                                      else tf.reduce_max(d.dyn_size)) for d in out.dims]
        if any(s is None for s in shape):
            raise ValueError("rec layer %r: cannot create the initial output of %r with shape %s" % (
                self.rec_layer.name, x, out))
        return tf.fill(shape, tf.constant(value, dtype=out.dtype))

    @staticmethod
    def _as_template_layout(data, template):
        x = data.placeholder
        if data.dims != template.dims and data.batch_ndim == template.batch_ndim:
            try:
                x = data.copy_compatible_to(template).placeholder
            except Exception:
                pass
        if (x.shape.rank == template.batch_ndim and x.shape.is_compatible_with(template.batch_shape)
                and x.shape.merge_with(template.batch_shape) != x.shape):
            x = tf.identity(x)
            x.set_shape(template.batch_shape)  # static dims the template knows
        return x

    def _frame_layer(self, ref, data, frame_source, i, loop):
        template, ta = frame_source(ref, data)
        out = template.copy_template(name=ref)
        out.placeholder = ta.read(i)
        return InternalLayer(name=ref, network=loop, output=out)

    # ---- access from outside ----
    def get_accumulated_layer(self, name):
        return self.accumulated.get(name)

    def get_step_template(self, name):
        return self.tpl.templates[name].output

    def get_last_frame(self, name):
        acc = self.accumulated[name].output
        seq_len = self.tpl.out_time_dim.dyn_size
        if seq_len is None or not acc.have_batch_axis():  # static axis, or a state without batch: the last step
            t_axis = acc.get_axis_by_tag(self.tpl.out_time_dim)
            return tf.gather(acc.placeholder, tf.shape(acc.placeholder)[t_axis] - 1, axis=t_axis)
        x = acc.copy_as_batch_major()
        x = x.copy_move_axis(x.get_axis_by_tag(self.tpl.out_time_dim), 1)  # [B, T, ...]
        res = x.copy_template_excluding_axis(1)
        res.placeholder = tf.gather(x.placeholder, tf.maximum(seq_len - 1, 0), axis=1, batch_dims=1)
        return res.copy_compatible_to(self.get_step_template(name)).placeholder if res.dims != \
            self.get_step_template(name).dims else res.placeholder


def _check_loss_dims(layer, key):
    """The same dim checks of output vs target as for losses outside a rec unit."""
    target = layer._get_target_value() if layer.loss.need_target and layer.target else None
    try:
        layer.loss.check_dims(layer, target)
    except ValueError as exc:
        raise ValueError("rec unit layer %r: %s" % (key, exc)) from None


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


def _same_template(a, b):
    return (a.batch_shape == b.batch_shape and a.dim == b.dim and a.sparse == b.sparse and a.dtype == b.dtype
            and (a.beam is None) == (b.beam is None))


def _searching_choices(unit, network):
    """Names of the choice layers of the unit that search."""
    from ..search import ChoiceLayer

    return [x for x, desc in sorted(unit.items()) if isinstance(desc, dict) and desc.get("class") == "choice"
            and ChoiceLayer.use_search(network, desc.get("search"), desc.get("input_type", "prob"))]


_BASE_EXTRA_OUTPUTS = LayerBase.get_rec_initial_extra_outputs.__func__


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
