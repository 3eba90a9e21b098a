"""
Datasets with the API of the original RETURNN, plus batching (:mod:`.batching`) and the
``init_dataset`` factory (:mod:`.registry`).
"""

from .basic import Dataset, DatasetError, NumbersDict, convert_data_dims
from .batching import Batch, BatchArrays, BatchSeq, batch_to_arrays, generate_batches, iterate_seqs, parse_chunking
from .generating import (CopyTaskDataset, DummyDataset, GeneratingDataset, Task12AXDataset, TaskEpisodicCopyDataset,
                         TaskNumberBaseConvertDataset, TaskXmlModelingDataset)
from .hdf import HDFDataset, SimpleHDFWriter
from .indexed import IndexedDataset
from .meta import MetaDataset
from .registry import dataset_class_names, get_dataset_class, init_dataset, register_dataset_class
from .static import StaticDataset

__all__ = [
    "Dataset", "DatasetError", "NumbersDict", "convert_data_dims", "IndexedDataset",
    "GeneratingDataset", "Task12AXDataset", "TaskEpisodicCopyDataset", "TaskXmlModelingDataset",
    "TaskNumberBaseConvertDataset", "CopyTaskDataset", "DummyDataset", "StaticDataset", "HDFDataset",
    "SimpleHDFWriter", "MetaDataset",
    "init_dataset", "get_dataset_class", "register_dataset_class", "dataset_class_names",
    "Batch", "BatchSeq", "BatchArrays", "generate_batches", "iterate_seqs", "parse_chunking", "batch_to_arrays",
]
