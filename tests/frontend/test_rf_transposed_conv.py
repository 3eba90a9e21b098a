"""rf.TransposedConv1d/2d and rf.transposed_conv (padding same/valid, strides, output_padding, remove_padding) on both
backends, against a numpy reference from the definition (each input frame i adds x[i] * w at output frames
i * stride + j, then TF's conv_transpose crop) computed per sequence, and against tf.nn.conv_transpose."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import in_order, random_params, run_layers, run_torch  # noqa: E402

time_dim = Dim(None, name="time")
feat_dim = Dim(3, name="feat")
out_dim = Dim(4, name="out")
extern_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
LENS = np.array([7, 5, 4], dtype="int32")
VARIANTS = {  # name -> (filter_size, strides, padding, output_padding, remove_padding)
    "same_k3_s2": (3, 2, "same", None, 0),
    "same_k4_s2": (4, 2, "same", None, 0),
    "valid_k3_s2": (3, 2, "valid", None, 0),
    "valid_k2_s3": (2, 3, "valid", None, 0),
    "same_k5_s2_op1": (5, 2, "same", 1, 0),
    "valid_k4_s2_rp1": (4, 2, "valid", None, 1),
}


def _np_transposed_conv1d(x, w, b, k, s, padding, op, rp):
    """x [T, in], w [in, out, k] -> [T', out] (TF conv_transpose semantics, keras output length)."""
    n = x.shape[0]
    full = np.zeros(((n - 1) * s + k, w.shape[1]))
    for i in range(n):
        for j in range(k):
            full[i * s + j] += x[i] @ w[:, :, j]
    if op is None:
        out_len = n * s + (max(k - s, 0) if padding == "valid" else 0)
        left = max(k - s, 0) // 2 if padding == "same" else 0
    else:
        pad = k // 2 if padding == "same" else 0
        out_len = (n - 1) * s + k - 2 * pad + op
        left = max(2 * pad - op, 0) // 2 if padding == "same" else 0
    full = np.concatenate([full, np.zeros((max(left + out_len - len(full), 0), w.shape[1]))])
    y = full[left:left + out_len] + b
    return y[rp:len(y) - rp]


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        for name, (k, s, padding, op, rp) in VARIANTS.items():
            setattr(self, name, rf.TransposedConv1d(feat_dim, out_dim, k, strides=s, padding=padding,
                                                    output_padding=op, remove_padding=rp))


def _step(*, model, extern_data, **_):
    x = extern_data["data"]
    for name in VARIANTS:
        y, y_dim = getattr(model, name)(x, in_spatial_dim=time_dim)
        y.mark_as_output(name, shape=[batch_dim, y_dim, out_dim])


def _check(res, params):
    x = _inputs()["data"]
    for name, (k, s, padding, op, rp) in VARIANTS.items():
        got = res[name]
        w, b = params[name + ".filter"], params[name + ".bias"]
        assert params[name + ".filter"].shape == (3, 4, k)
        for i, n in enumerate(LENS):
            ref = _np_transposed_conv1d(x[i, :n], w, b, k, s, padding, op, rp)
            np.testing.assert_allclose(got[i, :len(ref)], ref, rtol=1e-4, atol=1e-5, err_msg=name)
        ref_max = _np_transposed_conv1d(x[0], w, b, k, s, padding, op, rp)
        assert got.shape[1] == len(ref_max), name


def _inputs(seed=1):
    rng = np.random.RandomState(seed)
    x = rng.randn(3, 7, 3).astype("float32")
    for i, n in enumerate(LENS):  # zero padding, as in real batches (masking is off before behavior version 23)
        x[i, n:] = 0.0
    return {"data": x, "size:time": LENS}


def test_transposed_conv1d_torch_matches_numpy_per_sequence():
    params = random_params(Model)
    res, model = run_torch(extern_data, Model, _step, _inputs(), params, [time_dim])
    res = {name: in_order(res, name, [batch_dim] + [d for d in res[name + ":dims"] if d not in (batch_dim, out_dim)]
                          + [out_dim]) for name in VARIANTS}
    _check(res, params)


def test_transposed_conv1d_layers_backend_matches_numpy_per_sequence():
    pytest.importorskip("tensorflow")
    params = random_params(Model)
    res, names = run_layers(extern_data, Model, _step, _inputs(), params, [time_dim])
    assert sorted(params) == names
    res = {name: in_order(res, name, [batch_dim] + [d for d in res[name + ":dims"] if d not in (batch_dim, out_dim)]
                          + [out_dim]) for name in VARIANTS}
    _check(res, params)


def test_transposed_conv1d_out_lengths_torch():
    rf.select_backend_torch()
    params = random_params(Model)
    time_dim.reset_eager()
    batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(3, dtype=torch.int32), dims=[])
    time_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(LENS), dims=[batch_dim])
    x = rf.convert_to_tensor(torch.tensor(_inputs()["data"]), dims=[batch_dim, time_dim, feat_dim])
    model = Model()
    for name, (k, s, padding, op, rp) in VARIANTS.items():
        _, y_dim = getattr(model, name)(x, in_spatial_dim=time_dim)
        want = [len(_np_transposed_conv1d(np.zeros((n, 3)), params[name + ".filter"], 0.0, k, s, padding, op, rp))
                for n in LENS]
        assert y_dim.dyn_size_ext.raw_tensor.tolist() == want, name
    time_dim.reset_eager()


def test_transposed_conv2d_static_matches_tf_conv_transpose():
    tf = pytest.importorskip("tensorflow")
    rf.select_backend_torch()
    rng = np.random.RandomState(3)
    h, w_dim = Dim(4, name="h"), Dim(5, name="w")
    x = rng.randn(2, 4, 5, 3).astype("float32")
    batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(2, dtype=torch.int32), dims=[])
    for padding in ("same", "valid"):
        conv = rf.TransposedConv2d(feat_dim, out_dim, [3, 2], strides=[2, 2], padding=padding)
        filt = rng.randn(3, 4, 3, 2).astype("float32")  # [in, out, kh, kw]
        with torch.no_grad():
            conv.filter.raw_tensor.copy_(torch.tensor(filt))
            conv.bias.raw_tensor.zero_()
        xt = rf.convert_to_tensor(torch.tensor(x), dims=[batch_dim, h, w_dim, feat_dim])
        y, (oh, ow) = conv(xt, in_spatial_dims=[h, w_dim])
        got = y.copy_transpose([batch_dim, oh, ow, out_dim]).raw_tensor.detach().numpy()
        out_shape = [2, oh.dimension, ow.dimension, 4]
        ref = tf.nn.conv_transpose(x, np.transpose(filt, [2, 3, 1, 0]), output_shape=out_shape, strides=[2, 2],
                                   padding=padding.upper()).numpy()
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_transposed_conv_refuses_int_padding():
    rf.select_backend_torch()
    t_dim = Dim(3, name="t")
    batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(2, dtype=torch.int32), dims=[])
    x = rf.zeros([batch_dim, t_dim, feat_dim])
    with pytest.raises(rf.FrontendError, match="padding must be 'same' or 'valid'"):
        rf.transposed_conv(x, in_dim=feat_dim, out_dim=out_dim, in_spatial_dims=[t_dim], filter=None,
                           filter_size=[Dim(2, name="k")], padding=1)
