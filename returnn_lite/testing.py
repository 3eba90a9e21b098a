"""Small helpers to build a network and feed it random inputs (tests, notebooks, benchmarks)."""

from __future__ import annotations

import numpy as np

from .extern_data import ExternData
from .network import TFNetwork


def build_network(net_dict, extern_data, train_flag=False):
    """
    :param dict net_dict: layer dict
    :param dict|ExternData extern_data: e.g. {"data": {"dim": 5}}
    :rtype: TFNetwork
    """
    if not isinstance(extern_data, ExternData):
        extern_data = ExternData(extern_data)
    net = TFNetwork(extern_data=extern_data, train_flag=train_flag)
    net.construct_from_dict(net_dict)
    return net


def random_feed(net, seq_lens, seed=0):
    """
    Feed dict with random values for every extern data entry (in registration order): normal floats for dense
    data, class indices for sparse data; batch size len(seq_lens), dynamic axes padded to max(seq_lens).
    """
    rng = np.random.RandomState(seed)
    seq_lens = np.asarray(seq_lens, "int32")
    feed = {}
    for key, data in net.extern_data.data.items():
        if key in getattr(net.extern_data, "extra_added_keys", ()):
            continue  # registered by a layer (register_as_extern_data): computed, not fed
        shape = [len(seq_lens) if d.is_batch_dim() else (int(seq_lens.max()) if d.dimension is None else d.dimension)
                 for d in data.dims]
        if data.sparse:
            value = rng.randint(0, data.dim, shape).astype(data.dtype)
        else:
            value = rng.randn(*shape).astype(data.dtype)
        feed[data.placeholder] = value
        for size in data.size_placeholder.values():
            feed[size] = seq_lens
    return feed
