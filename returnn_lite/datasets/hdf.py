"""
The HDF file layout of the original RETURNN: :class:`HDFDataset` reads it, :class:`SimpleHDFWriter` writes it.

Layout (all sequences concatenated along the time axis)::

    attrs: numSeqs, numTimesteps, inputPattSize (input dim), numDims, numLabels
    inputs               [sum T, ...]  "data"; 1-D = sparse class indices, else dense [sum T, dim]
    seqLengths           [num_seqs, 1 + num_targets]  column 0: "data", column 1+i: i-th sorted target key
    seqTags              [num_seqs] strings
    labels               optional label names of "data"
    targets/data/<key>   [sum T_key, ...]
    targets/size         attrs <key> = dim, or [dim, ndim]
    targets/labels/<key> optional label names
"""

from __future__ import annotations

import bisect
import os
import tempfile

import h5py
import numpy

from .basic import DatasetError, NumbersDict
from .indexed import IndexedDataset

__all__ = ["HDFDataset", "SimpleHDFWriter"]


def _decode(value):
    if isinstance(value, (bytes, numpy.bytes_)):
        value = value.decode("utf8")
    return str(value).split("\0")[0]


def _read_strings(dataset):
    return [_decode(v) for v in dataset[...].tolist()]


class _HDFFile:
    """One opened, validated file: seq offsets per column, tags, keys."""

    def __init__(self, filename):
        if not os.path.isfile(filename):
            raise DatasetError("HDFDataset: file not found: %r" % filename)
        try:
            self.h5 = h5py.File(filename, "r")
        except OSError as exc:
            raise DatasetError("HDFDataset: cannot open %r as HDF5 file: %s" % (filename, exc)) from None
        self.filename = filename
        try:
            self._parse()
            self.format = (self.num_outputs(), {key: str(self.dataset(key).dtype) for key in self.lengths})
            self.shapes = {key: list(self.dataset(key).shape[1:]) for key in self.lengths}
            self.label_names = self.labels()
        except Exception as exc:
            self.h5.close()
            if isinstance(exc, DatasetError):
                raise
            raise self._corrupt(exc) from None

    def _corrupt(self, exc):
        """Whatever h5py raises on damaged bytes (KeyError, OSError, RuntimeError, ...): one line naming the file."""
        return self._error("corrupt or truncated HDF5 file (%s: %s)" % (type(exc).__name__, str(exc).strip("'\"")))

    def _error(self, message):
        return DatasetError("HDFDataset: %s: %s" % (self.filename, message))

    def _parse(self):
        h5 = self.h5
        for name in ("inputs", "seqLengths", "seqTags"):
            if name not in h5:
                raise self._error("missing dataset %r (not a RETURNN HDF file? expected inputs, seqLengths, "
                                  "seqTags, optional targets/data/<key>)" % name)
        self.target_keys = []
        if "targets" in h5:
            data_group = h5.get("targets/data")
            if data_group is None:
                raise self._error("group 'targets' without 'targets/data'")
            all_keys = set(data_group.keys()) | set(h5["targets/labels"].keys() if "targets/labels" in h5 else [])
            all_keys |= set(h5["targets/size"].attrs.keys() if "targets/size" in h5 else [])
            self.column_keys = sorted(all_keys)  # seqLengths column order, as the writer uses it
            self.target_keys = sorted(data_group.keys())
        else:
            self.column_keys = []
        lengths = numpy.asarray(h5["seqLengths"][...])
        if lengths.ndim == 1:
            lengths = numpy.repeat(lengths[:, None], 1 + len(self.column_keys), axis=1)
        if lengths.ndim != 2 or lengths.shape[1] < 1 + len(self.column_keys):
            raise self._error("seqLengths has shape %r, expected [num_seqs, %i]"
                              % (lengths.shape, 1 + len(self.column_keys)))
        self.num_seqs = lengths.shape[0]
        self.tags = _read_strings(h5["seqTags"])
        if len(self.tags) != self.num_seqs:
            raise self._error("%i seqTags but %i seqLengths rows" % (len(self.tags), self.num_seqs))
        self.lengths = {"data": lengths[:, 0].astype(numpy.int64)}
        for key in self.target_keys:
            self.lengths[key] = lengths[:, 1 + self.column_keys.index(key)].astype(numpy.int64)
        self.offsets = {}
        for key, lens in self.lengths.items():
            dataset = self.dataset(key)
            total = int(lens.sum())
            if dataset.shape[0] != total:
                raise self._error("%s has %i frames but seqLengths sum to %i" % (dataset.name, dataset.shape[0], total))
            self.offsets[key] = numpy.concatenate([[0], numpy.cumsum(lens)])

    def dataset(self, key):
        return self.h5["inputs"] if key == "data" else self.h5["targets/data/" + key]

    def num_outputs(self):
        inputs = self.h5["inputs"]
        if inputs.ndim == 1:
            out = {"data": [int(self.h5.attrs.get("inputPattSize", 1)), 1]}
        else:
            out = {"data": [int(inputs.shape[-1]), inputs.ndim]}
        size_attrs = self.h5["targets/size"].attrs if "targets/size" in self.h5 else {}
        for key in self.target_keys:
            dataset = self.dataset(key)
            if key in size_attrs:
                size = numpy.asarray(size_attrs[key])
                if size.ndim == 0:
                    out[key] = [int(size), dataset.ndim]
                elif size.shape == (2,):
                    out[key] = [int(size[0]), int(size[1])]
                else:
                    raise self._error("targets/size attr %r has shape %r, expected scalar or [dim, ndim]"
                                      % (key, size.shape))
            else:
                out[key] = [int(dataset.shape[-1]) if dataset.ndim >= 2 else 1, dataset.ndim]
        return out

    def labels(self):
        labels = {}
        if "labels" in self.h5:  # an empty list where the file has an empty "labels", as in the original
            has_any = self.h5["labels"].shape and self.h5["labels"].shape[0] > 0
            labels["data"] = _read_strings(self.h5["labels"]) if has_any else []
        if "targets/labels" in self.h5:
            for key in self.h5["targets/labels"]:
                names = _read_strings(self.h5["targets/labels/" + key])
                if names and names != ["dummy-label"]:
                    labels[key] = names
        return labels

    def read(self, key, file_seq_idx):
        start, end = self.offsets[key][file_seq_idx], self.offsets[key][file_seq_idx + 1]
        try:
            return self.dataset(key)[int(start):int(end)]
        except Exception as exc:
            raise self._corrupt(exc) from None


class HDFDataset(IndexedDataset):
    """
    Reads one or more HDF files of the layout above (seqs of all files, in file order, form the corpus).

    :param list[str]|str files:
    """

    _cheap_seq_lens = True

    def __init__(self, files=None, **kwargs):
        super().__init__(**kwargs)
        self.files = []
        self._files = []
        self._file_start = [0]  # corpus idx of the first seq of each file (+ total at the end)
        self._dtypes = {}
        self._shapes = {}
        if isinstance(files, str):
            files = [files]
        for filename in files or []:
            self.add_file(filename)
        self._apply_window_to_dims()

    def add_file(self, filename):
        hdf = _HDFFile(os.fspath(filename))
        num_outputs, dtypes = hdf.format
        if self._files:
            if not self._compatible(num_outputs, dtypes):
                hdf.h5.close()
                raise DatasetError("HDFDataset: %s: data format %r (dtypes %r) differs from %s: %r (dtypes %r)"
                                   % (filename, num_outputs, dtypes, self.files[0], self._raw_num_outputs,
                                      self._dtypes))
            for key, (dim, ndim) in num_outputs.items():
                if ndim <= 1:  # sparse: writers may infer the number of classes per file, take the largest
                    self._raw_num_outputs[key][0] = max(self._raw_num_outputs[key][0], dim)
                    self.num_outputs[key][0] = self._raw_num_outputs[key][0]
        else:
            self._raw_num_outputs = {k: list(v) for k, v in num_outputs.items()}
            self.num_outputs = {k: list(v) for k, v in num_outputs.items()}
            self.num_inputs = num_outputs["data"][0]
            self._dtypes = dtypes
            self._shapes = hdf.shapes
            self.labels = hdf.label_names
        self.files.append(hdf.filename)
        self._files.append(hdf)
        self._file_start.append(self._file_start[-1] + hdf.num_seqs)
        self._tag_index = None

    def _compatible(self, num_outputs, dtypes):
        if set(num_outputs) != set(self._raw_num_outputs) or dtypes != self._dtypes:
            return False
        for key, (dim, ndim) in num_outputs.items():
            old_dim, old_ndim = self._raw_num_outputs[key]
            if ndim != old_ndim or (ndim >= 2 and dim != old_dim):
                return False
        return True

    def _locate(self, corpus_idx):
        file_idx = bisect.bisect_right(self._file_start, corpus_idx) - 1
        return self._files[file_idx], corpus_idx - self._file_start[file_idx]

    def _num_corpus_seqs(self):
        return self._file_start[-1]

    def _load_corpus_seq(self, corpus_idx):
        hdf, idx = self._locate(corpus_idx)
        return {key: hdf.read(key, idx) for key in hdf.lengths}

    def _corpus_seq_lens(self, corpus_idx):
        hdf, idx = self._locate(corpus_idx)
        return NumbersDict({key: int(lens[idx]) for key, lens in hdf.lengths.items()})

    def _corpus_seq_tag(self, corpus_idx):
        hdf, idx = self._locate(corpus_idx)
        return hdf.tags[idx]

    def get_all_tags(self):
        return [tag for hdf in self._files for tag in hdf.tags]

    def get_num_timesteps(self):
        return int(sum(hdf.lengths["data"].sum() for hdf in self._files))

    def get_data_dtype(self, key):
        self._check_key(key)
        return self._dtypes[key]

    def get_data_shape(self, key):
        self._check_key(key)
        shape = list(self._shapes[key])
        if key == "data" and self.window > 1 and len(shape) == 1:
            shape[-1] *= self.window
        return shape

    def close(self):
        for hdf in self._files:
            try:
                hdf.h5.close()
            except Exception:  # already closed / interpreter shutdown
                pass

    def __del__(self):
        if hasattr(self, "_files"):
            self.close()


class SimpleHDFWriter:
    """
    Writes seqs batch-wise into a new HDF file that :class:`HDFDataset` reads. Data goes to a temp file
    next to ``filename``, which replaces ``filename`` only in :func:`close` (readers never see half files).

    :param str filename:
    :param int|None dim: feature dim of dense inputs, or number of classes of sparse inputs
    :param int|None ndim: axes per seq without batch: 1 = sparse [T], 2 = dense [T, dim] (default: 2 if dim else 1)
    :param list[str]|None labels: names for the ``dim`` classes/features
    :param dict[str,(int,int,str)]|None extra_type: key -> (dim, ndim, dtype) of extra data (targets/data/<key>)
    """

    def __init__(self, filename, dim, ndim=None, labels=None, extra_type=None):
        if ndim is None:
            ndim = 2 if dim is not None else 1
        if labels is not None and dim is not None and len(labels) != dim:
            raise ValueError("SimpleHDFWriter: %i labels for dim %i" % (len(labels), dim))
        self.filename = os.fspath(filename)
        self.dim, self.ndim = dim, ndim
        directory = os.path.dirname(os.path.abspath(self.filename))
        fd, self.tmp_filename = tempfile.mkstemp(
            dir=directory, prefix=".%s." % os.path.basename(self.filename), suffix=".tmp")
        os.close(fd)
        self._file = h5py.File(self.tmp_filename, "w")
        attrs = self._file.attrs
        attrs["numTimesteps"], attrs["numSeqs"], attrs["numDims"] = 0, 0, 1
        attrs["inputPattSize"] = attrs["numLabels"] = dim or 1
        self._file.create_dataset("labels", data=list(labels or []), dtype=h5py.string_dtype())
        self._seq_lengths = self._file.create_dataset("seqLengths", (0, 2), dtype="int32", maxshape=(None, None))
        self._seq_tags = self._file.create_dataset("seqTags", (0,), dtype=h5py.string_dtype(), maxshape=(None,))
        self._inputs = None
        self._inputs_max = 1
        self._extra = {}  # key -> h5py dataset
        self._extra_dims = {}  # key -> [dim or None (infer from max), ndim]
        self._extra_max = {}  # key -> 1 + max class index seen (for sparse extras without a given dim)
        for key, (e_dim, e_ndim, e_dtype) in (extra_type or {}).items():
            self._prepare_extra(key, e_dim, e_ndim, e_dtype, feature_shape=(e_dim,) if e_ndim >= 2 else ())

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _prepare_extra(self, key, dim, ndim, dtype, feature_shape):
        if key == "data" or "/" in key:
            raise ValueError("SimpleHDFWriter: invalid extra key %r" % key)
        if "targets" not in self._file:
            for group in ("targets/data", "targets/size", "targets/labels"):
                self._file.create_group(group)
        dtype = h5py.string_dtype() if isinstance(dtype, str) and dtype == "string" else numpy.dtype(dtype)
        self._extra[key] = self._file["targets/data"].create_dataset(
            key, (0,) + tuple(feature_shape), dtype=dtype, maxshape=(None,) + tuple(feature_shape))
        self._file["targets/labels"].create_dataset(key, data=[], dtype=h5py.string_dtype())
        self._extra_dims[key] = [dim, max(ndim, 1)]
        # seqLengths columns follow the sorted keys: rebuild them for the new key
        keys = sorted(self._extra)
        old = self._seq_lengths[...]
        old_keys = [k for k in keys if k != key]
        new = numpy.zeros((old.shape[0], 1 + len(keys)), dtype="int32")
        new[:, 0] = old[:, 0]
        for i, k in enumerate(old_keys):
            new[:, 1 + keys.index(k)] = old[:, 1 + i]
        self._seq_lengths.resize(new.shape)
        self._seq_lengths[...] = new

    @staticmethod
    def _append(dataset, values):
        if not len(values):
            return
        offset = dataset.shape[0]
        dataset.resize(offset + values.shape[0], axis=0)
        dataset[offset:] = values

    def insert_batch(self, inputs, seq_len, seq_tag, extra=None, extra_seq_len=None):
        """
        :param numpy.ndarray inputs: [B, T] (sparse) or [B, T, dim] (dense), padded
        :param list[int]|numpy.ndarray|dict[int,list[int]] seq_len: lengths of the T axis ({0: lens} also ok)
        :param list[str|bytes] seq_tag: B tags
        :param dict[str,numpy.ndarray]|None extra: key -> [B, T_key, ...] (or [B] scalars); trimmed to
          ``extra_seq_len[key]`` if given, else to ``seq_len`` if T_key equals T, else kept whole
        :param dict[str,list[int]]|None extra_seq_len:
        """
        if self._file is None:
            raise ValueError("SimpleHDFWriter: insert_batch after close")
        inputs = numpy.asarray(inputs)
        if isinstance(seq_len, dict):
            if set(seq_len) != {0}:
                raise NotImplementedError("SimpleHDFWriter: only one dynamic axis supported, got %r" % sorted(seq_len))
            seq_len = seq_len[0]
        seq_len = [int(n) for n in numpy.asarray(seq_len).reshape(-1)]
        n_batch = len(seq_tag)
        if inputs.ndim != self.ndim + 1:
            raise ValueError("SimpleHDFWriter: inputs shape %r, expected %i axes (batch + ndim=%i)"
                             % (inputs.shape, self.ndim + 1, self.ndim))
        if inputs.shape[0] != n_batch or len(seq_len) != n_batch:
            raise ValueError("SimpleHDFWriter: batch sizes differ: inputs %i, seq_len %i, seq_tag %i"
                             % (inputs.shape[0], len(seq_len), n_batch))
        if self.ndim >= 2 and self.dim is not None and inputs.shape[-1] != self.dim:
            raise ValueError("SimpleHDFWriter: inputs feature dim %i != dim %i" % (inputs.shape[-1], self.dim))
        if max(seq_len, default=0) > inputs.shape[1]:
            raise ValueError("SimpleHDFWriter: seq_len %r exceeds time axis %i" % (seq_len, inputs.shape[1]))
        data = numpy.concatenate([inputs[i, :seq_len[i]] for i in range(n_batch)], axis=0) if n_batch else None
        if data is None:
            return
        if self._inputs is None:
            self._inputs = self._file.create_dataset(
                "inputs", (0,) + data.shape[1:], dtype=data.dtype, maxshape=(None,) + data.shape[1:])
        self._append(self._inputs, data.astype(self._inputs.dtype, copy=False))
        if self.dim is None and self.ndim <= 1 and data.size and data.dtype.kind in "iu":
            self._inputs_max = max(self._inputs_max, int(data.max()) + 1)  # classes seen, for inputPattSize

        extra_lens = {}
        for key, value in sorted((extra or {}).items()):
            value = numpy.asarray(value)
            if value.shape[0] != n_batch:
                raise ValueError("SimpleHDFWriter: extra %r has batch size %i, expected %i"
                                 % (key, value.shape[0], n_batch))
            parts = []
            for i in range(n_batch):
                part = value[i]
                if part.ndim == 0:
                    part = part[None]
                elif extra_seq_len and key in extra_seq_len:
                    part = part[:int(extra_seq_len[key][i])]
                elif value.ndim >= 2 and value.shape[1] == inputs.shape[1]:
                    part = part[:seq_len[i]]
                parts.append(part)
            if key not in self._extra:
                ndim = parts[0].ndim
                dim = parts[0].shape[-1] if ndim >= 2 else (None if value.dtype.kind in "iu" else 1)
                self._prepare_extra(key, dim, ndim, value.dtype, feature_shape=parts[0].shape[1:])
            joined = numpy.concatenate(parts, axis=0)
            self._append(self._extra[key], joined.astype(self._extra[key].dtype, copy=False))
            if self._extra_dims[key][0] is None and joined.size:  # sparse without given dim: classes seen so far
                self._extra_max[key] = max(self._extra_max.get(key, 0), int(joined.max()) + 1)
            extra_lens[key] = [len(p) for p in parts]

        keys = sorted(self._extra)
        rows = numpy.zeros((n_batch, max(2, 1 + len(keys))), dtype="int32")
        rows[:, 0] = seq_len
        for key, lens in extra_lens.items():
            rows[:, 1 + keys.index(key)] = lens
        self._append(self._seq_lengths, rows)
        self._append(self._seq_tags, numpy.array([_decode(t) for t in seq_tag], dtype=object))
        self._file.attrs["numSeqs"] += n_batch
        self._file.attrs["numTimesteps"] += data.shape[0]

    def close(self):
        """Finish the file and move it to ``filename`` (replacing an existing file)."""
        if self._file is None:
            return
        if self._inputs is None:  # no seqs: still a valid (empty) file
            shape = (0,) if self.ndim <= 1 else (0, self.dim or 1)
            self._file.create_dataset("inputs", shape, dtype="int32" if self.ndim <= 1 else "float32",
                                      maxshape=(None,) + shape[1:])
        if self.dim is None and self.ndim <= 1:
            self._file.attrs["inputPattSize"] = self._file.attrs["numLabels"] = self._inputs_max
        for key, (dim, ndim) in self._extra_dims.items():
            if dim is None:
                dim = self._extra_max.get(key, 1)
            self._file["targets/size"].attrs[key] = numpy.array([dim, ndim], dtype="int32")
        self._file.close()
        self._file = None
        os.replace(self.tmp_filename, self.filename)

    def abort(self):
        """Discard everything written (``filename`` is left untouched)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if os.path.exists(self.tmp_filename):
            os.remove(self.tmp_filename)

    def __del__(self):
        if getattr(self, "_file", None) is not None:
            try:
                self.abort()
            except Exception:  # interpreter shutdown
                pass
