"""
:class:`MetaDataset`: combines data keys of several datasets, matching seqs by their seq tag.
"""

from __future__ import annotations

from .basic import Dataset, DatasetError, NumbersDict, _data_first
from .indexed import IndexedDataset
from .registry import init_dataset
from .seq_order import seq_ordering_needs_lengths

__all__ = ["MetaDataset"]


class MetaDataset(Dataset):
    """
    :param dict[str,dict|str|Dataset] datasets: name -> dataset options (see ``init_dataset``)
    :param dict[str,(str,str)] data_map: our data key -> (dataset name, its data key)
    :param str|None seq_list_file: text file with one seq tag per line: the corpus (default: all tags of
      the default dataset)
    :param str|None seq_order_control_dataset: this sub-dataset's own ``seq_ordering``/``partition_epoch``
      decide the order. Without it, this dataset's own options decide (lengths from the default dataset).
    :param dict|None data_dims: override ``num_outputs`` per key
    :param dict[str,str]|None data_dtypes: override dtypes per key
    """

    def __init__(self, datasets, data_map, seq_list_file=None, seq_order_control_dataset=None, data_dims=None,
                 data_dtypes=None, **kwargs):
        super().__init__(**kwargs)
        if not data_map:
            raise DatasetError("%s: data_map must not be empty" % self.name)
        self.data_map = {key: tuple(value) for key, value in data_map.items()}
        for key, value in self.data_map.items():
            if len(value) != 2 or value[0] not in datasets:
                raise DatasetError("%s: data_map[%r] = %r must be (dataset name, data key) with a dataset name in %s"
                                   % (self.name, key, value, sorted(datasets)))
        if seq_order_control_dataset is not None and seq_order_control_dataset not in datasets:
            raise DatasetError("%s: seq_order_control_dataset %r not in datasets %s"
                               % (self.name, seq_order_control_dataset, sorted(datasets)))
        used = {name for name, _ in self.data_map.values()} | ({seq_order_control_dataset} - {None})
        self.datasets = {name: init_dataset(datasets[name], extra_kwargs={"name": "%s_%s" % (self.name, name)})
                         for name in sorted(used)}
        for key, (name, sub_key) in self.data_map.items():
            if sub_key not in self.datasets[name].get_data_keys():
                raise DatasetError("%s: data_map[%r]: dataset %r has no data key %r (has %s)"
                                   % (self.name, key, name, sub_key, self.datasets[name].get_data_keys()))
        self._explicit_control = seq_order_control_dataset is not None
        self.default_dataset_key = seq_order_control_dataset or (
            self.data_map["data"][0] if "data" in self.data_map else sorted(self.datasets)[0])
        self.num_outputs = {key: list(self.datasets[name].num_outputs[sub_key])
                            for key, (name, sub_key) in self.data_map.items()}
        for key, value in (data_dims or {}).items():
            self.num_outputs[key] = list(value)
        self.num_inputs = self.num_outputs["data"][0] if "data" in self.num_outputs else 0
        self.data_dtypes = dict(data_dtypes or {})
        self.labels = {key: self.datasets[name].labels[sub_key] for key, (name, sub_key) in self.data_map.items()
                       if sub_key in self.datasets[name].labels}
        self._seq_list_file = seq_list_file
        self._all_tags = None  # the corpus, lazily
        self._all_tag_index = None
        self._seq_tags = None  # current epoch

    @property
    def _control(self):
        return self.datasets[self.default_dataset_key]

    def get_all_tags(self):
        if self._all_tags is None:
            if self._seq_list_file:
                try:
                    with open(self._seq_list_file, encoding="utf8") as f:
                        self._all_tags = [line.strip() for line in f if line.strip()]
                except OSError as exc:
                    raise DatasetError("%s: cannot read seq_list_file: %s" % (self.name, exc)) from None
            else:
                self._all_tags = list(self._control.get_all_tags())
        return self._all_tags

    def _sort_len(self, tag):
        control = self._control
        name, sub_key = self.data_map.get("data", (None, None))
        if name != self.default_dataset_key:
            sub_key = None  # "data" comes from elsewhere: sort by the longest key of the control dataset
        if isinstance(control, IndexedDataset):
            lens = control._corpus_seq_lens(control._corpus_indices_for_tags([tag])[0])
        else:
            control.init_seq_order(self.epoch, seq_list=[tag])
            lens = control.get_seq_length(0)
        return lens[sub_key] if sub_key in lens else lens.max_value()

    def init_seq_order(self, epoch=None, seq_list=None, seq_order=None):
        self.epoch = epoch
        if seq_list is not None:
            tags = list(seq_list)
        elif seq_order is not None:
            all_tags = self.get_all_tags()
            tags = [all_tags[i] for i in seq_order]
        elif self._explicit_control:
            self._control.init_seq_order(epoch)
            tags = [self._control.get_seq_tag(i) for i in range(self._control.num_seqs)]
        else:
            all_tags = self.get_all_tags()
            get_len = (lambda i: self._sort_len(all_tags[i])) if seq_ordering_needs_lengths(self.seq_ordering) else None
            tags = [all_tags[i] for i in self.get_seq_order_for_epoch(epoch, len(all_tags), get_seq_len=get_len)]
        for dataset in self.datasets.values():
            dataset.init_seq_order(epoch, seq_list=tags)
        self._seq_tags = tags
        return True

    def _require_init(self):
        if self._seq_tags is None:
            raise DatasetError("%s: call init_seq_order(epoch) before accessing seqs" % self.name)

    @property
    def num_seqs(self):
        self._require_init()
        return len(self._seq_tags)

    def get_current_seq_order(self):
        self._require_init()
        if self._all_tag_index is None:
            self._all_tag_index = {tag: i for i, tag in enumerate(self.get_all_tags())}
        return [self._all_tag_index[tag] for tag in self._seq_tags]

    def get_corpus_seq_idx(self, seq_idx):
        return self.get_current_seq_order()[seq_idx]

    def load_seqs(self, start, end):
        self._require_init()
        for dataset in self.datasets.values():
            dataset.load_seqs(start, end)
        for idx in range(start, min(end, len(self._seq_tags))):
            self._check_tags(idx)

    def _check_tags(self, seq_idx):
        for name, dataset in self.datasets.items():
            tag = dataset.get_seq_tag(seq_idx)
            if tag != self._seq_tags[seq_idx]:
                raise DatasetError("%s: seq %i: dataset %r has tag %r, expected %r"
                                   % (self.name, seq_idx, name, tag, self._seq_tags[seq_idx]))

    def get_data(self, seq_idx, key):
        self._check_key(key)
        name, sub_key = self.data_map[key]
        return self.datasets[name].get_data(seq_idx, sub_key)

    def get_seq_length(self, seq_idx):
        return NumbersDict({key: self.datasets[name].get_seq_length(seq_idx)[sub_key]
                            for key, (name, sub_key) in self.data_map.items()})

    def get_seq_tag(self, seq_idx):
        self._require_init()
        return self._seq_tags[seq_idx]

    get_tag = get_seq_tag

    def get_data_keys(self):
        return _data_first(self.data_map)

    def get_data_dtype(self, key):
        self._check_key(key)
        if key in self.data_dtypes:
            return self.data_dtypes[key]
        name, sub_key = self.data_map[key]
        return self.datasets[name].get_data_dtype(sub_key)

    def get_data_shape(self, key):
        self._check_key(key)
        name, sub_key = self.data_map[key]
        return self.datasets[name].get_data_shape(sub_key)

    def is_data_sparse(self, key):
        self._check_key(key)
        name, sub_key = self.data_map[key]
        return self.datasets[name].is_data_sparse(sub_key)

    def finish_epoch(self):
        for dataset in self.datasets.values():
            dataset.finish_epoch()
