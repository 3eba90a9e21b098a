"""The torch engine's options on the rf 12AX config (in-process, CPU): device selection, threads, torch_amp,
gradient options, dataloader workers, forward_callback, torch_compile, and options refused by name."""

import os
import re

import pytest

torch = pytest.importorskip("torch")

from returnn_lite.__main__ import main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_EXTRA = '''
backend = "torch"
train = {"class": "Task12AXDataset", "num_seqs": 40}
dev = {"class": "Task12AXDataset", "num_seqs": 10, "fixed_random_seed": 1}
eval = {"class": "Task12AXDataset", "num_seqs": 3, "fixed_random_seed": 2}
num_epochs = 1
log_verbosity = 4


def forward_step(*, model, extern_data, **_):
    logits = model(extern_data["data"])
    rf.softmax(logits, axis=classes_dim).mark_as_output("output", shape=[batch_dim, time_dim, classes_dim])
'''


@pytest.fixture
def config(tmp_path):
    with open(os.path.join(ROOT, "configs", "12ax_rf_lstm.config")) as f:
        text = f.read()
    path = tmp_path / "torch.config"
    path.write_text(text + _EXTRA)
    return str(path)


def _run(capsys, config, tmp_path, *args):
    status = main([config, "++model", str(tmp_path / "model"), "++learning_rate_file", str(tmp_path / "lr")] +
                  list(args))
    out, err = capsys.readouterr()
    return status, out, err


def _scores(out):
    return [tuple(float(x) for x in m) for m in re.findall(r"epoch \d+ score: ([\d.e+-]+) error: ([\d.e+-]+)", out)]


def test_device_gpu_without_gpu_is_one_error_line(config, tmp_path, capsys, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    status, out, err = _run(capsys, config, tmp_path, "++device", "gpu")
    assert status == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("rnn.py: error: device 'gpu': no CUDA GPU") and len(
        [line for line in lines if line.startswith("rnn.py")]) == 1, err
    monkeypatch.setenv("PT_DEVICE", "cuda:0")
    status, _, err = _run(capsys, config, tmp_path, "++device", "cpu")  # the env var wins
    assert status == 1 and "PT_DEVICE=cuda:0: no CUDA GPU" in err
    monkeypatch.setenv("PT_DEVICE", "tpu")
    status, _, err = _run(capsys, config, tmp_path)
    assert status == 1 and "PT_DEVICE=tpu: not a device" in err


def test_device_cpu_and_one_thread_by_default(config, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch, "set_num_threads", lambda n, _real=torch.set_num_threads: (
        setattr(test_device_cpu_and_one_thread_by_default, "threads", n), _real(n)))
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2) if old == 1 else None
        status, out, err = _run(capsys, config, tmp_path, "++device", "cpu")
        assert status == 0, err
        assert "device cpu" in out and torch.get_num_threads() == 1
        status, out, err = _run(capsys, config, tmp_path, "++num_epochs", "2", "++torch_intra_op_threads", "2")
        assert status == 0, err
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)


def test_torch_amp_bfloat16_changes_the_scores_and_float16_checkpoints_its_scaler(config, tmp_path, capsys):
    status, out, err = _run(capsys, config, tmp_path / "fp32")
    assert status == 0, err
    fp32 = _scores(out)
    status, out, err = _run(capsys, config, tmp_path / "bf16", "++torch_amp", "bfloat16")
    assert status == 0, err
    assert "amp bfloat16" in out
    bf16 = _scores(out)
    assert len(fp32) == len(bf16) == 1 and fp32 != bf16  # autocast really applied
    assert abs(fp32[0][0] - bf16[0][0]) < 0.05  # and it still trains the same
    status, out, err = _run(capsys, config, tmp_path / "fp16",
                            "++torch_amp", "{'dtype': 'float16', 'grad_scaler': {'init_scale': 256.0}}")
    assert status == 0, err
    state = torch.load(str(tmp_path / "fp16" / "model.001.pt"), weights_only=False)
    assert state["grad_scaler"]["scale"] <= 256.0
    status, out, err = _run(capsys, config, tmp_path / "fp16", "++num_epochs", "2",
                            "++torch_amp", "{'dtype': 'float16', 'grad_scaler': {'init_scale': 256.0}}")
    assert status == 0 and "Resume training after epoch 1" in out, err
    for bad, msg in [("'int8'", "torch_amp dtype 'int8'"), ("{'dtype': 'float16', 'scaler': {}}",
                                                             "torch_amp: unknown key")]:
        status, _, err = _run(capsys, config, tmp_path / "bad", "++torch_amp", bad)
        assert status == 1 and msg in err, err


def test_gradient_options_accumulation_and_clipping(config, tmp_path, capsys):
    status, out, err = _run(capsys, config, tmp_path / "plain")
    assert status == 0, err
    plain = _scores(out)
    status, out, err = _run(capsys, config, tmp_path / "accum", "++accum_grad_multiple_step", "2",
                            "++gradient_clip_global_norm", "1.0", "++learning_rate_warmup_steps", "3")
    assert status == 0, err
    assert _scores(out) != plain
    state = torch.load(str(tmp_path / "accum" / "model.001.pt"), weights_only=False)
    assert state["global_step"] == 4  # 40 seqs, max_seqs 10: 4 steps, 2 updates
    status, _, err = _run(capsys, config, tmp_path / "bad", "++optimizer", "{'class': 'lamb'}")
    assert status == 1 and "optimizer 'lamb': not supported on the torch backend" in err


def test_dataloader_workers_give_the_same_scores(config, tmp_path, capsys):
    status, out, err = _run(capsys, config, tmp_path / "a")
    assert status == 0, err
    status, out2, err = _run(capsys, config, tmp_path / "b", "++torch_dataloader_opts",
                             "{'num_workers': 2, 'pin_memory': False}")
    assert status == 0, err
    assert _scores(out) == _scores(out2)
    status, _, err = _run(capsys, config, tmp_path / "c", "++torch_dataloader_opts", "{'workers': 2}")
    assert status == 1 and "torch_dataloader_opts: unknown key(s) ['workers']" in err


def test_forward_callback_gets_every_seq(config, tmp_path, capsys):
    status, out, err = _run(capsys, config, tmp_path)
    assert status == 0, err
    record = tmp_path / "calls.json"
    with open(config, "a") as f:
        f.write('''
import json

from returnn_lite.forward_iface import ForwardCallbackIface


class Collect(ForwardCallbackIface):
    def init(self, *, model):
        self.seen = [("init", type(model).__name__)]

    def process_seq(self, *, seq_tag, outputs):
        out = outputs["output"]
        self.seen.append((seq_tag, list(out.raw_tensor.shape), [d.dimension for d in out.dims]))

    def finish(self):
        self.seen.append(("finish",))
        with open(%r, "w") as f:
            json.dump(self.seen, f)


forward_callback = Collect
''' % str(record))
    status, out, err = _run(capsys, config, tmp_path, "++task", "forward")
    assert status == 0, err
    import json

    calls = json.loads(record.read_text())
    assert calls[0] == ["init", "Model"] and calls[-1] == ["finish"]
    seqs = calls[1:-1]
    assert len(seqs) == 3 and all(shape[1] == 2 and len(shape) == 2 for _, shape, _ in seqs)
    assert all(dims == [None, 2] for _, _, dims in seqs)
    assert len(set(tag for tag, _, _ in seqs)) == 3


def test_torch_compile_opt_in(config, tmp_path, capsys):
    status, out, err = _run(capsys, config, tmp_path / "plain")
    assert status == 0, err
    status, out2, err = _run(capsys, config, tmp_path / "compiled", "++torch_compile", "{'backend': 'eager'}")
    assert status == 0, err
    assert abs(_scores(out)[0][0] - _scores(out2)[0][0]) < 1e-4
    status, _, err = _run(capsys, config, tmp_path / "bad", "++torch_compile", "'yes'")
    assert status == 1 and "torch_compile 'yes'" in err


def test_options_of_the_other_backend_are_refused(config, tmp_path, capsys):
    for args, msg in [(["++tf_log_dir", str(tmp_path / "tb")], "tf_log_dir: not supported with backend"),
                      (["++use_horovod", "True"], "use torch_distributed"),
                      (["++torch_distributed", "{'reduce': 'grad'}"], "torch_distributed: unknown key(s) ['reduce']"),
                      (["++torch_distributed", "{}"], "start the run with torchrun")]:
        status, _, err = _run(capsys, config, tmp_path, *args)
        assert status == 1 and msg in err, (args, err)


def test_torch_distributed_param_averaging_in_a_one_process_group(config, tmp_path, capsys, monkeypatch):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)
    status, out, err = _run(capsys, config, tmp_path, "++device", "cpu", "++log_verbosity", "5",
                            "++torch_distributed", "{'reduce_type': 'param', 'param_sync_step': 2}")
    assert status == 0, err
    assert "torch_distributed: 1 processes (gloo), reduce_type 'param'" in out
    assert [line.rsplit(" ", 1)[-1] for line in out.splitlines() if "params averaged" in line] == ["2", "4"]
    import torch.distributed

    assert not torch.distributed.is_initialized()  # left at the end of the run


def test_torch_options_are_refused_on_the_tf_backend(config, tmp_path, capsys):
    status, _, err = _run(capsys, config, tmp_path, "++backend", "tensorflow", "++torch_amp", "bfloat16")
    assert status == 1 and "torch_amp: only with backend = \"torch\"" in err


def test_out_of_memory_is_one_line_naming_the_step_and_the_batch(config, tmp_path, capsys, monkeypatch):
    from returnn_lite.engine import torch_engine

    real = torch_engine._StepModule.forward
    calls = []

    def forward(self, step_func, extern_data):
        calls.append(1)
        if len(calls) == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(self, step_func, extern_data)

    monkeypatch.setattr(torch_engine._StepModule, "forward", forward)
    status, out, err = _run(capsys, config, tmp_path)
    assert status == 1
    assert re.fullmatch(r"rnn.py: error: train step 2 of dataset 'train': out of memory on cpu with a batch of 10 "
                        r"seqs x \d+ frames; lower batch_size or max_seqs \(or use torch_amp\)",
                        err.strip().splitlines()[-1]), err


def test_a_dead_dataloader_worker_is_one_line_naming_the_dataset(config, tmp_path, capsys, monkeypatch):
    import signal

    from returnn_lite.engine import torch_data

    real = torch_data.batch_to_arrays

    def batch_to_arrays(dataset, batch, keys):
        if torch.utils.data.get_worker_info() is not None and batch.start_seq > 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(dataset, batch, keys)

    monkeypatch.setattr(torch_data, "batch_to_arrays", batch_to_arrays)
    status, out, err = _run(capsys, config, tmp_path, "++torch_dataloader_opts", "{'num_workers': 1}")
    assert status == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("rnn.py: error: dataset 'train': a torch_dataloader_opts worker died: DataLoader worker "
                           "(pid"), err


def test_results_read_one_step_late_give_the_same_scores(config, tmp_path, capsys, monkeypatch):
    # on a GPU the loop reads a train step's loss values after launching the next step (no host sync per step)
    status, out, err = _run(capsys, config, tmp_path / "a", "++log_verbosity", "5")
    assert status == 0, err
    from returnn_lite.engine.torch_engine import TorchBackend

    monkeypatch.setattr(TorchBackend, "_defer_results_on_cpu", True)
    status, out2, err = _run(capsys, config, tmp_path / "b", "++log_verbosity", "5")
    assert status == 0, err
    steps = re.findall(r"^train epoch 1, step (\d+), cost:ce ([\d.e+-]+)", out, re.M)
    assert len(steps) == 4 and steps == re.findall(r"^train epoch 1, step (\d+), cost:ce ([\d.e+-]+)", out2, re.M)
    assert _scores(out) == _scores(out2)
