"""Shared helpers of the Python suite: start N ranks as processes on loopback,
each running one script, with every wait bounded.

A script that imports torch runs in ranks forked from one multiprocessing
forkserver that has imported NumPy, torch and gossamer once (torch's import
alone takes about 1.7 s of CPU here) instead of in N interpreters importing
them each; the forkserver is a fresh single-threaded process, so forking it is
safe. Other scripts run in fresh interpreters, which start faster than the
forkserver's torch import."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import forked_rank

SOURCE_DIR = os.environ.get(
    "GOSSAMER_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
)

# A fresh interpreter's rank runs its script as __main__, its directory first
# on sys.path as under `python script`, and SIGUSR1 writes every thread's
# Python stack to its stderr (as forked_rank.main does for the forked ones).
_LAUNCH = ("import faulthandler, os, runpy, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
           "sys.argv = sys.argv[1:]; sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0])); "
           "runpy.run_path(sys.argv[0], run_name='__main__')")

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["numpy", "torch", "gossamer", "gossamer.torch"])


class Ranks:
    """The finished processes of one job: .codes (exit codes, -N for signal
    N), .out (stdout), .err, and .results, each rank's last stdout line
    parsed as JSON (None if absent)."""

    def __init__(self, codes, outs):
        self.codes = codes
        self.out = [o[0] for o in outs]
        self.err = [o[1] for o in outs]
        self.results = []
        for text in self.out:
            lines = [l for l in text.splitlines() if l.strip()]
            try:
                self.results.append(json.loads(lines[-1]) if lines else None)
            except json.JSONDecodeError:
                self.results.append(None)

    def check(self):
        for r, code in enumerate(self.codes):
            assert code == 0, f"rank {r} exited {code}:\n{self.err[r]}\n{self.out[r]}"
        return self


def _await_listening(port, proc, forked, limit=20.0):
    """Waits (at most `limit` seconds, or until `proc` exits) until a socket
    listens on TCP `port` (any address, IPv4 or IPv6), read from /proc/net
    without connecting. Rank 0 serves torch's TCPStore there; a client that
    finds nothing listening retries only after a second, so the other ranks
    start once it is up."""
    suffix = f":{port:04X}"
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and (proc.exitcode if forked else proc.poll()) is None:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                rows = [l.split() for l in list(f)[1:]]
            if any(row[1].endswith(suffix) and row[3] == "0A" for row in rows):
                return
        time.sleep(0.005)


@pytest.fixture
def run_ranks(tmp_path):
    """run_ranks(n, script, env=None, timeout=120, per_rank_env=None) runs
    `script` (Python source; the environment names the rank) in n processes
    with RANK/WORLD_SIZE set and a fresh rendezvous directory; a rank still
    running after `timeout` seconds writes its threads' Python stacks to its
    stderr and is killed (exit code -9)."""

    jobs = []

    def run(n, script, env=None, timeout=120, per_rank_env=None, launcher_vars=True):
        # Each job of a test its own script and rendezvous: a second job must
        # not meet the first one's addresses in the store.
        jobs.append(n)
        job = len(jobs)
        path = tmp_path / f"rank_script_{job}.py"
        path.write_text(textwrap.dedent(script))
        forked = "torch" in script
        rendezvous = tmp_path / f"rendezvous_{job}"
        procs, files = [], []
        for r in range(n):
            e = dict(os.environ)
            for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                      "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "GOSSAMER_RENDEZVOUS"):
                e.pop(k, None)
            if launcher_vars:
                e.update({"RANK": str(r), "WORLD_SIZE": str(n), "GOSSAMER_RENDEZVOUS": str(rendezvous)})
            e.setdefault("OMP_NUM_THREADS", "1")
            if env:
                e.update(env)
            if per_rank_env:
                e.update(per_rank_env(r))
            out, err = tmp_path / f"job{job}_rank{r}.out", tmp_path / f"job{job}_rank{r}.err"
            files.append((out, err))
            if forked:
                p = _CONTEXT.Process(target=forked_rank.main, args=(str(path), e, str(out), str(err)))
                p.start()
            else:
                with open(out, "w") as o, open(err, "w") as w:
                    p = subprocess.Popen([sys.executable, "-c", _LAUNCH, str(path)], env=e, stdout=o, stderr=w)
            procs.append(p)
            if r == 0 and n > 1 and "MASTER_PORT" in (env or {}):
                _await_listening(int(env["MASTER_PORT"]), procs[0], forked)
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                left = max(0.0, deadline - time.monotonic())
                if forked:
                    p.join(left)
                else:
                    try:
                        p.wait(left)
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            late = [p for p in procs if (p.exitcode if forked else p.poll()) is None]
            if late:  # each writes its threads' Python stacks to its .err first
                for p in late:
                    try:
                        os.kill(p.pid, signal.SIGUSR1)
                    except ProcessLookupError:  # it ended meanwhile
                        pass
                time.sleep(1.0)
            for p in late:
                p.kill()
                p.join(10) if forked else p.wait(10)
        outs = [(out.read_text(), err.read_text()) for out, err in files]
        return Ranks([p.exitcode if forked else p.returncode for p in procs], outs)

    return run
