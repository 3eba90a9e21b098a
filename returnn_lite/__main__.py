"""
Command line: ``python rnn.py CONFIG [++key value ...]`` (or ``returnn-lite``, ``python -m returnn_lite``).

Runs the config's ``task`` (``train`` by default, ``eval``, ``forward``). ``++key value`` overrides a config
value after the file is loaded (Python literals are parsed: ``++num_epochs 3``, ``++learning_rate 0.001``).
Errors in the setup (config, datasets, network, model files) print one clear message and exit with status 1.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

USAGE = """usage: rnn.py CONFIG [CONFIG ...] [++key value ...]

Runs the task of a RETURNN config (task = "train" | "eval" | "forward").
  ++key value   override a config value (e.g. ++num_epochs 3 ++task eval)
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
    files, overrides = _split_args(argv)
    bad = [f for f in files if f.startswith("-")]
    if bad:
        print("rnn.py: error: unknown option %s (overrides are given as ++key value)\n%s" % (bad[0], USAGE),
              file=sys.stderr)
        return 2
    if not files:
        print("rnn.py: error: no config file given\n%s" % USAGE, file=sys.stderr)
        return 2

    from .config import Config, ConfigError, global_config_ctx

    try:
        config = Config()
        for filename in files:
            config.load_file(filename)
        config.parse_cmd_args(overrides)
        with global_config_ctx(config):
            return _run(config)
    except KeyboardInterrupt:
        print("\nrnn.py: interrupted", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print("rnn.py: config error: %s" % exc, file=sys.stderr)
        return 1


def _expected_errors():
    from .datasets import DatasetError
    from .engine import EngineError, LearningRateFileError, UpdaterError
    from .network import NetworkError

    return (DatasetError, EngineError, UpdaterError, NetworkError, LearningRateFileError)


def _run(config):
    from .engine import Engine

    expected = _expected_errors()
    try:
        Engine(config).run()
    except expected as exc:
        print("rnn.py: error: %s" % exc, file=sys.stderr)
        return 1
    except Exception as exc:  # unexpected: keep the traceback for debugging, end with one clear line
        import traceback

        traceback.print_exc()
        print("rnn.py: error: %s: %s" % (type(exc).__name__, exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
