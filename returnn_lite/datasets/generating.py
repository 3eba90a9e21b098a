"""
Artificially generated datasets, with the data semantics of the original RETURNN's generating datasets.

Each seq is generated from its own random state, seeded from (epoch seed, corpus seq idx): data is the same
whatever order the seqs are read in, changes with each full epoch, and stays fixed with ``fixed_random_seed``
(useful for dev sets). The exact random numbers differ from the original's.
"""

from __future__ import annotations

import numpy

from .basic import DatasetError, convert_data_dims
from .indexed import IndexedDataset

__all__ = ["GeneratingDataset", "Task12AXDataset", "TaskEpisodicCopyDataset", "TaskXmlModelingDataset",
           "TaskNumberBaseConvertDataset", "CopyTaskDataset", "DummyDataset", "class_idx_seq_to_1_of_k"]


def class_idx_seq_to_1_of_k(seq, num_classes):
    """[T] class indices -> [T, num_classes] float32 one-hot."""
    seq = numpy.asarray(seq, dtype=numpy.int64)
    out = numpy.zeros((len(seq), num_classes), dtype=numpy.float32)
    out[numpy.arange(len(seq)), seq] = 1.0
    return out


class _LegacyDraws:
    """
    The draws of a ``numpy.random.RandomState`` (MT19937, the legacy stream numpy keeps frozen) read from its
    32-bit words fetched in blocks: ``random_sample()`` (= ``uniform()``) and ``randint(n)`` (= ``randint(0, n)``
    and ``choice`` of n items) give exactly the RandomState's numbers, without a call into numpy per draw. The
    RandomState itself ends up ahead by the rest of the last block.
    """

    _BLOCK = 256

    def __init__(self, random):
        self._random = random
        self._words = []
        self._pos = 0

    def _word(self):
        if self._pos == len(self._words):
            self._words = self._random.randint(0, 1 << 32, size=self._BLOCK, dtype=numpy.uint32).tolist()
            self._pos = 0
        self._pos += 1
        return self._words[self._pos - 1]

    def random_sample(self):
        """As RandomState's: 53 bits from two words (27 + 26)."""
        return ((self._word() >> 5) * 67108864.0 + (self._word() >> 6)) / 9007199254740992.0

    def randint(self, n):
        """As RandomState's ``randint(0, n)`` (n >= 2): a word masked to the bits of n - 1, rejected until < n."""
        mask = (1 << (n - 1).bit_length()) - 1
        while True:
            value = self._word() & mask
            if value < n:
                return value


class GeneratingDataset(IndexedDataset):
    """
    Base: subclasses implement ``generate_seq(seq_idx) -> dict key -> array`` using ``self.random``
    (a ``numpy.random.RandomState`` seeded for that seq).
    """

    _input_classes = None
    _output_classes = None

    def __init__(self, input_dim, output_dim, num_seqs=float("inf"), **kwargs):
        """
        :param int|None input_dim: dense "data" dim, unless output_dim defines "data"
        :param int|dict output_dim: see :func:`convert_data_dims`; an int is the sparse "classes" dim
        :param int|float num_seqs: per full epoch; ``inf`` for endless data
        """
        super().__init__(**kwargs)
        self.num_outputs = convert_data_dims(output_dim)
        if "data" not in self.num_outputs and input_dim is not None:
            self.num_outputs["data"] = [input_dim, 2]  # dense
        self.num_inputs = input_dim if input_dim is not None else self.num_outputs.get("data", [0])[0]
        self._apply_window_to_dims()
        if num_seqs != float("inf"):
            num_seqs = int(num_seqs)
        self._total_num_seqs = num_seqs
        self._epoch_seed = self.get_random_seed_for_epoch(None)
        self.random = numpy.random.RandomState(1)
        if self._input_classes and self._output_classes and not self.labels:
            self.labels = {"data": list(self._input_classes), "classes": list(self._output_classes)}

    def _num_corpus_seqs(self):
        return self._total_num_seqs

    def _on_new_epoch(self, epoch):
        self._epoch_seed = self.get_random_seed_for_epoch(epoch)

    def _load_corpus_seq(self, corpus_idx):
        # reseeding in place gives the state of a new RandomState([...]) at a tenth of its cost
        self.random.seed([self._epoch_seed & 0xFFFFFFFF, corpus_idx & 0xFFFFFFFF])
        seq = self.generate_seq(corpus_idx)
        out = {}
        for key, value in seq.items():
            dtype = self.get_data_dtype(key) if key in self.num_outputs else None
            out[key] = numpy.asarray(value, dtype=dtype)
        return out

    def generate_seq(self, seq_idx):
        raise NotImplementedError


class Task12AXDataset(GeneratingDataset):
    """
    The 12AX memory task (O'Reilly & Frank 2006). Inputs are symbols of "123ABCXYZ" (one-hot, dense dim 9),
    outputs are "L"/"R" (sparse dim 2): "R" (1) exactly at an X that follows an A while the last digit was 1,
    or at a Y that follows a B while the last digit was 2 (the A/B must come after the latest digit and
    after the previous X/Y); "L" (0) everywhere else.
    """

    _input_classes = "123ABCXYZ"
    _output_classes = "LR"

    def __init__(self, **kwargs):
        super().__init__(input_dim=len(self._input_classes), output_dim=len(self._output_classes), **kwargs)

    def get_random_seq_len(self):
        return self.random.randint(10, 100)

    def generate_input_seq(self, seq_len):
        """Skewed towards "1AX"/"2BY" patterns; otherwise "R" would be very rare."""
        draws = _LegacyDraws(self.random)  # RandomState.choice(list) / .uniform(), a few times cheaper
        rand, randint = draws.random_sample, draws.randint
        symbols = self._input_classes
        num_symbols = len(symbols)
        seq = ("", "1", "2")[randint(3)]
        while len(seq) < seq_len:
            if rand() < 0.5:
                seq += "12"[randint(2)]
            if rand() < 0.9:
                seq += ("AX", "BY")[randint(2)]
            while rand() < 0.5:
                seq += symbols[randint(num_symbols)]
        return [symbols.index(c) for c in seq[:seq_len]]

    @classmethod
    def make_output_seq(cls, input_seq):
        outer, inner = "", ""  # last digit (1/2) and last letter (A/B) since then
        out = []
        for i in input_seq:
            c = cls._input_classes[i]
            o = 0  # "L"
            if c in "12":
                outer = c
            elif c in "AB":
                inner = c
            elif c in "XY":
                if outer + inner + c in ("1AX", "2BY"):
                    o = 1  # "R"
                inner = ""
            # "3", "C", "Z" are distractors
            out.append(o)
        return out

    def generate_seq(self, seq_idx):
        input_seq = self.generate_input_seq(self.get_random_seq_len())
        return {"data": class_idx_seq_to_1_of_k(input_seq, len(self._input_classes)),
                "classes": numpy.array(self.make_output_seq(input_seq))}


class TaskEpisodicCopyDataset(GeneratingDataset):
    """
    Episodic copy: random chars, blanks, then delimiters during which the chars are to be reproduced.
    Input one-hot over " .01234567" (dense dim 10), output sparse over the same symbols.
    """

    _input_classes = " .01234567"
    _output_classes = _input_classes

    def __init__(self, **kwargs):
        super().__init__(input_dim=len(self._input_classes), output_dim=len(self._output_classes), **kwargs)

    def generate_input_seq(self):
        num_chars = self.random.randint(1, 10)
        seq = "".join(str(self.random.choice(list(self._input_classes[2:]))) for _ in range(num_chars))
        seq += " " * self.random.randint(1, 100)
        seq += "." * (num_chars + 2)  # one delimiter, then wait for the recall (+1 end marker)
        return [self._input_classes.index(c) for c in seq]

    @classmethod
    def make_output_seq(cls, input_seq):
        memory, out, recall = "", "", False
        for i in input_seq:
            c = cls._input_classes[i]
            if not recall:
                out += " "
                if c == ".":
                    recall = True
                elif c != " ":
                    memory += c
            else:
                out += memory[:1] or "."
                memory = memory[1:]
        return [cls._output_classes.index(c) for c in out]

    def generate_seq(self, seq_idx):
        input_seq = self.generate_input_seq()
        return {"data": class_idx_seq_to_1_of_k(input_seq, len(self._input_classes)),
                "classes": numpy.array(self.make_output_seq(input_seq))}


class TaskXmlModelingDataset(GeneratingDataset):
    """
    XML modeling (Jozefowicz et al. 2015): predict the next char of nested ``<tag>...</tag>`` text; only
    "<" after " "/">" and the chars of closing tags are predictable, everything else is " " (unknown).
    Input one-hot over " <>/abcdefgh" (dense dim 12), output sparse over the same symbols.
    """

    _input_classes = " <>/abcdefgh"
    _output_classes = _input_classes

    def __init__(self, limit_stack_depth=4, **kwargs):
        super().__init__(input_dim=len(self._input_classes), output_dim=len(self._output_classes), **kwargs)
        self.limit_stack_depth = limit_stack_depth

    def generate_input_seq(self):
        seq, stack = " ", []  # starts with blank: the first prediction is "<"
        while True:
            if not stack or (len(stack) < self.limit_stack_depth and self.random.rand() > 0.6):
                tag = "".join(str(self.random.choice(list(self._input_classes[4:])))
                              for _ in range(self.random.randint(1, 10)))
                seq += "<%s>" % tag
                stack.append(tag)
            else:
                seq += "</%s>" % stack.pop()
            if not stack and self.random.rand() > 0.2:
                break
        return [self._input_classes.index(c) for c in seq]

    @classmethod
    def make_output_seq(cls, input_seq):
        stack, out = [], ""
        state = "text"  # text -> lt (after "<") ; opening tag chars or closing tag chars
        for c in (cls._input_classes[i] for i in input_seq):
            if c in " >":
                out += "<"
                state = "expect_lt"
            elif state == "expect_lt":  # c == "<"
                out += " "  # opening or closing: unknown
                state = "tag_start"
            elif state == "tag_start":
                if c == "/":  # closing tag: the whole name (and ">") is known
                    out += stack[-1][0]
                    stack[-1] = stack[-1][1:]
                    state = "closing"
                else:
                    out += " "
                    stack.append(c)
                    state = "opening"
            elif state == "opening":
                out += " "
                stack[-1] += c
            elif state == "closing":
                if stack[-1]:
                    out += stack[-1][0]
                    stack[-1] = stack[-1][1:]
                else:
                    out += ">"
                    stack.pop()
                    state = "text"
        return [cls._output_classes.index(c) for c in out]

    def generate_seq(self, seq_idx):
        input_seq = self.generate_input_seq()
        return {"data": class_idx_seq_to_1_of_k(input_seq, len(self._input_classes)),
                "classes": numpy.array(self.make_output_seq(input_seq))}


class TaskNumberBaseConvertDataset(GeneratingDataset):
    """
    Convert a number from one base to another (e.g. octal digits -> binary digits). Input and output are
    sparse digit sequences of different lengths (a seq2seq task).
    """

    _digits = "0123456789abcdefghijklmnopqrstuvwxyz"

    def __init__(self, input_base=8, output_base=2, min_input_seq_len=1, max_input_seq_len=8, **kwargs):
        if not (2 <= input_base <= len(self._digits) and 2 <= output_base <= len(self._digits)):
            raise DatasetError("TaskNumberBaseConvertDataset: bases must be in [2, %i]" % len(self._digits))
        if not 0 < min_input_seq_len <= max_input_seq_len:
            raise DatasetError("TaskNumberBaseConvertDataset: need 0 < min_input_seq_len <= max_input_seq_len")
        super().__init__(input_dim=input_base, output_dim={"data": (input_base, 1), "classes": (output_base, 1)},
                         **kwargs)
        self.input_base, self.output_base = input_base, output_base
        self.min_input_seq_len, self.max_input_seq_len = min_input_seq_len, max_input_seq_len
        self.labels = {"data": list(self._digits[:input_base]), "classes": list(self._digits[:output_base])}

    def generate_input_seq(self):
        seq_len = self.random.randint(self.min_input_seq_len, self.max_input_seq_len + 1)
        return [int(self.random.randint(0, self.input_base)) for _ in range(seq_len)]

    def make_output_seq(self, input_seq):
        number = 0
        for digit in input_seq:
            number = number * self.input_base + digit
        out = []
        while number:
            number, digit = divmod(number, self.output_base)
            out.insert(0, digit)
        return out or [0]

    def generate_seq(self, seq_idx):
        input_seq = self.generate_input_seq()
        return {"data": numpy.array(input_seq), "classes": numpy.array(self.make_output_seq(input_seq))}


class CopyTaskDataset(GeneratingDataset):
    """Copy task: "data" and "classes" are the same random sparse sequence over ``nsymbols`` symbols."""

    def __init__(self, nsymbols, minlen=0, maxlen=0, minlen_epoch_factor=0, maxlen_epoch_factor=0, **kwargs):
        super().__init__(input_dim=nsymbols, output_dim={"data": (nsymbols, 1), "classes": (nsymbols, 1)}, **kwargs)
        self.nsymbols = nsymbols
        self.minlen, self.maxlen = minlen, maxlen
        self.minlen_epoch_factor, self.maxlen_epoch_factor = minlen_epoch_factor, maxlen_epoch_factor

    def get_random_seq_len(self):
        # Curriculum: lengths may grow with the epoch.
        epoch = self.epoch or 1
        minlen = int(self.minlen + self.minlen_epoch_factor * epoch)
        maxlen = int(self.maxlen + self.maxlen_epoch_factor * epoch)
        if not 0 < minlen <= maxlen:
            raise DatasetError("%s: need 0 < minlen <= maxlen, got %i, %i in epoch %i"
                               % (self.name, minlen, maxlen, epoch))
        return self.random.randint(minlen, maxlen + 1)

    def generate_seq(self, seq_idx):
        seq = self.random.randint(0, self.nsymbols, size=self.get_random_seq_len())
        return {"data": seq, "classes": seq.copy()}


class DummyDataset(GeneratingDataset):
    """
    Deterministic meaningless data: dense "data" [seq_len, input_dim] of values cycling through
    ``(i % input_max_value + shift) * scale``, sparse "classes" cycling through the classes.
    ``seq_len`` may be a dict ``{"data": n, "classes": m}`` for different lengths.
    """

    def __init__(self, input_dim, output_dim, num_seqs, seq_len=2, input_max_value=10.0, input_shift=None,
                 input_scale=None, **kwargs):
        super().__init__(input_dim=input_dim, output_dim=output_dim, num_seqs=num_seqs, **kwargs)
        self.seq_len = seq_len
        self.input_max_value = input_max_value
        self.input_shift = -input_max_value / 2.0 if input_shift is None else input_shift
        self.input_scale = 1.0 / input_max_value if input_scale is None else input_scale

    def _len_for(self, key):
        return self.seq_len[key] if isinstance(self.seq_len, dict) else self.seq_len

    def generate_seq(self, seq_idx):
        input_dim = self.num_outputs["data"][0] // self.window
        data_len, classes_len = self._len_for("data"), self._len_for("classes")
        i1, i2 = seq_idx, seq_idx + data_len * input_dim
        values = (numpy.arange(i1, i2) % self.input_max_value + self.input_shift) * self.input_scale
        seq = {"data": values.reshape((data_len, input_dim))}
        if "classes" in self.num_outputs:
            seq["classes"] = numpy.arange(i2, i2 + classes_len) % self.num_outputs["classes"][0]
        return seq
