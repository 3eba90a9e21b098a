"""rf conv with groups (depthwise) and strides as the original keeps them, pool2d, gating, rf.stft and rf.audio
(log-mel, SpecAugment), against numpy references from first principles, on both backends where both run them."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import in_order, random_params, run_layers, run_torch  # noqa: E402

time_dim = Dim(None, name="time")
feat_dim = Dim(6, name="feat")
out2_dim = Dim(12, name="out2")
extern_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
LENS = np.array([7, 5, 4], dtype="int32")


def _inputs(seed=1):
    rng = np.random.RandomState(seed)
    return {"data": rng.randn(3, 7, 6).astype("float32"), "size:time": LENS}


class GroupedModel(rf.Module):
    def __init__(self):
        super().__init__()
        self.depthwise = rf.Conv1d(feat_dim, feat_dim, filter_size=3, groups=feat_dim.dimension, padding="same")
        self.grouped = rf.Conv1d(feat_dim, out2_dim, filter_size=2, groups=2, padding="valid", with_bias=False)


def _step(*, model, extern_data, **_):
    x = extern_data["data"]
    y, _ = model.depthwise(x, in_spatial_dim=time_dim)
    y.mark_as_output("depthwise", shape=[batch_dim, time_dim, feat_dim])
    z, z_dim = model.grouped(x, in_spatial_dim=time_dim)
    z.mark_as_output("grouped", shape=[batch_dim, z_dim, out2_dim])


def _np_grouped_conv1d(x, w, b, groups, padding):
    """x [B, T, in], w [out, in // groups, k] -> [B, T', out]; 'same': (k - 1) // 2 zeros left, the rest right."""
    n_b, n_t, n_in = x.shape
    n_out, n_in_g, k = w.shape
    if padding == "same":
        left = (k - 1) // 2
        x = np.concatenate([np.zeros((n_b, left, n_in)), x, np.zeros((n_b, k - 1 - left, n_in))], axis=1)
    n_t_out = x.shape[1] - k + 1
    out_per_group = n_out // groups
    y = np.zeros((n_b, n_t_out, n_out))
    for o in range(n_out):
        g = o // out_per_group
        xs = x[:, :, g * n_in_g:(g + 1) * n_in_g]
        for t in range(n_t_out):
            y[:, t, o] = np.einsum("bki,ik->b", xs[:, t:t + k], w[o])
    return y + (b if b is not None else 0.0)


def test_conv_groups_param_shapes_and_strides_as_list():
    rf.select_backend_torch()
    model = GroupedModel()
    shapes = {name: tuple(d.dimension for d in p.dims) for name, p in model.named_parameters()}
    assert shapes == {"depthwise.filter": (6, 1, 3), "depthwise.bias": (6,), "grouped.filter": (12, 3, 2)}
    conv2d = rf.Conv2d(Dim(1, name="c"), Dim(4, name="o"), filter_size=(3, 5), strides=2, padding="valid")
    assert conv2d.strides == [2, 2] and conv2d.filter_size[1].dimension == 5
    conv2d = rf.Conv2d(Dim(1, name="c"), Dim(4, name="o"), filter_size=3, strides=(1, 2), padding="same")
    assert conv2d.strides == [1, 2]
    assert rf.Conv1d(feat_dim, feat_dim, 3, padding="same").strides is None
    with pytest.raises(rf.FrontendError, match="groups=4"):
        rf.Conv1d(feat_dim, out2_dim, 3, groups=4, padding="same")


@pytest.mark.parametrize("backend", ["torch", "layers"])
def test_grouped_and_depthwise_conv_match_numpy(backend):
    inputs, params = _inputs(), random_params(GroupedModel)
    run = run_torch if backend == "torch" else run_layers
    res, _ = run(extern_data, GroupedModel, _step, inputs, params, [time_dim])
    ref = _np_grouped_conv1d(inputs["data"], params["depthwise.filter"], params["depthwise.bias"], 6, "same")
    ref_grouped = _np_grouped_conv1d(inputs["data"], params["grouped.filter"], None, 2, "valid")
    dw = in_order(res, "depthwise", [batch_dim, time_dim, feat_dim])
    # behavior version 0 (as the original): no masking, the padded frames enter the conv as they are
    np.testing.assert_allclose(dw, ref, rtol=1e-4, atol=1e-5)
    gr = res["grouped"]
    np.testing.assert_allclose(gr[:, :, :], ref_grouped, rtol=1e-4, atol=1e-5)


def test_conv_use_mask_zeroes_padded_frames_first():
    inputs, params = _inputs(), random_params(GroupedModel)

    def step(*, model, extern_data, **_):
        y, _ = rf.conv(extern_data["data"], in_dim=feat_dim, out_dim=feat_dim, in_spatial_dims=[time_dim],
                       filter=model.depthwise.filter, filter_size=model.depthwise.filter_size, padding="same",
                       groups=6, bias=model.depthwise.bias, use_mask=True)
        y.mark_as_output("y", shape=[batch_dim, time_dim, feat_dim])

    res, _ = run_torch(extern_data, GroupedModel, step, inputs, params, [time_dim])
    masked = inputs["data"] * (np.arange(7)[None, :, None] < LENS[:, None, None])
    ref = _np_grouped_conv1d(masked, params["depthwise.filter"], params["depthwise.bias"], 6, "same")
    valid = np.arange(7)[None, :] < LENS[:, None]
    np.testing.assert_allclose(in_order(res, "y", [batch_dim, time_dim, feat_dim])[valid], ref[valid], rtol=1e-4,
                               atol=1e-5)


def test_gating_is_glu_and_gives_back_the_half_dim():
    rf.select_backend_torch()
    d = Dim(3, name="d")
    x_np = np.random.RandomState(0).randn(2, 6).astype("float32")
    x = rf.convert_to_tensor(torch.tensor(x_np), dims=[Dim(2, name="n"), 2 * d], dtype="float32")
    y, out_dim = rf.gating(x)
    assert out_dim is d
    np.testing.assert_allclose(y.placeholder.numpy(), x_np[:, :3] / (1 + np.exp(-x_np[:, 3:])), rtol=1e-5)


def test_pool2d_same_max_and_merge_dims_product():
    rf.select_backend_torch()
    a, b, c = Dim(4, name="a"), Dim(5, name="b"), Dim(2, name="c")
    x_np = np.random.RandomState(0).randn(4, 5, 2).astype("float32")
    x = rf.convert_to_tensor(torch.tensor(x_np), dims=[a, b, c], dtype="float32")
    y, (a2, b2) = rf.pool2d(x, mode="max", pool_size=(2, 2), padding="same", in_spatial_dims=[a, b])
    assert (a2.dimension, b2.dimension) == (2, 3) and a2 is a.ceildiv_right(2)
    ref = np.full((2, 3, 2), -np.inf)
    for i in range(2):
        for j in range(3):
            ref[i, j] = x_np[2 * i:2 * i + 2, 2 * j:2 * j + 2].max(axis=(0, 1))
    np.testing.assert_allclose(y.copy_transpose([a2, b2, c]).placeholder.numpy(), ref, rtol=1e-6)
    merged, m_dim = rf.merge_dims(y, dims=[b2, c])
    assert m_dim == b2 * c  # the product dim (ConformerConvSubsample's out_dim relies on it)


def _np_stft(x, frame_length, frame_step, fft_length):
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame_length) / frame_length)
    n = (len(x) - frame_length) // frame_step + 1
    frames = np.stack([x[i * frame_step:i * frame_step + frame_length] * window for i in range(n)])
    return np.fft.rfft(frames, n=fft_length)


def _np_mel_matrix(sr, n_fft, n_mels):
    def mel(f):
        return 1125.0 * np.log(1 + f / 700.0)

    def inv_mel(m):
        return 700.0 * (np.exp(m / 1125.0) - 1)

    centres = [n_fft / sr * inv_mel(mel(0) + i * (mel(sr / 2) - mel(0)) / (n_mels + 1)) for i in range(n_mels + 2)]
    mat = np.zeros((n_fft // 2 + 1, n_mels))
    for k in range(n_fft // 2 + 1):
        for m in range(1, n_mels + 1):
            lo, c, hi = centres[m - 1], centres[m], centres[m + 1]
            if lo < k < hi:
                mat[k, m - 1] = (k - lo) / (c - lo) if k < c else (hi - k) / (hi - c)
    return mat


def test_stft_and_log_mel_from_raw_match_numpy():
    rf.select_backend_torch()
    t_dim = Dim(None, name="samples")
    lens = np.array([1600, 1200], dtype="int32")
    audio = np.random.RandomState(3).randn(2, 1600).astype("float32")
    batch_dim.reset_eager()
    t_dim.reset_eager()
    batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(2, dtype=torch.int32), dims=[], dtype="int32")
    t_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(lens), dims=[batch_dim], dtype="int32")
    x = rf.convert_to_tensor(torch.tensor(audio), dims=[batch_dim, t_dim], dtype="float32")
    spec, s_dim, f_dim = rf.stft(x, in_spatial_dim=t_dim, frame_step=80, frame_length=200, fft_length=256)
    assert f_dim.dimension == 129
    assert s_dim.dyn_size_ext.placeholder.tolist() == [(1600 - 200) // 80 + 1, (1200 - 200) // 80 + 1]
    ref = _np_stft(audio[0], 200, 80, 256)
    np.testing.assert_allclose(spec.copy_transpose([batch_dim, s_dim, f_dim]).placeholder.numpy()[0], ref,
                               rtol=1e-3, atol=1e-3)
    mel_dim = Dim(20, name="mel")
    feats, m_spatial = rf.audio.log_mel_filterbank_from_raw(x, in_spatial_dim=t_dim, out_dim=mel_dim,
                                                            sampling_rate=8000)
    ref_feats = np.log10(np.maximum(np.abs(ref) ** 2 @ _np_mel_matrix(8000, 256, 20), 1e-10))
    np.testing.assert_allclose(feats.copy_transpose([batch_dim, m_spatial, mel_dim]).placeholder.numpy()[0],
                               ref_feats, rtol=1e-4, atol=1e-4)
    batch_dim.reset_eager()
    t_dim.reset_eager()


def test_specaugment_masks_in_training_only():
    rf.select_backend_torch()
    t_dim, f_dim = Dim(None, name="frames"), Dim(40, name="f")
    lens = np.array([300, 200], dtype="int32")
    batch_dim.reset_eager()
    batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(2, dtype=torch.int32), dims=[], dtype="int32")
    t_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(lens), dims=[batch_dim], dtype="int32")
    x = rf.convert_to_tensor(torch.ones(2, 300, 40), dims=[batch_dim, t_dim, f_dim], dtype="float32")
    rf.init_train_step_run_ctx(train_flag=False, step=0)
    assert rf.audio.specaugment(x, spatial_dim=t_dim) is x
    rf.init_train_step_run_ctx(train_flag=True, step=5000)
    rf.set_random_seed(1)
    y = rf.audio.specaugment(x, spatial_dim=t_dim, feature_dim=f_dim).copy_transpose(
        [batch_dim, t_dim, f_dim]).placeholder.numpy()
    assert set(np.unique(y)) == {0.0, 1.0}
    for b in range(2):
        whole_frames = (y[b] == 0).all(axis=1)
        whole_features = (y[b, :lens[b]] == 0).all(axis=0)
        # step >= 2000: 2..(max(T // 100, 2) * 4) time masks of <= 20 frames, 2..5 feature masks of <= 8 bins
        assert 2 <= whole_frames.sum() <= 6 * 4 * 20 and 2 <= whole_features.sum() <= 5 * 8
        assert not whole_frames[lens[b]:].any()  # masks only within the seq
    batch_dim.reset_eager()
    t_dim.reset_eager()


def test_reset_eager_forgets_the_lengths_of_derived_dims():
    """A new step's lengths reach the dims derived in the previous step (a conv output, T - 1 + T')."""
    rf.select_backend_torch()
    t_dim = Dim(None, name="steps")
    batch_dim.reset_eager()
    for lens in ([5, 3], [4, 4, 2]):
        t_dim.reset_eager()
        batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(len(lens), dtype=torch.int32), dims=[],
                                                      dtype="int32")
        t_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(lens, dtype=torch.int32), dims=[batch_dim],
                                                  dtype="int32")
        x = rf.convert_to_tensor(torch.ones(len(lens), max(lens), 6), dims=[batch_dim, t_dim, feat_dim],
                                 dtype="float32")
        y, (pooled,) = rf.pool(x, mode="max", pool_size=[2], padding="same", in_spatial_dims=[t_dim])
        rel = pooled - 1 + pooled
        assert pooled.dyn_size_ext.placeholder.tolist() == [(n + 1) // 2 for n in lens]
        assert rel.dyn_size_ext.placeholder.tolist() == [2 * ((n + 1) // 2) - 1 for n in lens]
    batch_dim.reset_eager()
    t_dim.reset_eager()


samples_dim = Dim(None, name="samples")
mel_dim = Dim(20, name="mel")
audio_extern_data = {"audio": {"dims": (batch_dim, samples_dim), "dtype": "float32"}}


def _audio_step(*, model, extern_data, **_):
    x = extern_data["audio"]
    spec, s_dim, f_dim = rf.stft(x, in_spatial_dim=samples_dim, frame_step=80, frame_length=200, fft_length=256)
    spec.mark_as_output("stft", shape=[batch_dim, s_dim, f_dim])
    torch_like, t_dim, t_f_dim = rf.stft(x, in_spatial_dim=samples_dim, frame_step=80, frame_length=199,
                                         fft_length=256, window_use_frame_length=False, align_window_left=False,
                                         window_enforce_even=False)
    torch_like.mark_as_output("stft_centred", shape=[batch_dim, t_dim, t_f_dim])
    feats, m_dim = rf.audio.log_mel_filterbank_from_raw(x, in_spatial_dim=samples_dim, out_dim=mel_dim,
                                                        sampling_rate=8000)
    feats.mark_as_output("log_mel", shape=[batch_dim, m_dim, mel_dim])


def test_stft_and_log_mel_on_both_backends_match_numpy():
    """rf.stft on the layers backend too (frontend_op), both window placements, against numpy per sequence."""
    pytest.importorskip("tensorflow")
    lens = np.array([1600, 1200], dtype="int32")
    audio = np.random.RandomState(4).randn(2, 1600).astype("float32")
    audio[1, 1200:] = 0.0
    inputs = {"audio": audio, "size:samples": lens}
    res_t, _ = run_torch(audio_extern_data, rf.Module, _audio_step, inputs, {}, [samples_dim])
    res_l, _ = run_layers(audio_extern_data, rf.Module, _audio_step, inputs, {}, [samples_dim])
    centred_window = np.zeros(256)
    centred_window[28:28 + 199] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(199) / 199)
    for res in (res_t, res_l):
        spec = in_order(res, "stft", [d for d in res["stft:dims"]])
        dims = res["stft:dims"]
        spec = np.transpose(spec, [dims.index(batch_dim)] + [i for i, d in enumerate(dims) if d != batch_dim])
        for b, n in enumerate(lens):
            ref = _np_stft(audio[b, :n], 200, 80, 256)
            np.testing.assert_allclose(spec[b, :len(ref)], ref, rtol=1e-3, atol=1e-3)
        dims = res["stft_centred:dims"]
        centred = np.transpose(res["stft_centred"],
                               [dims.index(batch_dim)] + [i for i, d in enumerate(dims) if d != batch_dim])
        n_frames = (1600 - 256) // 80 + 1  # frames of fft_length samples (window_use_frame_length=False)
        ref = np.fft.rfft(np.stack([audio[0, i * 80:i * 80 + 256] * centred_window for i in range(n_frames)]))
        np.testing.assert_allclose(centred[0, :n_frames], ref, rtol=1e-3, atol=1e-3)
        dims = res["log_mel:dims"]
        log_mel = np.transpose(res["log_mel"], [dims.index(batch_dim)] + [i for i, d in enumerate(dims)
                                                                            if d != batch_dim and d != mel_dim] +
                               [dims.index(mel_dim)])
        ref_feats = np.log10(np.maximum(np.abs(_np_stft(audio[0], 200, 80, 256)) ** 2 @
                                        _np_mel_matrix(8000, 256, 20), 1e-10))
        np.testing.assert_allclose(log_mel[0], ref_feats, rtol=1e-4, atol=1e-4)
