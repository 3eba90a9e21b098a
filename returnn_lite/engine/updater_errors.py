"""The updater's error class, importable without TensorFlow (the command line catches it on every backend)."""

__all__ = ["UpdaterError"]


class UpdaterError(Exception):
    """Bad optimizer settings, or nothing to train."""
