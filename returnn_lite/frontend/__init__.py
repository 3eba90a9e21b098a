"""
The RETURNN frontend (``rf``): backend-independent model code.

    import returnn_lite.frontend as rf

    rf.select_backend_returnn_layers_tf()   # rf calls build a RETURNN layer dict, compiled by TFNetwork

Functions dispatch to the backend of their tensors (see :mod:`returnn_lite.frontend._backend`); bad input (dim
mismatches, unknown dims, a loss marked twice) raises :class:`FrontendError` naming the model code's file:line.
"""

from __future__ import annotations

from ..tensor import Dim, Tensor, TensorDict, batch_dim, single_step_dim  # noqa: F401
from ._backend import (  # noqa: F401
    Backend, get_backend_by_raw_tensor_type, get_backend_for_dims, get_backend_for_tensor, get_selected_backend,
    is_backend_selected, select_backend_returnn_layers_tf, select_backend_tf, select_backend_torch)
from ._utils import FrontendError  # noqa: F401
from .device import copy_to_device, get_default_device, set_default_device, set_default_device_ctx  # noqa: F401
from .array_ import *  # noqa: F401,F403
from .array_ import slice  # noqa: F401 (shadows the builtin on purpose, as the original)
from .math_ import *  # noqa: F401,F403
from .math_ import abs, reduce, round  # noqa: F401
from .dims import *  # noqa: F401,F403 (after math_: dims' num_elements_of_shape has the original's options)
from .module import (  # noqa: F401
    Functional, Glorot, He, HeNormal, HeUniform, Module, ModuleList, Parameter, ParameterList, ParamInit, Sequential,
    VarianceScaling, init, sequential)
from .nn import (  # noqa: F401
    LSTM, BatchNorm, Conv1d, Conv2d, Embedding, LayerNorm, Linear, Loop, LstmState, State, ZoneoutLSTM, cond, conv,
    cross_entropy, ctc_loss, dropout, make_conv_out_spatial_dims, max_pool, max_pool1d, pool, pool1d, pool2d, random,
    random_normal, random_uniform, scan, set_random_seed, while_loop)
from .conv import (  # noqa: F401
    Conv3d, TransposedConv1d, TransposedConv2d, TransposedConv3d, gating, make_transposed_conv_out_spatial_dims, pool3d,
    transposed_conv, use_mask_default)
from .loop import TensorArray  # noqa: F401
from .packing import masked_scatter, masked_select, pack_padded  # noqa: F401
from .scatter import scatter, scatter_argmax, search_sorted  # noqa: F401
from .signal import stft  # noqa: F401
from .gradient import *  # noqa: F401,F403
from .label_smoothing import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .top_k import *  # noqa: F401,F403
from .piecewise_linear import *  # noqa: F401,F403
from .parametrize import *  # noqa: F401,F403
from .rand import *  # noqa: F401,F403
from .dtype import *  # noqa: F401,F403
from .edit_distance import edit_distance  # noqa: F401
fill = full  # noqa: F405 (the original's alias, const.py)
from .parametrizations import *  # noqa: F401,F403
from .run_ctx import Loss, RunCtx, get_run_ctx, init_forward_step_run_ctx, init_train_step_run_ctx  # noqa: F401
from .attention import *  # noqa: F401,F403
from .build_from_dict import build_dict, build_from_dict  # noqa: F401
from .defaults import *  # noqa: F401,F403

from . import audio, hooks  # noqa: E402,F401 (rf.audio, rf.hooks, as the original)
