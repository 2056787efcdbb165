"""Shared helpers of the Python suite: start N ranks as processes on loopback,
each running one script, with every wait bounded.

A script that imports torch runs in ranks forked from one multiprocessing
forkserver that has imported NumPy, torch and gossamer once (torch's import
alone takes about 1.7 s of CPU here) instead of in N interpreters importing
them each; the forkserver is a fresh single-threaded process, so forking it is
safe. Other scripts run in fresh interpreters, which start faster than the
forkserver's torch import."""

import errno
import json
import multiprocessing
import os
import random
import signal
import socket
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


def free_loopback_port():
    """A TCP port free on 127.0.0.1, for a rendezvous server rank 0 binds
    later: drawn below the kernel's ephemeral range (ip_local_port_range), so
    no outgoing connection or port-0 bind takes it meanwhile; another drawn if
    one is taken."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    high = min(ephemeral, 32768)
    low = max(1024, high - 12000)
    for _ in range(100):
        port = random.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                continue
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {low}..{high - 1} after 100 tries")


@pytest.fixture
def loopback_port():
    """A TCP port free on 127.0.0.1 below the ephemeral range (free_loopback_port)."""
    return free_loopback_port()


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
