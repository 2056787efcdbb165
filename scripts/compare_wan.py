#!/usr/bin/python3
"""Trains Fashion-MNIST on two islands of test hosts (tests/hosts: network
namespaces, 10 Gbit/s inside an island, 100 Mbit/s and 20 ms between) with
each algorithm in turn, and prints, per algorithm, the time to a target test
accuracy, the final accuracy and the bytes that crossed the slow link.
Writes results/compare-wan.json: one row per algorithm with algorithm,
seconds_to_target (null if never reached), target_accuracy, final_accuracy,
slow_link_bytes, hosts, plus the run's seconds per epoch and wall time.

The time to target is the training time (the sum of the epochs' seconds, as
gossamer-train reports them) up to the end of the first epoch whose average
model reaches the target: accuracy is measured once per epoch. Runs go one
after the other (8 ranks on this machine's cores would not share fairly).
Needs root for the namespaces (scripts/hosts.sh); exits 77 where they cannot
be made.

    scripts/compare-wan.sh                          # every algorithm, 6 epochs
    scripts/compare-wan.sh --algorithms allreduce_ring,crossover_uniform --epochs 2
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (config, overrides). Every run also gets the spec's network section
# and island delay from scripts/hosts.sh.
ALGORITHMS = {
    "allreduce_ring": ("examples/configs/quickstart-allreduce.yaml", ["collectives.allreduce=ring"]),
    "allreduce_hierarchical": ("examples/configs/quickstart-allreduce.yaml",
                               ["collectives.allreduce=hierarchical", "collectives.group_size=4"]),
    "crossover_uniform": ("examples/configs/quickstart-crossover.yaml", []),
    "crossover_bandwidth": ("examples/configs/quickstart-crossover.yaml", ["topology.kind=bandwidth_roulette"]),
    "hierarchical_crossover": ("examples/configs/hierarchical.yaml", []),
    "a2sgd": ("examples/configs/a2sgd-gossip.yaml", []),
    "diloco_allreduce": ("examples/configs/quickstart-diloco.yaml", ["algorithm.outer=allreduce"]),
    "diloco_gossip": ("examples/configs/quickstart-diloco.yaml", ["algorithm.outer=gossip"]),
    "diloco_noloco": ("examples/configs/quickstart-diloco.yaml", ["algorithm.outer=noloco"]),
}


def seconds_to_target(history, target):
    """Training seconds until the end of the first epoch at or above target, or None."""
    t = 0.0
    for h in history:
        t += h["seconds"]
        if h["test_accuracy"] >= target:
            return t
    return None


def run(name, config, overrides, args, work):
    summary = os.path.join(work, f"{name}.json")
    links = os.path.join(work, f"{name}-links.json")
    cmd = [os.path.join(ROOT, "scripts/hosts.sh"), "--spec", args.spec, "--config", config,
           "--summary-json", summary, "--link-stats", links, "--timeout", str(args.timeout),
           "--set", f"training.epochs={args.epochs}"]
    for o in overrides + args.set:
        cmd += ["--set", o]
    print(f"== {name}: {config} {' '.join(overrides)}", flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode == 77:
        sys.stderr.write(p.stderr)
        sys.exit(77)
    if p.returncode != 0:
        print(f"   failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-600:]}", flush=True)
        return {"algorithm": name, "error": (p.stderr or p.stdout).strip()[-2000:]}
    with open(summary, encoding="utf-8") as f:
        s = json.load(f)
    with open(links, encoding="utf-8") as f:
        crossed = json.load(f)["between_islands_bytes"]
    row = {
        "algorithm": name,
        "seconds_to_target": seconds_to_target(s["history"], args.target),
        "target_accuracy": args.target,
        "final_accuracy": s["test_accuracy"],
        "slow_link_bytes": crossed,
        "hosts": s["world_size"],
        "seconds_per_epoch": s["seconds_per_epoch"],
        "wall_seconds": s["wall_seconds"],
        "epochs": s["epochs"],
        "accuracy_by_epoch": [h["test_accuracy"] for h in s["history"]],
    }
    print(f"   {row['final_accuracy'] * 100:.2f}% after {row['epochs']} epochs, "
          f"{row['seconds_per_epoch']:.1f} s/epoch, {crossed / 1e6:.0f} MB across", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated, of: " + ", ".join(ALGORITHMS))
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--target", type=float, default=0.84)
    ap.add_argument("--spec", default="tests/hosts/two-islands.yaml",
                    help="the test hosts: a job config whose world_size and network: section "
                         "(islands, inside_gbps, between_gbps, between_delay_ms) give them (tests/hosts/hosts.py)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run")
    ap.add_argument("--timeout", type=int, default=1800, help="bound on each run, seconds")
    ap.add_argument("--json", default="results/compare-wan.json")
    args = ap.parse_args()
    names = [a for a in args.algorithms.split(",") if a]
    unknown = [a for a in names if a not in ALGORITHMS]
    if unknown:
        ap.error(f"unknown algorithm(s) {unknown}; known: {', '.join(ALGORITHMS)}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            config, overrides = ALGORITHMS[name]
            rows.append(run(name, config, overrides, args, work))
    print()
    print(f"{'algorithm':<24} {'to ' + format(args.target * 100, '.0f') + '% (s)':>12} {'final':>8} "
          f"{'slow link MB':>13} {'s/epoch':>8}")
    ring = next((r for r in rows if r["algorithm"] == "allreduce_ring" and r.get("seconds_to_target")), None)
    for r in rows:
        if "error" in r:
            print(f"{r['algorithm']:<24} failed")
            continue
        t = r["seconds_to_target"]
        speedup = f"  {ring['seconds_to_target'] / t:.1f}x ring" if ring and t else ""
        print(f"{r['algorithm']:<24} {('%.1f' % t) if t else 'never':>12} {r['final_accuracy'] * 100:>7.2f}% "
              f"{r['slow_link_bytes'] / 1e6:>13.0f} {r['seconds_per_epoch']:>8.1f}{speedup}")
    os.makedirs(os.path.dirname(os.path.join(ROOT, args.json)), exist_ok=True)
    with open(os.path.join(ROOT, args.json), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
    print(f"\nwrote {args.json}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
