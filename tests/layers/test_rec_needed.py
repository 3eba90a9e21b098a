"""
Which layers of a rec unit are built (issue 29): as in the original, only "output", "end", layers with a loss (when
evaluating), ``is_output_layer`` layers, what ``prev:`` needs and their dependencies. A choice that does not search
outputs its target and does not depend on its scores, so a fused LM that only feeds the choice (LM-fusion decoders,
the LM's layers flattened into the unit with an ``lm_`` prefix) is built, and creates params, only under search.
"""

import numpy as np
import tensorflow as tf

from returnn_lite.extern_data import ExternData
from returnn_lite.network import TFNetwork

EXTERN = {"data": {"dim": 5}, "classes": {"dim": 6, "sparse": True}}
LM_PARAMS = {"output/rec/lm_target_embed_raw/W", "output/rec/lm_dec_0_ff_conv1/W", "output/rec/lm_dec_0_ff_conv1/b",
             "output/rec/lm_dec_0_ff_conv2/W", "output/rec/lm_dec_0_ff_conv2/b", "output/rec/lm_output/W",
             "output/rec/lm_output/b"}


def _fusion_net():
    unit = {
        # the external LM, flattened into the unit (as TransformerLM(prefix_name="lm_", use_as_ext_lm=True) does)
        "lm_target_embed_raw": {"class": "linear", "activation": None, "with_bias": False, "n_out": 4,
                                "from": "prev:output"},
        "lm_dec_0_ff_conv1": {"class": "linear", "activation": "relu", "n_out": 8, "from": "lm_target_embed_raw"},
        "lm_dec_0_ff_conv2": {"class": "linear", "activation": None, "n_out": 4, "from": "lm_dec_0_ff_conv1"},
        "lm_output": {"class": "linear", "activation": "softmax", "n_out": 6, "from": "lm_dec_0_ff_conv2"},
        # the AM
        "target_embed": {"class": "linear", "activation": None, "with_bias": False, "n_out": 4, "from": "prev:output"},
        "s": {"class": "rnn_cell", "unit": "LSTMBlock", "from": ["target_embed", "prev:att"], "n_out": 5},
        "att": {"class": "reduce", "mode": "mean", "axes": "t", "from": "base:encoder"},
        "output_prob": {"class": "softmax", "from": ["s", "att"], "target": "classes", "loss": "ce"},
        "combo_output_prob": {"class": "eval", "from": ["output_prob", "lm_output"],
                              "eval": "safe_log(source(0)) + 0.3 * safe_log(source(1))"},
        "output": {"class": "choice", "target": "classes", "beam_size": 3, "from": "combo_output_prob",
                   "input_type": "log_prob", "initial_output": 0},
        "end": {"class": "compare", "from": "output", "value": 0},
        "unused": {"class": "linear", "n_out": 3, "from": "s"},  # nothing needs it: never built
    }
    return {"encoder": {"class": "linear", "activation": "tanh", "from": "data", "n_out": 4},
            "output": {"class": "rec", "from": [], "target": "classes", "unit": unit,
                       "max_seq_len": "max_len_from('base:encoder')"},
            "decision": {"class": "decide", "from": "output", "loss": "edit_distance", "target": "classes"}}


def _params(train_flag=False, search_flag=False, eval_flag=None):
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=train_flag, search_flag=search_flag,
                        eval_flag=eval_flag)
        net.construct_from_dict(_fusion_net())
        return {p.op.name for p in net.get_params_list()}


AM_PARAMS = {"output/rec/target_embed/W", "output/rec/s/rec/lstm_cell/kernel", "output/rec/s/rec/lstm_cell/bias",
             "output/rec/output_prob/W", "output/rec/output_prob/b", "encoder/W", "encoder/b"}


def test_fused_lm_not_built_in_training():
    params = _params(train_flag=True)
    assert params == AM_PARAMS  # no lm_* params, no "unused" params


def test_fused_lm_built_under_search():
    params = _params(search_flag=True)
    assert params == AM_PARAMS | LM_PARAMS


def test_teacher_forced_choice_without_sources_trains():
    with tf.Graph().as_default():
        net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=True)
        net.construct_from_dict(_fusion_net())
        loss = net.get_total_loss()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            feed = {net.extern_data.data["data"].placeholder: np.random.RandomState(1).randn(2, 4, 5),
                    net.extern_data.data["data"].size_placeholder[0]: [4, 3],
                    net.extern_data.data["classes"].placeholder: [[1, 2, 3], [4, 5, 0]],
                    net.extern_data.data["classes"].size_placeholder[0]: [3, 2]}
            value = session.run(loss, feed_dict=feed)
    assert np.isfinite(value) and value > 0
