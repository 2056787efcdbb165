#!/usr/bin/python3
"""A program's 4 ranks as processes on loopback; rank 2 is killed with
SIGKILL once rank 0 has reported some progress, and the other three must
finish through their gossamer::Session: exit 0, report the lost rank and a
model that learnt.

    kill_one_rank.py embed  EMBED_TRAIN     SOURCE_DIR
    kill_one_rank.py sparse GOSSAMER_SPARSE SOURCE_DIR
    kill_one_rank.py admm   GOSSAMER_ADMM   SOURCE_DIR

sparse and admm need the SpamAssassin files (scripts/spam-data.sh): without
them the script says so and exits 77 (ctest: skipped). Every wait is bounded;
the ranks are killed on any way out of the script: a failure, SIGTERM or
SIGINT, and (through PR_SET_PDEATHSIG) its own death by SIGKILL, ctest's
TIMEOUT.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from child_processes import dies_with

SKIP = 77
VICTIM = 2
MEMBERSHIP = ["--set", "membership.heartbeat_seconds=0.1", "--set", "membership.suspect_seconds=1.5",
              "--set", "transport.timeout_seconds=20", "--set", 'run.dir=""']


def spam_data(src):
    data = os.path.join(os.environ.get("GOSSAMER_DATA_DIR", os.path.join(src, "data")), "spam")
    train, test = (os.path.join(data, f"spam-{p}.libsvm") for p in ("train", "test"))
    if not (os.path.isfile(train) and os.path.isfile(test)):
        print(f"no {data}/spam-{{train,test}}.libsvm (run scripts/spam-data.sh): skipped")
        sys.exit(SKIP)
    return train, test


def commands(kind, exe, src, work):
    """(argv of rank r, the line of rank 0's output after which to kill)."""
    rdv = os.path.join(work, "rdv")
    if kind == "embed":
        config = os.path.join(src, "examples", "embed", "peer.yaml")
        return (lambda r: [exe, config, str(r), rdv]), "epoch 3/"
    train, test = spam_data(src)
    if kind == "sparse":
        config = os.path.join(src, "examples", "configs", "sparse", "sparse-sync.yaml")
        sets = ["--set", "world_size=4", "--set", "sparse.epochs=12", "--set", "sparse.batch_size=32",
                "--set", "sparse.factors=4", "--set", f"sparse.train={train}", "--set", f"sparse.test={test}"]
        trigger = "epoch 2/"
    else:
        config = os.path.join(src, "examples", "configs", "sparse", "admm-spam.yaml")
        sets = ["--set", "world_size=4", "--set", "admm.max_iterations=12", "--set",
                f"admm.train={train}", "--set", f"admm.test={test}"]
        trigger = "iter   3"
    return (lambda r: [exe, "--config", config, "--rank", str(r), "--rendezvous", rdv, "--summary-json",
                       os.path.join(work, f"summary{r}.json")] + sets + MEMBERSHIP), trigger


def wait_for(path, text, procs, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        if any(p.poll() is not None for p in procs):
            raise AssertionError(f"a rank ended before rank 0 printed {text!r}")
        time.sleep(0.05)
    raise AssertionError(f"rank 0 did not print {text!r} within {seconds} s")


def check(kind, work, outs, codes):
    for r in (0, 1, 3):
        assert codes[r] == 0, f"rank {r} exited with {codes[r]}:\n{outs[r]}"
    if kind == "embed":
        for r in (0, 1, 3):
            assert f"rank {r}: done after 1000 steps, 3 ranks left" in outs[r], outs[r]
        return "every survivor trained its 1000 steps in the view of 3 ranks"
    summaries = [s for s in (os.path.join(work, f"summary{r}.json") for r in (0, 1, 3)) if os.path.exists(s)]
    assert len(summaries) == 1, f"one summary, by the lowest survivor: {summaries}"
    with open(summaries[0]) as f:
        s = json.loads(f.readline())
    assert s["lost"] == [VICTIM] and s["survivors"] == [0, 1, 3], s
    assert s["test_accuracy"] > 0.9, s
    return f"lost {s['lost']}, test accuracy {100 * s['test_accuracy']:.2f}%"


def read(logs):
    out = []
    for f in logs:
        f.flush()
        with open(f.name, errors="replace") as g:
            out.append(g.read())
    return out


def stop(procs):
    """SIGKILL to every rank still running; waits for each at most 30 s."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            print(f"rank process {p.pid} did not end 30 s after SIGKILL", file=sys.stderr)


def main():
    kind, exe, src = sys.argv[1:4]
    # SIGTERM and SIGINT end the script through the finally below.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory() as work:
        argv, trigger = commands(kind, exe, src, work)
        logs = [open(os.path.join(work, f"out{r}"), "w+") for r in range(4)]
        procs = []
        codes = [None] * 4
        try:
            # TMPDIR: what the killed rank leaves there (ZeroMQ's ipc:// directories) goes with `work`.
            env = dict(os.environ, TMPDIR=work)
            for r in range(4):
                procs.append(subprocess.Popen(argv(r), stdout=logs[r], stderr=subprocess.STDOUT, env=env,
                                              preexec_fn=dies_with(os.getpid(), signal.SIGKILL)))
            wait_for(logs[0].name, trigger, procs, 120)
            procs[VICTIM].send_signal(signal.SIGKILL)
            deadline = time.monotonic() + 240  # for the 4 together
            codes = [p.wait(timeout=max(0.0, deadline - time.monotonic())) for p in procs]
            print(f"{kind}: {check(kind, work, read(logs), codes)}")
        except (AssertionError, subprocess.TimeoutExpired):
            stop(procs)
            for r, out in enumerate(read(logs)):
                print(f"--- rank {r} (exit {procs[r].returncode}):\n{out[-3000:]}")
            raise
        finally:
            stop(procs)


if __name__ == "__main__":
    main()
