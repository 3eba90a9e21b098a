"""Dim identity, Data layout derivation, axis descriptions and the copy family."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.data import Data, Dim, FeatureDim, SpatialDim, batch_dim

tf1 = tf.compat.v1


def test_dim_identity_not_by_size():
    a, b = SpatialDim("a", 3), SpatialDim("b", 3)
    assert a != b
    assert a == a
    b.declare_same_as(a)
    assert a == b and hash(a) == hash(b)


def test_dim_declare_same_shares_seq_lens():
    with tf.Graph().as_default():
        a, b = SpatialDim("a"), SpatialDim("b")
        a.dyn_size = tf.constant([3, 2])
        b.declare_same_as(a)
        assert b.dyn_size is a.dyn_size


def test_classic_kwargs_layout():
    d = Data("data", dim=5)
    assert d.batch_shape == (None, None, 5)
    assert (d.batch_dim_axis, d.time_dim_axis, d.feature_dim_axis) == (0, 1, 2)
    assert d.dim == 5 and not d.sparse and d.dtype == "float32"
    s = Data("classes", dim=4, sparse=True)
    assert s.batch_shape == (None, None) and s.sparse and s.dim == 4 and s.dtype == "int32"
    assert s.feature_dim_axis is None
    tm = Data("tm", dim=2, time_dim_axis=0, batch_dim_axis=1)
    assert tm.batch_shape == (None, None, 2) and tm.batch_dim_axis == 1 and tm.time_dim_axis == 0
    nt = Data("x", shape=(6,))
    assert nt.time_dim_axis is None and nt.feature_dim_axis == 1
    bfm = Data("x", shape=(3, None), time_dim_axis=2, feature_dim_axis=1)
    assert bfm.dim == 3 and bfm.feature_dim_axis == 1 and bfm.time_dim_axis == 2


def test_dim_shape_mismatch_is_error():
    with pytest.raises(ValueError, match="does not match"):
        Data("x", shape=(None, 3), dim=4)


def test_separate_keys_have_separate_time_tags():
    a, b = Data("a", dim=2), Data("b", dim=2)
    assert a.get_time_dim_tag() != b.get_time_dim_tag()
    assert a.dims[2] != b.dims[2]


def test_axis_descriptions():
    d = Data("x", shape=(None, 7, 5))  # [B,T,7,5]
    assert d.get_axes_from_description("B") == [0]
    assert d.get_axes_from_description("T") == [1]
    assert d.get_axes_from_description("F") == [3]
    assert d.get_axes_from_description("spatial") == [1, 2]
    assert d.get_axes_from_description("dyn") == [1]
    assert d.get_axes_from_description("except_time") == [2, 3]
    assert d.get_axes_from_description("except_batch") == [1, 2, 3]
    assert d.get_axes_from_description("dim:7") == [2]
    assert d.get_axes_from_description(-1) == [3]
    assert d.get_axes_from_description(["T", "F"]) == [1, 3]
    assert d.get_axes_from_description("stag:" + d.dims[2].description) == [2]
    assert d.get_axes_from_description(d.dims[2]) == [2]
    assert d.get_axis_from_description("s:1") == 2
    with pytest.raises(ValueError, match="dim:9"):
        d.get_axis_from_description("dim:9")
    with pytest.raises(ValueError, match="exactly one"):
        d.get_axis_from_description("spatial")


def test_copy_family():
    with tf.Graph().as_default():
        d = Data("x", dim=5, auto_create_placeholders=True)
        tm = d.copy_as_time_major()
        assert tm.time_dim_axis == 0 and tm.batch_dim_axis == 1 and tm.dims[0] is d.dims[1]
        assert tm.placeholder.shape.as_list() == [None, None, 5]
        back = tm.copy_as_batch_major()
        assert back.dims == d.dims
        assert d.copy_template().placeholder is None
        ex = d.copy_template_excluding_axis(1)
        assert ex.batch_shape == (None, 5) and ex.time_dim_axis is None
        moved = d.copy_move_axis(2, 1)
        assert moved.feature_dim_axis == 1 and moved.time_dim_axis == 2
        sq = d.copy_add_dim_by_tag(SpatialDim("s", 1), unbroadcast=True, axis=2).copy_squeeze_axes([2])
        assert sq.dims == d.dims
        with pytest.raises(ValueError):
            d.copy_add_batch_dim()


def test_copy_as_batch_spatial_major_and_explicit_axes():
    with tf.Graph().as_default():
        d = Data("x", shape=(3, None), time_dim_axis=2, feature_dim_axis=1, auto_create_placeholders=True)
        c = d.copy_as_batch_spatial_major()
        assert c.batch_shape == (None, None, 3) and c.feature_dim_axis == 2 and c.time_dim_axis == 1


def test_copy_compatible_to_broadcasts_and_transposes():
    with tf.Graph().as_default():
        d = Data("x", dim=5, auto_create_placeholders=True)
        red = d.copy_template_excluding_axis(1)  # [B,F]
        red.placeholder = tf.zeros([2, 5])
        c = red.copy_compatible_to(d)
        assert c.placeholder.shape.as_list() == [2, 1, 5]
        tm = d.copy_as_time_major()
        assert d.copy_compatible_to(tm).placeholder.shape.as_list() == [None, None, 5]


def test_common_data_adds_other_dynamic_axes():
    a, b = Data("a", dim=3), Data("b", dim=3)
    common = Data.get_common_data([a, b])
    assert common.batch_ndim == 4  # [B, T_a, T_b, F]: different time tags never match by size
    assert common.feature_dim_axis == 3


def test_sequence_mask():
    with tf.Graph().as_default():
        d = Data("x", dim=2, auto_create_placeholders=True)
        mask = d.get_sequence_mask_broadcast()
        masked = d.copy_masked(0.0)
        with tf1.Session() as s:
            x = np.ones((2, 3, 2), "float32")
            m, v = s.run([mask, masked.placeholder], {d.placeholder: x, d.size_placeholder[0]: [3, 1]})
        assert m.shape == (2, 3, 1)
        assert v[1, 1:].sum() == 0 and v[0].sum() == 6


def test_sequence_mask_cached_per_graph_and_lengths():
    """One mask op per (lengths, padded length) in a graph; a loop body (a graph of its own) builds its own."""
    with tf.Graph().as_default():
        d = Data("x", dim=2, auto_create_placeholders=True)
        tag = d.dims[1]
        n = d.get_dim(1)
        assert tag.get_mask(n) is tag.get_mask(n) and tag.get_mask(5) is tag.get_mask(5)
        assert tag.get_mask(5) is not tag.get_mask(n)
        assert d.copy(placeholder=tf.zeros([2, 4, 2])).get_dim(1) == 4  # static size known to TF
        outer = tag.get_mask(3)

        def body(i, acc):
            inner = tag.get_mask(3)
            assert inner is not outer and inner.graph is not outer.graph and inner is tag.get_mask(3)
            return i + 1, acc + tf.reduce_sum(tf.cast(inner, tf.int32))

        _, total = tf.while_loop(lambda i, _: i < 2, body, [0, 0])
        with tf1.Session() as s:
            m, t = s.run([outer, total], {d.size_placeholder[0]: [3, 1]})
    np.testing.assert_array_equal(m, [[True, True, True], [True, False, False]])
    assert t == 8
    with tf.Graph().as_default():
        tag.dyn_size = tf.constant([1, 2])
        assert tag.get_mask(3).graph is tf1.get_default_graph()


def test_feature_dim_kinds():
    f = FeatureDim("f", 4)
    d = Data("x", dims=[batch_dim, SpatialDim("t"), f])
    assert d.feature_dim_axis == 2 and d.dim == 4 and d.time_dim_axis == 1
    assert isinstance(d.dims[0], Dim) and d.dims[0].is_batch_dim()


def test_padded_length_and_masks_shared_per_dim_tag():
    """All data on one dynamic dim tag share its padded length and their broadcast masks (one op chain per graph)."""
    with tf.Graph().as_default() as graph:
        d = Data("x", dim=2, auto_create_placeholders=True)
        other = d.copy(placeholder=tf.sin(d.placeholder))  # another tensor with the same dims
        assert other.get_dim(1) is d.get_dim(1) and other.get_dim(0) is d.get_dim(0)
        assert other.get_sequence_mask_broadcast() is d.get_sequence_mask_broadcast()
        time_major = d.copy_as_time_major()
        mask_tm = time_major.get_sequence_mask_broadcast()
        assert mask_tm is not d.get_sequence_mask_broadcast()  # another layout: its own
        assert len([op for op in graph.get_operations() if op.type == "Range"]) == 1  # one sequence mask
        with tf1.Session() as s:
            m, m_tm = s.run([other.get_sequence_mask_broadcast(), mask_tm],
                            {d.placeholder: np.ones((2, 3, 2), "float32"), d.size_placeholder[0]: [3, 1]})
    np.testing.assert_array_equal(m[..., 0], [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(m_tm[..., 0], m[..., 0].T)
