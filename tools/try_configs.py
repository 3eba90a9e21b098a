#!/usr/bin/env python3
"""
Try to construct every RETURNN config in a folder (real published setups kept outside the repo):

    python tools/try_configs.py /tmp/realcfg [--timeout 120] [-v]

Each config runs in a subprocess: it is loaded with returnn_lite.config.Config (as rnn.py does), and the network
of epoch 1 (and of the first epoch after pretraining, when there is pretraining) is built in a fresh graph with
train_flag=True, with its losses.  Datasets are not needed.  Each config is classified as

    build   the network(s) built
    clean   one clear error line (a ConfigError / NetworkError / ... of returnn_lite)
    raw     any other exception (a bare TF/Python error: a bug to fix), a crash or a timeout

and a summary with counts is printed at the end.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, sys, traceback
sys.path.insert(0, %(root)r)
result = {"status": "raw", "msg": ""}
def clean_types():
    import returnn_lite.config as c, returnn_lite.network as n, returnn_lite.pretrain as p
    types = [c.ConfigError, n.NetworkError, p.PretrainError]
    try:
        from returnn_lite.datasets import DatasetError
        types.append(DatasetError)
    except ImportError:
        pass
    try:
        from returnn_lite.engine import EngineError, UpdaterError
        types += [EngineError, UpdaterError]
    except ImportError:
        pass
    return tuple(types)
try:
    from returnn_lite.config import Config, global_config_ctx
    from returnn_lite.network import TFNetwork
    from returnn_lite.pretrain import get_net_dict_for_epoch, pretrain_from_config
    import tensorflow as tf
    config = Config()
    config.load_file(%(path)r)
    with global_config_ctx(config):
        pretrain = pretrain_from_config(config)
        epochs = [1]
        if pretrain is not None:
            epochs.append(pretrain.get_train_num_epochs() + 1)
        n_layers = []
        for epoch in epochs:
            net_dict = get_net_dict_for_epoch(config, epoch, pretrain=pretrain)
            graph = tf.Graph()
            with graph.as_default():
                net = TFNetwork(config=config, train_flag=True, eval_flag=False, search_flag=False)
                net.construct_from_dict(net_dict)
                net.get_objective()
                n_layers.append(len(net.layers))
    result = {"status": "build", "msg": "epochs %%s, layers %%s" %% (epochs, n_layers)}
except BaseException as exc:
    clean = isinstance(exc, clean_types())
    lines = [l for l in str(exc).splitlines() if l.strip()]
    msg = "%%s: %%s" %% (type(exc).__name__, lines[0] if lines else "")
    result = {"status": "clean" if clean and len(lines) <= 1 else "raw", "msg": msg[:400]}
    if not clean:
        result["tb"] = traceback.format_exc()[-3000:]
print("@@RESULT@@" + json.dumps(result))
"""


def try_config(path, timeout, verbose=False):
    code = _CHILD % {"root": ROOT, "path": os.path.abspath(path)}
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=os.path.dirname(os.path.abspath(path)))
    except subprocess.TimeoutExpired:
        return {"status": "raw", "msg": "timeout after %is" % timeout}
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            return json.loads(line[len("@@RESULT@@"):])
    return {"status": "raw", "msg": "crash (exit %s): %s" % (proc.returncode, proc.stderr.strip()[-300:])}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of raw errors")
    args = parser.parse_args()
    paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(args.folder) for f in fs
                   if f.endswith(".config") or f.endswith(".py"))
    counts = {"build": 0, "clean": 0, "raw": 0}
    for path in paths:
        res = try_config(path, args.timeout, args.verbose)
        counts[res["status"]] += 1
        print("%-5s %s: %s" % (res["status"], os.path.relpath(path, args.folder), res["msg"]), flush=True)
        if args.verbose and res.get("tb"):
            print(res["tb"])
    print("total %i: build %i, clean %i, raw %i" % (len(paths), counts["build"], counts["clean"], counts["raw"]))


if __name__ == "__main__":
    main()
