#!/usr/bin/env python3
"""Checkpoint tool: inspect / convert / average / diff (see ``returnn_lite/checkpoint_tool.py``, ``--help``)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from returnn_lite.checkpoint_tool import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
