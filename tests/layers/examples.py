"""
One explicit example per registered layer class, used by tests/layers/test_generic.py.

EXAMPLES maps a layer class to the options of a layer named "output" with ``"from": "data"`` by default.
Special keys: ``_net`` (helper layers the example needs), ``_search`` (build the net with search_flag=True),
``_out_like_data`` (option ``out``: the template of "data", for the rf frontend's frontend_op).
``__TMP__`` in a string is replaced with a temporary directory.
UNAVAILABLE maps classes that cannot run in returnn_lite to a fragment of the NotImplementedError they must raise.
FAILS_WHEN_COMPUTED: classes that construct but cannot be computed here (tested on their own).
Extern data: "data" (float32 [B,T,6]) and "classes" (sparse int32 [B,T], dim 4).
"""

EXTERN = {"data": {"dim": 6}, "classes": {"dim": 4, "sparse": True}}

UNAVAILABLE = {
    "kenlm": "KenLM",
    "neural_transducer": "neural transducer",
}

# classes that construct but fail when their output is computed (they need RASR or a kernel returnn_lite lacks);
# tests/layers/test_sprint.py covers them
FAILS_WHEN_COMPUTED = {"fast_bw", "forced_align"}

# internal classes that only other layers create; the example of the named layer covers them
INTERNAL = {
    "_masked_select": "masked_computation",  # rec/subnet.py wraps masked_computation moved out of a loop with it
}

# layers with a float output that on purpose has no gradient path to the float input "data"
NO_INPUT_GRADIENT = {
    "accumulate_mean": "the output is the running mean variable",
    "constant": "no input",
    "random": "no input",
    "variable": "no input, only its param",
    "gradient": "dy/dx of a linear y is constant (no second-order path)",
    "relative_positional_encoding": "depends only on the input's shape",
}

# float params a layer has on purpose without a gradient path from its output
UNCONNECTED_PARAMS = {
    "tikhonov_regularization": "dummy",  # a marker param, the regularization acts on the gradient only
}

EXAMPLES = {
    'accumulate_mean': {'exp_average': 0.1},
    'activation': {'activation': 'tanh'},
    'batch_norm': {},
    'batch_softmax': {},
    'cast': {'dtype': 'int32'},
    'choice': {"target": "classes", "beam_size": 2, "from": "sm", "_search": True, "_net": {"sm": {"class": "softmax", "n_out": 4, "from": "enc"}, "enc": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"}}},
    'choice_get_beam_scores': {"from": "ch", "_search": True, "_net": {"ch": {"class": "choice", "target": "classes", "beam_size": 2, "from": "sm"}, "sm": {"class": "softmax", "n_out": 4, "from": "enc"}, "enc": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"}}},
    'choice_get_src_beams': {"from": "ch", "_search": True, "_net": {"ch": {"class": "choice", "target": "classes", "beam_size": 2, "from": "sm"}, "sm": {"class": "softmax", "n_out": 4, "from": "enc"}, "enc": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"}}},
    'combine': {'kind': 'add', 'from': ['data', 'data']},
    'combine_dims': {'axes': 'T'},
    'compare': {'kind': 'greater', 'value': 0.0},
    'complex_linear_projection': {"nr_of_filters": 3},
    'concat': {'from': [('data', 'T'), ('data', 'T')]},
    'concat_attention': {"base": "data", "base_ctx": "data", "from": "q", "_net": {"q": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"}}},
    'cond': {'condition': 'flag', 'true_layer': {'class': 'copy', 'from': 'data'}, 'false_layer': {'class': 'copy', 'from': 'data'}, '_net': {'flag': {'class': 'constant', 'value': True, 'from': []}}},
    'constant': {'value': 1.5, 'from': []},
    'conv': {'filter_size': (3,), 'n_out': 3, 'padding': 'same'},
    'copy': {},
    'ctc_loss': {"logits": "lg", "targets": "data:classes", "from": [], "_net": {"lg": {"class": "linear", "n_out": 5, "from": "data"}}},
    'cum_concat': {},
    'cumsum': {'axis': 'T'},
    'dct': {},
    'decide': {},
    'decide_keep_beam': {"from": "ch", "_search": True, "_net": {"ch": {"class": "choice", "target": "classes", "beam_size": 2, "from": "sm"}, "sm": {"class": "softmax", "n_out": 4, "from": "enc"}, "enc": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"}}},
    'dot': {'red1': 'F', 'red2': 'F', 'var1': 'T', 'var2': 'T', 'from': ['data', 'data']},
    'dot_attention': {"base": "data", "base_ctx": "data", "from": "q", "_net": {"q": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"}}},
    'dropout': {},
    'edit_distance': {'a': 'data:classes', 'b': 'data:classes', 'from': []},
    'elemwise_prod': {'axes': 'F'},
    'eval': {'eval': 'source(0) * 2.0'},
    'expand_dims': {'axis': 'T'},
    'flatten_batch': {},
    'forward': {'n_out': 3},
    'framewise_statistics': {"sil_label_idx": 0, "from": "sm", "target": "classes", "_net": {"sm": {"class": "softmax", "n_out": 4, "from": "data"}}},
    'gather': {'axis': 'F', 'position': 1},
    'gather_nd': {'position': 'data:classes', 'from': 'data'},
    'frontend_op': {"op": "activation", "opts": {"func": "tanh"}, "_out_like_data": True},
    'gating': {'activation': 'tanh', 'from': ['data', 'data']},
    'gauss_window_attention': {"base": "data", "window_size": 3, "from": "pos", "_net": {"pos": {"class": "reduce", "mode": "mean", "axis": "T", "keep_dims": False, "from": "p1"}, "p1": {"class": "linear", "n_out": 1, "from": "data"}}},
    'generic_attention': {'weights': 'att', 'base': 'data', 'from': [], '_net': {'att': {'class': 'softmax_over_spatial', 'from': 'energy'}, 'energy': {'class': 'reduce', 'mode': 'sum', 'axis': 'F', 'keep_dims': True, 'from': 'data'}}},
    'get_last_hidden_state': {"n_out": 6, "from": "r", "_net": {"r": {"class": "rec", "unit": "lstm", "n_out": 3, "from": "data"}}},
    'get_rec_accumulated': {"sub_layer": "h", "from": "r", "_net": {"r": {"class": "rec", "from": "data", "unit": {"h": {"class": "linear", "n_out": 3, "from": ["data:source", "prev:h"]}, "output": {"class": "copy", "from": "h"}}}}},
    'gradient': {"y": "sc", "x": "data", "from": [], "_net": {"sc": {"class": "reduce", "mode": "sum", "axis": "F", "from": "data"}}},
    'hdf_dump': {"filename": "__TMP__/dump.hdf"},
    'hidden': {'n_out': 3},
    'identity': {},
    'image_summary': {},
    'istft': {"frame_shift": 2, "frame_size": 4, "fft_size": 4, "from": "st", "_net": {"st": {"class": "stft", "frame_shift": 2, "frame_size": 4, "fft_size": 4, "from": "raw"}, "raw": {"class": "reduce", "mode": "sum", "axis": "F", "from": "data"}}},
    'layer_norm': {},
    'length': {},
    'linear': {'n_out': 3, 'activation': 'relu'},
    'loss': {'loss_': 'ce', 'from': 'sm', 'target_': 'classes', '_net': {'sm': {'class': 'softmax', 'n_out': 4, 'from': 'data'}}},
    'masked_computation': {"mask": "m", "unit": {"class": "linear", "n_out": 3, "from": "data"}, "_net": {"m": {"class": "compare", "kind": "greater", "value": 0, "from": "data:classes"}}},
    'math_norm': {'p': 2, 'axes': 'F'},
    'mel_filterbank': {"fft_size": 10, "nr_of_filters": 3, "sampling_rate": 16000},
    'merge_dims': {'axes': 'except_time'},
    'multichannel_multiresolution_stft_layer': {"frame_shift": 2, "frame_sizes": [4], "fft_sizes": [4], "nr_of_channels": 6},
    'multichannel_stft_layer': {"frame_shift": 2, "frame_size": 4, "fft_size": 4, "nr_of_channels": 6},
    'norm': {'axis': 'T'},
    'pad': {'axes': 'T', 'padding': (1, 2)},
    'pool': {'mode': 'max', 'pool_size': (2,), 'padding': 'same'},
    'positional_encoding': {'add_to_input': True},
    'postfix_in_time': {},
    'prefix_in_time': {},
    'print': {},
    'rand_int': {"shape": (3,), "maxval": 5, "from": []},
    'random': {"shape": (3, 4), "distribution": "normal", "from": []},
    'range': {'limit': 5, 'from': []},
    'range_from_length': {'from': 'len', '_net': {'len': {'class': 'length', 'from': 'data'}}},
    'range_in_axis': {'axis': 'T'},
    'rec': {'unit': 'lstm', 'n_out': 3},
    'rec_last_output': {"rec_layer": "r", "sub_layer_name": "h", "from": [], "_net": {"r": {"class": "rec", "from": "data", "unit": {"h": {"class": "linear", "n_out": 3, "from": ["data:source", "prev:h"]}, "output": {"class": "copy", "from": "h"}}}}},
    'rec_unstack': {},
    'reduce': {'mode': 'sum', 'axis': 'T'},
    'reduce_out': {'mode': 'max', 'num_pieces': 2},
    'reinterpret_data': {},
    'relative_positional_encoding': {'n_out': 3},
    'remove': {'symbol': 0, 'from': 'data:classes'},
    'repeat': {'repetitions': 2, 'axis': 'T'},
    'resize': {'factor': 2, 'axis': 'T', 'kind': 'nn'},
    'rnn_cell': {"unit": "lstm", "n_out": 3},
    'scaled_grad': {'scale': 0.5},
    'scatter_nd': {"position": "data:classes", "position_axis": "T", "output_dim_via_time_from": "data"},
    'search_sorted': {"sorted_sequence": "srt", "values": "data", "axis": "F", "from": [], "_net": {"srt": {"class": "cumsum", "axis": "F", "from": "ab"}, "ab": {"class": "activation", "activation": "abs", "from": "data"}}},
    'self_attention': {'num_heads': 2, 'total_key_dim': 4, 'n_out': 4},
    'seq_len_mask': {'mask_value': 0.0},
    'shift_axis': {'amount': 1, 'axis': 'T'},
    'slice': {'axis': 'T', 'slice_start': 1},
    'slice_nd': {"start": "st", "size": 2, "_net": {"st": {"class": "eval", "eval": "source(0) - source(0)", "from": "len"}, "len": {"class": "length", "from": "data"}}},
    'softmax': {'n_out': 3},
    'softmax_over_spatial': {},
    'source': {'data_key': 'classes', 'from': []},
    'sparse_softmax_cross_entropy_with_logits': {"logits": "lg", "targets": "data:classes", "from": [], "_net": {"lg": {"class": "linear", "n_out": 4, "from": "data"}}},
    'split': {'axis': 'F', 'num_splits': 2},
    'split_batch_beam': {"from": "ch", "_search": True, "_net": {"ch": {"class": "choice", "target": "classes", "beam_size": 2, "from": "sm"}, "sm": {"class": "softmax", "n_out": 4, "from": "enc"}, "enc": {"class": "reduce", "mode": "mean", "axis": "T", "from": "data"}}},
    'split_batch_time': {"base": "data", "from": "mg", "_net": {"mg": {"class": "merge_dims", "axes": "BT", "from": "data"}}},
    'split_concatenated_multichannel': {},
    'split_dims': {'axis': 'F', 'dims': (2, 3)},
    'squeeze': {'axis': 'F', 'from': 'sq_in', '_net': {'sq_in': {'class': 'expand_dims', 'axis': 'F', 'from': 'data'}}},
    'stack': {},
    'stft': {'frame_shift': 2, 'frame_size': 4, 'fft_size': 4, 'from': 'raw', '_net': {'raw': {'class': 'reduce', 'mode': 'sum', 'axis': 'F', 'from': 'data'}}},
    'subnetwork': {'subnetwork': {'output': {'class': 'linear', 'n_out': 3, 'from': 'data'}}},
    'swap_axes': {'axis1': 'T', 'axis2': 'F'},
    'switch': {'condition': True, 'true_from': 'data', 'false_from': 0.0},
    'synthetic_gradient': {"gradient": "g", "_net": {"g": {"class": "copy", "from": "data"}}},
    'tikhonov_regularization': {},
    'tile': {'multiples': {'F': 2}},
    'time_chunking': {'chunk_size': 3, 'chunk_step': 2},
    'time_unchunking': {"chunking_layer": "ch", "from": "ch", "_net": {"ch": {"class": "time_chunking", "chunk_size": 3, "chunk_step": 2, "from": "data"}}},
    'top_k': {'axis': 'F', 'k': 2},
    'train_flag': {},
    'transpose': {'perm': {'T': 'F', 'F': 'T'}},
    'twod_lstm': {"from": ["data", "emb"], "n_out": 3, "_net": {"emb": {"class": "linear", "n_out": 2, "from": "data:classes"}}},
    'transposed_conv': {'filter_size': (3,), 'n_out': 3, 'padding': 'same'},
    'unflatten_batch': {"from": "fl", "_net": {"fl": {"class": "flatten_batch", "from": "data"}}},
    'unflatten_nd': {"sizes": "sz", "num_axes": 2, "_net": {"sz": {"class": "eval", "from": "len", "eval": "tf.stack([source(0), source(0) * 0 + 1], axis=1)", "out_type": {"shape": (2,), "dim": 2, "dtype": "int32", "batch_dim_axis": 0, "time_dim_axis": None, "feature_dim_axis": 1}}, "len": {"class": "length", "from": "data"}}},
    'unmask': {"mask": "m", "_net": {"m": {"class": "compare", "kind": "greater", "value": 0, "from": "data:classes"}}},
    'variable': {'shape': (3,), 'from': []},
    'weighted_sum': {"axes": "F", "size": (3,), "padding": "same"},
    'window': {'window_size': 3},
}
