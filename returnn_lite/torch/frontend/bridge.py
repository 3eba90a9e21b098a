"""
An rf Module as a ``torch.nn.Module``: :func:`rf_module_to_pt_module` wraps the module tree so that
``parameters()``, ``state_dict()`` / ``load_state_dict()`` and optimizers see the rf params (which are
``torch.nn.Parameter`` on the torch backend) under their rf names (``lstm.ff_weight``).
"""

from __future__ import annotations

import torch


class RFModuleAsPTModule(torch.nn.Module):
    """``torch.nn.Module`` view of an rf Module: sub-modules and params registered under the rf attribute names."""

    def __init__(self, rf_module):
        super().__init__()
        from ...frontend.module import Module, Parameter

        object.__setattr__(self, "_rf_module", rf_module)
        for key, value in vars(rf_module).items():
            if isinstance(value, Parameter):
                raw = value.placeholder
                if not isinstance(raw, torch.nn.Parameter):
                    raise TypeError("rf param %s.%s has no torch.nn.Parameter (was it created on the torch backend? "
                                    "call rf.select_backend_torch() before creating the model)" % (
                                        type(rf_module).__name__, key))
                self.register_parameter(key, raw)
            elif isinstance(value, Module):
                self.add_module(key, RFModuleAsPTModule(value))

    @property
    def rf_module(self):
        return self._rf_module

    def forward(self, *args, **kwargs):
        return self._rf_module(*args, **kwargs)


def rf_module_to_pt_module(rf_module):
    """The ``torch.nn.Module`` view of an rf Module (state_dict keys = rf param names)."""
    from ...frontend.module import Module

    if not isinstance(rf_module, Module):
        raise TypeError("rf_module_to_pt_module: expected an rf.Module, got %r" % (rf_module,))
    for name, p in rf_module.named_parameters():
        if p.rf_name is None:
            p.rf_name = name
    return RFModuleAsPTModule(rf_module)
