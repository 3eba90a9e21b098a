"""rf encoders (as the original's ``returnn.frontend.encoder``): :mod:`.base` interfaces, :mod:`.conformer`,
:mod:`.conformer_v2`, :mod:`.e_branchformer` (and the Transformer encoder)."""
