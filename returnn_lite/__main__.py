"""
Command line: ``python rnn.py CONFIG [++key value ...]`` (or ``returnn-lite``, ``python -m returnn_lite``).

Runs the config's ``task`` (``train`` by default, ``eval``, ``forward``). ``++key value`` overrides a config
value after the file is loaded (Python literals are parsed: ``++num_epochs 3``, ``++learning_rate 0.001``).
Errors in the setup (config, datasets, network, model files) print one clear message and exit with status 1.
"""

from __future__ import annotations

import sys

USAGE = """usage: rnn.py [--debug] CONFIG [CONFIG ...] [++key value ...]

Runs the task of a RETURNN config (task = "train" | "eval" | "forward").
  ++key value   override a config value (e.g. ++num_epochs 3 ++task eval)
  --debug       show the Python traceback of an error (also with log_verbosity >= 5)
  --workers N   distributed training with N local workers (see python -m returnn_lite.launch --help)
Resuming: rerunning the same training command continues after the last saved epoch.
"""


def _split_args(argv):
    """(config files, override args)."""
    files, overrides = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("++"):
            overrides.append(arg)
            if "=" not in arg and i + 1 < len(argv):
                overrides.append(argv[i + 1])
                i += 1
        else:
            files.append(arg)
        i += 1
    return files, overrides


def main(argv=None):
    """Entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if any(a == "--workers" or a.startswith("--workers=") for a in argv):  # distributed: returnn_lite.launch
        from .launch import main as launch_main

        return launch_main(argv)
    files, overrides = _split_args(argv)
    debug = "--debug" in files
    files = [f for f in files if f != "--debug"]
    bad = [f for f in files if f.startswith("-")]
    if bad:
        print("rnn.py: error: unknown option %s (overrides are given as ++key value)\n%s" % (bad[0], USAGE),
              file=sys.stderr)
        return 2
    if not files:
        print("rnn.py: error: no config file given\n%s" % USAGE, file=sys.stderr)
        return 2

    from .tf_startup import configure_cli_log_level, import_tensorflow

    configure_cli_log_level()
    if not _torch_backend_requested(overrides):
        try:
            import_tensorflow()  # first (a config may import it too), so that its import-time log lines are filtered
        except ImportError:
            pass  # a PyTorch-only install: the torch backend needs no TF, the TF backend says what is missing
    from .config import Config, ConfigError, global_config_ctx

    try:
        config = Config()
        for filename in files:
            config.load_file(filename)
        config.parse_cmd_args(overrides)
        config.cmd_line_keys = {a[2:].split("=", 1)[0] for a in overrides if a.startswith("++")}
        with global_config_ctx(config):
            return _run(config, debug=debug)
    except KeyboardInterrupt:
        print("\nrnn.py: interrupted", file=sys.stderr)
        return 130
    except ConfigError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        print("rnn.py: error: %s" % _one_line(exc), file=sys.stderr)
        return 1


def _torch_backend_requested(overrides):
    """``++backend torch`` on the command line (then TF is not imported up front)."""
    for i, arg in enumerate(overrides):
        if arg in ("++backend", "--backend") and i + 1 < len(overrides):
            return overrides[i + 1].strip("'\"") == "torch"
        if arg.startswith(("++backend=", "--backend=")):
            return arg.split("=", 1)[1].strip("'\"") == "torch"
    return False


def _one_line(exc):
    """The message on one line (TF errors carry graph dumps and tracebacks in theirs)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 or len(lines[0]) > 40 else " ".join(lines[:3])
    return text if len(text) <= 1000 else text[:1000] + "..."


def _verbosity(config):
    try:
        return int(config.value("log_verbosity", 3) or 3)
    except (TypeError, ValueError):
        return 3


def _expected_errors():
    from .config import ConfigError
    from .datasets import DatasetError
    from .engine import EngineError, LearningRateFileError, UpdaterError
    from .errors import NetworkError

    return (ConfigError, DatasetError, EngineError, UpdaterError, NetworkError, LearningRateFileError)


def _run(config, debug=False):
    from .engine import Engine

    expected = _expected_errors()
    show_traceback = debug or _verbosity(config) >= 5
    try:
        Engine(config).run()
    except Exception as exc:  # one line; the traceback only with --debug / log_verbosity >= 5
        if show_traceback:
            import traceback

            traceback.print_exc()
        if isinstance(exc, expected):
            print("rnn.py: error: %s" % _one_line(exc), file=sys.stderr)
        else:
            print("rnn.py: error: %s: %s" % (type(exc).__name__, _one_line(exc)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
