"""
``task = "search"``: beam search with the last checkpoint (or ``load``/``load_epoch``) over ``search_data`` (else
``eval``, else ``dev``), as the original:

- the network is built with ``search_flag=True`` (choice layers search with their ``beam_size``);
- ``search_output_layer`` (default ``output``): on a beam, all its hypotheses with their scores are written, else
  the one (decided) hypothesis per sequence;
- ``search_output_file`` with ``search_output_file_format``: ``"txt"`` (one line per sequence: the best hypothesis,
  in dataset order) or ``"py"`` (a Python dict literal ``{seq_tag: [(score, "hyp"), ...]}``, best first; without a
  beam ``{seq_tag: "hyp"}``); labels are mapped through the dataset's label names of the target (else numbers);
- ``search_do_eval`` (default True where the dataset has the target): the error of the best hypotheses against the
  target, WER (label sequences) and CER (characters of the label strings) by edit distance, printed as
  ``search: WER 12.34% (56/454 labels), CER ...``;
- sequences whose best hypothesis did not end before ``max_seq_len`` are counted and reported.
"""

from __future__ import annotations

import numpy

from ..datasets import batch_to_arrays
from ..layer_ref import is_layer_target


def edit_distance(a, b):
    """Levenshtein distance between two sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def _target_key(net, layer):
    rec = layer
    target = getattr(rec, "target", None) or getattr(getattr(rec, "kwargs", None) or {}, "get", lambda k: None)("target")
    if isinstance(target, (list, tuple)):
        target = target[0] if target else None
    if target and not is_layer_target(target):
        return target
    return "classes" if "classes" in net.extern_data.data else None


def _check_has_search(engine, layer_name, EngineError):  # noqa: N803 (the engine's error class)
    net = engine.network
    if not any(layer.layer_class == "choice" for layer in net.get_all_layers_deep()):
        raise EngineError("task search: the network has no 'choice' layer, nothing to search (layer %r; add a "
                                 "choice layer with beam_size to the decoder)" % layer_name)


def search_task(engine, EngineError):  # noqa: N803 (the engine's error class, passed to avoid an import cycle)
    config = engine.config
    dataset = None
    for key in ("search_data", "eval", "dev"):
        dataset = engine.load_dataset(key)
        if dataset is not None:
            break
    if dataset is None:
        raise EngineError("task search needs a dataset: set 'search_data' (or 'eval' or 'dev')")
    output_file = config.value("search_output_file", None)
    fmt = config.value("search_output_file_format", "txt")
    if fmt not in ("txt", "py"):
        raise EngineError("search_output_file_format must be 'txt' or 'py', got %r" % (fmt,))
    engine.init_for_inference(dataset)
    backend = engine.backend  # the TF backend (search needs the graph)
    net = backend.network
    layer_name = config.value("search_output_layer", "output")
    try:
        layer = net.get_layer(layer_name)
    except Exception as exc:
        raise EngineError("task search: search_output_layer %r: %s" % (layer_name, exc)) from None
    _check_has_search(engine, layer_name, EngineError)
    target_key = _target_key(net, layer)
    labels = dataset.labels.get(target_key) if target_key and getattr(dataset, "labels", None) else None
    do_eval = config.bool("search_do_eval", True) and target_key in dataset.get_data_keys()
    out = layer.output
    if not out.sparse or not out.have_time_axis() or out.batch_ndim != 2:
        raise EngineError("task search: search_output_layer %r must give label sequences, got %s" % (
            layer_name, out.short_repr()))
    with backend.graph.as_default():
        out = out.copy_as_batch_major()
    k = out.beam.beam_size if out.beam is not None else 1
    fetches = {"labels": out.placeholder, "lens": out.get_time_dim_tag().dyn_size}
    if out.beam is not None:
        if out.beam.beam_scores is None:
            raise EngineError("task search: layer %r is on a beam without scores" % layer_name)
        fetches["scores"] = out.beam.beam_scores
    unfinished = [getattr(sub, "search_unfinished") for sub in net.get_all_layers_deep()
                  if getattr(sub, "search_unfinished", None) is not None]
    if unfinished:
        fetches["unfinished"] = unfinished[0]
    backend.data_keys = sorted(net.get_used_data_keys())
    backend.check_dataset(dataset)
    read_keys = sorted(set(backend.data_keys) | ({target_key} if do_eval else set()))

    def to_text(seq):
        if labels is not None:
            return " ".join(labels[i] if 0 <= i < len(labels) else str(i) for i in seq)
        return " ".join(str(i) for i in seq)

    results = []  # (tag, [(score, seq), ...], ref)
    n_unfinished = 0
    step = 0
    for batch in engine.batches(dataset, engine.epoch, train=False):
        arrays = batch_to_arrays(dataset, batch, read_keys)
        values = backend.run_fetches(fetches, arrays, dataset.name, step)
        step += 1
        n = arrays.num_seqs
        for b in range(n):
            hyps = []
            for j in range(k):
                row = b * k + j
                seq = [int(x) for x in values["labels"][row, :values["lens"][row]]]
                score = float(values["scores"][b, j]) if "scores" in values else None
                hyps.append((score, seq))
            if "scores" in values:
                hyps.sort(key=lambda h: -h[0])
            ref = None
            if do_eval:
                ref = [int(x) for x in arrays.data[target_key][b, :arrays.seq_lens[target_key][b]]]
            results.append((arrays.seq_tags[b], hyps, ref))
        if "unfinished" in values:
            n_unfinished += int(numpy.sum(values["unfinished"]))
    if output_file:
        with open(output_file, "w") as f:
            if fmt == "txt":
                for _, hyps, _ in results:
                    f.write(to_text(hyps[0][1]) + "\n")
            else:
                f.write("{\n")
                for tag, hyps, _ in results:
                    if k > 1 or hyps[0][0] is not None:
                        f.write("%r: [%s],\n" % (tag, ", ".join("(%r, %r)" % (s, to_text(h)) for s, h in hyps)))
                    else:
                        f.write("%r: %r,\n" % (tag, to_text(hyps[0][1])))
                f.write("}\n")
        engine.log.v1("search: wrote %i seqs of layer %r to %s" % (len(results), layer_name, output_file))
    if n_unfinished:
        engine.log.v1("search: %i of %i sequences did not end within max_seq_len (their best hypothesis was cut at "
                      "the maximal length)" % (n_unfinished, len(results)))
    if do_eval and results:
        errs = sum(edit_distance(h[0][1], ref) for _, h, ref in results)
        total = sum(len(ref) for _, _, ref in results)
        line = "search: WER %.2f%% (%i/%i labels)" % (100. * errs / max(total, 1), errs, total)
        if labels is not None:
            c_errs = sum(edit_distance("".join(labels[i] for i in h[0][1] if 0 <= i < len(labels)),
                                       "".join(labels[i] for i in ref if 0 <= i < len(labels))) for _, h, ref in results)
            c_total = sum(len("".join(labels[i] for i in ref if 0 <= i < len(labels))) for _, _, ref in results)
            line += ", CER %.2f%% (%i/%i chars)" % (100. * c_errs / max(c_total, 1), c_errs, c_total)
        engine.log.v1(line)
    return results
