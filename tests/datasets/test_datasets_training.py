"""Real setups train: an ASR-like config (OggZip + BPE + CTC) through rnn.py, an LM on a text corpus, prefetch,
the Sprint refusal at config load, and the dataset conformance checker."""

import os
import subprocess
import sys
import threading
import time

import pytest

from corpora import write_bpe, write_ogg_zip

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RNN = os.path.join(REPO, "rnn.py")
CHECKER = os.path.join(os.path.dirname(REPO), "shared", "conformance", "datasets", "check_datasets.py")

ASR_CONFIG = """#!rnn.py
task = "train"
_targets = {"class": "BytePairEncoding", "bpe_file": %(codes)r, "vocab_file": %(vocab)r, "unknown_label": "<unk>"}
train = {"class": "OggZipDataset", "path": %(zip)r, "audio": {"features": "log_mel_filterbank",
         "num_feature_filters": 20}, "targets": _targets, "seq_ordering": "laplace:2"}
dev = {"class": "OggZipDataset", "path": %(zip)r, "audio": {"features": "log_mel_filterbank",
       "num_feature_filters": 20}, "targets": _targets, "fixed_random_subset": 2}
extern_data = {"data": {"dim": 20}, "classes": {"dim": %(num_labels)i, "sparse": True}}
network = {
    "lstm": {"class": "rec", "unit": "nativelstm2", "n_out": 16, "from": "data"},
    "output": {"class": "softmax", "from": "lstm", "loss": "ctc", "n_out": %(num_labels)i + 1,
               "target": "classes", "loss_opts": {"ctc_opts": {"ignore_longer_outputs_than_inputs": True}}},
}
batch_size = 4000
max_seqs = 4
adam = True
learning_rate = 0.01
num_epochs = 1
model = %(dir)r + "/model"
log_verbosity = 4
"""


def test_asr_oggzip_bpe_ctc_trains_one_epoch_through_rnn_py(tmp_path):
    pytest.importorskip("soundfile")
    pytest.importorskip("librosa")
    zip_path, _ = write_ogg_zip(str(tmp_path), "train", 6, seconds=(0.3, 0.6))
    codes, vocab = write_bpe(str(tmp_path))
    from returnn_lite.datasets import create_vocab
    num_labels = create_vocab(bpe_file=codes, vocab_file=vocab).num_labels
    config = tmp_path / "asr.config"
    config.write_text(ASR_CONFIG % {"codes": codes, "vocab": vocab, "zip": zip_path, "num_labels": num_labels,
                                    "dir": str(tmp_path)})
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, RNN, str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=env, timeout=600)
    out = proc.stdout.decode("utf8", "replace")
    assert proc.returncode == 0, out[-3000:]
    assert os.path.exists(str(tmp_path / "model.001.index")), out[-3000:]
    assert "dev: score" in out or "dev_score" in out or "epoch   1" in out or "epoch 1" in out, out[-3000:]


LM_CONFIG = """#!rnn.py
task = "train"
train = {"class": "LmDataset", "corpus_file": %(corpus)r, "orth_symbols_file": %(syms)r,
         "add_delayed_seq_data": True, "delayed_seq_data_start_symbol": "[END]", "seq_ordering": "random"}
extern_data = {"delayed": {"dim": %(dim)i, "sparse": True},
               "data": {"dim": %(dim)i, "sparse": True}}
network = {
    "embed": {"class": "linear", "activation": None, "n_out": 8, "from": "data:delayed"},
    "lstm": {"class": "rec", "unit": "nativelstm2", "n_out": 16, "from": "embed"},
    "output": {"class": "softmax", "from": "lstm", "loss": "ce", "target": "data"},
}
batch_size = 200
max_seqs = 8
adam = True
learning_rate = 0.01
num_epochs = 1
model = %(dir)r + "/model"
"""


def test_lm_on_text_corpus_trains_one_epoch(tmp_path):
    from returnn_lite.__main__ import main
    chars = "[END]\n[UNKNOWN]\n \n" + "".join(c + "\n" for c in "abcdefghijklmnopqrstuvwxyz")
    (tmp_path / "chars.syms").write_text(chars)
    (tmp_path / "corpus.txt").write_text("\n".join(["the cat sat on the mat", "a dog ran", "hello world"] * 5) + "\n")
    config = tmp_path / "lm.config"
    config.write_text(LM_CONFIG % {"corpus": str(tmp_path / "corpus.txt"), "syms": str(tmp_path / "chars.syms"),
                                   "dim": 29, "dir": str(tmp_path)})
    assert main([str(config)]) == 0
    assert os.path.exists(str(tmp_path / "model.001.index"))


def test_sprint_dataset_refused_at_config_load(tmp_path, capsys):
    from returnn_lite.__main__ import main
    config = tmp_path / "sprint.config"
    config.write_text('#!rnn.py\ntask = "train"\ntrain = {"class": "ExternSprintDataset", "sprintTrainerExecPath": '
                      '"/x/nn-trainer", "sprintConfigStr": "--config=x"}\nnum_epochs = 1\n'
                      'network = {"output": {"class": "softmax", "loss": "ce"}}\n')
    code = main([str(config)])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code != 0
    assert "config option 'train' class 'ExternSprintDataset' needs RASR/Sprint" in text, text[-2000:]


def test_prefetch_runs_ahead_and_propagates_errors():
    from returnn_lite.datasets.prefetch import prefetch
    produced = []

    def slow():
        for i in range(5):
            produced.append(i)
            yield i

    gen = prefetch(slow(), size=2)
    assert next(gen) == 0
    deadline = time.time() + 5
    while len(produced) < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert len(produced) >= 3  # the thread ran ahead of the consumer
    assert list(gen) == [1, 2, 3, 4]

    def failing():
        yield 1
        raise ValueError("bad audio file x.ogg")

    with pytest.raises(ValueError, match="bad audio file"):
        list(prefetch(failing(), size=2))
    before = threading.active_count()
    gen = prefetch(iter(range(1000)), size=2)
    next(gen)
    gen.close()  # the consumer stops early: the thread ends
    assert threading.active_count() <= before
    assert list(prefetch(iter([1, 2]), size=0)) == [1, 2]


@pytest.mark.skipif(not os.path.exists(CHECKER), reason="../shared (dataset conformance cases) not present")
def test_dataset_conformance_checker_passes():
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, CHECKER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
                          env=env, timeout=900)
    out = proc.stdout.decode("utf8", "replace")
    last = out.strip().splitlines()[-1]
    assert last.endswith(" 0 failed"), out[-3000:]
