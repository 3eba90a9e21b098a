"""
Every fenced code block of README.md runs as written (issue 25):

- ``python`` blocks run with ``exec`` in a fresh subprocess, after the blocks they continue (``PYTHON_CONTINUES``:
  the torch and "From Python" snippets use the rf example's ``Model``);
- shell blocks run with bash in a temporary directory that has the repository's ``rnn.py`` and ``configs/``, with
  ``python`` and the console scripts (``returnn-lite``, ``returnn-lite-checkpoint``, ``returnn-lite-export``) of
  this checkout on PATH and ``$USER`` set to a fresh name (the configs' model dirs are ``/tmp/$USER/...``).
  Transcript blocks (``$ command`` lines followed by output) run each command and check that each output line's
  first word is in the output; ``diff`` transcripts that show ``differs:`` expect exit status 1.
- Trainings run shortened (``SHORTENED``: only the last epoch, on fewer sequences, so that the checkpoint names the
  README uses exist); blocks that need a trained model get it first (``NEEDS``); a few blocks are skipped, each
  with its reason (``SKIPPED``). A block that matches none of these runs as it is.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")

SKIPPED = {  # a substring of the block -> why it does not run here
    'pip install -e ".[test]" && python rnn.py configs/12ax_lstm.config':
        "pip install, and the main command has its own subprocess test (written with the native-op work)",
    'pip install -e ".[test]" && python -m pytest tests': "pip install and the whole test suite",
    "TF_CONFIG=": "two machines (host0, host1) and a placeholder CONFIG",
    "pip install --no-deps -e .": "pip install (tests/frontend/test_readme_torch.py checks its pins)",
    "++device gpu": "needs a GPU (tests/frontend/test_readme_torch.py runs it; test_torch_engine_gpu.py on CUDA)",
    "torchrun --standalone": "two processes; tests/frontend/test_torch_engine_distributed.py runs it",
    "python rnn.py configs/conformer_ctc.config": "4 epochs; tests/frontend/test_conformer_ctc_recipe.py trains one "
                                                  "short epoch of it",
}
_FEW_12AX = "++train \"{'class': 'Task12AXDataset', 'num_seqs': 60}\" ++dev \"{'class': 'Task12AXDataset', " \
    "'num_seqs': 10, 'fixed_random_seed': 1}\""
SHORTENED = {  # config -> arguments appended to its training commands (no ++task)
    "configs/12ax_lstm.config": "++start_epoch 3 " + _FEW_12AX,
    "configs/12ax_rf_lstm.config": "++start_epoch 5 " + _FEW_12AX,
    "configs/attention_copy.config": "++start_epoch 12",
}
NEEDS = {  # a substring of the block -> commands run before it (once per session, in the shared $USER)
    "returnn-lite-checkpoint inspect $M.005": ["python rnn.py configs/12ax_lstm.config"],
    "returnn-lite-export configs/12ax_lstm.config": ["python rnn.py configs/12ax_lstm.config"],
    "returnn-lite-checkpoint tf-to-torch": ["python rnn.py configs/12ax_rf_lstm.config"],
}
PYTHON_CONTINUES = {  # a substring of a python block -> substrings of the blocks it continues
    "rf.select_backend_torch()": ["class Model(rf.Module)"],
    "get_net_dict(epoch=1": ["class Model(rf.Module)"],
}
SHARED_USER = "readme-%s" % uuid.uuid4().hex[:8]


def readme_blocks():
    """[(line number, language, text)] of README.md's fenced blocks."""
    blocks, lines = [], open(README).read().splitlines(True)
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if m:
            start, body = i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((start, m.group(1), "".join(body)))
        i += 1
    return blocks


BLOCKS = readme_blocks()


def _find(substring):
    found = [text for _, lang, text in BLOCKS if substring in text]
    assert len(found) == 1, "README block with %r: found %i" % (substring, len(found))
    return found[0]


@pytest.fixture(scope="module")
def shell_dir():
    """The temp cwd: rnn.py and configs/ of this checkout; bin/ with python and the console scripts."""
    root = tempfile.mkdtemp(prefix="readme-blocks-")
    os.symlink(os.path.join(REPO, "rnn.py"), os.path.join(root, "rnn.py"))
    os.symlink(os.path.join(REPO, "configs"), os.path.join(root, "configs"))
    bin_dir = os.path.join(root, "bin")
    os.mkdir(bin_dir)
    scripts = {"python": "", "returnn-lite": "-m returnn_lite", "returnn-lite-checkpoint": "-m returnn_lite.checkpoint_tool",
               "returnn-lite-export": "-m returnn_lite.export"}
    for name, args in scripts.items():
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, args))
        os.chmod(path, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree("/tmp/%s" % SHARED_USER, ignore_errors=True)


def _env(root, user):
    env = dict(os.environ, PATH=os.path.join(root, "bin") + os.pathsep + os.environ["PATH"], USER=user,
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), RETURNN_LITE_NATIVE_OPS="0")
    env["M"] = "/tmp/%s/returnn-lite-12ax/model" % user
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user has it
    return env


def _shorten(script):
    lines = []
    for line in script.splitlines():
        for config, extra in SHORTENED.items():
            if re.search(r"(rnn\.py|returnn_lite\.launch .*) %s\b" % re.escape(config), line) and "++task" not in line:
                line = re.sub(r"\s+#.*$", "", line) + " " + extra  # a comment would swallow the arguments
        lines.append(line)
    return "\n".join(lines)


def _run(command, root, user, expect_status=0):
    proc = subprocess.run(["bash", "-c", "set -e\n" + _shorten(command)], cwd=root, env=_env(root, user),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == expect_status, "%s\nexit status %i\nstdout:\n%s\nstderr:\n%s" % (
        _shorten(command), proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


_done_needs = set()


def _transcript(text):
    """[(command, [output lines])] of a '$ command' transcript."""
    steps = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip() and line.strip() != "...":
            steps[-1][1].append(line)
    return steps


def _block_id(block):
    line, lang, text = block
    return "line%i-%s" % (line, lang or "sh")


@pytest.mark.parametrize("block", BLOCKS, ids=[_block_id(b) for b in BLOCKS])
def test_readme_block(block, shell_dir):
    _, lang, text = block
    for substring, reason in SKIPPED.items():
        if substring in text:
            pytest.skip(reason)
    if lang == "python":
        return _run_python(text)
    needs = [cmds for substring, cmds in NEEDS.items() if substring in text]
    user = SHARED_USER if needs else "readme-%s" % uuid.uuid4().hex[:8]
    try:
        for command in (c for cmds in needs for c in cmds):
            if command not in _done_needs:
                _run(command, shell_dir, user)
                _done_needs.add(command)
        if text.lstrip().startswith("$ "):
            for command, output in _transcript(text):
                status = 1 if any(line.startswith("differs:") for line in output) else 0
                proc = _run(command, shell_dir, user, expect_status=status)
                for line in output:
                    assert line.split()[0] in proc.stdout, (command, line, proc.stdout)
        else:
            _run(text, shell_dir, user)
    finally:
        if user != SHARED_USER:
            shutil.rmtree("/tmp/%s" % user, ignore_errors=True)


def _run_python(text):
    prelude = [_find(s) for key, subs in PYTHON_CONTINUES.items() if key in text for s in subs]
    code = "\n".join("exec(compile(%r, 'README.md block %i', 'exec'))" % (block, i)
                     for i, block in enumerate(prelude + [text]))
    with tempfile.TemporaryDirectory() as cwd:
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   RETURNN_LITE_NATIVE_OPS="0")
        proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=600)
    assert proc.returncode == 0, "stdout:\n%s\nstderr:\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:])


def test_every_block_is_covered():
    """Each skip / need / continuation names one block that exists (no stale entries)."""
    for substring in list(SKIPPED) + list(NEEDS) + list(PYTHON_CONTINUES) + \
            [s for subs in PYTHON_CONTINUES.values() for s in subs]:
        _find(substring)
    assert len(BLOCKS) >= 10
