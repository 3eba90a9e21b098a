"""The torch backend's GPU-speed choices keep the numbers: rf.Linear is one F.linear (in the autocast dtype, as
torch.nn.Linear), rf.matmul returns the batched matmul's own layout (no strided view), a masked softmax gives padded
frames weight 0 (also for an empty sequence), and cached sequence masks follow in-place changes of the lengths."""

import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402


@pytest.fixture(autouse=True)
def _torch_backend():
    rf.select_backend_torch()
    rf.set_random_seed(1)


def _time_dim(lengths):
    time = Dim(None, name="time")
    batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(len(lengths), dtype=torch.int32), dims=[],
                                                  dtype="int32")
    time.dyn_size_ext = rf.convert_to_tensor(torch.tensor(lengths, dtype=torch.int32), dims=[batch_dim],
                                             dtype="int32")
    return time


def test_linear_is_x_dot_weight_plus_bias_and_keeps_the_autocast_dtype():
    in_dim, out_dim = Dim(5, name="in"), Dim(3, name="out")
    lin = rf.Linear(in_dim, out_dim)
    with torch.no_grad():
        lin.bias.raw_tensor.normal_()
    x = rf.convert_to_tensor(torch.randn(4, 5), dims=[batch_dim, in_dim], dtype="float32")
    y = lin(x)
    assert y.dims == (batch_dim, out_dim)
    ref = x.raw_tensor @ lin.weight.raw_tensor + lin.bias.raw_tensor
    torch.testing.assert_close(y.raw_tensor, ref)
    # in_dim not last: moved last
    xt = rf.convert_to_tensor(x.raw_tensor.t().contiguous(), dims=[in_dim, batch_dim], dtype="float32")
    torch.testing.assert_close(lin(xt).raw_tensor, ref)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yb = lin(x)
    assert yb.raw_tensor.dtype == torch.bfloat16 and yb.dtype == "bfloat16"  # as torch.nn.Linear under autocast
    torch.testing.assert_close(yb.raw_tensor.float(), ref, atol=0.05, rtol=0.05)


def test_matmul_result_is_the_batched_layout_not_a_strided_view():
    time = _time_dim([4, 3])
    keys_time = time  # self attention: query and keys over the same time dim, reduced over key
    heads, key = Dim(2, name="heads"), Dim(3, name="key")
    q = rf.convert_to_tensor(torch.randn(2, 4, 2, 3), dims=[batch_dim, time, heads, key], dtype="float32")
    k_time = Dim(None, name="kv-time")
    k_time.dyn_size_ext = time.dyn_size_ext
    k = rf.convert_to_tensor(torch.randn(2, 4, 2, 3), dims=[batch_dim, k_time, heads, key], dtype="float32")
    energy = rf.matmul(q, k, reduce=key)
    assert energy.dims == (batch_dim, heads, keys_time, k_time)  # common dims, then q's, then k's
    assert energy.raw_tensor.is_contiguous()
    torch.testing.assert_close(energy.raw_tensor, torch.einsum("bthk,bshk->bhts", q.raw_tensor, k.raw_tensor))


@pytest.mark.parametrize("lengths", [[4, 2], [4, 0]])
def test_masked_softmax_gives_padded_frames_zero_weight(lengths):
    time = _time_dim(lengths)
    feat = Dim(2, name="feat")
    x = rf.convert_to_tensor(torch.randn(2, 4, 2), dims=[batch_dim, time, feat], dtype="float32")
    y = rf.softmax(x, axis=time).raw_tensor
    assert not torch.isnan(y).any()
    for b, n in enumerate(lengths):
        assert (y[b, n:] == 0).all()
        if n:
            torch.testing.assert_close(y[b, :n], torch.softmax(x.raw_tensor[b, :n], dim=0))


def test_cached_sequence_mask_follows_in_place_changes_of_the_lengths():
    time = _time_dim([4, 2])
    x = rf.convert_to_tensor(torch.ones(2, 4), dims=[batch_dim, time], dtype="float32")
    assert rf.reduce_sum(x, axis=time).raw_tensor.tolist() == [4.0, 2.0]
    time.dyn_size_ext.raw_tensor[1] = 3  # (the cache keys on the tensor's version)
    assert rf.reduce_sum(x, axis=time).raw_tensor.tolist() == [4.0, 3.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (cuDNN)")
def test_cuda_lstm_weights_are_one_cudnn_buffer_and_train_as_on_the_cpu():
    import warnings

    from returnn_lite.torch.frontend import rf_module_to_pt_module

    time = _time_dim([5, 3])
    in_dim, out_dim = Dim(4, name="in"), Dim(6, name="out")
    lstm = rf.LSTM(in_dim, out_dim)
    pt = rf_module_to_pt_module(lstm)
    x_cpu = torch.randn(2, 5, 4)

    def step(device):
        x = rf.convert_to_tensor(x_cpu.to(device), dims=[batch_dim, time, in_dim], dtype="float32")
        with rf.set_default_device_ctx(str(device)):
            state = lstm.default_initial_state(batch_dims=[batch_dim])
        y, _ = lstm(x, state=state, spatial_dim=time)
        pt.zero_grad(set_to_none=True)
        y.raw_tensor.square().sum().backward()
        return y.raw_tensor.detach().cpu(), [p.grad.detach().cpu() for p in pt.parameters()]

    y_ref, g_ref = step(torch.device("cpu"))
    pt.cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "RNN module weights are not part of single contiguous chunk"
        for _ in range(2):
            y, g = step(torch.device("cuda"))
    assert lstm.ff_weight.raw_tensor._rf_cudnn_flat  # flattened (not the copying fallback)
    torch.testing.assert_close(y, y_ref, atol=1e-4, rtol=1e-4)
    for a, b in zip(g, g_ref):  # sums over frames in another order (cuDNN; seen on an H200: 1.6e-4 abs)
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)
    with torch.no_grad():  # an in-place update (as Adam's) reaches the buffer cuDNN reads
        lstm.ff_weight.raw_tensor.zero_()
        lstm.rec_weight.raw_tensor.zero_()
        lstm.bias.raw_tensor.zero_()
    y0, _ = step(torch.device("cuda"))
    assert torch.count_nonzero(y0) == 0
