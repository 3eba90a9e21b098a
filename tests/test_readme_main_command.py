"""
The README's main command, exactly as written (``python rnn.py configs/12ax_lstm.config``), in a subprocess with the
environment as a user has it, except $USER: the config puts its model dir under /tmp/$USER/, so a unique user name
gives a fresh temporary model dir. It trains to the dev frame error the config promises (< 1% within 5 epochs).
"""

import os
import re
import shutil
import subprocess
import sys
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = "python rnn.py configs/12ax_lstm.config"


def test_readme_shows_the_command():
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    assert re.search(r"```\n[^`]*&& %s\n```" % re.escape(COMMAND), readme), "the README's main command changed"


def test_main_command_trains_below_one_percent():
    user = "returnn-lite-test-%s" % uuid.uuid4().hex[:12]
    model_dir = "/tmp/%s" % user
    env = dict(os.environ, USER=user)
    # "python" is this interpreter; this checkout's returnn_lite wins over an installed one
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    try:
        proc = subprocess.run(COMMAND, shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert os.path.isfile(os.path.join(model_dir, "returnn-lite-12ax", "model.005.index"))
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    dev_errors = [float(e) for e in re.findall(r"dev: score [0-9.e-]+ error ([0-9.e-]+)", proc.stdout)]
    assert len(dev_errors) == 5, proc.stdout[-3000:]
    assert dev_errors[-1] < 0.01, dev_errors
    assert "rnn.py: error" not in proc.stderr
