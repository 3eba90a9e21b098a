"""A 12AX HDF file with chosen faults, for the CLI fault tests of both engines (test_cli_faults.py and
frontend/test_torch_engine_faults.py)."""

import numpy


def write_12ax_hdf(path, dim=9, sparse_data=False, label_offset=0, n=8, nan_seq=None):
    from returnn_lite.datasets import SimpleHDFWriter, Task12AXDataset

    src = Task12AXDataset(num_seqs=n, fixed_random_seed=5)
    src.init_seq_order(epoch=1)
    writer = SimpleHDFWriter(str(path), dim=9 if sparse_data else dim, ndim=1 if sparse_data else 2)
    for i in range(n):
        data, classes = src.get_data(i, "data")[:, :dim], src.get_data(i, "classes")
        if sparse_data:
            data = data.argmax(-1).astype("int32")
        elif i == nan_seq:
            data = data.copy()
            data[1, 0] = numpy.nan
        writer.insert_batch(data[None], [len(data)], ["seq-%i" % i], extra={"classes": (classes + label_offset)[None]})
    writer.close()
    return str(path)


def hdf_train_args(path):
    return ["++train", "{'class': 'HDFDataset', 'files': [%r]}" % path, "++dev", ""]
