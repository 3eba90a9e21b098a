"""Distributed training on TF collectives (issue 18): 2 workers on loopback, tiny model, a few steps."""

import io
import os
import time

import numpy
import pytest
import tensorflow as tf

from returnn_lite.config import Config
from returnn_lite.datasets import init_dataset
from returnn_lite.distributed import DistributedError, DistributedSetup, get_distributed_setup
from returnn_lite.engine import Engine
from returnn_lite.engine.distributed_train import DistributedTraining
from returnn_lite.engine.progress import Log
from returnn_lite.launch import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = """
task = "train"
train = {"class": "Task12AXDataset", "num_seqs": 8, "fixed_random_seed": 3}
num_inputs = 9
num_outputs = 2
network = {"hidden": {"class": "linear", "activation": "tanh", "n_out": 4, "from": "data"},
           "output": {"class": "softmax", "loss": "ce", "from": "hidden"}}
batch_size = 0
max_seqs = 1
optimizer = {"class": "sgd"}
num_epochs = 1
log_verbosity = 5
"""


def _run_workers(tmp_path, extra, timeout=55):
    cfg = tmp_path / "dist.config"
    cfg.write_text(CONFIG + "model = %r\n" % str(tmp_path / "net") + extra)
    out = io.StringIO()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT + (os.pathsep + old if old else "")
    try:
        start = time.time()
        status = launch(2, [str(cfg)], timeout=timeout, out=out)
        elapsed = time.time() - start
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    return status, out.getvalue(), elapsed


def _params(filename):
    reader = tf.train.load_checkpoint(filename)
    return {k: reader.get_tensor(k) for k in ("hidden/W", "hidden/b", "output/W", "output/b")}


def _single(tmp_path, **kwargs):
    d = {"task": "train", "train": {"class": "Task12AXDataset", "num_seqs": 8, "fixed_random_seed": 3},
         "num_inputs": 9, "num_outputs": 2, "batch_size": 0, "max_seqs": 1, "optimizer": {"class": "sgd"},
         "num_epochs": 1, "log_verbosity": 0, "model": str(tmp_path / "single"),
         "network": {"hidden": {"class": "linear", "activation": "tanh", "n_out": 4, "from": "data"},
                     "output": {"class": "softmax", "loss": "ce", "from": "hidden"}}}
    d.update(kwargs)
    Engine(Config(d)).run()
    return _params(str(tmp_path / "single.001"))


def test_grad_mode_equals_one_worker_with_summed_shard_gradients(tmp_path):
    status, out, _ = _run_workers(tmp_path, 'learning_rate = 0.5\nhorovod_reduce_type = "grad"\n'
                                            'horovod_dataset_distribution = "shard"\n')
    assert status == 0, out
    dist = _params(str(tmp_path / "net.001"))
    # one worker: seqs 0,1 | 2,3 | ... (worker 0 had 0,2,4,6; worker 1 had 1,3,5,7), gradients of 2 steps summed
    ref = _single(tmp_path, learning_rate=0.5, accum_grad_multiple_step=2)
    untrained = _single(tmp_path / "u", learning_rate=0.0)
    for key in ref:
        numpy.testing.assert_allclose(dist[key], ref[key], rtol=1e-4, atol=1e-5, err_msg=key)
        assert not numpy.allclose(dist[key], untrained[key]), key
    # only rank 0 writes files and logs the epoch summary
    assert "[rank 0] Saved model" in out and "[rank 1] Saved model" not in out
    assert "[rank 0] epoch 1 score" in out and "[rank 1] epoch 1 score" not in out
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("net")) == [
            "net.001.data-00000-of-00001", "net.001.index", "net.learning_rates"]


def test_param_mode_averages_every_n_steps(tmp_path):
    # sync every step with SGD: mean(p - lr * g_i) = p - lr/2 * sum(g_i), i.e. grad mode with half the rate
    status, out, _ = _run_workers(tmp_path, 'learning_rate = 0.5\ndistributed = {"reduce_type": "param", '
                                            '"param_sync_step": 1, "dataset_distribution": "shard"}\n')
    assert status == 0, out
    ref = _single(tmp_path, learning_rate=0.25, accum_grad_multiple_step=2)
    dist = _params(str(tmp_path / "net.001"))
    for key in ref:
        numpy.testing.assert_allclose(dist[key], ref[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_param_mode_sync_step_2(tmp_path):
    status, out, _ = _run_workers(tmp_path, 'learning_rate = 0.5\nhorovod_reduce_type = "param"\n'
                                            'horovod_param_sync_step = 2\n')
    assert status == 0, out
    for rank in (0, 1):
        synced = [line for line in out.splitlines() if line.startswith("[rank %i] distributed: params averaged" % rank)]
        assert [line.rsplit(" ", 1)[-1] for line in synced] == ["2", "4"], out


def test_shard_and_seed_offset_distribution():
    log = Log(verbosity=0)
    orders = []
    for rank in (0, 1):
        dataset = init_dataset({"class": "Task12AXDataset", "num_seqs": 11, "seq_ordering": "random"})
        dist = DistributedTraining(DistributedSetup(["a:1", "b:2"], rank, dataset_distribution="shard"), log)
        dist.init_seq_order(dataset, epoch=1)
        orders.append(list(dataset.get_current_seq_order()))
    assert not set(orders[0]) & set(orders[1])
    assert sorted(orders[0] + orders[1]) == list(range(11))
    orders = []
    for rank in (0, 1):
        dataset = init_dataset({"class": "Task12AXDataset", "num_seqs": 11, "seq_ordering": "random"})
        dist = DistributedTraining(DistributedSetup(["a:1", "b:2"], rank, dataset_distribution="random_seed_offset"),
                                   log)
        dist.init_seq_order(dataset, epoch=1)
        orders.append(list(dataset.get_current_seq_order()))
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1]) == list(range(11))


def test_setup_from_tf_config_and_config_keys(monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, '
                                    '"task": {"type": "worker", "index": 0}}')
    setup = get_distributed_setup(Config({"use_horovod": True}), log=Log(verbosity=3))
    assert (setup.rank, setup.size, setup.reduce_type, setup.dataset_distribution) == (0, 2, "grad", "shard")
    assert capsys.readouterr().out.count("notice: use_horovod = True") == 1
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, '
                                    '"task": {"type": "worker", "index": 1}}')
    setup = get_distributed_setup(Config({"horovod_reduce_type": "param", "horovod_param_sync_step": 3}))
    assert (setup.rank, setup.size, setup.reduce_type, setup.param_sync_step) == (1, 2, "param", 3)
    with pytest.raises(DistributedError, match="reduce_type 'bad'"):
        get_distributed_setup(Config({"horovod_reduce_type": "bad"}))
    with pytest.raises(DistributedError, match="unknown key"):
        get_distributed_setup(Config({"distributed": {"reduce": "grad"}}))
    with pytest.raises(Exception, match="only task train"):
        Engine(Config({"task": "forward", "use_horovod": True, "train": {"class": "Task12AXDataset"}})).train()
    monkeypatch.delenv("TF_CONFIG")
    assert get_distributed_setup(Config({})) is None
    with pytest.raises(DistributedError, match="needs the workers"):
        get_distributed_setup(Config({"use_horovod": True}))
    setup = get_distributed_setup(Config({"distributed": {"workers": ["h:1", "h:2", "h:3"], "rank": 2}}))
    assert (setup.rank, setup.size) == (2, 3)


def test_killed_worker_ends_the_run(tmp_path):
    kill = ("import os, json, threading, signal\n"
            "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
            "    threading.Timer(12.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()\n"
            "train = {'class': 'Task12AXDataset', 'num_seqs': 2000}\nnum_epochs = 1000\n"
            "learning_rate = 0.01\n")
    status, out, elapsed = _run_workers(tmp_path, kill, timeout=55)
    assert status != 0
    assert "launch: worker 1 failed (killed by signal 9)" in out, out
    assert elapsed < 50


def test_killed_worker_stops_the_other_with_a_clear_message(tmp_path):
    """Without the launcher: the surviving worker notices by itself (collective error / timeout)."""
    import subprocess
    import sys

    from returnn_lite.launch import free_ports, worker_env

    cfg = tmp_path / "dist.config"
    cfg.write_text(CONFIG + "model = %r\n" % str(tmp_path / "net") + (
        "import os, json, threading, signal\n"
        "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
        "    threading.Timer(12.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()\n"
        "train = {'class': 'Task12AXDataset', 'num_seqs': 2000}\nnum_epochs = 1000\nlearning_rate = 0.01\n"
        "log_verbosity = 3\ndistributed_timeout = 20\n"))
    workers = ["127.0.0.1:%i" % p for p in free_ports(2)]
    procs = []
    for rank in (0, 1):
        env = worker_env(workers, rank)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(subprocess.Popen([sys.executable, "-m", "returnn_lite", str(cfg)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        out1, _ = procs[1].communicate(timeout=50)
        start = time.time()
        out0, _ = procs[0].communicate(timeout=50)
        assert time.time() - start < 45
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[1].returncode == -9
    assert procs[0].returncode == 1
    assert "distributed: worker 0 of 2 lost contact with the other workers" in out0.decode(), out0.decode()[-2000:]


def test_fused_gradient_all_reduce_buckets_pack_and_split():
    from returnn_lite.distributed import Collectives

    class LocalSetup(DistributedSetup):
        device = "/device:CPU:0"  # no server: the session is local

    setup = LocalSetup(["127.0.0.1:1"], 0)  # one worker: the collective is an identity, the packing is real
    graph = tf.Graph()
    with graph.as_default():
        values = [numpy.arange(n * 3, dtype="float32").reshape(n, 3) + n for n in (1, 4, 2, 8)]
        values.append(numpy.array([7.0]))  # float64: a buffer of its own
        tensors = [tf.constant(v) for v in values]
        # filled from the end: 8x3 floats (96 bytes) closes a bucket, then 2x3 + 4x3 (72), then 1x3 (open)
        assert Collectives._buckets(tensors, 64) == [[3], [1, 2], [4], [0]]
        assert Collectives._buckets(tensors, None) == [[4], [0, 1, 2, 3]]
        outs = Collectives(setup).all_reduce_list(tensors, "sum", bucket_bytes=64)
        assert [o.shape.as_list() for o in outs] == [list(v.shape) for v in values]
        with tf.compat.v1.Session(graph=graph) as session:
            for value, out in zip(values, session.run(outs)):
                numpy.testing.assert_array_equal(value, out)


def test_grad_mode_with_gradient_buckets_equals_one_buffer(tmp_path):
    # tiny buckets: every gradient (and the step flag) in its own all-reduce, results as with one buffer
    status, out, _ = _run_workers(tmp_path, 'learning_rate = 0.5\ndistributed = {"reduce_type": "grad", '
                                            '"grad_bucket_bytes": 16}\n')
    assert status == 0, out
    dist = _params(str(tmp_path / "net.001"))
    ref = _single(tmp_path, learning_rate=0.5, accum_grad_multiple_step=2)
    for key in ref:
        numpy.testing.assert_allclose(dist[key], ref[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_grad_bucket_bytes_is_checked():
    with pytest.raises(DistributedError, match="grad_bucket_bytes"):
        DistributedSetup(["a:1", "b:2"], 0, grad_bucket_bytes=-1)
