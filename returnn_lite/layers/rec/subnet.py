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
   from outside as ``rec_layer/sub_layer``; losses of sub-layers are registered on the accumulated outputs. This
   construction is ``RecLoopConstruction`` in loop.py, in named passes.
"""

from __future__ import annotations

import tensorflow as tf

from ...data import Data, Dim, SearchBeam, batch_dim
from ...errors import LayerNotFound, LayerOptionError, NetworkConstructionDependencyLoopException
from ...layer_ref import is_layer_target, parse_layer_ref, target_ref
from ...network import assign_output_beam
from ...util import as_list
from ..base import InternalLayer, LayerBase, apply_out_dim, get_layer_class
from .loop import RecLoopConstruction, _SubNet, _extern_data_on_loop_time, _frame_template


class _OuterLayerFirst(BaseException):  # (not an Exception: no layer's error handling may catch it)
    """The template pass asks for an outer layer (base:X) that is not built yet: run() builds it, then restarts."""

    def __init__(self, name):
        BaseException.__init__(self, name)
        self.layer_name = name


class _NeedPrev(NetworkConstructionDependencyLoopException):
    """prev:X was asked for while X's template is still being built."""

    def __init__(self, name, requester):  # noqa (no super init: no message formatting needed)
        Exception.__init__(self, "template of %r not ready (needed by %r)" % (name, requester))
        self.layer_name = name
        self.requester = requester


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
        masked_from = desc.pop("masked_from", None)
        if masked_from is not None:
            # as the original (which needs the layer moved out of the loop then): the unit runs over the whole
            # masked_from sequence (already the masked frames), the mask is not used; params named as M
            if sub.get("from", "data") in ("data", ["data"]):
                sub["from"] = masked_from
            res[name] = dict(sub, **{k: v for k, v in desc.items() if k != "class"})  # e.g. is_output_layer
            continue
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
        self.defer_outer = False  # (see build_needed_outer_first)
        self.guess_only = set()  # prev: targets that cannot be built before the requesting layer
        self.subst = set()  # prev: targets replaced by a stand-in template in this pass
        self.guessed = set()  # names built with a guessed prev: template
        self.prev_fallback = {}  # templates of the previous pass
        self.cache = {}
        self.tpl = None
        self.net = None

    def run(self):
        self.setup_time_axes()
        self.build_needed_outer_first()
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
        # under search (as the original), a unit with 'end' ends by it, also without a searching choice (e.g. a
        # regression choice): the target's length is not used
        ends_by_end = (bool(self.searching) or bool(network.search_flag)) and "end" in unit and not cheating
        if time_dim is None and target and not ends_by_end and (not self.searching or cheating):
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
        elif ends_by_end:
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
    def build_needed_outer_first(self):
        """
        build_needed, but the first outer layer it asks for (e.g. the encoder of a decoder unit) is built from here:
        the pass recurses once per sub-layer of a chain, and TF records the whole Python stack for every op it
        creates (a Transformer encoder built under a 6-layer decoder's chain: a third of the construction time).
        The pass is then run again from the start (templates make no ops). The same layer is built first either
        way (params and seeds as before); if building it here fails, the pass runs as before and names the error.
        """
        self.defer_outer = True
        try:
            self.build_needed()
            return
        except _OuterLayerFirst as exc:
            name = exc.layer_name
        finally:
            self.defer_outer = False
        self._clear_pass()
        try:
            self.get_layer(name)
        except Exception:  # noqa: BLE001 (the pass below raises it with the sub-layer that asked for it)
            pass
        self._clear_pass()
        self.build_needed()

    def _clear_pass(self):
        tpl = self.tpl
        self.guess_only.clear()
        self.subst.clear()
        self.guessed.clear()
        tpl.templates.clear()
        tpl.deps.clear()
        self.net.layers.clear()
        self.cache.clear()
        del self.building[:]

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
            self._clear_pass()
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
        if beams:
            # several choices: each chosen from the beam of the one before it in the step; the loop goes on with the
            # newest beam (the next step's prev: layers are on it)
            tpl.beam = SearchBeam.get_combined_beam(*(b for b, _ in beams.values()), owner="rec layer %r" % name)
            choices = [x for x in self.searching if x in tpl.templates]
            tpl.choice_names = sorted(choices, key=lambda x: tpl.templates[x].output.beam is not tpl.beam)
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
        tpl, net, unit, name = self.tpl, self.net, self.unit, self.name
        cur = self.building[-1] if self.building else None
        if ref in self.cache:  # (still a dependency of every layer that asks for it)
            if cur is not None:
                tpl.deps.setdefault(cur, set()).add(ref)
            return self.cache[ref]
        r = parse_layer_ref(ref)
        if r.canonical != ref:  # e.g. "layer:x": resolved (and recorded as a dependency) as "x"
            return self.resolve(r.canonical)
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
            if self.defer_outer and r.name not in self.network.layers:
                raise _OuterLayerFirst(r.name)
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
        self.in_loop = []  # names computed inside the loop (after build)
        self.moved_out = []  # names built once over the whole sequence (after build)
        self.construction = None  # the RecLoopConstruction of build()

    @property
    def outside_net(self):
        return self.construction.outside_net if self.construction is not None else None

    @property
    def loop_net(self):
        return self.construction.loop_net if self.construction is not None else None

    @property
    def accumulated(self):
        return self.construction.accumulated if self.construction is not None else {}

    def get_sub_networks(self):
        return [n for n in (self.outside_net, self.loop_net) if n is not None]

    def _classify(self):
        """
        (names computed inside the loop, names moved out). A sub-layer moves out only where its output over the
        whole sequence is, frame by frame, what the loop computes (docs/design.md, "move out"):

        - its class is frame-wise (not ``recurrent``, no per-step state), or says for these options that it computes
          the same over the whole sequence (``rec_move_out_ok``, e.g. causal self_attention, positional_encoding,
          and window/cumsum, which move out whenever their inputs do, as the original); a layer with per-step state
          inside a masked_computation stays in the loop (its state advances on the unmasked frames only);
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
            stateless = not t.cls.recurrent and t.cls.get_rec_initial_extra_outputs.__func__ is _BASE_EXTRA_OUTPUTS
            if x in gated and not stateless:  # a masked_computation keeps its state on masked frames: per step only
                return False
            ok = getattr(t.cls, "rec_move_out_ok", None)
            if ok is not None:
                return ok(network=t.network, **{k: v for k, v in t.kwargs.items() if k not in ("name", "network")}) \
                    and frame_varying(x)
            return stateless

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

    def build(self):
        if self.tpl.beam is not None and self.rec_layer.network.train_flag is False:
            # a search is never differentiated: TF's v1 control flow (no function graph, no intermediates kept for
            # gradients) builds the loop about 3x faster
            from .cells import control_flow_v1

            with control_flow_v1():
                return self._build()
        return self._build()

    def _build(self):
        self.in_loop, self.moved_out = self._classify()
        self.construction = RecLoopConstruction(
            self.rec_layer, self.tpl, self.unit, outside_unit=self._outside_unit(self.moved_out),
            in_loop=self.in_loop, moved_out=self.moved_out, max_seq_len=self.max_seq_len)
        self.construction.run()

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


def _same_template(a, b):
    return (a.batch_shape == b.batch_shape and a.dim == b.dim and a.sparse == b.sparse and a.dtype == b.dtype
            and (a.beam is None) == (b.beam is None))


def _searching_choices(unit, network):
    """Names of the choice layers of the unit that search."""
    from ..search import ChoiceLayer

    return [x for x, desc in sorted(unit.items()) if isinstance(desc, dict) and desc.get("class") == "choice"
            and ChoiceLayer.use_search(network, desc.get("search"), desc.get("input_type", "prob"))]


_BASE_EXTRA_OUTPUTS = LayerBase.get_rec_initial_extra_outputs.__func__

