"""returnn-lite-checkpoint tf-to-torch / torch-to-tf: checkpoints move between the layers and the torch backend."""

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.checkpoint_tool import main, write_checkpoint  # noqa: E402
from returnn_lite.tensor import Dim  # noqa: E402
from returnn_lite.torch.frontend import rf_module_to_pt_module  # noqa: E402


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.lstm = rf.LSTM(Dim(3, name="in"), Dim(4, name="hid"))
        self.output = rf.Linear(self.lstm.out_dim, Dim(2, name="classes"))


def _run(*argv):
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_tf_to_torch_and_back(tmp_path):
    rng = np.random.RandomState(0)
    values = {"lstm/ff_weight/param": rng.randn(16, 3).astype("float32"),
              "lstm/rec_weight/param": rng.randn(16, 4).astype("float32"),
              "lstm/bias/param": rng.randn(16).astype("float32"),
              "output/weight/param": rng.randn(4, 2).astype("float32"),
              "output/bias/param": rng.randn(2).astype("float32"),
              "output/bias/param/Adam": np.zeros(2, "float32"),
              "global_step": np.array(17, dtype=np.int64)}
    tf_ckpt = str(tmp_path / "model.003")
    write_checkpoint(tf_ckpt, values)
    code, text = _run("tf-to-torch", tf_ckpt, str(tmp_path / "model.003.pt"))
    assert code == 0 and "wrote 5 params" in text
    state = torch.load(str(tmp_path / "model.003.pt"), weights_only=False)
    assert state["global_step"] == 17 and state["epoch"] == 3
    rf.select_backend_torch()
    model = Model()
    pt = rf_module_to_pt_module(model)
    pt.load_state_dict(state["model"])  # the names and shapes of the rf model on the torch backend
    np.testing.assert_array_equal(model.lstm.ff_weight.raw_tensor.detach().numpy(), values["lstm/ff_weight/param"])
    with torch.no_grad():
        model.output.bias.raw_tensor.add_(1.0)
    torch.save({"model": pt.state_dict(), "global_step": 18}, str(tmp_path / "changed.pt"))
    code, text = _run("torch-to-tf", str(tmp_path / "changed.pt"), str(tmp_path / "back"))
    assert code == 0 and "wrote 5 params" in text
    code, text = _run("diff", tf_ckpt, str(tmp_path / "back"), "--params-only")
    assert code == 1  # exactly the changed param differs, by 1.0
    assert "differs:   output/bias/param [2] max abs diff 1 " in text and "4 tensors equal, 1 differ" in text


def test_conversion_errors_name_the_file(tmp_path, capsys):
    torch.save([1, 2], str(tmp_path / "bad.pt"))
    code, _ = _run("torch-to-tf", str(tmp_path / "bad.pt"), str(tmp_path / "out"))
    assert code == 2
    assert "bad.pt" in capsys.readouterr().err
    write_checkpoint(str(tmp_path / "plain"), {"W": np.zeros(2, "float32")})
    code, _ = _run("tf-to-torch", str(tmp_path / "plain"), str(tmp_path / "x.pt"))
    assert code == 2
    assert "not an rf param" in capsys.readouterr().err
