"""rf decoders (as the original's ``returnn.frontend.decoder``): :mod:`.transformer`."""
