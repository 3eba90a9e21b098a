"""The TF engine's per-step path (issue 30, benchmarks/engine_step.py): train/eval steps as one TF callable give
what session.run gives, the per-step feed check keeps its errors, and the 12AX data keeps its random stream."""

import numpy
import pytest

from returnn_lite.config import Config
from returnn_lite.datasets import Task12AXDataset
from returnn_lite.engine import Engine
from returnn_lite.engine import tf_backend
from returnn_lite.engine.backend import EngineError
from returnn_lite.engine.checks import check_feed_value
from returnn_lite.engine.learning_rate_control import load_learning_rate_control_from_config
from returnn_lite.engine.progress import Log
from returnn_lite.tensor import Dim, Tensor, batch_dim


def _reference_12ax_input(random, seq_len):
    """The generator as it was written first (RandomState.choice / .uniform): the stream the data must keep."""
    seq = str(random.choice(["", "1", "2"]))
    while len(seq) < seq_len:
        if random.uniform() < 0.5:
            seq += str(random.choice(list("12")))
        if random.uniform() < 0.9:
            seq += str(random.choice(["AX", "BY"]))
        while random.uniform() < 0.5:
            seq += str(random.choice(list("123ABCXYZ")))
    return ["123ABCXYZ".index(c) for c in seq[:seq_len]]


@pytest.mark.parametrize("epoch", [1, 4])
def test_12ax_data_keeps_the_reference_random_stream(epoch):
    dataset = Task12AXDataset(num_seqs=40)
    dataset.init_seq_order(epoch=epoch)
    seed = dataset.get_random_seed_for_epoch(epoch)
    for seq_idx in range(dataset.num_seqs):
        corpus_idx = dataset.get_corpus_seq_idx(seq_idx)
        random = numpy.random.RandomState([seed & 0xFFFFFFFF, corpus_idx & 0xFFFFFFFF])
        expected = _reference_12ax_input(random, random.randint(10, 100))
        assert dataset.get_data(seq_idx, "data").argmax(-1).tolist() == expected
        assert dataset.get_data(seq_idx, "classes").tolist() == Task12AXDataset.make_output_seq(expected)


def _engine(tmp_path):
    config = Config()
    config.update({
        "task": "train", "train": {"class": "Task12AXDataset", "num_seqs": 60},
        "dev": {"class": "Task12AXDataset", "num_seqs": 20, "fixed_random_seed": 1},
        "num_inputs": 9, "num_outputs": 2, "batch_size": 2000, "max_seqs": 10, "adam": True, "learning_rate": 0.01,
        "network": {"fw0": {"class": "rec", "unit": "lstm", "n_out": 8},
                    "output": {"class": "softmax", "loss": "ce", "from": "fw0"}},
        "model": str(tmp_path / "model"), "learning_rate_file": str(tmp_path / "lr")})
    engine = Engine(config, log=Log(verbosity=0))
    engine._init_train_datasets()
    engine.learning_rate_control = load_learning_rate_control_from_config(config)
    engine._build(1, engine.train_data, train=True)
    return engine


def _train_and_eval(engine):
    train = engine.run_epoch(engine.train_data, 1, train=True, learning_rate=0.01)[:2]
    dev = engine.run_epoch(engine.eval_datasets["dev"], 1, train=False)[:2]
    backend = engine.backend
    with backend.graph.as_default():
        import tensorflow as tf

        params = backend.session.run(tf.compat.v1.trainable_variables())
    return train, dev, params


def test_steps_as_tf_callable_equal_session_run(tmp_path, monkeypatch):
    engine = _engine(tmp_path / "a")
    with_callable = _train_and_eval(engine)
    kinds = {key[0] for key, runner in engine.backend._step_callables.items() if runner is not None}
    assert kinds == {"train", "eval"}  # the callables did run
    engine.close()
    monkeypatch.setattr(tf_backend._StepCallable, "make", classmethod(lambda cls, *args: None))
    engine = _engine(tmp_path / "b")
    with_session_run = _train_and_eval(engine)
    assert not any(engine.backend._step_callables.values())
    engine.close()
    assert with_callable[:2] == with_session_run[:2]  # scores: exactly the same
    for a, b in zip(with_callable[2], with_session_run[2]):
        numpy.testing.assert_array_equal(a, b)


def test_feed_check_looks_at_the_frames_within_the_lengths_only():
    time_dim = Dim(None, name="time")
    classes = Tensor("classes", dims=(batch_dim, time_dim), dtype="int32", sparse_dim=Dim(2, name="classes"))
    features = Tensor("data", dims=(batch_dim, time_dim, Dim(3, name="feat")), dtype="float32")
    lens = numpy.array([3, 2], dtype="int32")
    labels = numpy.array([[0, 1, 1], [1, 0, 7]], dtype="int32")  # 7: padding (beyond the length 2)
    values = numpy.ones((2, 3, 3), dtype="float32")
    values[1, 2, 0] = numpy.nan  # padding too
    from types import SimpleNamespace

    view = SimpleNamespace(layers={}, extern_data=SimpleNamespace(default_input="data"))  # a net without layers

    def check(tensor, value, tags=("seq-a", "seq-b")):
        check_feed_value(tensor, value, lens, tensor.name, "train", view, list(tags), EngineError)

    check(classes, labels)
    check(features, values)
    labels[1, 1] = 5
    with pytest.raises(EngineError, match=r"label 5 out of range \[0, 2\).* in seq 'seq-b'"):
        check(classes, labels)
    values[0, 1, 2] = numpy.inf
    with pytest.raises(EngineError, match=r"non-finite input values.* in seq 'seq-a'"):
        check(features, values)


def test_engine_step_benchmark_runs():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "engine_step.py"), "--rounds", "1"],
                         cwd=root, env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for fragment in ("engine (run_epoch, log_verbosity 5):", "bare session.run, prebuilt feeds:", "ratio engine/bare:"):
        assert fragment in out.stdout, out.stdout
