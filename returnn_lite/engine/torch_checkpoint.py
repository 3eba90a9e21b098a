"""
``.pt`` checkpoint files of the torch engine: written all or nothing (a kill or a full disk leaves the previous
file), read with the checks ``torch.load`` lacks (the zip's CRCs, params without data), each problem one
:class:`returnn_lite.engine.backend.EngineError` naming the file. Tensors saved on another device are mapped onto
this one (``map_location``).
"""

from __future__ import annotations

import os
import zipfile
import zlib

import torch

from ..util import atomic_write
from .backend import EngineError
from .checks import first_line

__all__ = ["save_pt_atomically", "load_pt", "check_state_dict_tensors"]


def save_pt_atomically(state, path):
    """``torch.save`` all or nothing: a temp file in the same directory, flushed and fsynced, renamed onto ``path``,
    then the directory fsynced (the rename survives a crash). A failed or killed save leaves the previous file
    and at most a temp file ``.<name>.*.tmp`` (removed on error, and by the next run's stale-file cleanup)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    atomic_write(path, lambda f: torch.save(state, f), binary=True)
    _fsync_dir(directory)


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _corrupt_zip_member(path):
    """The first member of the ``.pt`` zip whose data does not match its CRC (torch.load does not check them),
    or None. Files that are no zip (torch's legacy format) or were written without CRCs are not checked."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if not any(i.CRC for i in infos if i.file_size):
                return None
            return zf.testzip()
    except zipfile.BadZipFile as exc:
        return "(%s)" % exc
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        return "(%s: %s)" % (type(exc).__name__, exc)


def load_pt(path, device, what):
    """``torch.load`` of a ``.pt`` onto ``device`` (tensors saved on another device are mapped there); a truncated
    or corrupt file is one EngineError starting with ``what``."""
    if not os.path.exists(path):
        raise EngineError("%s: file not found" % what)
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError:
        is_zip = False
    bad = _corrupt_zip_member(path) if is_zip else None
    if bad is not None:
        raise EngineError("%s: checkpoint file truncated or corrupt (member %s fails its CRC check)" % (what, bad))
    try:
        return torch.load(path, map_location=device, weights_only=False)
    except Exception as exc:  # e.g. a truncated file, an unknown device type
        raise EngineError("%s: checkpoint file truncated or corrupt (%s: %s)" % (
            what, type(exc).__name__, first_line(exc))) from None


def check_state_dict_tensors(values, what):
    """Params without data (saved from the 'meta' device, e.g. a model built with ``torch.device("meta")``)."""
    if not isinstance(values, dict):
        return
    empty = sorted(k for k, v in values.items() if isinstance(v, torch.Tensor) and v.is_meta)
    if empty:
        raise EngineError("%s: params %s are on the 'meta' device (saved without data); save the checkpoint from "
                          "a model with real params" % (what, empty[:4] + (["..."] if len(empty) > 4 else [])))
