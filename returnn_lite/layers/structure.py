"""
Structure layers: subnetwork (own namespace as a child network), cond (tf.cond between two layers),
hdf_dump (writes what passes through into an HDF file), image_summary and framewise_statistics
(pass-through plus summaries/statistics). (forced_align / fast_bw: see :mod:`.sprint`.)
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from ..data import Data, Dim
from ..util import NotSpecified, as_list
from ..errors import LayerNotFound
from ..layer_ref import LayerOption, parse_layer_ref
from .base import LayerBase, concat_sources

tf1 = tf.compat.v1


def flatten_subnetworks_in_unit(unit):
    """
    For rec units: a subnetwork layer ``S`` inside a rec unit can use ``prev:X`` on its own sub-layers, which
    a per-step loop only supports for layers of the unit itself. This returns a copy of the unit dict where every
    (nested) subnetwork layer S is replaced by its sub-layers named ``S/X`` (``from`` names rewritten: ``X`` ->
    ``S/X``, ``prev:X`` -> ``prev:S/X``, ``base:Y`` -> ``Y``, ``data`` -> ``S/data`` = the subnetwork's sources)
    plus ``S`` = copy of ``S/output``. Param names stay the same (``<rec>/rec/S/X/W``). Units without
    subnetwork layers are returned unchanged (the same object).
    """
    if not any(isinstance(d, dict) and d.get("class") == "subnetwork" for d in unit.values()):
        return unit
    res = {}
    for name, desc in unit.items():
        if not (isinstance(desc, dict) and desc.get("class") == "subnetwork"):
            res[name] = desc
            continue
        sub = flatten_subnetworks_in_unit(desc.get("subnetwork") or {})
        if "output" not in sub:
            raise ValueError("subnetwork layer %r: its subnetwork dict has no 'output' layer" % name)
        if not desc.get("concat_sources", True):
            raise NotImplementedError("subnetwork layer %r inside a rec unit: concat_sources=False" % name)
        sources = desc.get("from", "data")
        for src in sources if isinstance(sources, (list, tuple)) else [sources]:  # S/data may be never built
            if src == name:
                raise ValueError("subnetwork layer %r: option 'from': a dependency loop (the layer itself; use "
                                 "'prev:%s' for its previous frame)" % (name, name))
            if isinstance(src, str) and src.split("/")[0] not in unit and src not in ("data", "none", ":i") and \
                    not src.startswith(("data:", "base:", "prev:")):
                raise ValueError("subnetwork layer %r: option 'from': %r is not a layer of the rec unit (layers: %s)"
                                 % (name, src, sorted(unit)))

        def rename(ref, _name=name, _sub=sub):
            if not isinstance(ref, str) or ref in ("", "none"):
                return ref
            r = parse_layer_ref(ref)
            if r.kind == "base":
                return r.name
            if r.kind == "prev":
                return "prev:" + rename(r.name)
            if r.kind == "data" and r.name in (None, "data"):
                return "%s/data" % _name
            if r.kind == "layer":
                return "%s/%s" % (_name, r.name)
            return ref  # :i, data:KEY, extra.NET:...

        for sub_name, sub_desc in sub.items():
            sub_desc = dict(sub_desc)
            if "from" in sub_desc:
                frm = sub_desc["from"]
                sub_desc["from"] = [rename(r) for r in frm] if isinstance(frm, (list, tuple)) else rename(frm)
            else:
                sub_desc["from"] = rename("data")
            res["%s/%s" % (name, sub_name)] = sub_desc
        res["%s/data" % name] = {"class": "copy", "from": sources}
        outer = {k: v for k, v in desc.items() if k not in ("class", "subnetwork", "from", "concat_sources",
                                                           "load_on_init")}
        res[name] = dict(outer, **{"class": "copy", "from": "%s/output" % name})
        data_used = any("%s/data" % name in (d["from"] if isinstance(d.get("from"), (list, tuple)) else [d.get("from")])
                        for k, d in res.items() if k.startswith(name + "/"))
        if not data_used and sources not in ([], (), None, "none"):  # its sources are resolved (checked) anyway
            res[name]["extra_deps"] = ["%s/data" % name]
    return res


class SubnetworkLayer(LayerBase):
    """
    A whole network dict as one layer. Its input is ``data``/``data:data`` inside (the concatenated sources),
    or with concat_sources=False also ``data:<source name>`` and ``data:0`` .. ``data:<n-1>``. The sub layer
    ``output`` is the output; ``base:NAME`` refers to the parent network.
    :param subnetwork: dict of the sub layers (required); its "output" layer is the output
    :param concat_sources: concatenate the sources as "data" of the subnetwork (else data:0, data:1, ...; not inside a rec unit)
    :param load_on_init: checkpoint file (or dict with filename/prefix) to load the sub layers' params from
    :param dropout: dropout rate applied to the subnetwork's input data
    :param dropout_noise_shape: noise shape of that dropout (dict axis -> None for broadcast)
    :param dropout_on_forward: apply that dropout also outside training
    """

    layer_class = "subnetwork"
    recurrent = True
    dep_attributes = ("output_layer",)

    def __init__(self, subnetwork, concat_sources=True, load_on_init=None, dropout=0, dropout_noise_shape=None,
                 dropout_on_forward=False, **kwargs):
        super().__init__(**kwargs)
        self.subnetwork = subnetwork  # the Subnetwork built by construct_children
        subnetwork.parent_layer = self
        self.output_layer = subnetwork.get_layer("output")
        self.load_on_init = load_on_init
        self.output.placeholder = self.output_layer.output.placeholder
        prefix = subnetwork.get_absolute_name_prefix()
        for layer in subnetwork.get_all_layers_deep():  # sub params are also this layer's params (original naming)
            for p in layer.params.values():
                name = p.op.name
                self.params.setdefault(name[len(prefix):] if name.startswith(prefix) else name, p)

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        net_dict = d.get("subnetwork")
        if not isinstance(net_dict, dict):
            raise TypeError("option 'subnetwork' must be a layer dict, got %r" % (net_dict,))
        if "output" not in net_dict:
            raise LayerNotFound(
                "its subnetwork dict has no 'output' layer (it has: %s); the 'output' sub layer is the output of the "
                "subnetwork layer" % (", ".join(sorted(net_dict)) or "nothing"), "output", network)

    @classmethod
    def construct_children(cls, d, name, network, get_layer):
        """The child network (its input: the sources, concatenated unless concat_sources=False) and its layers."""
        from ..subnetwork import Subnetwork

        sources = d["sources"]
        own = {}

        def dropout(data):
            if not d.get("dropout"):
                return data
            return network.apply_dropout(data, d["dropout"], noise_shape=d.get("dropout_noise_shape"),
                                         on_forward=d.get("dropout_on_forward", False))

        if sources:
            if d.get("concat_sources", True):
                own["data"] = dropout(concat_sources(sources, name="%s_data" % name))
            else:
                for i, src in enumerate(sources):
                    data = dropout(src.output.copy(name="%s_data_%i" % (name, i)))
                    own[str(i)] = data
                    own.setdefault(src.name, data)
                own["data"] = own["0"]
        ns = d.get("name_scope")  # the option name_scope: the sub layers' params go there ("" = the parent's scope)
        scope = None
        if ns is not None:
            scope = ns[1:] if ns.startswith("/") else network.get_absolute_name_scope_prefix() + ns
            scope = scope + "/" if scope and not scope.endswith("/") else scope
        subnet = Subnetwork(network, name, net_dict=d["subnetwork"], own_data=own, parent_get_layer=get_layer,
                            name_scope_prefix=scope)
        subnet.construct_from_dict(d["subnetwork"])
        d["subnetwork"] = subnet

    @classmethod
    def get_out_data_from_opts(cls, name, subnetwork, n_out=NotSpecified, out_type=None, **kwargs):
        out = subnetwork.get_layer("output").output.copy_template(name="%s_output" % name)
        if n_out is not NotSpecified and n_out is not None and out.dim != n_out:
            raise ValueError("n_out=%r does not match the dim %r of the subnetwork output %s" % (
                n_out, out.dim, out.short_repr()))
        return out

    def get_sub_layer(self, layer_name):
        return self.subnetwork.get_layer(layer_name)

    def get_sub_networks(self):
        return [self.subnetwork]

    def get_sub_layers(self):
        return self.subnetwork.get_all_layers_shallow()

    def post_initialize_params(self, session):
        """load_on_init: after the random init, load the sub params from a checkpoint (names without our prefix)."""
        if not self.load_on_init:
            return
        opts = self.load_on_init
        if isinstance(opts, str):
            opts = {"filename": opts}
        opts = dict(opts)
        prefix = self.subnetwork.get_absolute_name_prefix()
        opts.setdefault("load_if_prefix", prefix)
        opts.setdefault("params_prefix", "")
        params = [p for layer in self.subnetwork.get_all_layers_deep() for p in layer.params.values()]
        from ..network import CustomCheckpointLoader

        loader = CustomCheckpointLoader(saveable_params=params, network=self.subnetwork, **opts)
        loader.load_now(session)


class CondLayer(LayerBase):
    """
    tf.cond on a scalar bool ``condition`` between ``true_layer`` and ``false_layer`` (names or layer dicts;
    dicts are built as sub layers ``<name>/condition``, ``<name>/true_layer``, ``<name>/false_layer``, their params
    in the scope of the cond layer itself: ``<name>/W``, or ``<name>/lin/W`` for a subnetwork branch with ``lin``).
    :param condition: layer (dict or name) with a scalar bool
    :param true_layer: layer (dict or name) giving the output when condition is true
    :param false_layer: layer (dict or name) giving the output when condition is false
    """

    layer_class = "cond"
    default_from = ()
    recurrent = True
    # each a layer name, or a layer dict (built as a child by construct_children)
    layer_options = ("condition", "true_layer", "false_layer")
    required_options = layer_options
    option_types = {key: (str, dict, LayerBase) for key in layer_options}

    def __init__(self, condition, true_layer, false_layer, **kwargs):
        super().__init__(**kwargs)
        self.condition_layer, self.true_layer, self.false_layer = condition, true_layer, false_layer
        c = condition.output
        if c.batch_ndim != 0 or c.dtype != "bool":
            raise ValueError("condition %r must be a scalar bool, got %s" % (condition.name, c.short_repr()))
        t = true_layer.output
        self.output.placeholder = tf.cond(c.placeholder, self._branch_fn(true_layer, t),
                                          self._branch_fn(false_layer, t))
        for i, d in enumerate(self.output.dims):
            if d is t.dims[i] or d.dimension is not None or d.is_batch_dim():
                continue
            td, fd = t.dims[i], self._false_tag(i)
            if fd is not None and td.dyn_size is not None and fd.dyn_size is not None:
                d.dyn_size = tf.cond(c.placeholder, lambda: td.dyn_size, lambda: fd.dyn_size)
            else:
                d.dyn_size = td.dyn_size

    def _branch_fn(self, layer, like):
        """
        The branch function of tf.cond. A branch given as a layer dict without params and losses is built again
        inside it, so that only the taken branch runs (the layer built by construct_children gave the template).
        """
        def as_out(data):
            try:
                return data.copy_compatible_to(like).placeholder
            except ValueError:
                return data.placeholder

        rebuild = getattr(layer, "_cond_rebuild", None)
        if rebuild is None or not _self_contained(layer):
            x = as_out(layer.output)
            return lambda: tf.identity(x)
        from ..subnetwork import Subnetwork

        key, desc, get_layer = rebuild

        def fn():
            net = Subnetwork(self.network, self.name, fallback_to_parent=True, parent_get_layer=get_layer)
            return tf.identity(as_out(net.construct_layer({key: desc}, key).output))

        return fn

    def _false_tag(self, axis):
        t, f = self.true_layer.output, self.false_layer.output
        mapping = f.find_matching_axes(t)
        inv = {j: i for i, j in mapping.items()}
        if axis in inv:
            return f.dims[inv[axis]]
        dyn_t = [i for i in t.get_dynamic_axes()]
        dyn_f = [i for i in f.get_dynamic_axes()]
        if axis in dyn_t and len(dyn_t) == len(dyn_f):
            return f.dims[dyn_f[dyn_t.index(axis)]]
        return None

    @classmethod
    def construct_children(cls, d, name, network, get_layer):
        """Layer dicts given as condition/true_layer/false_layer: sub layers <name>/<option> of one Subnetwork."""
        from ..subnetwork import Subnetwork

        extra = None
        for key in ("condition", "true_layer", "false_layer"):
            if isinstance(d[key], dict):
                if extra is None:
                    extra = Subnetwork(network, name, fallback_to_parent=True, parent_get_layer=get_layer)
                desc = d[key]
                if "name_scope" not in desc:  # params in the cond layer's own scope (cond/W, cond/lin/W), as the
                    desc = dict(desc, name_scope="")  # original, which builds each branch under the cond's name
                d[key] = extra.construct_layer({key: desc}, key)
                if key != "condition":  # built again inside tf.cond (see _branch_fn)
                    d[key]._cond_rebuild = (key, desc, get_layer)

    @property
    def _extra_net(self):
        """The child network of the branches given as dicts (None if all are layer names)."""
        from ..subnetwork import Subnetwork

        for layer in (self.condition_layer, self.true_layer, self.false_layer):
            net = layer.network
            if isinstance(net, Subnetwork) and net.parent_net is self.network and net.name == self.name:
                return net
        return None

    @classmethod
    def get_out_data_from_opts(cls, name, true_layer, false_layer, **kwargs):
        t, f = true_layer.output, false_layer.output
        out = t.copy_template(name="%s_output" % name)
        if t.batch_ndim != f.batch_ndim or t.dtype != f.dtype:
            raise ValueError("true_layer %s and false_layer %s do not have the same shape and dtype" % (
                t.short_repr(), f.short_repr()))
        mapping = f.find_matching_axes(t)
        matched = set(mapping.values())
        dims = list(out.dims)
        for i, d in enumerate(dims):
            if i not in matched and d.dimension is None and not d.is_batch_dim():
                dims[i] = Dim(None, kind=d.kind, description="%s:cond-%s" % (name, d.description))
        out.dims = tuple(dims)
        return out

    def get_sub_networks(self):
        return [self._extra_net] if self._extra_net is not None else []

    def get_sub_layers(self):
        return [self.condition_layer, self.true_layer, self.false_layer]

    def get_sub_layer(self, layer_name):
        if self._extra_net is not None and layer_name in self._extra_net.layers:
            return self._extra_net.layers[layer_name]
        return None


def _self_contained(layer):
    """Whether layer (and its sub-networks) has no params and no losses: building it again creates nothing shared."""
    layers = [layer] + [x for net in getattr(layer, "get_sub_networks", lambda: [])() if net is not None
                        for x in net.get_all_layers_deep()]
    return not any(x.params or x.loss is not None for x in layers)


class HDFDumpLayer(LayerBase):
    """
    Pass-through of its (single) source which also writes every batch that runs through it into an HDF file in
    the HDFDataset layout (inputs, seqLengths, seqTags, targets/data/<extra key>). The file is rewritten after
    every run, so it is complete whenever a session.run returned.
    :param filename: HDF file to write (str, or callable(**opts) -> str) (required)
    :param extra: dict name -> layer whose outputs are dumped too
    :param dump_whole_batches: dump one sequence per batch (whole batch) instead of per sequence
    :param labels: list of label names written to the file (sparse output)
    :param extend_existing_file: append to an existing file instead of overwriting it
    :param dump_per_run: write one file per run; refused (only False)
    """

    layer_class = "hdf_dump"
    unsupported_options = {"dump_per_run": (False,)}
    layer_options = (LayerOption("extra", "dict"),)  # {key: layer name}
    option_types = {"extra": (dict,)}

    def __init__(self, filename, extra=None, dump_whole_batches=False, labels=None, extend_existing_file=False,
                 dump_per_run=False, **kwargs):
        super().__init__(**kwargs)
        if len(self.sources) != 1:
            raise ValueError("hdf_dump needs exactly one source, got %i" % len(self.sources))
        data = self.sources[0].output.copy_as_batch_major()
        if not data.have_batch_axis():
            raise ValueError("hdf_dump: source %s has no batch axis" % data.short_repr())
        self.filename = filename
        self.extra = dict(extra or {})
        self.dump_whole_batches = dump_whole_batches
        self.labels = labels
        self._batches = []  # per run: (inputs, seq_lens, extra dict, extra lens dict)
        self._existing = self._read_existing(filename) if extend_existing_file else None
        self._seq_counter = 0 if self._existing is None else len(self._existing["tags"])
        self._template = data.copy_template()
        x, lens = self._batch_major_with_time(data)
        tensors = [x, lens]
        keys = sorted(self.extra)
        for key in keys:
            e = self.extra[key].output.copy_as_batch_major()
            ex, elens = self._batch_major_with_time(e)
            tensors += [ex, elens]
        dump = tf.numpy_function(self._dump, tensors, tf.int64, name="hdf_dump")
        with tf.control_dependencies([dump]):
            self.output.placeholder = tf.identity(self.sources[0].output.placeholder)
        self._extra_keys = keys

    @staticmethod
    def _batch_major_with_time(data):
        """[B, T, ...] (a length-1 time axis is added if there is none) and [B] lengths."""
        dyn = [i for i in data.get_dynamic_axes() if data.dims[i].dyn_size is not None]
        if len(dyn) > 1:
            raise NotImplementedError("hdf_dump: only one dynamic axis is supported, got %s" % data.short_repr())
        x = data.placeholder
        if dyn:
            t = dyn[0]
            if t != 1:
                data = data.copy_move_axis(t, 1)
                x = data.placeholder
            lens = data.dims[1].dyn_size
        else:
            x = tf.expand_dims(x, 1)
            lens = tf.ones([tf.shape(x)[0]], dtype=tf.int32)
        return x, tf.cast(lens, tf.int32)

    @staticmethod
    def _read_existing(filename):
        import h5py

        if not os.path.exists(filename):
            raise IOError("hdf_dump: extend_existing_file=True but %r does not exist" % filename)
        with h5py.File(filename, "r") as f:
            lens = f["seqLengths"][...]
            inputs = f["inputs"][...]
            tags = [t.decode("utf8") if isinstance(t, bytes) else str(t) for t in f["seqTags"][...]]
            extra = {}
            if "targets" in f:
                for key in f["targets/data"]:
                    extra[key] = f["targets/data"][key][...]
        return {"lens": lens, "inputs": inputs, "tags": tags, "extra": extra}

    def _dump(self, x, lens, *extra):
        extras = {}
        for i, key in enumerate(self._extra_keys):
            extras[key] = (extra[2 * i], extra[2 * i + 1])
        if self.dump_whole_batches:
            x = np.concatenate([x[b, :lens[b]] for b in range(x.shape[0])], axis=0)[None]
            lens = np.array([x.shape[1]], dtype=np.int32)
            extras = {k: (np.concatenate([v[b, :ln[b]] for b in range(v.shape[0])], axis=0)[None],
                          np.array([int(np.sum(ln))], dtype=np.int32)) for k, (v, ln) in extras.items()}
        tags = ["seq-%i" % (self._seq_counter + i) for i in range(x.shape[0])]
        self._seq_counter += x.shape[0]
        self._batches.append((x, lens, tags, extras))
        self._write()
        return np.int64(0)

    def _write(self):
        from ..datasets.hdf import SimpleHDFWriter

        tmpl = self._template
        ndim = 1 if tmpl.sparse else max(tmpl.batch_ndim - 1 + (0 if tmpl.get_dynamic_axes() else 1), 1)
        dim = tmpl.dim
        directory = os.path.dirname(os.path.abspath(self.filename))
        os.makedirs(directory, exist_ok=True)
        writer = SimpleHDFWriter(self.filename, dim=dim, ndim=ndim, labels=self.labels)
        try:
            if self._existing is not None:
                ex = self._existing
                offsets = np.concatenate([[0], np.cumsum(ex["lens"][:, 0])])
                for i, tag in enumerate(ex["tags"]):
                    seq = ex["inputs"][offsets[i]:offsets[i + 1]]
                    writer.insert_batch(seq[None], [seq.shape[0]], [tag])
            for x, lens, tags, extras in self._batches:
                writer.insert_batch(x, lens, tags, extra={k: v for k, (v, _) in extras.items()} or None,
                                    extra_seq_len={k: ln for k, (_, ln) in extras.items()} or None)
        except Exception:
            writer.abort()
            raise
        writer.close()

    @classmethod
    def transform_config_dict(cls, d, network, get_layer):
        super().transform_config_dict(d, network=network, get_layer=get_layer)
        if callable(d.get("filename")):
            d["filename"] = d["filename"]()

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        if len(sources) != 1:
            raise ValueError("hdf_dump needs exactly one source, got %i" % len(sources))
        return sources[0].output.copy_template(name="%s_output" % name)


class ImageSummaryLayer(LayerBase):
    """Pass-through of its source, adding a TensorBoard image summary of it ([B, H, W] or [B, H, W, 1]).
    :param max_outputs: maximum number of images in the summary
    """

    layer_class = "image_summary"

    def __init__(self, max_outputs=3, **kwargs):
        super().__init__(**kwargs)
        data = self.sources[0].output
        x = data.placeholder
        self.output.placeholder = x
        img = data.copy_as_batch_major().placeholder
        if img.shape.rank == 3:
            img = tf.expand_dims(img, -1)
        if img.shape.rank == 4 and img.dtype.is_floating:
            tf1.summary.image(self.name, tf.cast(img, tf.float32), max_outputs=max_outputs)

    @classmethod
    def get_out_data_from_opts(cls, name, sources=(), **kwargs):
        if not sources:
            raise ValueError("image_summary needs a source")
        return sources[0].output.copy_template(name="%s_output" % name)


class FramewiseStatisticsLayer(LayerBase):
    """
    Statistics of its source (frame posteriors) against the target: frame error rate, silence ratios and
    output-probability histogram, stored in ``self.stats``. The output is a dummy scalar.
    :param sil_label_idx: index of the silence label (for the silence/non-silence statistics)
    :param histogram_num_bins: number of histogram bins
    """

    layer_class = "framewise_statistics"

    def __init__(self, sil_label_idx, histogram_num_bins=20, **kwargs):
        super().__init__(**kwargs)
        self.output.placeholder = tf.constant(0, dtype=tf.int32)
        if not self.sources or not self.target:
            return
        out = self.sources[0].output.copy_as_batch_major()
        target = self._get_target_value().copy_as_batch_major()
        mask = target.get_sequence_mask()
        pred = tf.argmax(out.placeholder, axis=-1, output_type=tf.int32) if not out.sparse else out.placeholder
        ref = target.placeholder if target.sparse else tf.argmax(target.placeholder, axis=-1, output_type=tf.int32)
        pred_m = tf.boolean_mask(pred, mask)
        ref_m = tf.boolean_mask(ref, mask)
        n = tf.cast(tf.size(ref_m), tf.float32)
        err = tf.cast(tf.not_equal(pred_m, ref_m), tf.float32)
        ref_sil = tf.equal(ref_m, sil_label_idx)
        pred_sil = tf.equal(pred_m, sil_label_idx)
        self.stats["fer"] = tf.reduce_sum(err) / n
        self.stats["ref_sil_ratio"] = tf.reduce_mean(tf.cast(ref_sil, tf.float32))
        self.stats["out_sil_ratio"] = tf.reduce_mean(tf.cast(pred_sil, tf.float32))
        self.stats["fer_sil"] = tf.math.divide_no_nan(
            tf.reduce_sum(err * tf.cast(ref_sil, tf.float32)), tf.reduce_sum(tf.cast(ref_sil, tf.float32)))
        self.stats["fer_non_sil"] = tf.math.divide_no_nan(
            tf.reduce_sum(err * tf.cast(~ref_sil, tf.float32)), tf.reduce_sum(tf.cast(~ref_sil, tf.float32)))
        if not out.sparse and out.dtype.startswith("float"):
            probs = tf.boolean_mask(tf.reduce_max(out.placeholder, axis=-1), mask)
            self.stats["output_prob_histogram"] = tf.histogram_fixed_width(
                probs, [0.0, 1.0], nbins=histogram_num_bins)
        for key, value in self.stats.items():
            if value.shape.rank == 0:
                tf1.summary.scalar("%s_%s" % (self.name, key), value)

    @classmethod
    def get_out_data_from_opts(cls, name, **kwargs):
        return Data(name="%s_output" % name, shape=(), dtype="int32", batch_dim_axis=None)
