"""
:class:`Subnetwork` (defined in :mod:`returnn_lite.network`, where seed 003 documents it): the one kind of child
network. Used for ``subnetwork`` layers, the branches of ``cond``, the unit of ``masked_computation`` and the per-step
networks of ``rec`` units. What differs is configuration:

- ``own_data``: extern data of the child (``data``/``data:KEY``), e.g. a subnetwork layer's sources; other keys
  resolve in the parent network;
- ``fallback_to_parent``: names the child does not own resolve in the parent (cond branches, masked_computation);
- ``parent_get_layer``: how the parent resolves names (e.g. the rec template's lookup); ``prev:X`` and ``:i`` of the
  child go there (as ``prev:<name>/X`` for the child's own layers);
- ``absolute_name_prefix`` (layer names, e.g. ``rec/``) and ``name_scope_prefix`` (params, e.g. ``rec/rec/``);
- flags: ``train_flag``, ``eval_flag`` (False where the owning layer registers the losses itself), ``search_flag``,
  ``inside_rec_time_dim`` / ``over_rec_time_dim``.
"""

from __future__ import annotations

from .network import Subnetwork

__all__ = ["Subnetwork"]
