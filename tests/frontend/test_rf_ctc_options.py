"""rf.ctc_loss over several batch dims (torch), logits_normalized, and max_approx (Viterbi; layers backend, refused
on torch as the original), against numpy DP references."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim  # noqa: E402

from rf_harness import run_layers  # noqa: E402

time_dim = Dim(None, name="time")
tgt_dim = Dim(None, name="tgt_time")
cls_dim = Dim(4, name="classes")
LENS, TLENS = np.array([6, 4], "int32"), np.array([2, 1], "int32")
rng = np.random.RandomState(3)
LOGITS = rng.randn(2, 6, 4).astype("float32")
TARGETS = np.array([[1, 2], [3, 0]], "int32")


def _np_ctc(logits, labels, blank, viterbi):
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ext = [blank]
    for lab in labels:
        ext += [lab, blank]
    s_len = len(ext)
    comb = (lambda v: np.max(v)) if viterbi else (lambda v: np.logaddexp.reduce(v))
    alpha = np.full(s_len, -np.inf)
    alpha[0] = lp[0, ext[0]]
    if s_len > 1:
        alpha[1] = lp[0, ext[1]]
    for t in range(1, len(lp)):
        new = np.full(s_len, -np.inf)
        for s in range(s_len):
            cands = [alpha[s]] + ([alpha[s - 1]] if s >= 1 else [])
            if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                cands.append(alpha[s - 2])
            new[s] = lp[t, ext[s]] + comb(np.array(cands))
        alpha = new
    return -comb(alpha[-2:] if s_len > 1 else alpha[-1:])


def _set_sizes():
    batch_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(2, dtype=torch.int32), dims=[])
    time_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(LENS), dims=[batch_dim])
    tgt_dim.dyn_size_ext = rf.convert_to_tensor(torch.tensor(TLENS), dims=[batch_dim])


def test_ctc_loss_torch_extra_batch_dim_and_normalized_logits():
    rf.select_backend_torch()
    _set_sizes()
    beam = Dim(3, name="beam")
    scale = torch.tensor([1.0, 0.5, 2.0])
    logits = rf.convert_to_tensor(torch.tensor(LOGITS)[None] * scale[:, None, None, None],
                                  dims=[beam, batch_dim, time_dim, cls_dim])
    targets = rf.convert_to_tensor(torch.tensor(TARGETS)[None].expand(3, 2, 2), dims=[beam, batch_dim, tgt_dim],
                                   sparse_dim=cls_dim)
    loss = rf.ctc_loss(logits=logits, targets=targets, input_spatial_dim=time_dim, targets_spatial_dim=tgt_dim,
                       blank_index=0)
    got = loss.copy_transpose([beam, batch_dim]).raw_tensor.numpy()
    for k in range(3):
        for b in range(2):
            ref = _np_ctc(LOGITS[b, :LENS[b]] * float(scale[k]), TARGETS[b, :TLENS[b]], 0, viterbi=False)
            np.testing.assert_allclose(got[k, b], ref, rtol=1e-4)
    log_probs = rf.log_softmax(logits, axis=cls_dim)
    loss2 = rf.ctc_loss(logits=log_probs, logits_normalized=True, targets=targets, input_spatial_dim=time_dim,
                        targets_spatial_dim=tgt_dim, blank_index=0)
    np.testing.assert_allclose(loss2.copy_transpose([beam, batch_dim]).raw_tensor.numpy(), got, rtol=1e-5)
    with pytest.raises(rf.FrontendError, match="max_approx"):
        rf.ctc_loss(logits=logits, targets=targets, input_spatial_dim=time_dim, targets_spatial_dim=tgt_dim,
                    blank_index=0, max_approx=True)
    for d in (time_dim, tgt_dim):
        d.reset_eager()


ctc_extern = {"logits": {"dims": (batch_dim, time_dim, cls_dim), "dtype": "float32"},
              "targets": {"dims": (batch_dim, tgt_dim), "dtype": "int32", "sparse_dim": cls_dim}}


def _ctc_step(*, model, extern_data, **_):
    for name, viterbi in (("ctc", False), ("viterbi", True)):
        rf.ctc_loss(logits=extern_data["logits"], targets=extern_data["targets"], input_spatial_dim=time_dim,
                    targets_spatial_dim=tgt_dim, blank_index=0, max_approx=viterbi).mark_as_output(
            name, shape=[batch_dim])


def test_ctc_loss_max_approx_layers_backend():
    pytest.importorskip("tensorflow")
    inputs = {"logits": LOGITS, "targets": TARGETS, "size:time": LENS, "size:tgt_time": TLENS}
    res, _ = run_layers(ctc_extern, rf.Module, _ctc_step, inputs, {}, [time_dim, tgt_dim])
    for b in range(2):
        for name, viterbi in (("ctc", False), ("viterbi", True)):
            ref = _np_ctc(LOGITS[b, :LENS[b]], TARGETS[b, :TLENS[b]], 0, viterbi=viterbi)
            np.testing.assert_allclose(res[name][b], ref, rtol=1e-4, err_msg=name)
