#!/usr/bin/python3
"""Trains the Fashion-MNIST MLP with AllReduce-SGD, SGP, Crossover-SGD and
hierarchical Crossover-SGD at several world sizes and compares them.

Run through scripts/compare-gossip.sh (which installs and builds first).

  compare_gossip.py                 accuracy / consensus / traffic / time table,
                                    results/compare-gossip.json, and per world size
                                    gossamer-report --compare plots of the runs
                                    (results/compare-gossip-report/n<N>/)
  compare_gossip.py --straggler     steps per second of the other peers when one
                                    peer is slowed 10x (8 peers)
  compare_gossip.py --overlap       seconds per step with and without overlap (8 peers)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_job import TRAIN, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")
WORK = os.path.join(RESULTS, "compare-gossip")

ALGORITHMS = {
    # name: (algorithm.name, topology.kind, extra algorithm keys)
    "allreduce_sgd": ("allreduce_sgd", "ring", {}),
    "sgp": ("sgp", "directed_exponential", {}),
    "crossover_sgd": ("crossover_sgd", "fair_roulette", {"segments": 4}),
    "hierarchical_crossover_sgd": ("hierarchical", "fair_roulette",
                                   {"segments": 4, "inter_algorithm": "crossover_sgd"}),
}


def config_text(label, world_size, epochs, mode="sync", transport="zmq", train_limit=0,
                straggler_rank=-1, straggler_delay=0.0, timeout=60):
    name, topology, extra = ALGORITHMS[label]
    algo = {"name": name, "mode": mode, **extra}
    if name == "hierarchical":
        algo["group_size"] = 2 if world_size <= 4 else 4
    lines = [
        f"world_size: {world_size}", "seed: 42",
        "transport:", f"  kind: {transport}", f"  timeout_seconds: {timeout}",
        "topology:", f"  kind: {topology}",
        "algorithm:"] + [f"  {k}: {v}" for k, v in algo.items()] + [
        "model:", "  kind: mlp", "  hidden: [128]",
        "data:", f"  train_limit: {train_limit}",
        "training:", f"  epochs: {epochs}", "  batch_size: 32", "  learning_rate: 0.01",
        "  momentum: 0.9", f"  straggler_rank: {straggler_rank}",
        f"  straggler_delay_seconds: {straggler_delay}"]
    return "\n".join(lines) + "\n"


def run(tag, text):
    """Writes config `text` to WORK/TAG.yaml and trains it; the job's summary."""
    os.makedirs(WORK, exist_ok=True)
    cfg = os.path.join(WORK, tag + ".yaml")
    with open(cfg, "w") as f:
        f.write(text)
    return train(tag, cfg, WORK)[0]


def compare(args):
    rows = []
    for n in args.world_sizes:
        transport = "inproc" if n > args.max_processes else "zmq"
        for label in ALGORITHMS:
            s = run(f"{label}-n{n}", config_text(label, n, args.epochs, transport=transport))
            rows.append({
                "algorithm": label, "world_size": n, "transport": transport,
                "test_accuracy": s["test_accuracy"], "test_accuracy_rank0": s["test_accuracy_rank0"],
                "consensus_distance": s["consensus_distance"], "bytes_per_step": s["bytes_per_step"],
                "seconds_per_epoch": s["seconds_per_epoch"],
                "accuracy_per_epoch": [h["test_accuracy"] for h in s["history"]],
                "run_dir": s["run_dir"],
            })
    header = (f"{'algorithm':<28}{'N':>4}{'acc(avg)':>10}{'acc(r0)':>10}{'consensus':>12}"
              f"{'bytes/step':>12}{'s/epoch':>9}")
    print(header)
    for r in rows:
        print(f"{r['algorithm']:<28}{r['world_size']:>4}{100 * r['test_accuracy']:>9.2f}%"
              f"{100 * r['test_accuracy_rank0']:>9.2f}%{r['consensus_distance']:>12.2e}"
              f"{r['bytes_per_step']:>12.0f}{r['seconds_per_epoch']:>9.2f}")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "compare-gossip.json"), "w") as f:
        json.dump([{k: v for k, v in r.items() if k not in ("accuracy_per_epoch", "transport", "run_dir")}
                   for r in rows], f, indent=1)
    plot(rows, args.world_sizes)


def plot(rows, world_sizes):
    """The runs of each world size overlaid by gossamer-report --compare
    (accuracy and loss against steps and wall time, consensus distance,
    bytes sent), in results/compare-gossip-report/n<N>/."""
    for n in world_sizes:
        runs = [r for r in rows if r["world_size"] == n]
        out = os.path.join(RESULTS, "compare-gossip-report", f"n{n}")
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "gossamer-report"), "--compare"]
                       + [r["run_dir"] for r in runs]
                       + ["--labels", ",".join(r["algorithm"] for r in runs), "--out", out],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
        print(f"plots: {os.path.relpath(out, ROOT)}/report.md")


def straggler(args):
    n, slow = 8, 7
    rows = []
    for label, mode in [("allreduce_sgd", "sync"), ("crossover_sgd", "async"), ("sgp", "async"),
                        ("crossover_sgd", "sync"), ("sgp", "sync")]:
        base = run(f"straggler-{label}-{mode}-base",
                   config_text(label, n, 1, mode=mode, train_limit=args.train_limit))
        rate = statistics.median(base["steps_per_second_by_rank"])
        delay = 9.0 / rate  # the slow peer's step takes ~10x as long
        slowed = run(f"straggler-{label}-{mode}-slow",
                     config_text(label, n, 1, mode=mode, train_limit=args.train_limit,
                                 straggler_rank=slow, straggler_delay=round(delay, 6)))
        others = [v for i, v in enumerate(slowed["steps_per_second_by_rank"]) if i != slow]
        base_others = [v for i, v in enumerate(base["steps_per_second_by_rank"]) if i != slow]
        row = {"algorithm": label, "mode": mode, "world_size": n,
               "steps_per_second": statistics.mean(base_others),
               "steps_per_second_with_straggler": statistics.mean(others),
               "straggler_steps_per_second": slowed["steps_per_second_by_rank"][slow],
               "straggler_delay_seconds": delay,
               "test_accuracy": base["test_accuracy"],
               "test_accuracy_with_straggler": slowed["test_accuracy"]}
        row["drop"] = 1 - row["steps_per_second_with_straggler"] / row["steps_per_second"]
        rows.append(row)
    print(f"{'algorithm':<16}{'mode':<7}{'steps/s':>9}{'w/ straggler':>14}{'drop':>8}"
          f"{'straggler':>11}{'acc':>8}{'acc w/':>8}")
    for r in rows:
        print(f"{r['algorithm']:<16}{r['mode']:<7}{r['steps_per_second']:>9.1f}"
              f"{r['steps_per_second_with_straggler']:>14.1f}{100 * r['drop']:>7.1f}%"
              f"{r['straggler_steps_per_second']:>11.1f}{100 * r['test_accuracy']:>7.2f}%"
              f"{100 * r['test_accuracy_with_straggler']:>7.2f}%")
    with open(os.path.join(RESULTS, "compare-gossip-straggler.json"), "w") as f:
        json.dump(rows, f, indent=1)


def overlap(args):
    n = 8
    rows = []
    for rep in range(args.reps):  # interleaved repetitions
        for label in ("crossover_sgd", "sgp"):
            for mode in ("sync", "overlap"):
                s = run(f"overlap-{label}-{mode}-{rep}",
                        config_text(label, n, 1, mode=mode, train_limit=args.train_limit))
                rows.append({"algorithm": label, "mode": mode, "rep": rep,
                             "seconds_per_step": 1 / statistics.mean(s["steps_per_second_by_rank"]),
                             "test_accuracy": s["test_accuracy"]})
    print(f"{'algorithm':<16}{'sync s/step':>13}{'overlap s/step':>16}{'ratio':>8}")
    summary = []
    for label in ("crossover_sgd", "sgp"):
        med = {m: statistics.median(r["seconds_per_step"] for r in rows
                                    if r["algorithm"] == label and r["mode"] == m)
               for m in ("sync", "overlap")}
        summary.append({"algorithm": label, "world_size": n, "sync_seconds_per_step": med["sync"],
                        "overlap_seconds_per_step": med["overlap"],
                        "ratio": med["overlap"] / med["sync"]})
        print(f"{label:<16}{med['sync']:>13.5f}{med['overlap']:>16.5f}{med['overlap'] / med['sync']:>8.3f}")
    with open(os.path.join(RESULTS, "compare-gossip-overlap.json"), "w") as f:
        json.dump({"runs": rows, "medians": summary}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--straggler", action="store_true", help="straggler table (8 peers)")
    p.add_argument("--overlap", action="store_true", help="overlap vs sync seconds per step (8 peers)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--world-sizes", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--max-processes", type=int, default=16,
                   help="larger world sizes run as threads over inproc")
    p.add_argument("--train-limit", type=int, default=30000, help="straggler/overlap runs: images used")
    p.add_argument("--reps", type=int, default=3, help="overlap runs: interleaved repetitions")
    args = p.parse_args()
    if not os.path.exists(TRAIN):
        raise SystemExit(f"{TRAIN} not built: run scripts/compare-gossip.sh")
    if args.straggler:
        straggler(args)
    elif args.overlap:
        overlap(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
