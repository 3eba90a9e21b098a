"""rf on PyTorch: :class:`TorchBackend` (``rf.select_backend_torch()``) and the rf Module <-> torch.nn.Module bridge."""

from ._backend import TorchBackend  # noqa: F401
from .bridge import RFModuleAsPTModule, rf_module_to_pt_module  # noqa: F401
