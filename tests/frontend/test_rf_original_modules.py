"""Runs the ORIGINAL RETURNN's published rf encoder/decoder module files as user code on returnn_lite's rf
(``returnn.`` mapped to ``returnn_lite.``), next to our own modules of the same name: same param names and shapes,
same outputs for the same params (rtol 1e-4), on the torch backend, and on the layers backend where it runs.

The original's files are not part of this project (we never copy its code). Point RETURNN_LITE_ORIG_RF_DIR at a
directory holding them as ``encoder/{base,conformer,conformer_v2,e_branchformer,transformer}.py``,
``decoder/transformer.py`` and ``attention.py`` (as in the original's returnn/frontend/); otherwise these tests skip.
The original's attention classes then run next to ours (rf.SelfAttention, rf.RelPosSelfAttention, ...)."""

import importlib
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import returnn_lite.frontend as rf  # noqa: E402
from returnn_lite.tensor import Dim, batch_dim, single_step_dim  # noqa: E402

from rf_harness import in_order, run_layers, run_torch  # noqa: E402

ORIG_DIR = os.environ.get("RETURNN_LITE_ORIG_RF_DIR")
pytestmark = pytest.mark.skipif(not ORIG_DIR or not os.path.isdir(ORIG_DIR or ""),
                                reason="set RETURNN_LITE_ORIG_RF_DIR to the original's returnn/frontend files")
PKG = "orig_rf_user_code"
RTOL = ATOL = 1e-4


def _as_user_code(src):
    return re.sub(r"\breturnn\.(tensor|frontend|util|config)\b", r"returnn_lite.\1", src)


@pytest.fixture(scope="module")
def orig():
    """The original's modules, imports rewritten to returnn_lite, importable as PKG.encoder.* / PKG.decoder.*."""
    root = tempfile.mkdtemp()
    for sub in ("encoder", "decoder"):
        os.makedirs(os.path.join(root, PKG, sub))
        open(os.path.join(root, PKG, sub, "__init__.py"), "w").close()
        for fn in os.listdir(os.path.join(ORIG_DIR, sub)):
            if fn.endswith(".py") and fn != "__init__.py":
                with open(os.path.join(ORIG_DIR, sub, fn)) as f:
                    src = _as_user_code(f.read())
                with open(os.path.join(root, PKG, sub, fn), "w") as f:
                    f.write(src)
    open(os.path.join(root, PKG, "__init__.py"), "w").close()
    if os.path.exists(os.path.join(ORIG_DIR, "attention.py")):
        with open(os.path.join(ORIG_DIR, "attention.py")) as f:
            src = _as_user_code(f.read())
        with open(os.path.join(root, PKG, "attention.py"), "w") as f:
            f.write(src)
    sys.path.insert(0, root)
    try:
        yield lambda name: importlib.import_module(PKG + "." + name)
    finally:
        sys.path.remove(root)
        for name in [m for m in sys.modules if m.startswith(PKG)]:
            del sys.modules[name]
        shutil.rmtree(root)


def ours(name):
    return importlib.import_module("returnn_lite.frontend." + name)


time_dim = Dim(None, name="time")
feat_dim = Dim(10, name="feat")
model_dim = Dim(8, name="model")
vocab_dim = Dim(11, name="vocab")
LENS = np.array([7, 5, 4], dtype="int32")


def _params(model, seed=3, scale=0.5):
    rng = np.random.RandomState(seed)
    res = {}
    for name, p in model.named_parameters():
        value = rng.uniform(-scale, scale, tuple(d.dimension for d in p.dims))
        if name.endswith("running_variance"):
            value = np.abs(value) + 0.5
        res[name] = value.astype("float32")
    return res


def _shapes(model):
    return {name: tuple(d.dimension for d in p.dims) for name, p in model.named_parameters()}


def _compare(get_orig, get_ours, step, extern_data, inputs, outputs, *, layers=True, dyn_dims=(time_dim,)):
    """Same param names/shapes; same outputs on torch for both; the original's also on the layers backend."""
    rf.select_backend_torch()
    orig_model, our_model = get_orig(), get_ours()
    assert _shapes(orig_model) == _shapes(our_model)
    # a torch state dict of the original's module loads into ours by name (strict)
    from returnn_lite.torch.frontend.bridge import rf_module_to_pt_module

    orig_state = rf_module_to_pt_module(orig_model).state_dict()
    rf_module_to_pt_module(our_model).load_state_dict(orig_state, strict=True)
    params = _params(orig_model)
    res_orig, _ = run_torch(extern_data, get_orig, step, inputs, params, list(dyn_dims))
    res_ours, _ = run_torch(extern_data, get_ours, step, inputs, params, list(dyn_dims))
    runs = [("ours/torch", res_ours)]
    if layers:
        res_layers, _ = run_layers(extern_data, get_orig, step, inputs, params, list(dyn_dims))
        runs.append(("orig/layers", res_layers))
    diffs = {}
    for name, mask_of in outputs.items():
        want = res_orig[name]
        mask = mask_of(res_orig)
        for what, res in runs:
            got = res[name]
            if name + ":dims" in res and name + ":dims" in res_orig and what == "orig/layers":
                got = in_order(res, name, res_orig[name + ":dims"])
            assert got.shape == want.shape, (what, name)
            np.testing.assert_allclose(got[mask], want[mask], rtol=RTOL, atol=ATOL, err_msg=f"{what} {name}")
            diffs[(what, name)] = float(np.abs(got[mask] - want[mask]).max())
    print("max abs diffs:", diffs)
    return res_orig


def _valid_by(len_name):
    def mask(res):
        lens = res[len_name]
        return np.arange(res["y"].shape[1])[None, :] < lens[:, None]
    return mask


feat_data = {"data": {"dims": (batch_dim, time_dim, feat_dim), "dtype": "float32"}}
model_data = {"data": {"dims": (batch_dim, time_dim, model_dim), "dtype": "float32"}}
label_data = {"data": {"dims": (batch_dim, time_dim), "dtype": "int32", "sparse_dim": vocab_dim}}


def _feat_inputs(n_feat, seed=1):
    return {"data": np.random.RandomState(seed).randn(3, 7, n_feat).astype("float32"), "size:time": LENS}


def _seq_step(*, model, extern_data, **_):
    y, out_spatial = model(extern_data["data"], in_spatial_dim=time_dim)
    y.mark_as_output("y", shape=[batch_dim, out_spatial, model.out_dim])
    out_spatial.get_size_tensor().mark_as_output("len", shape=[batch_dim])


def _framewise_step(*, model, extern_data, **_):
    y = model(extern_data["data"], spatial_dim=time_dim)
    y.mark_as_output("y", shape=[batch_dim, time_dim, model_dim])
    time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])


def _conformer(mod, **opts):
    sub = mod.ConformerConvSubsample(feat_dim, out_dims=[Dim(3, name="c0"), Dim(4, name="c1")],
                                     filter_sizes=[(3, 3), (3, 3)], pool_sizes=[(1, 2)], strides=[1, (2, 1)])
    if "encoder_layer" not in opts:  # options that only the Conformer layer takes
        opts.update(ff_dim=Dim(12, name="ff"), conv_kernel_size=3)
    return mod.ConformerEncoder(feat_dim, model_dim, num_layers=2, input_layer=sub, num_heads=2, dropout=0.0,
                                att_dropout=0.0, input_dropout=0.0, **opts)


def test_conformer_encoder(orig):
    _compare(lambda: _conformer(orig("encoder.conformer")), lambda: _conformer(ours("encoder.conformer")),
             _seq_step, feat_data, _feat_inputs(10), {"y": _valid_by("len")})


def test_conformer_encoder_with_e_branchformer_layers(orig):
    def make(prefix):
        get = orig if prefix == "orig" else ours
        layer = rf.build_dict(get("encoder.e_branchformer").EBranchformerLayer, ff_dim=Dim(12, name="ff"),
                              cgmlp_ff_dim=Dim(6, name="cgmlp"), cgmlp_conv_kernel=3, merge_conv_kernel=3)
        return _conformer(get("encoder.conformer"), encoder_layer=layer)

    _compare(lambda: make("orig"), lambda: make("ours"), _seq_step, feat_data, _feat_inputs(10),
             {"y": _valid_by("len")})


def _conformer_without_input_layer(mod):
    return mod.ConformerEncoder(model_dim, model_dim, num_layers=1, input_layer=None, input_embedding_scale=2.0,
                                ff_dim=Dim(12, name="ff"), conv_kernel_size=3, num_heads=2, dropout=0.0,
                                att_dropout=0.0, input_dropout=0.0)


def test_conformer_encoder_without_input_layer_and_with_embedding_scale(orig):
    """(options of newer versions of the original; older ones lack input_embedding_scale)"""
    import inspect

    if "input_embedding_scale" not in inspect.signature(orig("encoder.conformer").ConformerEncoder).parameters:
        pytest.skip("this version of the original's ConformerEncoder has no input_embedding_scale")
    _compare(lambda: _conformer_without_input_layer(orig("encoder.conformer")),
             lambda: _conformer_without_input_layer(ours("encoder.conformer")),
             _seq_step, model_data, _feat_inputs(8), {"y": _valid_by("len")})


def _conformer_v2(mod):
    return mod.ConformerEncoderV2(model_dim, num_layers=2, ff_dim=Dim(12, name="ff"), conv_kernel_size=3,
                                  num_heads=2, dropout=0.0, att_dropout=0.0)


def test_conformer_v2_encoder(orig):
    _compare(lambda: _conformer_v2(orig("encoder.conformer_v2")), lambda: _conformer_v2(ours("encoder.conformer_v2")),
             _framewise_step, model_data, _feat_inputs(8), {"y": _valid_by("len")})


def _conformer_frontend(mod, conf_mod):
    sub = conf_mod.ConformerConvSubsample(feat_dim, out_dims=[Dim(3, name="c0")], filter_sizes=[(3, 3)],
                                          pool_sizes=[(2, 2)])
    return mod.ConformerFrontend(feat_dim, model_dim, input_layer=sub, input_embedding_scale=2.0, input_dropout=0.0)


def test_conformer_v2_frontend(orig):
    _compare(lambda: _conformer_frontend(orig("encoder.conformer_v2"), orig("encoder.conformer")),
             lambda: _conformer_frontend(ours("encoder.conformer_v2"), ours("encoder.conformer")),
             _seq_step, feat_data, _feat_inputs(10), {"y": _valid_by("len")})


def _transformer_encoder(mod):
    return mod.TransformerEncoder(vocab_dim, model_dim, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0)


def _label_inputs(seed=1):
    return {"data": np.random.RandomState(seed).randint(0, vocab_dim.dimension, (3, 7)).astype("int32"),
            "size:time": LENS}


def test_transformer_encoder(orig):
    def step(*, model, extern_data, **_):
        model(extern_data["data"], spatial_dim=time_dim).mark_as_output("y", shape=[batch_dim, time_dim, model_dim])
        time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])

    _compare(lambda: _transformer_encoder(orig("encoder.transformer")),
             lambda: _transformer_encoder(ours("encoder.transformer")),
             step, label_data, _label_inputs(), {"y": _valid_by("len")})


enc_time_dim = Dim(None, name="enc_time")


def _decoder(mod):
    return mod.TransformerDecoder(model_dim, vocab_dim, Dim(8, name="dec-model"), num_layers=2, num_heads=2,
                                  dropout=0.0, att_dropout=0.0, share_embedding=False,
                                  input_embedding_scale=8 ** 0.5, input_dropout=0.0)


def _decoder_step(mode):
    def step(*, model, extern_data, **_):
        labels, enc = extern_data["data"], extern_data["enc"]
        enc_state = model.transform_encoder(enc, axis=enc_time_dim)
        state = model.default_initial_state(batch_dims=[batch_dim])
        if mode == "full":
            logits, _ = model(labels, spatial_dim=time_dim, state=state, encoder=enc_state)
            out_spatial = time_dim
        else:  # one label per call, state carried over (as in beam search)
            outs = []
            for t in range(int(time_dim.get_dim_value())):
                label_t = rf.gather(labels, axis=time_dim, indices=t)
                logits_t, state = model(label_t, spatial_dim=single_step_dim, state=state, encoder=enc_state)
                outs.append(logits_t)
            logits, out_spatial = rf.stack(outs)
        logits.mark_as_output("y", shape=[batch_dim, out_spatial, vocab_dim])
        time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])
    return step


def test_transformer_decoder(orig):
    """Full sequence and step-wise (default_initial_state), with cross attention on a random 'encoder'."""
    extern_data = dict(label_data)
    extern_data["enc"] = {"dims": (batch_dim, enc_time_dim, model_dim), "dtype": "float32"}
    inputs = _label_inputs()
    inputs["enc"] = np.random.RandomState(5).randn(3, 6, 8).astype("float32")
    inputs["size:enc_time"] = np.array([6, 3, 5], dtype="int32")
    dyn_dims = (time_dim, enc_time_dim)
    get_orig, get_ours = lambda: _decoder(orig("decoder.transformer")), lambda: _decoder(ours("decoder.transformer"))
    full = _compare(get_orig, get_ours, _decoder_step("full"), extern_data, inputs, {"y": _valid_by("len")},
                    dyn_dims=dyn_dims)
    steps = _compare(get_orig, get_ours, _decoder_step("steps"), extern_data, inputs, {"y": _valid_by("len")},
                     layers=False, dyn_dims=dyn_dims)
    mask = _valid_by("len")(full)
    np.testing.assert_allclose(steps["y"][mask], full["y"][mask], rtol=RTOL, atol=ATOL)


def _orig_attention(orig):
    try:
        return orig("attention")
    except ImportError:
        pytest.skip("no attention.py in RETURNN_LITE_ORIG_RF_DIR")


def _att_step(*, model, extern_data, **_):
    model(extern_data["data"], axis=time_dim).mark_as_output("y", shape=[batch_dim, time_dim, model_dim])
    time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])


def test_linear_and_self_attention_with_the_same_dim_in_and_out(orig):
    att = _orig_attention(orig)

    def make(cls):
        return cls(model_dim, model_dim, key_dim_total=model_dim, value_dim_total=model_dim, num_heads=2,
                   att_dropout=0.0)

    _compare(lambda: make(att.SelfAttention), lambda: make(rf.SelfAttention), _att_step, model_data,
             _feat_inputs(8), {"y": _valid_by("len")})


REL_POS_VARIANTS = {
    "transformer_xl": {},
    "learned_pos_emb_expanded": dict(learnable_pos_emb=True, learnable_pos_emb_clipping=3),
    "learned_pos_emb_cut": dict(learnable_pos_emb=True, learnable_pos_emb_clipping=16),
    "shaw": dict(with_bias=False, with_linear_pos=False, with_pos_bias=False, learnable_pos_emb=True,
                 learnable_pos_emb_clipping=2, separate_pos_emb_per_head=False),
    "no_linear_pos_per_head": dict(with_linear_pos=False),
}


@pytest.mark.parametrize("variant", sorted(REL_POS_VARIANTS))
def test_rel_pos_self_attention(orig, variant):
    att = _orig_attention(orig)

    def make(cls):
        return cls(model_dim, model_dim, key_dim_total=model_dim, value_dim_total=model_dim, num_heads=2,
                   att_dropout=0.0, **REL_POS_VARIANTS[variant])

    _compare(lambda: make(att.RelPosSelfAttention), lambda: make(rf.RelPosSelfAttention), _att_step, model_data,
             _feat_inputs(8), {"y": _valid_by("len")})


def test_causal_self_attention_steps(orig):
    att = _orig_attention(orig)

    def make(cls):
        return cls(model_dim, model_dim, key_dim_total=model_dim, value_dim_total=model_dim, num_heads=2,
                   att_dropout=0.0)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        state = model.default_initial_state(batch_dims=[batch_dim])
        outs = []
        for t in range(int(time_dim.get_dim_value())):
            y_t, state = model(rf.gather(x, axis=time_dim, indices=t), axis=single_step_dim, state=state)
            outs.append(y_t)
        y, steps_dim = rf.stack(outs)
        y.mark_as_output("y", shape=[batch_dim, steps_dim, model_dim])
        time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])

    _compare(lambda: make(att.CausalSelfAttention), lambda: make(rf.CausalSelfAttention), step, model_data,
             _feat_inputs(8), {"y": _valid_by("len")}, layers=False)


def test_transformer_decoder_newer_options(orig):
    """layer_opts with a rel-pos causal self-att, and output_only_last_frame (options of newer versions)."""
    import inspect

    mod = orig("decoder.transformer")
    params = inspect.signature(mod.TransformerDecoder.__call__).parameters
    if "output_only_last_frame" not in params:
        pytest.skip("this version of the original's TransformerDecoder lacks output_only_last_frame")

    def make(m):
        return m.TransformerDecoder(None, vocab_dim, Dim(8, name="dec-model"), num_layers=2, num_heads=2,
                                    dropout=0.0, att_dropout=0.0, share_embedding=True, input_embedding_scale=1.5,
                                    input_dropout=0.0, layer_opts={"self_att": rf.RelPosCausalSelfAttention})

    def step(*, model, extern_data, **_):
        state = model.default_initial_state(batch_dims=[batch_dim])
        logits, _ = model(extern_data["data"], spatial_dim=time_dim, state=state, output_only_last_frame=True)
        logits.mark_as_output("y", shape=[batch_dim, vocab_dim])

    _compare(lambda: make(mod), lambda: make(ours("decoder.transformer")), step, label_data, _label_inputs(),
             {"y": lambda res: np.ones(res["y"].shape, bool)})


def test_transformer_encoder_on_features_with_layer_opts(orig):
    """input_embedding=None (features of model_dim in), layer_opts (options of newer versions)."""
    import inspect

    mod = orig("encoder.transformer")
    if "input_embedding" not in inspect.signature(mod.TransformerEncoder).parameters:
        pytest.skip("this version of the original's TransformerEncoder lacks input_embedding")

    def make(m):
        return m.TransformerEncoder(vocab_dim, model_dim, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0,
                                    input_embedding=None, layer_opts={"self_att": rf.RelPosSelfAttention})

    _compare(lambda: make(mod), lambda: make(ours("encoder.transformer")), _framewise_step, model_data,
             _feat_inputs(8), {"y": _valid_by("len")})


def _orig_attention_class(orig, name):
    att = _orig_attention(orig)
    if not hasattr(att, name):
        pytest.skip("this version of the original's attention.py has no %s" % name)
    return getattr(att, name)


@pytest.mark.parametrize("name", ["CausalSelfAttention", "RelPosCausalSelfAttention"])
@pytest.mark.parametrize("mode", ["full", "steps"])
def test_causal_self_attention_full_sequence_and_steps(orig, name, mode):
    """(newer versions of the original: causal self-att also over a whole sequence, and the rel-pos variant)"""
    import inspect

    cls = _orig_attention_class(orig, name)
    if name == "RelPosCausalSelfAttention" and mode == "steps":
        pytest.skip("the original's relative_positional_encoding passes query_offset=0 to _make_indices, which "
                    "asserts None for a single step: the original itself fails here")
    if mode == "full" and inspect.signature(cls.__call__).parameters["state"].default is inspect.Parameter.empty:
        pytest.skip("this version of the original's %s works step-wise only" % name)

    def make(c):
        return c(model_dim, model_dim, key_dim_total=model_dim, value_dim_total=model_dim, num_heads=2,
                 att_dropout=0.0)

    def step(*, model, extern_data, **_):
        x = extern_data["data"]
        state = model.default_initial_state(batch_dims=[batch_dim])
        if mode == "full":
            y, _ = model(x, axis=time_dim, state=state)
            out_spatial = time_dim
        else:
            outs = []
            for t in range(int(time_dim.get_dim_value())):
                y_t, state = model(rf.gather(x, axis=time_dim, indices=t), axis=single_step_dim, state=state)
                outs.append(y_t)
            y, out_spatial = rf.stack(outs)
        y.mark_as_output("y", shape=[batch_dim, out_spatial, model_dim])
        time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])

    _compare(lambda: make(cls), lambda: make(getattr(rf, name)), step, model_data, _feat_inputs(8),
             {"y": _valid_by("len")}, layers=mode == "full")


def test_cross_attention(orig):
    cls = _orig_attention_class(orig, "CrossAttention")
    extern_data = dict(model_data)
    extern_data["enc"] = {"dims": (batch_dim, enc_time_dim, feat_dim), "dtype": "float32"}

    def make(c):
        return c(feat_dim, model_dim, model_dim, key_dim_total=model_dim, value_dim_total=model_dim, num_heads=2,
                 att_dropout=0.0)

    def step(*, model, extern_data, **_):
        enc = model.transform_encoder(extern_data["enc"], axis=enc_time_dim)
        model(extern_data["data"], enc).mark_as_output("y", shape=[batch_dim, time_dim, model_dim])
        time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])

    inputs = _feat_inputs(8)
    inputs["enc"] = np.random.RandomState(5).randn(3, 6, 10).astype("float32")
    inputs["size:enc_time"] = np.array([6, 3, 5], dtype="int32")
    _compare(lambda: make(cls), lambda: make(rf.CrossAttention), step, extern_data, inputs, {"y": _valid_by("len")},
             dyn_dims=(time_dim, enc_time_dim))


@pytest.mark.parametrize("behavior_version", [0, 21])
def test_transformer_decoder_defaults_by_behavior_version(orig, behavior_version):
    """share_embedding / input_embedding_scale left to their defaults, which follow the behavior version."""
    from returnn_lite.util.basic import BehaviorVersion

    def make(m):
        return m.TransformerDecoder(None, vocab_dim, Dim(8, name="dec-model"), num_layers=1, num_heads=2,
                                    dropout=0.0, att_dropout=0.0)

    def step(*, model, extern_data, **_):
        state = model.default_initial_state(batch_dims=[batch_dim])
        logits, _ = model(extern_data["data"], spatial_dim=time_dim, state=state)
        logits.mark_as_output("y", shape=[batch_dim, time_dim, vocab_dim])
        time_dim.get_size_tensor().mark_as_output("len", shape=[batch_dim])

    old = BehaviorVersion._version
    BehaviorVersion.set(behavior_version)
    try:
        orig_model = make(orig("decoder.transformer"))
        assert (orig_model.logits.weight is orig_model.input_embedding.weight) == (behavior_version >= 20)
        _compare(lambda: make(orig("decoder.transformer")), lambda: make(ours("decoder.transformer")), step,
                 label_data, _label_inputs(), {"y": _valid_by("len")}, layers=False)
    finally:
        BehaviorVersion._version = old
