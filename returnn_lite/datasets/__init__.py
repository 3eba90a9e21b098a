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
from .registry import (SPRINT_DATASETS, check_dataset_opts, dataset_class_names, get_dataset_class, init_dataset,
                       register_dataset_class)
from .audio import EpochWiseFilter, LibriSpeechCorpus, OggZipDataset
from .audio_features import ExtractAudioFeatures
from .text import LmDataset, TranslationDataset
from .vocabulary import (BytePairEncoding, CharacterTargets, SentencePieces, Utf8ByteTargets, Vocabulary,
                         create_vocab)
from .static import StaticDataset

__all__ = [
    "Dataset", "DatasetError", "NumbersDict", "convert_data_dims", "IndexedDataset",
    "GeneratingDataset", "Task12AXDataset", "TaskEpisodicCopyDataset", "TaskXmlModelingDataset",
    "TaskNumberBaseConvertDataset", "CopyTaskDataset", "DummyDataset", "StaticDataset", "HDFDataset",
    "SimpleHDFWriter", "MetaDataset", "OggZipDataset", "LibriSpeechCorpus", "EpochWiseFilter", "ExtractAudioFeatures",
    "LmDataset", "TranslationDataset",
    "Vocabulary", "CharacterTargets", "Utf8ByteTargets", "BytePairEncoding", "SentencePieces", "create_vocab",
    "init_dataset", "get_dataset_class", "register_dataset_class", "dataset_class_names", "check_dataset_opts",
    "SPRINT_DATASETS",
    "Batch", "BatchSeq", "BatchArrays", "generate_batches", "iterate_seqs", "parse_chunking", "batch_to_arrays",
]
