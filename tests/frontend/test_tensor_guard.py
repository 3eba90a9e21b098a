"""Packaging guards (issue 26): the tensor package, rf and the rf torch backend run with TensorFlow blocked from
import; the TF compiler builds and runs a net with torch blocked. Each in a subprocess with a sys.meta_path blocker."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCKER = """
import sys

class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == %r:
            raise ImportError("blocked by the test: import of " + name)

sys.meta_path.insert(0, _Blocker())
"""


def _run_blocked(blocked, code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", BLOCKER % blocked + textwrap.dedent(code)], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def test_blocker_blocks():
    out = _run_blocked("tensorflow", """
        try:
            import tensorflow  # noqa: F401
        except ImportError as exc:
            print("BLOCKED", exc)
    """)
    assert "BLOCKED" in out


def test_tensor_frontend_and_torch_backend_without_tensorflow():
    pytest.importorskip("torch")
    out = _run_blocked("tensorflow", """
        import torch

        import returnn_lite.frontend as rf
        import returnn_lite.tensor
        import returnn_lite.torch.frontend
        from returnn_lite.tensor import Dim, Tensor, TensorDict, batch_dim

        rf.select_backend_torch()
        time_dim, in_dim, hid_dim, classes_dim = Dim(None, name="time"), Dim(3, name="in"), Dim(5, name="hid"), \\
            Dim(4, name="classes")

        class Model(rf.Module):
            def __init__(self):
                super().__init__()
                self.lstm = rf.LSTM(in_dim, hid_dim)
                self.att = rf.SelfAttention(hid_dim, hid_dim, key_dim_total=hid_dim, value_dim_total=hid_dim,
                                            num_heads=1, att_dropout=0.0)
                self.out = rf.Linear(hid_dim, classes_dim)

            def __call__(self, x):
                h, _ = self.lstm(x, state=self.lstm.default_initial_state(batch_dims=[batch_dim]),
                                 spatial_dim=time_dim)
                return self.out(self.att(h, axis=time_dim) + h)

        td = TensorDict()
        td.update({"data": {"dims": (batch_dim, time_dim, in_dim)},
                   "classes": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": classes_dim}},
                  auto_convert=True)
        batch_dim.dyn_size_ext = Tensor("b", dims=[], dtype="int32", raw_tensor=torch.tensor(2, dtype=torch.int32))
        time_dim.dyn_size_ext = Tensor("t", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor([6, 4]))
        td["data"].raw_tensor = torch.randn(2, 6, 3)
        td["classes"].raw_tensor = torch.randint(0, 4, (2, 6), dtype=torch.int32)
        model = Model()
        rf.init_train_step_run_ctx(train_flag=True, step=0, epoch=1)
        logits = model(td["data"])
        ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=td["classes"], axis=classes_dim)
        ce.mark_as_loss("ce")
        rf.get_run_ctx().total_loss().raw_tensor.backward()
        grads = {n: p.raw_tensor.grad for n, p in model.named_parameters()}
        assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), grads
        assert not [m for m in sys.modules if m.split(".")[0] == "tensorflow"]
        print("OK", sorted(grads))
    """)
    assert "OK" in out and "att.proj.weight" in out


def test_tf_compiler_without_torch():
    out = _run_blocked("torch", """
        import numpy as np
        import tensorflow as tf

        from returnn_lite.config import Config
        from returnn_lite.network import Subnetwork, TFNetwork  # noqa: F401

        config = Config({"extern_data": {"data": {"dim": 3}}})
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            net = TFNetwork(config=config, train_flag=False)
            net.construct_from_dict({"output": {"class": "linear", "activation": "tanh", "n_out": 2, "from": "data"},
                                     "sum": {"class": "reduce", "mode": "sum", "axis": "T", "from": "output",
                                             "is_output_layer": True}})
            session.run(tf.compat.v1.global_variables_initializer())
            data = net.extern_data.data["data"]
            out = session.run(net.get_layer("sum").output.placeholder, feed_dict={
                data.placeholder: np.ones((2, 4, 3), "float32"), data.size_placeholder[0]: [4, 2]})
        assert out.shape == (2, 2)
        assert not [m for m in sys.modules if m.split(".")[0] == "torch"]
        print("OK")
    """)
    assert "OK" in out
