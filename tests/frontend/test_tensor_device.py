"""rf ops on the torch backend put the tensors they create on the right device (issue 27): the device of the inputs,
else rf's default device (rf.set_default_device_ctx); sequence lengths stay on the CPU. Checked with PyTorch's
"meta" device (no data: a host read of a meta tensor fails, so this also shows no host sync on the data device),
and on CUDA where there is a GPU."""

import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, Tensor, batch_dim  # noqa: E402

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")
hid_dim = Dim(4, name="hid")


@pytest.fixture
def lengths_on_cpu():
    rf.select_backend_torch()
    batch_dim.dyn_size_ext = Tensor("b", dims=[], dtype="int32", raw_tensor=torch.tensor(2, dtype=torch.int32))
    time_dim.dyn_size_ext = Tensor("t", dims=[batch_dim], dtype="int32", raw_tensor=torch.tensor([5, 3]))
    yield
    for d in (batch_dim, time_dim):
        d.reset_eager()


def test_default_device_api():
    assert rf.get_default_device() is None
    with rf.set_default_device_ctx("meta"):
        assert rf.get_default_device() == "meta"
        with rf.set_default_device_ctx(None):
            assert rf.get_default_device() is None
        assert rf.get_default_device() == "meta"
    assert rf.get_default_device() is None
    rf.set_default_device(torch.device("cpu"))
    try:
        assert rf.get_default_device() == "cpu"
    finally:
        rf.set_default_device(None)


def _ops(x, device):
    """Tensors of rf ops that create tensors (masks, ranges, constants, random, states) from x (dims B, T, F)."""
    lstm = rf.LSTM(feat_dim, hid_dim)
    out = {
        "sum_masked": rf.reduce_sum(x, axis=time_dim),
        "mean_masked": rf.reduce_mean(x, axis=time_dim),
        "max_masked": rf.reduce_max(x, axis=time_dim),
        "softmax_masked": rf.softmax(x, axis=time_dim),
        "seq_mask": rf.sequence_mask([batch_dim, time_dim]),
        "zeros": rf.zeros([batch_dim, feat_dim]),
        "ones_like": rf.ones_like(x),
        "range": rf.range_over_dim(time_dim),
        "const": rf.convert_to_tensor(1.5),
        "random": rf.random_uniform([batch_dim, feat_dim]),
        "random_seeded": rf.random_normal([feat_dim], seed=3),
        "init_state_h": lstm.default_initial_state(batch_dims=[batch_dim]).h,
        "size_on_device": time_dim.get_size_tensor(device=device),
        "where_scalars": rf.where(rf.sequence_mask([batch_dim, time_dim]), 1.0, 0.0),
    }
    padded, (t_pad,) = rf.pad(x, axes=[time_dim], padding=[(1, 2)], handle_dynamic_dims=True)
    out["pad_dynamic"] = padded
    both, _ = rf.concat((x, time_dim), (padded, t_pad))
    out["concat_dynamic"] = both
    idx = rf.convert_to_tensor(torch.tensor([7, 1], device=device), dims=[batch_dim], dtype="int64")
    out["gather_clipped"] = rf.gather(x, indices=idx, axis=time_dim, clip_to_valid=True)
    out["dropout"] = rf.dropout(x, 0.5, axis=feat_dim, on_forward=True)
    out["linear_same_dims"] = rf.Linear(feat_dim, feat_dim)(x)
    return out


@pytest.mark.parametrize("device", ["meta"] + (["cuda"] if torch.cuda.is_available() else []))
def test_created_tensors_on_the_data_and_default_device(lengths_on_cpu, device):
    x = Tensor("x", dims=[batch_dim, time_dim, feat_dim], dtype="float32",
               raw_tensor=torch.randn(2, 5, 3, device=device))
    rf.init_forward_step_run_ctx()
    with rf.set_default_device_ctx(device):
        out = _ops(x, device)
    wrong = {k: str(t.raw_tensor.device) for k, t in out.items() if t.raw_tensor.device.type != device}
    assert not wrong, wrong
    assert time_dim.dyn_size_ext.raw_tensor.device.type == "cpu"  # the lengths stay on the CPU
    assert out["zeros"].device.startswith(device)


def test_mask_moves_lengths_to_the_data_device_without_blocking(lengths_on_cpu, monkeypatch):
    """The mask of a dynamic dim is built on the data's device: the CPU lengths are copied with non_blocking=True."""
    calls = []
    real_to = torch.Tensor.to

    def spy_to(self, *args, **kwargs):
        calls.append((tuple(self.shape), args, kwargs))
        return real_to(self, *args, **kwargs)

    x = Tensor("x", dims=[batch_dim, time_dim, feat_dim], dtype="float32", raw_tensor=torch.randn(2, 5, 3,
                                                                                                     device="meta"))
    monkeypatch.setattr(torch.Tensor, "to", spy_to)
    y = rf.reduce_sum(x, axis=time_dim)
    assert y.raw_tensor.device.type == "meta"
    assert any(shape == (2,) and kwargs.get("non_blocking") and str(args[0]) == "meta" for shape, args, kwargs in calls)


def test_default_device_of_params(lengths_on_cpu):
    with rf.set_default_device_ctx("meta"):
        lin = rf.Linear(feat_dim, hid_dim)
    assert lin.weight.raw_tensor.device.type == "meta" and isinstance(lin.weight.raw_tensor, torch.nn.Parameter)
    assert rf.Linear(feat_dim, hid_dim).weight.raw_tensor.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_train_step_on_cuda_with_lengths_on_cpu(lengths_on_cpu):
    """An rf model trains on the GPU while the lengths stay on the CPU (the original's engine keeps them there)."""
    classes_dim = Dim(5, name="classes")

    class Model(rf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = rf.LSTM(feat_dim, hid_dim)
            self.att = rf.SelfAttention(hid_dim, hid_dim, key_dim_total=hid_dim, value_dim_total=hid_dim, num_heads=2)
            self.out = rf.Linear(hid_dim, classes_dim)

        def __call__(self, x):
            h, _ = self.lstm(x, state=self.lstm.default_initial_state(batch_dims=[batch_dim]), spatial_dim=time_dim)
            return self.out(self.att(h, axis=time_dim))

    with rf.set_default_device_ctx("cuda"):
        model = Model()
        x = Tensor("x", dims=[batch_dim, time_dim, feat_dim], dtype="float32", raw_tensor=torch.randn(2, 5, 3).cuda())
        y = Tensor("y", dims=[batch_dim, time_dim], dtype="int32", sparse_dim=classes_dim,
                   raw_tensor=torch.randint(0, 5, (2, 5), dtype=torch.int32).cuda())
        rf.init_train_step_run_ctx(train_flag=True, step=0, epoch=1)
        logits = model(x)
        rf.cross_entropy(estimated=logits, estimated_type="logits", target=y, axis=classes_dim).mark_as_loss("ce")
        rf.get_run_ctx().total_loss().raw_tensor.backward()
    assert all(p.raw_tensor.grad is not None and p.raw_tensor.grad.is_cuda for p in model.parameters())
