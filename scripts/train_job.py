"""One gossamer-train job for the comparison scripts (compare_gossip.py,
compare_diloco.py, compare_half.py): runs it, bounded, and returns its summary."""
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
TRAIN = os.path.join(BUILD, "apps", "gossamer-train")


def train(tag, config, work, overrides=(), timeout=1800):
    """Runs gossamer-train on the YAML file `config` with `--set` `overrides`,
    its summary in WORK/TAG.json and its run directory WORK/runs/TAG (made
    anew). Prints the elapsed seconds to stderr; returns (summary dict,
    elapsed seconds, data loading included).

    Raises SystemExit with the job's output if it exits non-zero, and
    subprocess.TimeoutExpired after `timeout` seconds.
    """
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, tag + ".json")
    run_dir = os.path.join(work, "runs", tag)
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [TRAIN, "--config", config, "--summary-json", out, "--set", f"run.dir={run_dir}"]
    for o in overrides:
        cmd += ["--set", o]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"run {tag} failed (exit {proc.returncode})")
    with open(out) as f:
        summary = json.load(f)
    print(f"  {tag}: {elapsed:.1f} s", file=sys.stderr, flush=True)
    return summary, elapsed
