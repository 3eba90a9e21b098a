"""
Checkpoint conversion between the two rf backends (subcommands of ``returnn-lite-checkpoint``):

* ``tf-to-torch CKPT OUT.pt``: a TF checkpoint of the layers backend (variables ``a/b/param``) -> a ``.pt`` file
  as the torch engine writes it (``{"model": state_dict with rf names a.b, "global_step", "epoch"}``), so that
  ``backend = "torch"`` can ``load`` it (or a training resumes from it when named ``<model>.NNN.pt``).
* ``torch-to-tf IN.pt CKPT``: a ``.pt`` of the torch engine (or a plain state_dict) -> a TF checkpoint with the
  layers backend's variable names (plus ``global_step``).

Both backends keep a param in the dims order of its rf ``Parameter``, so values are copied as they are; optimizer
state is not converted. Output files are written to a temp name and renamed into place.
"""

from __future__ import annotations

import os
import re

import numpy as np
from ..util import atomic_write


class ConversionError(ValueError):
    pass


def _torch():
    try:
        import torch
    except ImportError:
        raise ConversionError("converting to/from .pt needs PyTorch (pip install -e \".[torch]\")") from None
    return torch


def tf_name_to_rf(name):
    """``lstm/ff_weight/param`` -> ``lstm.ff_weight`` (None for non-param variables)."""
    if not name.endswith("/param"):
        return None
    return name[:-len("/param")].replace("/", ".")


def rf_name_to_tf(name):
    return name.replace(".", "/") + "/param"


def tf_checkpoint_to_torch(tf_filename, out_filename):
    """Returns the number of converted params."""
    torch = _torch()

    from ..checkpoint_files import Checkpoint

    ckpt = Checkpoint(tf_filename)
    state = {}
    for name in ckpt.param_names():
        rf_name = tf_name_to_rf(name)
        if rf_name is None:
            raise ConversionError("checkpoint %r: variable %r is not an rf param (expected <module path>/param; "
                                  "only checkpoints of rf models on the layers backend convert)" % (
                                      ckpt.filename, name))
        state[rf_name] = torch.from_numpy(np.ascontiguousarray(ckpt.get(name)))
    if not state:
        raise ConversionError("checkpoint %r has no params" % ckpt.filename)
    m = re.match(r"^.*\.(\d+)$", ckpt.filename)
    _save_atomic({"model": state, "global_step": ckpt.global_step() or 0, "epoch": int(m.group(1)) if m else None,
                  "optimizer": None}, out_filename)
    return len(state)


def torch_to_tf_checkpoint(pt_filename, out_filename):
    torch = _torch()

    from ..checkpoint_files import write_checkpoint

    if not os.path.exists(pt_filename):
        raise ConversionError("%r: no such file" % pt_filename)
    try:
        obj = torch.load(pt_filename, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ConversionError("%r: not a readable torch file (%s)" % (pt_filename, exc)) from None
    state = obj.get("model", obj) if isinstance(obj, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConversionError("%r: expected a state_dict (name -> tensor) or {'model': state_dict}" % pt_filename)
    values = {rf_name_to_tf(k): v.detach().cpu().numpy() for k, v in state.items()}
    step = obj.get("global_step", 0) if "model" in obj else 0
    values["global_step"] = np.array(int(step or 0), dtype=np.int64)
    write_checkpoint(out_filename, values)
    return len(state)


def _save_atomic(obj, filename):
    import torch

    directory = os.path.dirname(os.path.abspath(filename))
    if not os.path.isdir(directory):
        raise ConversionError("output %r: directory %r does not exist" % (filename, directory))
    atomic_write(filename, lambda f: torch.save(obj, f), binary=True)


def _cmd_tf_to_torch(args, out):
    n = tf_checkpoint_to_torch(args.input, args.output)
    print("wrote %i params to %s" % (n, args.output), file=out)
    return 0


def _cmd_torch_to_tf(args, out):
    n = torch_to_tf_checkpoint(args.input, args.output)
    print("wrote %i params to %s" % (n, args.output), file=out)
    return 0


def add_subcommands(sub):
    """Registers tf-to-torch / torch-to-tf in the checkpoint tool's argparse subparsers."""
    s = sub.add_parser("tf-to-torch", help="TF checkpoint of an rf model (layers backend) -> .pt (torch backend)",
                       description="Variables a/b/param -> state_dict entries a.b ({'model': ..., 'global_step': "
                                   "...}, as the torch engine's checkpoints); optimizer state is left out.")
    s.add_argument("input", help="TF checkpoint prefix (or its .index file)")
    s.add_argument("output", help="the .pt file to write")
    s.set_defaults(func=_cmd_tf_to_torch)
    s = sub.add_parser("torch-to-tf", help=".pt of the torch backend (or a state_dict) -> TF checkpoint (layers "
                                           "backend)")
    s.add_argument("input", help=".pt file")
    s.add_argument("output", help="TF checkpoint prefix to write")
    s.set_defaults(func=_cmd_torch_to_tf)
