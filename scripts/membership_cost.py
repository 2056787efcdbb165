#!/usr/bin/python3
"""What the membership service (on by default) costs in training speed.

Runs gossamer-train (8 peer processes over ZeroMQ on loopback, the
Fashion-MNIST MLP) with membership.enabled true and false, interleaved, for
each algorithm, and prints the survivors' mean steps per second (evaluation
excluded): medians over the repetitions and their ratio. Writes
results/membership-cost.json.

Usage: scripts/membership-cost.sh [--reps 3] [--epochs 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {
    "crossover": "examples/configs/quickstart-crossover.yaml",
    "sgp": "examples/configs/sgp.yaml",
    "allreduce": "examples/configs/quickstart-allreduce.yaml",
}


def steps_per_second(binary, config, epochs, membership, timeout):
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [binary, "--config", os.path.join(ROOT, config), "--summary-json", summary, "--set", "world_size=8",
               "--set", f"training.epochs={epochs}", "--set", f"membership.enabled={str(membership).lower()}"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        with open(summary) as f:
            return json.load(f)["steps_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/apps/gossamer-train"))
    ap.add_argument("--algorithms", default=",".join(CONFIGS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600, help="bound on each run, seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/membership-cost.json"))
    args = ap.parse_args()

    algos = args.algorithms.split(",")
    runs = {(a, m): [] for a in algos for m in (False, True)}
    for _ in range(args.reps):
        for a in algos:
            for m in (False, True):
                runs[(a, m)].append(steps_per_second(args.binary, CONFIGS[a], args.epochs, m, args.timeout))
    rows = []
    print(f"{'algorithm':10} {'off st/s':>9} {'on st/s':>8} {'on/off':>7}")
    for a in algos:
        off, on = statistics.median(runs[(a, False)]), statistics.median(runs[(a, True)])
        rows.append({"algorithm": a, "config": CONFIGS[a], "steps_per_second_off": off, "steps_per_second_on": on,
                     "ratio": on / off, "runs_off": runs[(a, False)], "runs_on": runs[(a, True)]})
        print(f"{a:10} {off:9.1f} {on:8.1f} {on / off:7.3f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "reps": args.reps,
                   "epochs": args.epochs, "rows": rows}, fh, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
