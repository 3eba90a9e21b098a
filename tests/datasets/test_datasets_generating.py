"""Generated task datasets: formats, seeds, and the task rules (checked by independent reference code)."""

import numpy
import pytest

from returnn_lite.datasets import (CopyTaskDataset, DatasetError, DummyDataset, Task12AXDataset,
                                   TaskEpisodicCopyDataset, TaskNumberBaseConvertDataset, TaskXmlModelingDataset)

SYMBOLS_12AX = "123ABCXYZ"


def _all_seqs(ds, epoch=1):
    ds.init_seq_order(epoch)
    ds.load_seqs(0, ds.num_seqs)
    return [{key: ds.get_data(i, key) for key in ds.get_data_keys()} for i in range(ds.num_seqs)]


def _reference_12ax(symbols):
    """R at X iff the last digit so far is 1 and the last of A/B/X/Y before it is A (Y: 2 and B)."""
    out = []
    for t, c in enumerate(symbols):
        before = symbols[:t]
        digits = [s for s in before if s in "12"]
        letters = [s for s in before if s in "ABXY"]
        last_digit = digits[-1] if digits else None
        last_letter = letters[-1] if letters else None
        hit = (c == "X" and last_digit == "1" and last_letter == "A") or \
              (c == "Y" and last_digit == "2" and last_letter == "B")
        out.append(1 if hit else 0)
    return out


def test_12ax_format_and_rule():
    ds = Task12AXDataset(num_seqs=200)
    assert ds.num_outputs == {"data": [9, 2], "classes": [2, 1]} and ds.num_inputs == 9
    assert not ds.is_data_sparse("data") and ds.is_data_sparse("classes")
    assert ds.labels["classes"] == ["L", "R"] and ds.get_data_dim("classes") == 2
    seqs = _all_seqs(ds)
    assert len(seqs) == 200
    num_r = 0
    for seq in seqs:
        data, classes = seq["data"], seq["classes"]
        assert data.dtype == numpy.float32 and classes.dtype == numpy.int32
        assert 10 <= data.shape[0] < 100 and data.shape == (classes.shape[0], 9)
        assert (data.sum(axis=1) == 1).all()  # one-hot
        symbols = "".join(SYMBOLS_12AX[i] for i in data.argmax(axis=1))
        assert classes.tolist() == _reference_12ax(symbols)
        num_r += int(classes.sum())
    assert num_r > 50  # the generator favours the target patterns


def test_12ax_make_output_seq_examples():
    def run(s):
        return "".join("LR"[o] for o in Task12AXDataset.make_output_seq([SYMBOLS_12AX.index(c) for c in s]))

    assert run("1AX") == "LLR"
    assert run("2BY") == "LLR"
    assert run("1BY2AX") == "LLLLLL"
    assert run("1AZX") == "LLLR"  # distractor between A and X
    assert run("1AXX") == "LLRL"  # X consumes the A
    assert run("1A2X") == "LLLL"


def test_generated_seeds():
    first = _all_seqs(Task12AXDataset(num_seqs=5), epoch=1)
    again = _all_seqs(Task12AXDataset(num_seqs=5), epoch=1)
    other = _all_seqs(Task12AXDataset(num_seqs=5), epoch=2)
    assert all((a["data"] == b["data"]).all() for a, b in zip(first, again))
    assert any(a["data"].shape != b["data"].shape or (a["data"] != b["data"]).any() for a, b in zip(first, other))
    fixed1 = _all_seqs(Task12AXDataset(num_seqs=5, fixed_random_seed=42), epoch=1)
    fixed3 = _all_seqs(Task12AXDataset(num_seqs=5, fixed_random_seed=42), epoch=3)
    assert all((a["classes"] == b["classes"]).all() for a, b in zip(fixed1, fixed3))
    # the same seq regardless of the order it is read in
    ds = Task12AXDataset(num_seqs=5, seq_ordering="reverse")
    rev = _all_seqs(ds)
    assert (rev[0]["data"] == first[4]["data"]).all() and ds.get_seq_tag(0) == "seq-4"


def test_endless_generation():
    ds = Task12AXDataset()
    ds.init_seq_order(1)
    assert ds.num_seqs == float("inf") and ds.is_less_than_num_seqs(10 ** 9)
    assert ds.get_data(3, "data").shape[1] == 9
    assert ds.get_complete_frac(3) is None
    with pytest.raises(DatasetError, match="endless"):
        Task12AXDataset(seq_ordering="random").init_seq_order(1)


def test_episodic_copy():
    ds = TaskEpisodicCopyDataset(num_seqs=20)
    symbols = TaskEpisodicCopyDataset._input_classes
    for seq in _all_seqs(ds):
        inp = "".join(symbols[i] for i in seq["data"].argmax(axis=1))
        out = "".join(symbols[i] for i in seq["classes"])
        chars = inp.split(" ")[0]
        delim = inp.index(".")
        assert out[:delim + 1] == " " * (delim + 1)
        assert out[delim + 1:] == chars + "."


def test_xml_modeling():
    ds = TaskXmlModelingDataset(num_seqs=20)
    symbols = TaskXmlModelingDataset._input_classes
    for seq in _all_seqs(ds):
        inp = "".join(symbols[i] for i in seq["data"].argmax(axis=1))
        out = "".join(symbols[i] for i in seq["classes"])
        assert len(inp) == len(out) and inp[0] == " "
        for t in range(len(inp) - 1):
            if out[t] != " ":  # every confident prediction is the actual next char
                assert out[t] == inp[t + 1], (inp, out, t)
        # all chars of closing tags after "</" are predicted
        for t in range(len(inp) - 1):
            if inp[t:t + 2] == "</":
                end = inp.index(">", t)
                assert out[t + 1:end] == inp[t + 2:end + 1]


def test_number_base_convert():
    ds = TaskNumberBaseConvertDataset(input_base=8, output_base=2, num_seqs=30)
    assert ds.num_outputs == {"data": [8, 1], "classes": [2, 1]}
    for seq in _all_seqs(ds):
        number = int("".join(map(str, seq["data"])), 8)
        assert "".join(map(str, seq["classes"])) == bin(number)[2:]
        assert 1 <= len(seq["data"]) <= 8


def test_copy_task():
    ds = CopyTaskDataset(nsymbols=5, minlen=2, maxlen=4, num_seqs=10)
    assert ds.is_data_sparse("data") and ds.num_outputs["data"] == [5, 1]
    for seq in _all_seqs(ds):
        assert (seq["data"] == seq["classes"]).all() and 2 <= len(seq["data"]) <= 4


def test_dummy_dataset():
    ds = DummyDataset(input_dim=2, output_dim=3, num_seqs=4, seq_len=3)
    seqs = _all_seqs(ds)
    assert seqs[0]["data"].shape == (3, 2) and seqs[0]["classes"].tolist() == [0, 1, 2]
    assert numpy.allclose(seqs[0]["data"].ravel(), (numpy.arange(6) % 10 - 5) / 10)
    multi = _all_seqs(DummyDataset(input_dim=2, output_dim=3, num_seqs=2, seq_len={"data": 4, "classes": 2}))
    assert multi[1]["data"].shape == (4, 2) and multi[1]["classes"].shape == (2,)


def test_window():
    ds = DummyDataset(input_dim=2, output_dim=3, num_seqs=1, seq_len=3, window=3)
    assert ds.num_outputs["data"] == [6, 2]
    data = _all_seqs(ds)[0]["data"]
    plain = _all_seqs(DummyDataset(input_dim=2, output_dim=3, num_seqs=1, seq_len=3))[0]["data"]
    assert data.shape == (3, 6)
    assert (data[1] == plain.ravel()).all() and (data[0, :2] == 0).all()
