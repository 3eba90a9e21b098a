"""configs/conformer_ctc.config (rf Conformer + CTC on SyntheticSpeechDataset, torch backend) trains one short epoch
with `python rnn.py`; the dataset's signal is determined by the labels."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE = os.path.join(ROOT, "configs", "conformer_ctc.config")


def test_synthetic_speech_dataset_is_deterministic_and_label_determined():
    from returnn_lite.datasets.registry import init_dataset

    def seqs(seed, n=4):
        ds = init_dataset({"class": "SyntheticSpeechDataset", "num_seqs": n, "fixed_random_seed": seed,
                           "noise_level": 0.0})
        ds.init_seq_order(epoch=1)
        ds.load_seqs(0, n)
        return [(ds.get_data(i, "data"), ds.get_data(i, "classes")) for i in range(n)], ds

    first, ds = seqs(1)
    again, _ = seqs(1)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(first, again))
    assert ds.get_data_dim("classes") == 8 and ds.num_outputs["data"] == [1, 2]
    for audio, labels in first:
        assert audio.dtype == np.float32 and audio.shape[1] == 1 and 3 <= len(labels) <= 8
        assert all(labels[i] != labels[i + 1] for i in range(len(labels) - 1))
        assert len(audio) >= len(labels) * 0.06 * 8000
    # the spectrum of a label's tone peaks at its two formants
    audio, labels = first[0]
    formants = ds.formants[labels[0]]
    spectrum = np.abs(np.fft.rfft(audio[:480, 0] * np.hanning(480)))
    freqs = np.fft.rfftfreq(480, 1.0 / 8000)
    peak = freqs[np.argmax(spectrum)]
    assert min(abs(peak - formants[0]), abs(peak - formants[1])) < 0.15 * formants[0] + 50
    with pytest.raises(ValueError, match="num_labels"):
        init_dataset({"class": "SyntheticSpeechDataset", "num_seqs": 1, "num_labels": 1})


def test_conformer_ctc_recipe_trains_one_short_epoch(tmp_path):
    pytest.importorskip("torch")
    config = tmp_path / "short.config"
    config.write_text(
        "#!rnn.py\n"
        "exec(compile(open(%r).read(), %r, 'exec'))\n"
        "train = dict(_data, num_seqs=24)\n"
        "dev = dict(_data, num_seqs=8, fixed_random_seed=1)\n"
        "num_epochs = 1\n"
        "model = %r\n"
        "learning_rate_file = %r\n" % (RECIPE, RECIPE, str(tmp_path / "model"), str(tmp_path / "lr")))
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "rnn.py"), str(config)], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "torch backend" in proc.stdout and "encoder.layers.1.conv_block.depthwise_conv.filter" in proc.stdout
    m = re.search(r"epoch 1 score: ([0-9.e+-]+) error: ([0-9.e+-]+) .* dev: score ([0-9.e+-]+) error ([0-9.e+-]+)",
                  proc.stdout)
    assert m, proc.stdout[-3000:]
    assert 0 < float(m.group(1)) < 100 and 0 < float(m.group(3)) < 100  # CTC loss per label, finite
    assert 0 <= float(m.group(4)) <= 2  # dev CER (edit errors per reference label)
    assert os.path.exists(str(tmp_path / "model.001.pt"))
