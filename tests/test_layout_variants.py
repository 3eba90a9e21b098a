"""
Metamorphic layout test (tools/layout_variants.py) on a few representative public conformance cases:
the canonical outputs, sequence lengths and losses must not depend on whether the extern data is given
batch-major or time-major.
"""

import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONFORMANCE = os.path.normpath(os.path.join(_ROOT, "..", "shared", "conformance"))
_CASES = os.path.join(_CONFORMANCE, "cases")

pytestmark = pytest.mark.skipif(not os.path.isdir(_CASES), reason="../shared/conformance/cases not available")

CASES = [
    "ce_softmax",  # loss over time-major targets
    "ce_time_major_input",  # time-major case turned batch-major
    "ctc_softmax",
    "conv_1d_stride_same",
    "merge_dims_batch_time",
    "pad_time_reflect",
    "rec_lstm_bw_ce",
    "rec_enc_dec_demo_eval",  # register_as_extern_data + rec decoder with target
    "reduce_sum_nchw_time",  # channels-first input turned feature-last
]


@pytest.fixture(scope="module")
def lv():
    sys.path.insert(0, os.path.join(_ROOT, "tools"))
    try:
        import layout_variants
    finally:
        sys.path.remove(os.path.join(_ROOT, "tools"))
    return layout_variants


@pytest.mark.parametrize("name", CASES)
def test_layout_variant(lv, name):
    case_dir = os.path.join(_CASES, name)
    if not os.path.isdir(case_dir):
        pytest.skip("case %s not present" % name)
    check = lv._import_check(_CONFORMANCE)
    status, msg = lv.compare_case(case_dir, check)
    assert status == "OK", "%s: %s" % (name, msg)


def test_flip_extern_data(lv):
    ed = {
        "data": {"dim": 3},
        "classes": {"dim": 5, "sparse": True},
        "tm": {"dim": 2, "batch_dim_axis": 1, "time_dim_axis": 0},
        "static": {"shape": (4, 3), "time_dim_axis": None},
        "nchw": {"shape": (4, None, 3), "time_dim_axis": 2, "feature_dim_axis": 1},
    }
    flipped = lv.time_major_extern_data(ed)
    assert flipped["data"] == {"dim": 3, "batch_dim_axis": 1, "time_dim_axis": 0}
    assert flipped["classes"] == {"dim": 5, "sparse": True, "batch_dim_axis": 1, "time_dim_axis": 0}
    assert flipped["tm"] == {"dim": 2}
    assert flipped["static"] == ed["static"]
    assert flipped["nchw"] == {"shape": (None, 3, 4), "dim": 4}
    assert lv.time_major_keys(ed) == ["data", "classes", "tm", "nchw"]
    assert lv.time_major_extern_data(ed, ["tm"])["data"] == ed["data"]
