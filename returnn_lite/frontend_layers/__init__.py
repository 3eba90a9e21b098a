"""
The RETURNN-layers backend of rf (seed 000): rf calls emit layer dicts, compiled by
:class:`returnn_lite.network.TFNetwork`.

    net_dict, model = get_net_dict(epoch=1, step=0)   # under global_config_ctx(config)
    net = TFNetwork(config=config, train_flag=False)
    net.construct_from_dict(net_dict)
"""

from __future__ import annotations

from . import _layer  # noqa: F401 (registers the frontend_op layer class)
from . import _loop  # noqa: F401 (registers the loop_frames op of frontend_op)
from ._backend import ReturnnLayersBackend  # noqa: F401
from ._net import Layer, NetDictBuilder, get_current_builder  # noqa: F401
from .config_entry_points import get_net_dict, register_params  # noqa: F401

__all__ = ["ReturnnLayersBackend", "Layer", "NetDictBuilder", "get_net_dict", "get_current_builder"]
