"""Runs the ranks of the C training program (bindings/c/examples/
train_fashion_mnist.c) as processes and collects what each printed last."""
import json
import subprocess
import sys
from typing import List


def run_ranks(commands: List[List[str]], timeout: float) -> List[dict]:
    """Starts one process per command (rank r: commands[r]), waits for each
    at most ``timeout`` seconds, and returns the JSON object each printed on
    its last line, by rank. A rank that exits with a status other than 0
    ends this script (sys.exit naming the rank and its stderr); processes
    still running then are killed and reaped."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    results = []
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout)
            if p.returncode != 0:
                sys.exit(f"rank {r} exited {p.returncode}: {err}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results
