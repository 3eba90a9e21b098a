"""
LSTM param layout conversions (NativeLstm2 <-> TF LSTMCell / BasicLSTMCell / LSTMBlockCell <-> Keras) live in
returnn_lite/param_conversion.py; CustomCheckpointLoader applies them automatically when loading a checkpoint.
"""

from __future__ import annotations

from ...param_conversion import LSTM_LAYOUTS, get_lstm_layout  # noqa: F401
