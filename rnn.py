#!/usr/bin/env python3
"""``python rnn.py CONFIG [++key value ...]``: train / eval / forward with a RETURNN config (see README)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from returnn_lite.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
