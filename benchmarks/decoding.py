"""
Decoding benchmark: beam search of an attention decoder, returnn_lite (``search_flag=True``, a ``rec`` unit with a
``choice`` layer) vs a hand-written plain-TF beam search (tf.while_loop + top_k + gather of the states) in the same
process, on the same encoder (built by returnn_lite in both graphs, so that the ratio is about the search loop).

Model (the issue's setup): encoder BLSTM 2x256, decoder LSTM 256 with dot attention, vocab 1000, beam 12, batch 16,
encoder length ~100. Random weights: both searches run the full ``--max-len`` steps (the end label is never
chosen: 'end' compares with a label outside the vocab), so they do the same amount of work. No length normalization
in either. Time: CPU time of the process (``time.process_time``) per ``session.run``, min over repeats.

    python benchmarks/decoding.py [--repeats 3] [--max-len 30]

Prints ``decoded seqs/s: returnn_lite X, plain TF Y, ratio X/Y``, and the graph construction times of the search
and training graphs of the attention decoder.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from returnn_lite.extern_data import ExternData  # noqa: E402
from returnn_lite.network import TFNetwork  # noqa: E402

tf1 = tf.compat.v1

VOCAB, DIM, BEAM, BATCH, ENC_T, FEAT = 1000, 256, 12, 16, 100, 40


def encoder_dict():
    return {
        "lstm0_fw": {"class": "rec", "unit": "lstm", "n_out": DIM, "direction": 1, "from": "data"},
        "lstm0_bw": {"class": "rec", "unit": "lstm", "n_out": DIM, "direction": -1, "from": "data"},
        "lstm1_fw": {"class": "rec", "unit": "lstm", "n_out": DIM, "direction": 1, "from": ["lstm0_fw", "lstm0_bw"]},
        "lstm1_bw": {"class": "rec", "unit": "lstm", "n_out": DIM, "direction": -1, "from": ["lstm0_fw", "lstm0_bw"]},
        "encoder": {"class": "linear", "activation": None, "n_out": DIM, "from": ["lstm1_fw", "lstm1_bw"]},
        "enc_ctx": {"class": "linear", "activation": None, "n_out": DIM, "from": "encoder"},
    }


def decoder_dict(max_len):
    net = encoder_dict()
    net["output"] = {"class": "rec", "from": [], "target": "classes", "max_seq_len": max_len, "unit": {
        "embed": {"class": "linear", "activation": None, "n_out": DIM, "from": "prev:output"},
        "s": {"class": "rnn_cell", "unit": "LSTMBlock", "n_out": DIM, "from": ["embed", "prev:att"]},
        "att": {"class": "dot_attention", "from": "s", "base": "base:encoder", "base_ctx": "base:enc_ctx"},
        "prob": {"class": "softmax", "from": ["s", "att"], "target": "classes", "loss": "ce"},
        "output": {"class": "choice", "target": "classes", "beam_size": BEAM, "from": "prob", "initial_output": 0,
                   "length_normalization": False},
        "end": {"class": "compare", "from": "output", "value": VOCAB},  # never: both run max_len steps
    }}
    net["decision"] = {"class": "decide", "from": "output", "is_output_layer": True}
    return net


EXTERN = {"data": {"dim": FEAT}, "classes": {"dim": VOCAB, "sparse": True}}


def build_returnn_lite(max_len):
    net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=False, search_flag=True)
    net.construct_from_dict(decoder_dict(max_len))
    return net, net.get_layer("decision").output.placeholder


def build_plain_tf(max_len):
    """The same encoder (returnn_lite), then a hand-written beam search loop."""
    net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=False)
    enc_dict = encoder_dict()
    enc_dict["enc_ctx"] = dict(enc_dict["enc_ctx"], is_output_layer=True)
    net.construct_from_dict(dict(enc_dict, **{"out": {"class": "copy", "from": "encoder", "is_output_layer": True}}))
    enc = net.get_layer("encoder").output.copy_as_batch_major()
    ctx = net.get_layer("enc_ctx").output.copy_as_batch_major().placeholder
    seq_lens = enc.get_time_dim_tag().dyn_size
    enc = enc.placeholder
    k = BEAM
    batch = tf.shape(enc)[0]
    with tf1.variable_scope("plain", reuse=tf1.AUTO_REUSE):
        w_emb = tf1.get_variable("emb", [VOCAB, DIM])
        w_lstm = tf1.get_variable("lstm_w", [2 * DIM + DIM, 4 * DIM])
        b_lstm = tf1.get_variable("lstm_b", [4 * DIM], initializer=tf1.zeros_initializer())
        w_out = tf1.get_variable("out_w", [2 * DIM, VOCAB])
        b_out = tf1.get_variable("out_b", [VOCAB], initializer=tf1.zeros_initializer())

    def tile(x):
        x = tf.expand_dims(x, 1)
        x = tf.tile(x, [1, k] + [1] * (x.shape.rank - 2))
        return tf.reshape(x, tf.concat([[batch * k], tf.shape(x)[2:]], 0))

    enc_t, ctx_t = tile(enc), tile(ctx)
    mask = tf.sequence_mask(tile(seq_lens), maxlen=tf.shape(enc)[1])
    init = (tf.constant(0), tf.zeros([batch * k], tf.int32), tf.zeros([batch * k, DIM]), tf.zeros([batch * k, DIM]),
            tf.zeros([batch * k, DIM]), tf.concat([tf.zeros([batch, 1]), tf.fill([batch, k - 1], -1e30)], 1),
            tf.TensorArray(tf.int32, size=max_len), tf.TensorArray(tf.int32, size=max_len))

    def body(i, label, c, h, att, scores, labels_ta, src_ta):
        x = tf.concat([tf.gather(w_emb, label), att, h], axis=1)
        gates = tf.matmul(x, w_lstm) + b_lstm
        gi, gj, gf, go = tf.split(gates, 4, axis=1)
        c = tf.sigmoid(gf) * c + tf.sigmoid(gi) * tf.tanh(gj)
        h = tf.sigmoid(go) * tf.tanh(c)
        energy = tf.squeeze(tf.matmul(ctx_t, h[:, :, None]), 2)
        weights = tf.nn.softmax(tf.where(mask, energy, float("-inf")))
        att = tf.squeeze(tf.matmul(weights[:, None], enc_t), 1)
        logp = tf.nn.log_softmax(tf.matmul(tf.concat([h, att], 1), w_out) + b_out)
        comb = tf.reshape(scores[:, :, None] + tf.reshape(logp, [batch, k, VOCAB]), [batch, k * VOCAB])
        scores, idx = tf.nn.top_k(comb, k=k)
        src, label = idx // VOCAB, idx % VOCAB
        flat = tf.reshape(tf.range(batch)[:, None] * k + src, [-1])
        c, h, att = (tf.gather(v, flat) for v in (c, h, att))
        label = tf.reshape(label, [-1])
        return i + 1, label, c, h, att, scores, labels_ta.write(i, label), src_ta.write(i, src)

    res = tf1.while_loop(lambda i, *_: i < max_len, body, init, parallel_iterations=1)
    labels, src = res[-2].stack(), res[-1].stack()  # [T, B*K], [T, B, K]

    def back(idx, s_t):
        return tf.gather(s_t, idx, batch_dims=1)

    last = tf.zeros([batch], tf.int32)[:, None] + tf.range(1)  # the best (first) hypothesis
    earlier = tf.scan(back, src[1:][::-1], initializer=last)
    idx = tf.concat([earlier[::-1], last[None]], 0)[:, :, 0]  # [T, B]
    labels = tf.gather(tf.reshape(labels, [max_len, batch, k]), idx, axis=2, batch_dims=2)
    return net, tf.transpose(labels)


def timed(build, max_len, repeats, feed_values):
    with tf.Graph().as_default() as graph:
        t0 = time.process_time()
        net, out = build(max_len)
        construct = time.process_time() - t0
        ed = net.extern_data.data["data"]
        with tf1.Session(graph=graph, config=tf1.ConfigProto(intra_op_parallelism_threads=2,
                                                             inter_op_parallelism_threads=1)) as session:
            session.run(tf1.global_variables_initializer())
            feed = {ed.placeholder: feed_values[0], ed.size_placeholder[0]: feed_values[1]}
            session.run(out, feed)  # warm-up
            best = float("inf")
            for _ in range(repeats):
                t0 = time.process_time()
                session.run(out, feed)
                best = min(best, time.process_time() - t0)
    return best, construct


def construction_times():
    """Graph construction of the attention decoder: search graph vs training graph (CPU seconds)."""
    res = {}
    for search in (False, True):
        with tf.Graph().as_default():
            t0 = time.process_time()
            net = TFNetwork(extern_data=ExternData(EXTERN), train_flag=not search, search_flag=search)
            net.construct_from_dict(decoder_dict(50))
            if not search:
                net.get_objective()
            res[search] = time.process_time() - t0
    return res[True], res[False]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=30)
    args = parser.parse_args()
    rnd = numpy.random.RandomState(1)
    lens = rnd.randint(ENC_T * 8 // 10, ENC_T + 1, size=BATCH).astype("int32")
    lens[0] = ENC_T
    x = rnd.normal(size=(BATCH, ENC_T, FEAT)).astype("float32")
    lite, lite_construct = timed(build_returnn_lite, args.max_len, args.repeats, (x, lens))
    plain, plain_construct = timed(build_plain_tf, args.max_len, args.repeats, (x, lens))
    print("decoding (batch %i, beam %i, vocab %i, %i steps): returnn_lite %.3fs, plain TF %.3fs CPU per batch" % (
        BATCH, BEAM, VOCAB, args.max_len, lite, plain))
    print("decoded seqs/s: returnn_lite %.1f, plain TF %.1f, ratio %.2fx" % (BATCH / lite, BATCH / plain, plain / lite))
    search_t, train_t = construction_times()
    print("graph construction: search %.2fs, training %.2fs, ratio %.2fx" % (search_t, train_t, search_t / train_t))


if __name__ == "__main__":
    main()
