"""
The engine's epoch loop, shared by both backends: datasets, batching, learning-rate control, progress lines,
epoch scores, checkpoints and resume, eval, forward to HDF; the tasks ``train``, ``eval``, ``forward``, ``search``
and ``hyper_param_tuning`` as the original RETURNN runs them. The model and its framework are behind a backend
(:mod:`returnn_lite.engine.backend`): ``backend = "tensorflow"`` (default) or ``backend = "torch"``.

Per epoch in training::

    epoch 3 score: 0.123 error: 0.05 elapsed: 0:00:03 dev: score 0.1 error 0.02

Scores are per loss ``sum(cost) / sum(frames)`` over the epoch (frames = 1 / loss_norm_factor per step).
After an epoch: the learning-rate file is written (atomically), then the checkpoint ``<model>.<epoch %03d>``
(atomically, its marker file last). Rerunning the same command resumes after the last complete checkpoint.

This module imports no framework: the backend module is imported when the engine is created.
"""

from __future__ import annotations

import math
import time

from ..compat import returnn_import_hook
from ..config import global_config_ctx
from ..datasets import DatasetError, SimpleHDFWriter, batch_to_arrays, check_dataset_opts, generate_batches, \
    init_dataset
from ..datasets.prefetch import prefetch
from .backend import EngineError, get_backend_class
from .checks import check_writable_dir, first_line
from .checkpoints import epoch_model_filename, model_epoch_from_filename, normalize_checkpoint_name
from .learning_rate_control import (commit_pending_file, discard_pending_file, load_learning_rate_control_from_config,
                                    recover_pending_file)
from .progress import Log, ProgressLine, hms
from .resume_notices import print_notice, superseded_override_notices

__all__ = ["Engine", "EngineError"]


def _format_score(score):
    """One loss: its value; several: ``output 0.1 ctc 0.3``."""
    if not score:
        return "None"
    if len(score) == 1:
        return _fmt(next(iter(score.values())))
    return " ".join("%s %s" % (key.split(":", 1)[-1], _fmt(value)) for key, value in sorted(score.items()))


def _fmt(value):
    return "%.6g" % value if isinstance(value, float) else str(value)


class _Accumulator:
    """Sums cost, error and frames (1 / loss_norm_factor) per loss over the steps of an epoch."""

    def __init__(self):
        self.cost, self.error, self.frames = {}, {}, {}
        self.num_steps = 0
        self.num_seqs = 0

    def add(self, results):
        self.num_steps += 1
        for key, value in results.items():
            if not key.startswith("loss_norm_factor:"):
                continue
            name = key[len("loss_norm_factor:"):]
            norm = float(value)
            frames = 1.0 / norm if norm else 0.0
            self.frames[name] = self.frames.get(name, 0.0) + frames
            if "cost:" + name in results:
                self.cost[name] = self.cost.get(name, 0.0) + float(results["cost:" + name])
            if "error:" + name in results:
                self.error[name] = self.error.get(name, 0.0) + float(results["error:" + name])

    @staticmethod
    def step_scores(results):
        """Normalized values of one step: cost:NAME -> cost * norm_factor."""
        out = {}
        for key, value in results.items():
            if key.startswith(("cost:", "error:")):
                name = key.split(":", 1)[1]
                out[key] = float(value) * float(results.get("loss_norm_factor:" + name, 1.0))
        return out

    def scores(self):
        score = {"cost:" + n: v / self.frames[n] if self.frames.get(n) else v for n, v in self.cost.items()}
        error = {"error:" + n: v / self.frames[n] if self.frames.get(n) else v for n, v in self.error.items()}
        return score, error


class Engine:
    """Runs the config's task: ``Engine(config).run()``. The backend is the config's ``backend``."""

    def __init__(self, config, log=None):
        self.config = config
        self.log = log or Log.from_config(config)
        self.task = config.value("task", "train")
        self.model_prefix = config.value("model", None)
        self.num_epochs = config.int("num_epochs", 5)
        self.save_interval = config.int("save_interval", 1) or 1
        self.stop_on_nonfinite_train_score = config.bool("stop_on_nonfinite_train_score", True)
        self.train_data = None
        self.eval_datasets = {}
        self.epoch = None
        self.learning_rate_control = None
        self._summary_step = 0
        self._last_eval = {}
        self._chunking = None
        self._read_batch_settings()
        self.backend = get_backend_class(config.value("backend", "tensorflow") or "tensorflow")(
            config, self.log, self.task)

    # ---- what the backend built (public, e.g. for the checkpoint tool and tests)

    @property
    def network(self):
        """The TF backend's TFNetwork (None on the torch backend)."""
        return getattr(self.backend, "network", None)

    @property
    def dist(self):
        return self.backend.dist

    # ---- entry

    def run(self):
        tasks = {"train": self.train, "eval": self.eval_task, "forward": self.forward_task,
                 "search": self.search_task, "hyper_param_tuning": self.hyper_param_tuning_task}
        if self.task not in tasks:
            raise EngineError("unknown task %r; supported: %s" % (self.task, ", ".join(sorted(tasks))))
        for key in ("train", "dev", "eval", "eval_datasets"):  # e.g. Sprint datasets: refused before anything is built
            if self.config.has(key):
                opts = self.config.typed_value(key) if self.config.is_typed(key) else self.config.value(key)
                for name, sub in (opts.items() if key == "eval_datasets" and isinstance(opts, dict) else [(key, opts)]):
                    check_dataset_opts(sub, what="config option %r" % name)
        try:
            with global_config_ctx(self.config):
                tasks[self.task]()
        finally:
            self.close()

    def close(self):
        self.backend.close()
        self.log.close()

    def close_session(self):
        """Release the backend's session / model (the engine can build again)."""
        self.backend.close()

    def _read_batch_settings(self):
        """Batching options (again after a network whose ``#config`` changes them)."""
        config = self.config
        self.batch_size = config.typed_value("batch_size", 1)
        self.max_seqs = config.int("max_seqs", -1)
        self.max_seq_length = config.typed_value("max_seq_length", None)
        chunking = config.typed_value("chunking", None)
        chunking = chunking if chunking not in ("", "0", 0) else None
        if self.train_data is not None and chunking != self._chunking:
            self.train_data.chunking = chunking
        self._chunking = chunking

    # ---- datasets

    def load_dataset(self, key, **defaults):
        """The dataset of config option ``key`` (``train``, ``dev``, ``eval``, ``search_data``), or None."""
        if not self.config.has(key):
            return None
        opts = self.config.typed_value(key) if self.config.is_typed(key) else self.config.value(key)
        if opts is None or opts == "":
            return None
        defaults.setdefault("name", key)  # options the dataset's own dict gives win over these defaults
        try:
            with returnn_import_hook():
                dataset = init_dataset(opts, default_kwargs=defaults)
        except DatasetError as exc:
            raise DatasetError("dataset %r: %s" % (key, exc)) from None
        return dataset

    def _init_train_datasets(self):
        defaults = {}
        chunking = self.config.typed_value("chunking", None)
        if chunking not in (None, "", "0", 0):
            defaults["chunking"] = chunking
        batching = self.config.value("batching", None)
        if batching:
            defaults["seq_ordering"] = batching
        self.train_data = self.load_dataset("train", **defaults)
        if self.train_data is None:
            raise EngineError("task train needs a 'train' dataset in the config (e.g. "
                              "train = {\"class\": \"Task12AXDataset\", \"num_seqs\": 1000})")
        self._init_eval_datasets()

    def _init_eval_datasets(self):
        for key in ("dev", "eval"):
            dataset = self.load_dataset(key)
            if dataset is not None:
                self.eval_datasets[key] = dataset
        extra = self.config.typed_value("eval_datasets", None) or {}
        for name, opts in extra.items():
            with returnn_import_hook():
                self.eval_datasets[name] = init_dataset(opts, default_kwargs={"name": name})

    # ---- model

    def _build(self, epoch, dataset, train):
        with global_config_ctx(self.config):
            self.backend.build(epoch, dataset, train)
        self._read_batch_settings()

    def init_network_from_config(self, config=None, epoch=None):
        """
        As the original's: build the config's network for ``epoch`` (default 1; pretraining and ``get_network``
        apply) in the mode of the task (train: with losses and the update op). The data description comes from
        ``extern_data``/``num_outputs``, else from the ``train`` dataset. Returns the network (TF backend).
        """
        if config is not None:
            self.config = self.backend.config = config
        config = self.config
        dataset = None
        if not (config.has("extern_data") or config.has("num_outputs") or config.has("num_inputs")):
            dataset = self.load_dataset("train")
        self.epoch = epoch or 1
        self._build(self.epoch, dataset, train=self.task == "train")
        return self.network

    def init_for_inference(self, dataset):
        """Build the model in inference mode and load the checkpoint of the task (``load``/``load_epoch``/last)."""
        epoch_model = self.get_epoch_model()
        if not epoch_model[1]:
            raise EngineError("task %s needs a trained model: set 'load' or 'model' (with existing checkpoints "
                              "%s.NNN%s)" % (self.task, self.model_prefix or "<model>",
                                             self.backend.checkpoint_suffix))
        self.epoch = epoch_model[0] or model_epoch_from_filename(epoch_model[1]) or 1
        self._build(self.epoch, dataset, train=False)
        self._load_model(epoch_model, train=False)

    # ---- batches and steps

    def batches(self, dataset, epoch, train):
        """The batches of ``dataset`` for ``epoch`` (this rank's part in a distributed training)."""
        if self.dist is not None:  # this rank's part (train and eval: the eval scores are summed over the ranks)
            self.dist.init_seq_order(dataset, epoch)
        else:
            dataset.init_seq_order(epoch=epoch)
        batch_size = self.batch_size
        if not train:
            batch_size = self.config.typed_value("batch_size_eval", None) or batch_size
        return generate_batches(
            dataset, batch_size=batch_size, max_seqs=self.max_seqs,
            max_seq_length=self.max_seq_length if train else None,
            shuffle_batches=train and self.config.bool("shuffle_batches", False),
            used_data_keys=self.backend.data_keys)

    def _prefetched_batches(self, dataset, epoch, train):
        """(batch, arrays) pairs, made ``prefetch_batches`` batches ahead (a background thread, or the backend's
        loader workers, e.g. ``torch_dataloader_opts``)."""
        make = getattr(self.backend, "batch_arrays_iter", None)
        if make is not None:
            return make(self, dataset, epoch, train)
        batches = self.batches(dataset, epoch, train)
        keys = self.backend.data_keys
        pairs = ((batch, batch_to_arrays(dataset, batch, keys)) for batch in batches)
        return prefetch(pairs, size=self.config.int("prefetch_batches", 2))

    def run_epoch(self, dataset, epoch, train, learning_rate=None, prefix=""):
        """One pass over ``dataset`` (train: with updates); returns (score, error, elapsed seconds)."""
        self.backend.check_dataset(dataset)
        dist = self.dist
        distributed = dist is not None and train  # eval steps have no collectives: no step sync needed
        acc = _Accumulator()
        progress = ProgressLine(self.log, prefix)
        start = time.time()
        pairs = self._prefetched_batches(dataset, epoch, train)
        if distributed:  # all ranks run the same number of steps
            pairs = self._dist_synced_batches(pairs)
        timing = {"step_start": start}

        def finish_step(step, results, batch, num_seqs):
            acc.add(results)
            acc.num_seqs += num_seqs
            step_scores = _Accumulator.step_scores(results)
            if train and self.stop_on_nonfinite_train_score:
                bad = {k: v for k, v in step_scores.items() if k.startswith("cost:") and not math.isfinite(v)}
                if bad:
                    progress.finish()
                    raise EngineError(
                        "non-finite training loss in epoch %i, step %i: %s (stop_on_nonfinite_train_score). "
                        "Nothing was saved for this epoch; lower the learning rate or check the data." % (
                            epoch, step, ", ".join("%s=%s" % kv for kv in sorted(bad.items()))))
            frac = dataset.get_complete_frac(batch.end_seq - 1)
            costs = [v for k, v in step_scores.items() if k.startswith("cost:")]
            progress.update(step + 1, acc.num_seqs, loss=sum(costs) if costs else None, complete_frac=frac)
            now = time.time()
            if self.log.verbosity >= 5 or (self.log.file is not None and self.log.file_verbosity >= 5):
                elapsed = now - start
                info = ", ".join("%s %s" % (k, _fmt(v)) for k, v in sorted(step_scores.items()))
                remaining = (" exp. remaining %s, complete %.1f%%," % (hms(elapsed / frac - elapsed), frac * 100)
                             if frac else "")
                self.log.v5("%s, step %i, %s, num_seqs %i, %.3f sec/step, elapsed %s,%s" % (
                    prefix, step, info, num_seqs, now - timing["step_start"], hms(elapsed), remaining.rstrip(",")))
            timing["step_start"] = now
            if train:
                self._summary_step += 1
                self.backend.write_summaries(dict(step_scores, learning_rate=learning_rate), self._summary_step)

        pending = None  # a step whose results the backend hands over after the next step was launched
        num_steps = 0
        for batch, arrays in pairs:
            step = num_steps
            num_steps += 1
            if train:
                results = self.backend.train_step(
                    arrays, dataset_name=dataset.name, step=step, epoch=epoch, epoch_step=step,
                    learning_rate=learning_rate, have_next=self._dist_have_next if distributed else None)
            else:
                results = self.backend.eval_step(arrays, dataset_name=dataset.name, step=step, epoch=epoch)
            if distributed:
                self._dist_all_more = bool(results.pop("all_have_next"))
                dist.after_step()
            if pending is not None:
                finish_step(pending[0], pending[1](), pending[2], pending[3])
                pending = None
            if "deferred" in results:
                pending = (step, results["deferred"], batch, arrays.num_seqs)
            else:
                finish_step(step, results, batch, arrays.num_seqs)
        if pending is not None:
            finish_step(pending[0], pending[1](), pending[2], pending[3])
        progress.finish()
        dataset.finish_epoch()
        if dist is not None:  # scores over all ranks (the same on every rank: newbob decides the same)
            if train:
                dist.end_of_epoch()
            dist.sum_accumulator(acc)
        if acc.num_steps == 0:
            raise EngineError("dataset %r gave no batches in epoch %i (empty dataset, or all seqs longer than "
                              "max_seq_length?)" % (dataset.name, epoch))
        score, error = acc.scores()
        return score, error, time.time() - start

    def _dist_synced_batches(self, pairs):
        """This rank's batches while every rank has one (checked with the step's all-reduce)."""
        pairs = iter(pairs)
        try:
            current = next(pairs, None)
            if not self.dist.all_have_batch(current is not None):
                return
            while current is not None:
                following = next(pairs, None)
                self._dist_have_next = following is not None
                yield current
                if not self._dist_all_more:
                    return
                current = following
        finally:
            if hasattr(pairs, "close"):
                pairs.close()  # e.g. stops the prefetch thread

    # ---- model files

    def _existing_models(self):
        """epoch -> checkpoint name of the complete epoch checkpoints (the backend's files)."""
        return self.backend.existing_models(self.model_prefix)

    def get_epoch_model(self):
        """(epoch or None, checkpoint name or None), as the original: existing epoch checkpoints first."""
        config = self.config
        suffix = self.backend.checkpoint_suffix
        start_epoch_mode = config.value("start_epoch", "auto")
        start_epoch = None if start_epoch_mode == "auto" else int(start_epoch_mode)
        load = config.value("load", "") or ""
        load = normalize_checkpoint_name(load) if load else ""
        if load and not self.backend.checkpoint_exists(load):
            raise EngineError("load: checkpoint %r not found (no file %r)" % (load, load + suffix))
        import_epoch1 = config.value("import_model_train_epoch1", "") or ""
        import_epoch1 = normalize_checkpoint_name(import_epoch1) if import_epoch1 else ""
        if import_epoch1 and not self.backend.checkpoint_exists(import_epoch1):
            raise EngineError("import_model_train_epoch1: checkpoint %r not found (no file %r)"
                              % (import_epoch1, import_epoch1 + suffix))
        existing = self._existing_models()
        load_epoch = config.int("load_epoch", -1)
        if load:
            if load_epoch <= 0:
                load_epoch = model_epoch_from_filename(load) or 0
        elif load_epoch > 0:
            if load_epoch not in existing:
                raise EngineError("load_epoch %i: no checkpoint %r" % (
                    load_epoch, epoch_model_filename(self.model_prefix, load_epoch) + suffix))
            load = existing[load_epoch]
        is_train = self.task == "train"
        if load and (not is_train or start_epoch is not None):
            epoch_model = (None if is_train else load_epoch, load)
        elif existing and not (load_epoch > 0 and not is_train):
            epoch_model = sorted(existing.items())[-1]
            if load and "load" not in getattr(config, "cmd_line_args", ()):  # else: resume_notices.py
                self.log.v4("note: ignoring 'load' %r because of the existing model %r" % (load, epoch_model[1]))
        elif is_train and import_epoch1 and start_epoch in (None, 1):
            epoch_model = (0, import_epoch1)
        elif load:
            epoch_model = (load_epoch, load)
        else:
            epoch_model = (None, None)
        if start_epoch == 1 and epoch_model[0]:
            self.log.v4("warning: start_epoch 1 but there is the existing model %r; starting anew" % (epoch_model[1],))
            epoch_model = (None, None)
        elif (start_epoch or 0) > 1 and (start_epoch - 1) in existing:
            epoch_model = (start_epoch - 1, existing[start_epoch - 1])
        return epoch_model

    def _load_model(self, epoch_model, train):
        epoch, filename = epoch_model
        if filename:
            self.log.v4("Load model %s%s" % (filename, self.backend.checkpoint_suffix))
            self.backend.load_checkpoint(filename, load_extra=bool(epoch))
        self.backend.preload_from_files(training=train, fresh_train=train and not epoch)

    # ---- train

    def train(self):
        self._check_output_dirs_writable()
        dist = self.backend.setup_distributed()
        self._init_train_datasets()
        if not self.model_prefix:
            self.log.v4("warning: no 'model' in the config: no checkpoints will be written, no resume possible")
        if dist is None or dist.is_chief:
            self.backend.remove_stale_temp_files(self.model_prefix)
        epoch_model = self.get_epoch_model()
        start_epoch = (epoch_model[0] or 0) + 1
        final_epoch = self.num_epochs
        if start_epoch > final_epoch:
            self.log.v1("No epochs to train, start_epoch: %i, final_epoch: %i (model %s)" % (
                start_epoch, final_epoch, epoch_model[1]))
            return
        if epoch_model[1] and epoch_model[0]:
            self.log.v3("Resume training after epoch %i from %s" % (epoch_model[0], epoch_model[1]))
        if not self.config.value("learning_rate_file", None) and self.model_prefix:
            # keep the learning-rate state next to the checkpoints, so that a resume continues it
            self.config.set("learning_rate_file", self.model_prefix + ".learning_rates")
        if (dist is None or dist.is_chief) and recover_pending_file(
                self.config.value("learning_rate_file", None), self._existing_models()):
            self.log.v4("note: completed the learning-rate file of the last checkpoint (the run was killed after "
                        "saving it)")
        self.learning_rate_control = load_learning_rate_control_from_config(self.config)
        self._notice_superseded_overrides(start_epoch, epoch_model)
        self.epoch = start_epoch
        self._build(start_epoch, self.train_data, train=True)
        self._load_model(epoch_model, train=True)
        for dataset in [self.train_data] + list(self.eval_datasets.values()):  # before the first step
            self.backend.check_dataset(dataset)
        if epoch_model[0] == 0:  # import_model_train_epoch1: start training fresh from these params
            self.backend.set_global_train_step(0)
        if dist is not None:  # every rank starts from rank 0's params (also after resume)
            dist.broadcast_params()
        for epoch in range(start_epoch, final_epoch + 1):
            self.epoch = epoch
            self._maybe_update_network(epoch)
            self.train_epoch(epoch, final_epoch)
        if dist is not None:  # the rank that finishes first waits for the others
            dist.barrier("the final barrier")
        self.log.v3("Finished training in epoch %i." % final_epoch)

    def _check_output_dirs_writable(self):
        """Before anything is trained: the model and learning-rate file directories must be writable."""
        files = [("model", self.model_prefix)] if self.model_prefix else []
        lr_file = self.config.value("learning_rate_file", None)
        if lr_file:
            files.append(("learning_rate_file", lr_file))
        for what, filename in files:
            problem = check_writable_dir(filename, what)
            if problem:
                raise EngineError(problem + "; nothing was trained")

    def _notice_superseded_overrides(self, start_epoch, epoch_model):
        """On resume: one notice per ++key value that the saved state overrides (resume_notices.py)."""
        for text in superseded_override_notices(self, start_epoch, epoch_model):
            print_notice(self.log, text)

    def _maybe_update_network(self, epoch):
        if not self.backend.needs_rebuild(epoch):
            return
        self.log.v3("Network changed in epoch %i: rebuilding, keeping the params of matching names" % epoch)
        with global_config_ctx(self.config):
            self.backend.rebuild(epoch, self.train_data)
        self._read_batch_settings()
        if self.dist is not None:
            self.dist.broadcast_params()

    def _learning_rate_for_epoch(self, epoch):
        """
        As the original: a net dict's ``"#config": {"learning_rate": ...}`` (e.g. from pretraining or get_network)
        sets the learning rate of that epoch (also in the learning-rate file); else, with pretraining and without
        ``use_learning_rate_control_always``, the pretrain epochs use the constant ``pretrain_learning_rate``
        (default: the initial learning rate) and the first epoch after them the initial learning rate; else the
        learning-rate control decides.
        """
        lrc = self.learning_rate_control
        override = self.backend.learning_rate_override(epoch)
        if override is not None:
            old = lrc.get_learning_rate_for_epoch(epoch)
            if old != override:
                self.log.v3("Overwrite learning rate for epoch %i: %r -> %r (net dict #config)" % (epoch, old, override))
            lrc.epoch_data[epoch].learning_rate = override
            return override
        num = self.backend.pretrain_num_epochs()
        if num is not None and not self.config.bool("use_learning_rate_control_always", False):
            if epoch <= num + 1:
                lr = lrc.default_learning_rate
                if epoch <= num:
                    lr = self.config.float("pretrain_learning_rate", lr)
                lrc.set_default_learning_rate_for_epoch(epoch, lr)
                return lr
        return lrc.get_learning_rate_for_epoch(epoch)

    def train_epoch(self, epoch, final_epoch):
        lrc = self.learning_rate_control
        lr = self._learning_rate_for_epoch(epoch)
        chief = self.dist is None or self.dist.is_chief
        self.log.v3("start epoch %i with learning rate %s ..." % (epoch, lr))
        score, error, elapsed = self.run_epoch(self.train_data, epoch, train=True, learning_rate=lr,
                                               prefix="train epoch %i" % epoch)
        if any(not math.isfinite(v) for v in score.values()) and self.stop_on_nonfinite_train_score:
            raise EngineError("non-finite train score in epoch %i: %s" % (epoch, score))
        lrc.set_epoch_error(epoch, {"train_score": score, "train_error": error})
        line = "epoch %i score: %s" % (epoch, _format_score(score))
        if error:
            line += " error: %s" % _format_score(error)
        line += " elapsed: %s" % hms(elapsed)
        results = self.eval_model(epoch)
        lrc.set_epoch_error(epoch, results)
        for name, res in self._last_eval.items():
            line += " %s: score %s" % (name, _format_score(res[0]))
            if res[1]:
                line += " error %s" % _format_score(res[1])
        if chief:
            self.log.v1(line)
        values = {"epoch/train_score": _scalar(score), "epoch/learning_rate": lr}
        for k, v in results.items():
            values["epoch/%s" % k] = _scalar(v)
        self.backend.write_summaries(values, epoch)
        if not chief:  # only rank 0 writes files
            return
        if self.model_prefix and (epoch % self.save_interval == 0 or epoch == final_epoch):
            self._save_epoch(epoch)
        else:
            self._save_learning_rate_file(epoch)

    def _save_learning_rate_file(self, epoch, pending=False):
        try:
            return self.learning_rate_control.save(pending=pending) if pending else self.learning_rate_control.save()
        except OSError as exc:
            raise EngineError("epoch %i: cannot write the learning-rate file %r (%s); the previous learning-rate "
                              "file is unchanged" % (epoch, self.learning_rate_control.filename, exc)) from None

    def _save_epoch(self, epoch):
        """Checkpoint, then the learning-rate file that refers to it: the learning-rate state is written to a
        pending file first, moved into place after the checkpoint's marker file (a kill in between is completed
        on resume). A failed save (e.g. disk full) leaves the previous checkpoint and learning-rate file."""
        filename = epoch_model_filename(self.model_prefix, epoch)
        pending = self._save_learning_rate_file(epoch, pending=True)
        try:
            self.backend.save_checkpoint(filename)
        except Exception as exc:
            if pending:
                discard_pending_file(pending)
            self.backend.remove_stale_temp_files(self.model_prefix)
            text = getattr(exc, "strerror", None) or first_line(getattr(exc, "message", None) or exc)
            last = self._existing_models()
            raise EngineError("epoch %i: saving checkpoint %r failed (%s: %s); kept the previous checkpoint %s and "
                              "learning-rate file unchanged" % (
                                  epoch, filename, type(exc).__name__, text,
                                  repr(sorted(last.items())[-1][1]) if last else "(none)")) from None
        if pending:
            commit_pending_file(pending)
        self.log.v4("Saved model %s" % filename)

    def eval_model(self, epoch):
        """Evaluate all eval datasets: {"dev_score": {...}, "dev_error": {...}, ...}."""
        results = {}
        self._last_eval = {}
        for name, dataset in self.eval_datasets.items():
            score, error, _ = self.run_epoch(dataset, epoch, train=False, prefix="eval %s" % name)
            results["%s_score" % name] = score
            if error:
                results["%s_error" % name] = error
            self._last_eval[name] = (score, error)
        return results

    # ---- eval / forward / search / tuning

    def eval_task(self):
        self._init_eval_datasets()
        if not self.eval_datasets:
            raise EngineError("task eval needs a 'dev' or 'eval' dataset in the config")
        self.init_for_inference(next(iter(self.eval_datasets.values())))
        if not self.backend.has_loss():
            raise EngineError("task eval: the network has no loss to evaluate")
        self.eval_model(self.epoch)
        line = "epoch %i" % self.epoch
        for name, (score, error) in self._last_eval.items():
            line += " %s: score %s" % (name, _format_score(score))
            if error:
                line += " error %s" % _format_score(error)
        self.log.v1(line)

    def forward_task(self):
        dataset = self.load_dataset("eval")
        if dataset is None:
            raise EngineError("task forward needs an 'eval' dataset in the config (the data to forward)")
        output_file = self.config.value("output_file", None)
        custom = getattr(self.backend, "forward_with_callback", None)
        if custom is not None and self.config.typed_value("forward_callback", None) is not None:
            self.init_for_inference(dataset)
            return custom(self, dataset)
        if not output_file:
            raise EngineError("task forward needs 'output_file' (the HDF file to write)")
        self.init_for_inference(dataset)
        self.forward_to_hdf(dataset, output_file)

    def hyper_param_tuning_task(self):
        """Evolutionary search over the config's HyperParam placeholders (see hyper_param_tuning.py)."""
        from .hyper_param_tuning import HyperParamTuning

        self._init_train_datasets()
        try:
            tuning = HyperParamTuning(self.config, self.train_data, type(self), self.log)
        except ValueError as exc:
            raise EngineError(str(exc)) from None
        tuning.work()

    def train_one_epoch_from_scratch(self, train_data, learning_rate, prefix=""):
        """Build a fresh model, train it one epoch on ``train_data``; the train score (hyper-param tuning)."""
        self.epoch = 1
        self.train_data = train_data
        self._build(1, train_data, train=True)
        score, _, _ = self.run_epoch(train_data, 1, train=True, learning_rate=learning_rate, prefix=prefix)
        return score

    def search_task(self):
        if not self.backend.supports_search:
            raise EngineError("task search: not supported with backend %r (write the beam search in forward_step "
                              "with a forward_callback, task forward)" % self.config.value("backend", None))
        from .search import search_task

        return search_task(self, EngineError)

    def forward_to_hdf(self, dataset, output_file):
        """The backend's forward output of every seq of ``dataset`` into an HDF file (as the original's)."""
        self.batch_size = self.config.typed_value("forward_batch_size", None) or self.batch_size
        out = self.backend.forward_output()  # None: known after the first batch
        writer = SimpleHDFWriter(output_file, dim=out.dim, ndim=out.ndim) if out is not None else None
        n = 0
        try:
            progress = ProgressLine(self.log, "forward")
            for step, batch in enumerate(self.batches(dataset, self.epoch, train=False)):
                arrays = batch_to_arrays(dataset, batch, self.backend.data_keys)
                values, lens = self.backend.forward_batch(arrays, dataset_name=dataset.name, step=step,
                                                          epoch=self.epoch)
                if writer is None:
                    out = self.backend.forward_output()
                    writer = SimpleHDFWriter(output_file, dim=out.dim, ndim=out.ndim)
                writer.insert_batch(values, lens, arrays.seq_tags)
                n += arrays.num_seqs
                progress.update(n, n, complete_frac=dataset.get_complete_frac(batch.end_seq - 1))
            progress.finish()
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is None:
            raise EngineError("task forward: dataset %r gave no seqs; nothing written to %r" % (dataset.name, output_file))
        writer.close()
        self.log.v1("forward: wrote %i seqs of %s %r to %s" % (
            n, "layer" if self.backend.name == "tf" else "output", out.name, output_file))


def _scalar(score):
    if isinstance(score, dict):
        return float(sum(score.values())) if score else 0.0
    return float(score)
