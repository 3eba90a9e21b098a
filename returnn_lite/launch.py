"""
Start N local workers of a distributed training: ``python -m returnn_lite.launch --workers N CONFIG [...]``
(or ``returnn-lite --workers N CONFIG ...``).

Each worker is ``python -m returnn_lite CONFIG ...`` with its own ``TF_CONFIG`` (all workers on free loopback
ports of 127.0.0.1). Their output is forwarded line by line with a ``[rank r]`` prefix. If one worker fails
(exit status != 0, killed), the others are ended (SIGTERM, then SIGKILL after a grace period) and the launch
exits with that worker's status; ``--timeout SECONDS`` ends the whole run after that long. Rerunning the same
launch resumes from the last checkpoint (rank 0 writes them).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from .tf_startup import ENV_LEVEL, user_log_level

USAGE = """usage: python -m returnn_lite.launch --workers N [--timeout SECONDS] CONFIG [CONFIG ...] [++key value ...]

Starts N local worker processes (loopback ports, TF_CONFIG each) of a distributed training
(horovod_reduce_type / horovod_dataset_distribution or distributed = {...} in the config).
"""

GRACE_S = 5.0


def free_ports(n, host="127.0.0.1"):
    """n distinct free TCP ports on ``host``."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def worker_env(workers, rank, base=None):
    env = dict(os.environ if base is None else base)
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}})
    if base is None and user_log_level() is None:  # the workers use the CLI's default (tf_startup.py)
        env.pop(ENV_LEVEL, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _forward(stream, rank, out, lock):
    for line in iter(stream.readline, b""):
        with lock:
            out.write("[rank %i] %s" % (rank, line.decode("utf-8", "replace")))
            out.flush()
    stream.close()


def _end_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except OSError:
                pass
    deadline = time.time() + GRACE_S
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(num_workers, args, timeout=None, out=None, python=None):
    """Run the workers; returns the exit status (0: all succeeded)."""
    out = out or sys.stdout
    workers = ["127.0.0.1:%i" % p for p in free_ports(num_workers)]
    lock = threading.Lock()
    procs, threads = [], []
    cmd = [python or sys.executable, "-m", "returnn_lite"] + list(args)
    try:
        for rank in range(num_workers):
            p = subprocess.Popen(cmd, env=worker_env(workers, rank), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            procs.append(p)
            t = threading.Thread(target=_forward, args=(p.stdout, rank, out, lock), daemon=True)
            t.start()
            threads.append(t)
        start = time.time()
        status = 0
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                with lock:
                    out.write("launch: worker %i failed (%s); ending the other workers\n" % (
                        rank, "killed by signal %i" % -code if code < 0 else "exit status %i" % code))
                    out.flush()
                status = code if code > 0 else 1
                break
            if all(c == 0 for c in codes):
                break
            if timeout and time.time() - start > timeout:
                with lock:
                    out.write("launch: timeout after %g s; ending the workers\n" % timeout)
                    out.flush()
                status = 124
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        status = 130
    finally:
        _end_all(procs)
        for t in threads:
            t.join(2.0)
    return status


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    num_workers, timeout, rest = None, None, []
    i = 0
    try:
        while i < len(argv):
            arg = argv[i]
            if arg in ("-h", "--help"):
                print(USAGE)
                return 0
            if arg == "--workers" or arg.startswith("--workers="):
                value = arg.split("=", 1)[1] if "=" in arg else argv[i + 1]
                i += 0 if "=" in arg else 1
                num_workers = int(value)
            elif arg == "--timeout" or arg.startswith("--timeout="):
                value = arg.split("=", 1)[1] if "=" in arg else argv[i + 1]
                i += 0 if "=" in arg else 1
                timeout = float(value)
            else:
                rest.append(arg)
            i += 1
    except (IndexError, ValueError):
        print("launch: error: --workers N and --timeout SECONDS need a number\n" + USAGE, file=sys.stderr)
        return 2
    if not num_workers or num_workers < 1:
        print("launch: error: --workers N (N >= 1) is required\n" + USAGE, file=sys.stderr)
        return 2
    if not rest:
        print("launch: error: no config file given\n" + USAGE, file=sys.stderr)
        return 2
    return launch(num_workers, rest, timeout=timeout)


if __name__ == "__main__":
    sys.exit(main())
