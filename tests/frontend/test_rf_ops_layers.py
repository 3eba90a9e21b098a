"""rf ops that used to fall back to ``frontend_op`` on the layers backend (issue 16) and now emit ordinary layers:
combine/compare where no operand has all dims (``allow_broadcast_all_sources``), mixed dtypes (a ``cast`` layer
first), reduce prod, gather clip_to_valid with an int index. Each: the layer class emitted, numbers vs numpy, and the
same rf code on the torch backend."""

import numpy as np
import pytest
import tensorflow as tf

import returnn_lite.frontend as rf
from returnn_lite.config import Config, global_config_ctx
from returnn_lite.frontend_layers import get_net_dict
from returnn_lite.network import TFNetwork
from returnn_lite.tensor import Dim, batch_dim
from rf_harness import extern_feed  # noqa: E402 (tests/frontend/rf_harness.py)

tf1 = tf.compat.v1

TIME, FEAT, OTHER = Dim(None, name="time"), Dim(3, name="feat"), Dim(4, name="other")
EXTERN = {"x": {"dims": (batch_dim, TIME, FEAT), "dtype": "float32"},
          "y": {"dims": (batch_dim, OTHER), "dtype": "float32"},
          "i": {"dims": (batch_dim, TIME), "dtype": "int32"}}
RNG = np.random.RandomState(42)
INPUTS = {"x": RNG.uniform(-2, 2, (2, 5, 3)).astype("float32"), "y": RNG.uniform(-2, 2, (2, 4)).astype("float32"),
          "i": RNG.randint(-3, 7, (2, 5)).astype("int32"), "size:time": np.array([5, 3], dtype="int32")}


def _layers(func):
    """func(x, y, i) -> {name: (Tensor, dims)} on the layers backend: net dict and the output values."""
    def step(*, model, extern_data, **_):
        for name, (t, dims) in func(extern_data["x"], extern_data["y"], extern_data["i"]).items():
            t.mark_as_output(name, shape=dims)

    config = Config({"extern_data": EXTERN, "get_model": lambda **_: rf.Module(), "task": "forward",
                     "forward_step": step})
    rf.select_backend_returnn_layers_tf()
    for opts in EXTERN.values():
        for d in opts["dims"]:
            d.reset_eager()
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session, global_config_ctx(config):
        net_dict, _ = get_net_dict(epoch=1, step=0)
        outputs = rf.get_run_ctx().outputs.data
        net = TFNetwork(config=config, train_flag=False)
        net.construct_from_dict(net_dict)
        fetches = {k: net.get_layer(t.raw_tensor.get_abs_name()).output.placeholder for k, t in outputs.items()}
        feed = extern_feed(net, INPUTS)
        res = session.run(fetches, feed_dict=feed)
    for opts in EXTERN.values():
        for d in opts["dims"]:
            d.reset_eager()
    return res, net_dict


def _torch(func):
    """The same rf code on the torch backend (eager): {name: numpy value}."""
    torch = pytest.importorskip("torch")
    rf.select_backend_torch()
    try:
        TIME.dyn_size_ext = rf.convert_to_tensor(INPUTS["size:time"], dims=[batch_dim], dtype="int32")
        batch_dim.dyn_size_ext = rf.convert_to_tensor(np.array(2, dtype="int32"), dims=[], dtype="int32")
        ins = [rf.convert_to_tensor(torch.tensor(INPUTS[k]), dims=list(EXTERN[k]["dims"]), dtype=EXTERN[k]["dtype"])
               for k in ("x", "y", "i")]
        out = {}
        for name, (t, dims) in func(*ins).items():
            out[name] = t.copy_compatible_to_dims_raw(dims).numpy() if hasattr(t, "copy_compatible_to_dims_raw") \
                else t.copy_transpose(dims).raw_tensor.numpy()
        return out
    finally:
        rf.select_backend_returnn_layers_tf()
        for opts in EXTERN.values():
            for d in opts["dims"]:
                d.reset_eager()


def _classes(net_dict):
    return {d["class"] for d in net_dict.values()}


def _mask(lens, t):
    return np.arange(t)[None, :] < lens[:, None]


def _check(func, *, expect_classes=(), masked=()):
    """Layers backend vs torch backend (and the returned numpy refs), no frontend_op; returns the layers' values."""
    res, net_dict = _layers(func)
    classes = _classes(net_dict)
    assert "frontend_op" not in classes, net_dict
    assert set(expect_classes) <= classes, classes
    ref = _torch(func)
    mask = _mask(INPUTS["size:time"], 5)
    for key, value in ref.items():
        assert res[key].dtype == value.dtype, key
        if key in masked:  # [B, T, ...]: compare the valid frames only
            m = np.broadcast_to(mask.reshape(mask.shape + (1,) * (value.ndim - 2)), value.shape)
            np.testing.assert_allclose(res[key][m], value[m], rtol=1e-5, err_msg=key)
        else:
            np.testing.assert_allclose(res[key], value, rtol=1e-5, err_msg=key)
    return res, net_dict


def test_combine_compare_broadcast_all_sources():
    def func(x, y, i):
        return {"add": (rf.combine(x, "add", y, allow_broadcast_all_sources=True), (batch_dim, TIME, FEAT, OTHER)),
                "gt": (rf.compare(x, "greater", y, allow_broadcast_all_sources=True), (batch_dim, OTHER, TIME, FEAT))}

    res, net_dict = _check(func, expect_classes={"combine", "compare"}, masked={"add"})
    assert net_dict["add"]["allow_broadcast_all_sources"] is True and net_dict["add"]["class"] == "combine"
    x, y = INPUTS["x"], INPUTS["y"]
    np.testing.assert_allclose(res["add"], x[:, :, :, None] + y[:, None, None, :], rtol=1e-6)
    np.testing.assert_array_equal(res["gt"], (x[:, None, :, :] > y[:, :, None, None]))


def test_combine_layer_allow_broadcast_all_sources_false_refuses():
    from returnn_lite.errors import NetworkLayerException

    time = Dim(None, name="t")
    extern = {"a": {"dims": (batch_dim, time, Dim(3, name="f3"))}, "b": {"dims": (batch_dim, Dim(None, name="t2"))}}
    config = Config({"extern_data": extern})
    with tf.Graph().as_default():
        net = TFNetwork(config=config, train_flag=False)
        with pytest.raises(NetworkLayerException, match="allow_broadcast_all_sources"):
            net.construct_from_dict({"output": {"class": "combine", "kind": "add", "from": ["data:a", "data:b"],
                                                "allow_broadcast_all_sources": False}})


def test_mixed_dtypes_and_int_truediv_cast_first():
    def func(x, y, i):
        return {"add": (i + x, (batch_dim, TIME, FEAT)), "div": (i / 2, (batch_dim, TIME)),
                "idiv": (rf.combine(i, "truediv", i + 10), (batch_dim, TIME)),
                "less": (rf.compare(i, "less", x), (batch_dim, TIME, FEAT))}

    res, net_dict = _check(func, expect_classes={"cast", "combine", "compare"}, masked={"add", "div", "idiv", "less"})
    casts = [d for d in net_dict.values() if d["class"] == "cast"]
    assert len(casts) == 5 and all(d["dtype"] == "float32" for d in casts)
    x, i = INPUTS["x"], INPUTS["i"]
    assert res["add"].dtype == np.float32 and res["div"].dtype == np.float32
    np.testing.assert_allclose(res["add"], i[:, :, None] + x, rtol=1e-6)
    np.testing.assert_allclose(res["div"], i / 2, rtol=1e-6)
    np.testing.assert_allclose(res["idiv"], i / (i + 10), rtol=1e-6)
    np.testing.assert_array_equal(res["less"], i[:, :, None] < x)


def test_reduce_prod_and_any_all_on_numbers():
    def func(x, y, i):
        return {"prod_t": (rf.reduce_prod(x, axis=TIME), (batch_dim, FEAT)),
                "prod_f": (rf.reduce_prod(y, axis=OTHER), (batch_dim,)),
                "any": (rf.reduce_any(i, axis=TIME), (batch_dim,)),
                "all": (rf.reduce_all(i, axis=TIME), (batch_dim,))}

    res, net_dict = _check(func, expect_classes={"reduce"})
    assert {d["mode"] for d in net_dict.values() if d["class"] == "reduce"} == {"prod", "any", "all"}
    x, y, i = INPUTS["x"], INPUTS["y"], INPUTS["i"]
    mask = _mask(INPUTS["size:time"], 5)
    np.testing.assert_allclose(res["prod_t"], np.where(mask[:, :, None], x, 1.0).prod(axis=1), rtol=1e-5)
    np.testing.assert_allclose(res["prod_f"], y.prod(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(res["any"], ((i != 0) & mask).any(axis=1))
    np.testing.assert_array_equal(res["all"], ((i != 0) | ~mask).all(axis=1))


def test_gather_clip_to_valid():
    def func(x, y, i):
        return {"hi": (rf.gather(y, indices=7, axis=OTHER, clip_to_valid=True), (batch_dim,)),
                "lo": (rf.gather(x, indices=-5, axis=FEAT, clip_to_valid=True), (batch_dim, TIME)),
                "idx": (rf.gather(y, indices=i, axis=OTHER, clip_to_valid=True), (batch_dim, TIME))}

    res, net_dict = _check(func, expect_classes={"gather"}, masked={"lo", "idx"})
    positions = sorted(str(d["position"]) for d in net_dict.values() if d["class"] == "gather")
    assert positions[:2] == ["0", "3"]
    x, y, i = INPUTS["x"], INPUTS["y"], INPUTS["i"]
    np.testing.assert_allclose(res["hi"], y[:, 3])
    np.testing.assert_allclose(res["lo"], x[:, :, 0])
    np.testing.assert_allclose(res["idx"], np.take_along_axis(y, np.clip(i, 0, 3), axis=1))


def test_fill_over_dynamic_dims_is_a_constant_layer():
    def func(x, y, i):
        z = rf.zeros([batch_dim, TIME, FEAT]) + x
        f = rf.full(dims=[TIME, OTHER], fill_value=2, dtype="int32")
        return {"z": (z, (batch_dim, TIME, FEAT)), "f": (f, (TIME, OTHER)),
                "o": (rf.ones([FEAT, TIME], dtype="float32"), (TIME, FEAT))}

    res, net_dict = _check(func, expect_classes={"constant"}, masked={"z"})
    fulls = [d for d in net_dict.values() if d["class"] == "constant" and d.get("from")]
    assert len(fulls) == 3 and all(d["from"] == ["data:x"] for d in fulls)
    np.testing.assert_allclose(res["z"], INPUTS["x"])
    np.testing.assert_array_equal(res["f"], np.full((5, 4), 2, dtype="int32"))
    np.testing.assert_array_equal(res["o"], np.ones((5, 3), dtype="float32"))


def test_concat_along_dynamic_dims_per_sequence():
    two = Dim(2, name="two")
    out_dims = {}

    def func(x, y, i):
        c, out_dims["cat"] = rf.concat((x, TIME), (x * 10.0, TIME))
        p = rf.zeros([batch_dim, two, FEAT]) - 1.0
        d, out_dims["pre"] = rf.concat((p, two), (x, TIME))
        return {"cat": (c, (batch_dim, out_dims["cat"], FEAT)), "pre": (d, (batch_dim, out_dims["pre"], FEAT)),
                "len": (out_dims["cat"].get_size_tensor(), (batch_dim,))}

    res, net_dict = _layers(func)
    concats = [d for d in net_dict.values() if d["class"] == "concat"]
    assert len(concats) == 2 and all(d["handle_dynamic_dims"] is True for d in concats)
    assert "frontend_op" not in _classes(net_dict)
    x, lens = INPUTS["x"], INPUTS["size:time"]
    np.testing.assert_array_equal(res["len"], 2 * lens)
    assert res["cat"].shape == (2, 10, 3) and res["pre"].shape == (2, 7, 3)
    for b, n in enumerate(lens):
        np.testing.assert_allclose(res["cat"][b, :2 * n], np.concatenate([x[b, :n], 10 * x[b, :n]]), rtol=1e-6)
        np.testing.assert_allclose(res["pre"][b, :2 + n], np.concatenate([-np.ones((2, 3)), x[b, :n]]), rtol=1e-6)
    ref = _torch(func)
    for b, n in enumerate(lens):
        np.testing.assert_allclose(res["cat"][b, :2 * n], ref["cat"][b, :2 * n], rtol=1e-6)
        np.testing.assert_allclose(res["pre"][b, :2 + n], ref["pre"][b, :2 + n], rtol=1e-6)


def test_concat_layer_handle_dynamic_dims_in_a_hand_written_dict():
    time2 = Dim(None, name="t2")
    extern = {"a": {"dims": (batch_dim, TIME, FEAT)}, "b": {"dims": (batch_dim, time2, FEAT)}}
    config = Config({"extern_data": extern})
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as session:
        net = TFNetwork(config=config, train_flag=False)
        net.construct_from_dict({"output": {"class": "concat", "from": [("data:a", TIME), ("data:b", time2)],
                                            "handle_dynamic_dims": True}})
        out = net.get_default_output_layer().output
        a, b = INPUTS["x"], INPUTS["x"][:, :4] + 100
        la, lb = np.array([5, 3]), np.array([2, 4])
        feed = {net.extern_data.data["a"].placeholder: a, net.extern_data.data["b"].placeholder: b,
                TIME.dyn_size_ext.raw_tensor: la, time2.dyn_size_ext.raw_tensor: lb}
        y, n = session.run((out.placeholder, out.dims[out.get_axis_from_description("T")].dyn_size), feed_dict=feed)
    for d in (TIME, time2, batch_dim):
        d.reset_eager()
    np.testing.assert_array_equal(n, la + lb)
    assert y.shape == (2, 7, 3)
    for k in range(2):
        np.testing.assert_allclose(y[k, :la[k] + lb[k]], np.concatenate([a[k, :la[k]], b[k, :lb[k]]]))
        np.testing.assert_array_equal(y[k, la[k] + lb[k]:], 0)


def test_where_with_mixed_dtypes_casts_first():
    def func(x, y, i):
        return {"w": (rf.where(x > 0.0, i, x), (batch_dim, TIME, FEAT))}

    res, net_dict = _check(func, expect_classes={"switch", "cast"}, masked={"w"})
    x, i = INPUTS["x"], INPUTS["i"]
    assert res["w"].dtype == np.float32
    np.testing.assert_allclose(res["w"], np.where(x > 0, i[:, :, None].astype("float32"), x))


def test_full_with_tensor_value_and_expand_dim_by_dynamic_dim():
    def func(x, y, i):
        m = rf.reduce_max(x, axis=[TIME, FEAT])  # [B]
        return {"full": (rf.full(dims=[batch_dim, TIME, OTHER], fill_value=m), (batch_dim, TIME, OTHER)),
                "exp": (rf.expand_dim(y, TIME), (batch_dim, TIME, OTHER)),
                "expb": (rf.expand_dim(rf.reduce_any(rf.cast(y, "int32"), axis=OTHER), TIME), (batch_dim, TIME))}

    res, net_dict = _check(func, expect_classes={"constant", "combine"}, masked={"full", "exp", "expb"})
    x, y = INPUTS["x"], INPUTS["y"]
    mask = _mask(INPUTS["size:time"], 5)
    m = np.where(mask[:, :, None], x, -np.inf).max(axis=(1, 2))
    np.testing.assert_allclose(res["full"], np.broadcast_to(m[:, None, None], (2, 5, 4)))
    np.testing.assert_allclose(res["exp"], np.broadcast_to(y[:, None, :], (2, 5, 4)))
    np.testing.assert_array_equal(res["expb"], np.broadcast_to((y.astype("int32") != 0).any(axis=1)[:, None], (2, 5)))


def test_fill_with_sparse_dim_is_a_constant_layer_with_that_sparse_dim():
    classes = Dim(5, name="classes")

    def func(x, y, i):
        z = rf.zeros([batch_dim, OTHER], dtype="int32", sparse_dim=classes)
        c = rf.convert_to_tensor(np.array([1, 2, 3, 4], dtype="int32"), dims=[OTHER], dtype="int32",
                                 sparse_dim=classes)
        assert z.sparse_dim == classes and c.sparse_dim == classes
        return {"z": (z, [batch_dim, OTHER]), "c": (c, [OTHER])}

    res, net_dict = _layers(func)
    consts = [d for d in net_dict.values() if d["class"] == "constant" and d.get("sparse_dim") == classes]
    assert len(consts) == 2 and "frontend_op" not in _classes(net_dict)
    np.testing.assert_array_equal(res["z"], np.zeros((2, 4), "int32"))
    np.testing.assert_array_equal(res["c"], [1, 2, 3, 4])
