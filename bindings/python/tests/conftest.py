"""Shared helpers of the Python suite: start N ranks as processes of this
interpreter on loopback, each running one script, with every wait bounded."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SOURCE_DIR = os.environ.get(
    "GOSSAMER_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
)


class Ranks:
    """The finished processes of one job: .codes, .out (stdout), .err, and
    .results, each rank's last stdout line parsed as JSON (None if absent)."""

    def __init__(self, procs, outs):
        self.codes = [p.returncode for p in procs]
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


@pytest.fixture
def run_ranks(tmp_path):
    """run_ranks(n, script, env=None, timeout=120, per_rank_env=None) runs
    `script` (Python source; the environment names the rank) in n processes
    with RANK/WORLD_SIZE set and a fresh rendezvous directory."""

    jobs = []

    def run(n, script, env=None, timeout=120, per_rank_env=None, launcher_vars=True):
        # Each job of a test its own script and rendezvous: a second job must
        # not meet the first one's addresses in the store.
        jobs.append(n)
        path = tmp_path / f"rank_script_{len(jobs)}.py"
        path.write_text(textwrap.dedent(script))
        rendezvous = tmp_path / f"rendezvous_{len(jobs)}"
        procs = []
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
            procs.append(subprocess.Popen([sys.executable, str(path)], env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=timeout))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
        return Ranks(procs, outs)

    return run
