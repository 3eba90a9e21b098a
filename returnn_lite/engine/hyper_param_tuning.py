"""
``task = "hyper_param_tuning"``: an evolutionary search over the config's :class:`HyperParam` placeholders, as the
original's (demos/demo-hyper-param-tuning.config).

The placeholders are found in the typed config values and nested dicts (e.g. the network dict). Each individual is a
setting of all of them; its cost is the train score of the loss of ``output`` (else the sum of all train scores)
after training a fresh model (a new graph from scratch) for one pass over the first ``num_train_steps`` sequences
of the train dataset (epoch 1 order). Iteration 1 starts from the defaults, the canonical values (middle of each
range) and random individuals; each iteration trains the individuals without a cost, drops the worst
``num_kill_individuals``, keeps the ``num_best`` best over all iterations, and the next population is made of some of
the best so far, the survivors and new random individuals, crossed over (a parameter is taken from another
individual or the middle of both). The best settings are printed after each iteration and at the end.

Options (``hyper_param_tuning = {...}``): ``num_tune_iterations``, ``num_individuals`` (required),
``num_train_steps`` (default 100), ``num_kill_individuals`` (default half), ``num_best`` (default 10),
``dry_run_first_individual`` (default True: the first individual trains with the normal log output, the others
quietly), ``num_threads``: returnn_lite trains the individuals one after another in this process (the results do
not depend on it; a value other than 1 is noted once in the log).
"""

from __future__ import annotations

import time

import numpy

from ..compat.hyper_param import HyperParam
from ..config import Config
from .learning_rate_control import load_learning_rate_control_from_config
from .progress import Log, hms

_OPTIONS = ("num_tune_iterations", "num_individuals", "num_train_steps", "num_kill_individuals", "num_best",
            "dry_run_first_individual", "num_threads")


class Individual:
    """One setting of the hyper params; ``cost`` once trained."""

    def __init__(self, mapping, name):
        self.mapping = mapping
        self.name = name
        self.cost = None

    def cross_over(self, params, others, seed):
        rnd = numpy.random.RandomState(seed)
        res = Individual(dict(self.mapping), name="%sx%x" % (self.name if len(self.name) <= 10 else self.name[:8] + "..",
                                                            seed))
        while True:
            other = others[rnd.randint(0, len(others))]
            for p in params:
                x = rnd.uniform(0.0, 1.0)
                if x > 0.75:
                    res.mapping[p] = other.mapping[p]
                elif x > 0.5:
                    res.mapping[p] = p.merge_values(res.mapping[p], other.mapping[p])
            if rnd.uniform(0.0, 1.0) > 0.5:
                return res


def find_hyper_params(config):
    """The HyperParams of the config (order of creation); each gets its usages (paths) set."""
    found = {}

    def visit(value, path, seen):
        if isinstance(value, HyperParam):
            if id(value) not in found:
                found[id(value)] = value
                value.usages = []
            value.usages.append(path)
            return
        if not isinstance(value, dict) or id(value) in seen:
            return
        seen.add(id(value))
        for key in sorted(value, key=repr):
            visit(value[key], "%s[%r]" % (path, key) if path else str(key), seen)

    visit(config.typed_dict, "", set())
    return sorted(found.values(), key=lambda p: p.unique_idx)


def config_with_values(config, mapping):
    """A copy of config with each HyperParam replaced by its value (dicts on the way copied; the rest shared)."""

    def replace(value, seen):
        if isinstance(value, HyperParam):
            return mapping[value]
        if isinstance(value, dict) and id(value) not in seen:
            return {k: replace(v, seen | {id(value)}) for k, v in value.items()}
        return value

    new = Config()
    new.dict = dict(config.dict)
    new.files = list(config.files)
    new.typed_dict = {k: replace(v, set()) for k, v in config.typed_dict.items()}
    new.set("task", "train")
    return new


class HyperParamTuning:
    """The search (see the module doc); ``engine_cls`` builds and trains one individual's model."""

    def __init__(self, config, train_data, engine_cls, log):
        opts = config.typed_value("hyper_param_tuning", None)
        if not isinstance(opts, dict):
            raise ValueError("task 'hyper_param_tuning' needs hyper_param_tuning = {'num_tune_iterations': ..., "
                             "'num_individuals': ...} in the config")
        unknown = sorted(set(opts) - set(_OPTIONS))
        missing = [k for k in ("num_tune_iterations", "num_individuals") if k not in opts]
        if unknown or missing:
            raise ValueError("hyper_param_tuning: %s (options: %s)" % (
                "unknown option(s) %s" % unknown if unknown else "missing %s" % missing, ", ".join(_OPTIONS)))
        self.config = config
        self.engine_cls = engine_cls
        self.log = log
        self.params = find_hyper_params(config)
        if not self.params:
            raise ValueError("task 'hyper_param_tuning': the config has no HyperParam placeholders")
        self.num_iterations = int(opts["num_tune_iterations"])
        self.num_individuals = int(opts["num_individuals"])
        self.num_kill = int(opts.get("num_kill_individuals", self.num_individuals // 2))
        self.num_best = int(opts.get("num_best", 10))
        self.dry_run_first = bool(opts.get("dry_run_first_individual", True))
        self.num_threads = opts.get("num_threads", 1)
        if self.num_individuals < 2:
            raise ValueError("hyper_param_tuning: num_individuals must be at least 2, got %r" % self.num_individuals)
        self.train_data = _first_seqs(train_data, int(opts.get("num_train_steps", 100)))

    def random_individual(self, iteration, idx):
        return Individual({p: p.get_random_value_by_idx(iteration, idx) for p in self.params},
                          name="%i-%i" % (iteration, idx))

    def train_individual(self, individual, verbose):
        if individual.cost is not None:
            return individual.cost
        start = time.time()
        self.log.v3("Training %r using hyper params:" % individual.name)
        for p in self.params:
            self.log.v3("  %s -> %r" % (p.description(), individual.mapping[p]))
        config = config_with_values(self.config, individual.mapping)
        log = self.log if verbose else Log(verbosity=0)
        engine = self.engine_cls(config, log=log)
        try:
            lr = load_learning_rate_control_from_config(config).get_learning_rate_for_epoch(1)
            score = engine.train_one_epoch_from_scratch(self.train_data, lr,
                                                        prefix="hyper param tune train %r" % individual.name)
        finally:
            engine.close_session()
        cost = score["cost:output"] if "cost:output" in score else sum(score.values())
        individual.cost = float(cost) if numpy.isfinite(cost) else float("inf")
        self.log.v1("Individual %s: train cost: %s elapsed: %s" % (individual.name, cost, hms(time.time() - start)))
        return individual.cost

    def work(self):
        self.log.v1("We have found these hyper params:\n%s" % "\n".join("  " + p.description() for p in self.params))
        if self.num_threads not in (None, 1):
            self.log.v3("num_threads %r: returnn_lite trains the individuals one after another" % (self.num_threads,))
        best, population = [], []
        for it in range(1, self.num_iterations + 1):
            self.log.v3("Starting iteration %i." % it)
            if it == 1:
                population.append(Individual({p: p.get_default_value() for p in self.params}, name="default"))
                population.append(Individual({p: p.get_initial_value() for p in self.params}, name="canonical"))
            population.extend(self.random_individual(it, i) for i in range(self.num_individuals - len(population)))
            if it > 1:
                for i in range(len(population) - 1):
                    population[i] = population[i].cross_over(self.params, population[:i] + population[i + 1:],
                                                             seed=it * 1013 + i * 17)
            for i, individual in enumerate(population):
                self.train_individual(individual, verbose=(it == 1 and i == 0 and self.dry_run_first))
            population.sort(key=lambda x: x.cost)
            if self.num_kill:
                del population[-self.num_kill:]
            best = sorted({id(x): x for x in best + population}.values(), key=lambda x: x.cost)[:self.num_best]
            population = best[:self.num_kill // 4] + population
            self._print_individual("Current best setting, individual", best[0])
        self.log.v1("Best %i settings:" % len(best))
        for individual in best:
            self._print_individual("Individual", individual)
        return best

    def _print_individual(self, prefix, individual):
        self.log.v1("%s %s cost: %s" % (prefix, individual.name, individual.cost))
        for p in self.params:
            self.log.v1("  %s -> %r" % (p.description(), individual.mapping[p]))


def _first_seqs(dataset, num_seqs):
    """A StaticDataset of the first num_seqs sequences of dataset (epoch 1 order): each individual trains on it."""
    from ..datasets.static import StaticDataset

    dataset.init_seq_order(epoch=1)
    seqs, tags = [], []
    keys = dataset.get_data_keys()
    while len(seqs) < num_seqs and dataset.is_less_than_num_seqs(len(seqs)):
        i = len(seqs)
        dataset.load_seqs(i, i + 1)
        seqs.append({key: dataset.get_data(i, key) for key in keys})
        tags.append(dataset.get_seq_tag(i))
    if not seqs:
        raise ValueError("task 'hyper_param_tuning': the train dataset has no sequences")
    return StaticDataset(data=seqs, output_dim={k: list(v) for k, v in dataset.num_outputs.items() if k in keys},
                         seq_tags=tags, name="train")
