#!/usr/bin/env python3
"""Export a config + checkpoint for inference (see ``returnn_lite/export.py``, ``--help``)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from returnn_lite.export import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
