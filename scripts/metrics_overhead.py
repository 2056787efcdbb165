#!/usr/bin/python3
"""Measures what the run metrics cost: the quickstart job (Crossover-SGD, 4
processes over zmq on loopback) with run.metrics on and off, interleaved
round by round, the median training step time of each and their ratio. The
step time is 1 / steps_per_second of gossamer-train's summary (training
steps only, mean over the ranks). Ranks are bound to cores (--bind core) so
that where the scheduler puts them does not decide the comparison. A third variant, "all off", also turns off
the stall report (run.stall_seconds 0), for reference.

Run through scripts/metrics-overhead.sh (which builds first).
Writes results/metrics-overhead.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
TRAIN = os.path.join(BUILD, "apps", "gossamer-train")
CONFIG = os.path.join(ROOT, "examples", "configs", "quickstart-crossover.yaml")
RESULTS = os.path.join(ROOT, "results")
WORK = os.path.join(RESULTS, "metrics-overhead")
VARIANTS = {
    "metrics on": ["run.metrics=true"],
    "metrics off": ["run.metrics=false"],
    "all off": ["run.metrics=false", "run.stall_seconds=0"],
}


def run(name, args, round_):
    """One job; returns (seconds per training step, wall seconds)."""
    tag = name.replace(" ", "-")
    out = os.path.join(WORK, f"{tag}-{round_}.json")
    log = os.path.join(WORK, f"{tag}-{round_}.log")
    cmd = [TRAIN, "--config", CONFIG, "--summary-json", out, "--bind", args.bind,
           "--set", f"training.epochs={args.epochs}",
           "--set", f"run.dir={os.path.join(WORK, 'runs', f'{tag}-{round_}')}"]
    for kv in VARIANTS[name] + args.set:
        cmd += ["--set", kv]
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout)
    if proc.returncode != 0:
        sys.stderr.write(open(log).read())
        raise SystemExit(f"gossamer-train ({name}) failed ({proc.returncode}); log: {log}")
    with open(out) as f:
        s = json.load(f)
    return 1.0 / s["steps_per_second"], s["wall_seconds"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per job (default 3, the quickstart's)")
    p.add_argument("--bind", choices=["core", "none"], default="core",
                   help="gossamer-train --bind: core (default) pins rank r to CPU r mod C, which removes the "
                        "scheduler's placement from the comparison")
    p.add_argument("--timeout", type=float, default=600, help="seconds per job")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE for every job (repeatable)")
    args = p.parse_args()
    if args.rounds < 1 or args.epochs < 1:
        p.error("--rounds and --epochs must be at least 1")
    os.makedirs(WORK, exist_ok=True)
    step = {n: [] for n in VARIANTS}
    for r in range(args.rounds):
        # Alternate the order so neither side always runs first.
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
        for n in order:
            s, _ = run(n, args, r)
            step[n].append(s)
        print(f"round {r + 1}/{args.rounds}: " +
              "  ".join(f"{n} {step[n][-1] * 1e3:.3f} ms/step" for n in VARIANTS), flush=True)
    med = {n: statistics.median(v) for n, v in step.items()}
    base = med["metrics off"]
    rows = []
    print(f"\n{'variant':<13}{'median ms/step':>16}{'min':>9}{'max':>9}{'vs metrics off':>16}")
    for n in VARIANTS:
        ratio = med[n] / base
        print(f"{n:<13}{med[n] * 1e3:>16.3f}{min(step[n]) * 1e3:>9.3f}{max(step[n]) * 1e3:>9.3f}{ratio:>16.4f}")
        rows.append({"variant": n, "median_seconds_per_step": med[n], "seconds_per_step": step[n],
                     "ratio_to_metrics_off": ratio})
    overhead = med["metrics on"] / base - 1
    print(f"\nmetrics overhead: {overhead * 100:+.2f}% of step time (median of {args.rounds} interleaved rounds)")
    result = {"config": os.path.relpath(CONFIG, ROOT), "epochs": args.epochs, "rounds": args.rounds,
              "bind": args.bind,
              "rows": rows, "metrics_overhead_fraction": overhead}
    path = os.path.join(RESULTS, "metrics-overhead.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
