"""The original RETURNN 12AX demo config (with its `returnn` import) trains unchanged with returnn_lite."""

import os
import re

from returnn_lite.__main__ import main

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "demo-tf-native-lstm2.12ax.config")


def test_original_12ax_demo_trains(tmp_path, capsys):
    # only where it writes and how long it runs are overridden
    rc = main([DEMO, "++model", str(tmp_path / "model"), "++num_epochs", "4", "++log_verbosity", "3"])
    out = capsys.readouterr().out
    assert rc in (0, None), out[-2000:]
    dev_errors = [float(e) for e in re.findall(r"dev: score [\d.e+-]+ error ([\d.e+-]+)", out)]
    assert len(dev_errors) == 4, out[-2000:]
    assert dev_errors[-1] < 0.02, dev_errors  # the original reaches well below 1% frame error within a few epochs
    assert os.path.exists(str(tmp_path / "model.004.index"))
