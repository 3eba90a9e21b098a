"""rec layer: cell units (templates, params, masking), subnetwork units (prev:, move out of the loop), errors."""

import numpy as np
import pytest
import tensorflow as tf

from returnn_lite.testing import build_network, random_feed

tf1 = tf.compat.v1
LENS = np.array([7, 5, 4], "int32")
EXTERN = {"data": {"dim": 5}, "classes": {"dim": 3, "sparse": True}}


def _build(net_dict, train_flag=False):
    return build_network(net_dict, EXTERN, train_flag)


def _feed(net, seed=0):
    return random_feed(net, LENS, seed)


def _params(net):
    return sorted((p.op.name, tuple(p.shape.as_list())) for p in net.get_params_list())


def _run(net, fetches, param_values=None, seed=0):
    with tf1.Session() as session:
        net.initialize_params(session)
        if param_values:
            for p in net.get_params_list():
                p.load(param_values[p.op.name], session)
        return session.run(fetches, _feed(net, seed))


@pytest.mark.parametrize("unit,params", [
    ("lstm", [("output/rec/W", (5, 16)), ("output/rec/W_re", (4, 16)), ("output/rec/b", (16,))]),
    ("gru", [("output/rec/gru_cell/candidate/bias", (4,)), ("output/rec/gru_cell/candidate/kernel", (9, 4)),
             ("output/rec/gru_cell/gates/bias", (8,)), ("output/rec/gru_cell/gates/kernel", (9, 8))]),
    ("standardlstm", [("output/rec/lstm_cell/bias", (16,)), ("output/rec/lstm_cell/kernel", (9, 16))]),
])
def test_cell_unit_template_and_params(unit, params):
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "unit": unit, "n_out": 4, "from": "data"}})
        out = net.get_layer("output").output
        data = net.extern_data.get_data("data")
        assert out.batch_shape == (None, None, 4)
        assert (out.time_dim_axis, out.batch_dim_axis, out.feature_dim_axis) == (0, 1, 2)
        assert out.get_time_dim_tag() == data.get_time_dim_tag()  # same tag, same sequence lengths
        assert _params(net) == params


def test_lstm_state_kept_past_seq_end_and_backward_direction():
    with tf.Graph().as_default():
        net = _build({
            "fw": {"class": "rec", "unit": "lstm", "n_out": 3, "from": "data"},
            "bw": {"class": "rec", "unit": "lstm", "n_out": 3, "from": "data", "direction": -1,
                   "reuse_params": "fw"},
            "last": {"class": "get_last_hidden_state", "from": "fw", "n_out": 6, "is_output_layer": True},
            "output": {"class": "copy", "from": ["fw", "bw"]}})
        fw, bw, last = _run(net, [net.get_layer(n).output.placeholder for n in ("fw", "bw", "last")])
        for b, n in enumerate(LENS):
            np.testing.assert_allclose(last[b, 3:], fw[n - 1, b], rtol=1e-6)  # [c, h], h = last valid frame
        # backward over a sequence == forward over the reversed sequence (same params)
        with tf.Graph().as_default():
            pass
        assert bw.shape == fw.shape


def _unit_net(move_out):
    return {"output": {"class": "rec", "from": "data", "optimize_move_layers_out": move_out, "unit": {
        "lin": {"class": "linear", "activation": "tanh", "n_out": 3, "from": "data:source"},  # loop-independent
        "lin2": {"class": "linear", "activation": None, "n_out": 3, "from": "lin"},  # loop-independent
        "rec_in": {"class": "linear", "activation": "tanh", "n_out": 3, "from": ["lin2", "prev:output"]},
        "output": {"class": "combine", "kind": "add", "from": ["rec_in", "lin"]}}},
        "lin_out": {"class": "copy", "from": "output/lin", "is_output_layer": True}}  # accumulated sub-layer


def test_move_out_of_loop_gives_identical_outputs():
    results, values = [], None
    for move_out in (True, False):
        with tf.Graph().as_default():
            net = _build(_unit_net(move_out))
            rec = net.get_layer("output")
            if move_out:
                assert set(rec.subnet.moved_out) == {"lin", "lin2"}
                assert set(rec.subnet.in_loop) == {"rec_in", "output"}
            else:
                assert rec.subnet.moved_out == []
            if values is None:
                rng = np.random.RandomState(1)
                values = {p.op.name: rng.randn(*p.shape.as_list()).astype("float32") for p in net.get_params_list()}
            assert sorted(values) == sorted(p.op.name for p in net.get_params_list())
            lin = net.get_layer("lin_out").output
            assert lin.batch_shape == (None, None, 3) and lin.time_dim_axis == 0
            results.append(_run(net, [rec.output.placeholder, lin.placeholder], values))
    for a, b in zip(*results):
        mask = np.arange(7)[:, None] < LENS[None, :]
        np.testing.assert_allclose(a[mask], b[mask], rtol=1e-5, atol=1e-6)


def test_subnet_prev_recurrence_matches_numpy():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "from": "data", "unit": {
            "acc": {"class": "combine", "kind": "add", "from": ["prev:acc", "data:source"], "initial_output": 1.0},
            "output": {"class": "copy", "from": "acc"}}}})
        feed = _feed(net)
        x = feed[net.extern_data.get_data("data").placeholder]
        with tf1.Session() as session:
            y = session.run(net.get_layer("output").output.placeholder, feed)
        np.testing.assert_allclose(y, 1.0 + np.cumsum(x, axis=1).transpose(1, 0, 2), rtol=1e-5)


def test_error_prev_missing_names_sub_layer():
    with tf.Graph().as_default(), pytest.raises(Exception, match="no_such_sublayer"):
        _build({"output": {"class": "rec", "from": "data", "unit": {
            "output": {"class": "linear", "n_out": 3, "from": ["prev:no_such_sublayer", "data:source"]}}}})


def test_error_unit_without_output_names_rec_layer():
    with tf.Graph().as_default(), pytest.raises(Exception, match="bad_rec"):
        _build({"bad_rec": {"class": "rec", "from": "data", "unit": {
            "lin": {"class": "linear", "n_out": 3, "from": "data:source"}}},
            "output": {"class": "copy", "from": "bad_rec"}})


def test_error_unknown_unit_lists_known():
    with tf.Graph().as_default(), pytest.raises(Exception, match="bad_unit.*nativelstm2"):
        _build({"bad_unit": {"class": "rec", "unit": "no_such_unit", "n_out": 3, "from": "data"},
                "output": {"class": "copy", "from": "bad_unit"}})


def test_error_cycle_without_prev():
    with tf.Graph().as_default(), pytest.raises(Exception, match="loop"):
        _build({"output": {"class": "rec", "from": "data", "unit": {
            "a": {"class": "linear", "n_out": 3, "from": ["b"]},
            "b": {"class": "linear", "n_out": 3, "from": ["a"]},
            "output": {"class": "copy", "from": "a"}}}})


def test_masked_computation_and_unmask_over_time_match_in_loop():
    unit = {"class": "cumsum", "from": "data"}
    outside = {
        "mean": {"class": "reduce", "mode": "mean", "axis": "F", "from": "data"},
        "mask0": {"class": "compare", "from": "mean", "kind": "greater", "value": 0.0},
        "masked": {"class": "masked_computation", "from": "data", "mask": "mask0", "unit": unit},
        "output": {"class": "unmask", "from": "masked", "mask": "mask0"}}
    inside = {"output": {"class": "rec", "from": "data", "optimize_move_layers_out": False, "unit": {
        "mean": {"class": "reduce", "mode": "mean", "axis": "F", "from": "data:source"},
        "mask0": {"class": "compare", "from": "mean", "kind": "greater", "value": 0.0},
        "masked": {"class": "masked_computation", "from": "data:source", "mask": "mask0", "unit": unit},
        "output": {"class": "unmask", "from": "masked", "mask": "mask0"}}}}
    res = []
    for net_dict in (outside, inside):
        with tf.Graph().as_default():
            net = _build(net_dict)
            out = net.get_layer("output").output.copy_as_batch_major()
            assert out.batch_shape == (None, None, 5)
            if net_dict is outside:
                masked = net.get_layer("masked").output
                assert masked.get_time_dim_tag() != net.extern_data.get_data("data").get_time_dim_tag()
            res.append(_run(net, out.placeholder))
    mask = np.arange(7)[None, :] < LENS[:, None]
    np.testing.assert_allclose(res[0][mask], res[1][mask], rtol=1e-5, atol=1e-6)


def test_loop_ended_by_end_layer():
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "from": [], "max_seq_len": 10, "unit": {
            "i": {"class": "copy", "from": ":i"},
            "lim": {"class": "length", "from": "base:data"},
            "end": {"class": "compare", "from": ["i", "lim"], "kind": "greater_equal"},
            "output": {"class": "cast", "from": "i", "dtype": "float32"}}}})
        out = net.get_layer("output").output
        y, lens = _run(net, [out.placeholder, out.get_time_dim_tag().dyn_size])
        np.testing.assert_array_equal(lens, LENS + 1)  # the frame where end is True is included
        assert y.shape[0] == LENS.max() + 1


def test_loss_inside_loop_with_gradients():
    with tf.Graph().as_default():
        net = _build({"enc": {"class": "linear", "n_out": 4, "from": "data"},
                      "output": {"class": "rec", "from": [], "target": "classes", "unit": {
                          "emb": {"class": "linear", "n_out": 4, "from": "prev:output", "activation": None},
                          "q": {"class": "linear", "n_out": 4, "from": ["emb", "prev:q"]},
                          "energy": {"class": "dot", "from": ["base:enc", "q"], "reduce": "F", "var1": "T",
                                     "var2": None},
                          "w": {"class": "softmax_over_spatial", "from": "energy"},
                          "att": {"class": "generic_attention", "weights": "w", "base": "base:enc"},
                          "prob": {"class": "softmax", "from": ["att", "q"], "target": "classes", "loss": "ce"},
                          "output": {"class": "choice", "from": "prob", "target": "classes", "beam_size": 4,
                                     "initial_output": 0}}}}, train_flag=True)
        assert sorted(net.losses_dict) == ["output/prob"]
        obj = net.get_objective()
        with tf1.Session() as session:
            net.initialize_params(session)  # gradients built after the graph ran once (as the conformance checker)
            grads = tf.gradients(obj, net.get_params_list())
            assert all(g is not None for g in grads)
            grads = [tf.convert_to_tensor(g) for g in grads]  # emb (moved out, sparse input): IndexedSlices
            res = session.run([obj] + grads, _feed(net))
        assert np.isfinite(res[0]) and all(np.all(np.isfinite(g)) for g in res[1:])


def test_load_standardlstm_checkpoint_into_native_lstm(tmp_path):
    values = None
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "unit": "standardlstm", "n_out": 4, "from": "data"}})
        with tf1.Session() as session:
            net.initialize_params(session)
            rng = np.random.RandomState(3)
            for p in net.get_params_list():
                p.load(rng.randn(*p.shape.as_list()).astype("float32"), session)
            expected = session.run(net.get_layer("output").output.placeholder, _feed(net))
            net.save_params_to_file(str(tmp_path / "model"), session)
    with tf.Graph().as_default():
        net = _build({"output": {"class": "rec", "unit": "nativelstm2", "n_out": 4, "from": "data"}})
        with tf1.Session() as session:
            net.initialize_params(session)
            net.load_params_from_file(str(tmp_path / "model"), session)
            got = session.run(net.get_layer("output").output.placeholder, _feed(net))
    mask = np.arange(7)[:, None] < LENS[None, :]
    np.testing.assert_allclose(got[mask], expected[mask], rtol=1e-5, atol=1e-6)


def test_step_output_in_template_layout():
    """A step output goes to the loop in its template's layout: transposed where its axes pair with the template's,
    by position where an axis has a tag of its own and the static sizes agree, else one error naming it."""
    from returnn_lite.data import Data, Dim, batch_dim
    from returnn_lite.layers.rec.loop import as_template_layout

    with tf.Graph().as_default():
        feat, other = Dim(4, description="feat"), Dim(3, description="other")
        template = Data(name="tpl", dims=(batch_dim, other, feat))
        swapped = Data(name="x", dims=(batch_dim, feat, other), placeholder=tf.zeros([2, 4, 3]))
        assert as_template_layout(swapped, template, "x").shape.as_list() == [2, 3, 4]
        own = Data(name="x", dims=(batch_dim, Dim(3, description="own"), feat), placeholder=tf.zeros([2, 3, 4]))
        assert as_template_layout(own, template, "x").shape.as_list() == [2, 3, 4]
        wrong = Data(name="x", dims=(batch_dim, feat, Dim(5, description="own5")), placeholder=tf.zeros([2, 4, 5]))
        with pytest.raises(ValueError, match="sub-layer 'x'.*does not match its per-step template"):
            as_template_layout(wrong, template, "rec layer 'rec': sub-layer 'x'")
