#!/usr/bin/python3
"""Trains the Fashion-MNIST MLP with 8 peers and compressed gradient exchanges
(the A2SGD paper: A2SGD and its Top-K / Gaussian-K / QSGD baselines) and compares them with the
uncompressed algorithms.

Run through scripts/compare-compression.sh (which installs and builds first).

Rows (all with the same epochs, batch 32, lr 0.01, momentum 0.9, 8 peers as
processes over zmq on loopback):
  AllReduce-SGD:  dense | A2SGD (model sync every --sync-period steps and after
                  the last) | A2SGD with the final sync only (Algorithm 1 as
                  written) | Top-K 1% with error feedback | Gaussian-K 1%
                  with error feedback | QSGD s=4, buckets of
                  512 | QSGD s=4 with one norm for the whole vector (as the A2SGD paper
                  counts it, 2.8n + 32 bits)
  Crossover-SGD:  uncompressed | A2SGD with gossiped means (push-sum over the
                  fair roulette) and a Crossover-SGD exchange of the model every
                  --gossip-sync-period steps and after the last

Every configuration runs once per seed (--seeds), interleaved (seed by seed,
all configurations in turn) so that a slow spell of the machine hits all of
them. Reported: the mean over seeds of the final test accuracy of the average
model (and of rank 0's own model), the consensus distance (1/n) sum ||xbar -
x_i||^2 (largest epoch-end value and the final one), payload bytes per peer
per step (frame headers excluded; the wire adds 48 bytes per message), and
seconds per epoch (median over seeds).

Writes results/compare-compression.json, the plot (default
docs/compression.png) and prints the table and its checks: A2SGD within 2 points of dense and no worse than Top-K, Gaussian-K and QSGD; gossiped A2SGD within 3 points of Crossover-SGD.

  compare_compression.py --sweep    A2SGD's test accuracy and bytes per step
                                    against the model sync period (allreduce
                                    and gossip), results/compare-compression-sweep.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
TRAIN = os.path.join(BUILD, "apps", "gossamer-train")
RESULTS = os.path.join(ROOT, "results")
WORK = os.path.join(RESULTS, "compare-compression")


def configurations(args):
    """label -> (group, algorithm.name, topology.kind, compression keys)."""
    return {
        "dense": ("allreduce", "allreduce_sgd", "ring", {"kind": "none"}),
        "a2sgd": ("allreduce", "allreduce_sgd", "ring",
                  {"kind": "a2sgd", "sync_period": args.sync_period}),
        "a2sgd_final_sync_only": ("allreduce", "allreduce_sgd", "ring",
                                  {"kind": "a2sgd", "sync_period": 0}),
        "topk": ("allreduce", "allreduce_sgd", "ring", {"kind": "topk", "topk_ratio": 0.01}),
        "gaussk": ("allreduce", "allreduce_sgd", "ring", {"kind": "gaussk", "gaussk_ratio": 0.01}),
        "qsgd": ("allreduce", "allreduce_sgd", "ring",
                 {"kind": "qsgd", "qsgd_levels": 4, "qsgd_bucket_size": 512}),
        "qsgd_one_norm": ("allreduce", "allreduce_sgd", "ring",
                          {"kind": "qsgd", "qsgd_levels": 4, "qsgd_bucket_size": 1 << 30}),
        "crossover_sgd": ("gossip", "crossover_sgd", "fair_roulette", {"kind": "none"}),
        "a2sgd_gossip": ("gossip", "crossover_sgd", "fair_roulette",
                         {"kind": "a2sgd", "means": "gossip", "sync": "gossip",
                          "sync_period": args.gossip_sync_period}),
    }


def config_text(args, seed, algorithm, topology, compression):
    lines = [
        f"world_size: {args.world_size}", f"seed: {seed}",
        "transport:", "  kind: zmq", "  timeout_seconds: 60",
        "topology:", f"  kind: {topology}",
        "algorithm:", f"  name: {algorithm}"] + (["  segments: 4"] if algorithm == "crossover_sgd" else []) + [
        "model:", "  kind: mlp", "  hidden: [128]",
        "training:", f"  epochs: {args.epochs}", "  batch_size: 32", "  learning_rate: 0.01",
        "  momentum: 0.9",
        "compression:"] + [f"  {k}: {v}" for k, v in compression.items()]
    return "\n".join(lines) + "\n"


def run(tag, text):
    os.makedirs(WORK, exist_ok=True)
    cfg = os.path.join(WORK, tag + ".yaml")
    out = os.path.join(WORK, tag + ".json")
    with open(cfg, "w") as f:
        f.write(text)
    t0 = time.time()
    proc = subprocess.run([TRAIN, "--config", cfg, "--summary-json", out],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"run {tag} failed (exit {proc.returncode})")
    with open(out) as f:
        summary = json.load(f)
    print(f"  {tag}: {100 * summary['test_accuracy']:.2f}%  {time.time() - t0:.1f} s",
          file=sys.stderr, flush=True)
    return summary


def mean(xs):
    return sum(xs) / len(xs)


def compare(args):
    configs = configurations(args)
    runs = {label: [] for label in configs}
    for seed in args.seeds:  # interleaved: every configuration once per seed, in turn
        for label, (_, algorithm, topology, compression) in configs.items():
            text = config_text(args, seed, algorithm, topology, compression)
            runs[label].append(run(f"{label}-s{seed}", text))
    rows = []
    for label, (group, algorithm, topology, compression) in configs.items():
        ss = runs[label]
        epochs = len(ss[0]["history"])
        rows.append({
            "label": label,
            "compressor": compression["kind"],
            "algorithm": algorithm,
            "group": group,
            "world_size": args.world_size,
            "epochs": args.epochs,
            "seeds": args.seeds,
            "settings": compression,
            "test_accuracy": mean([s["test_accuracy"] for s in ss]),
            "test_accuracy_by_seed": [s["test_accuracy"] for s in ss],
            "test_accuracy_rank0": mean([s["test_accuracy_rank0"] for s in ss]),
            "consensus_distance": mean([s["consensus_distance"] for s in ss]),
            "consensus_distance_max": mean([max(h["consensus_distance"] for h in s["history"])
                                            for s in ss]),
            "bytes_per_step": mean([s["bytes_per_step"] for s in ss]),
            "wire_bytes_per_step": mean([s["wire_bytes_per_step"] for s in ss]),
            "messages_per_step": mean([s["messages_per_step"] for s in ss]),
            "seconds_per_epoch": statistics.median([s["seconds_per_epoch"] for s in ss]),
            "accuracy_per_epoch": [mean([s["history"][e]["test_accuracy"] for s in ss])
                                   for e in range(epochs)],
            "consensus_per_epoch": [mean([s["history"][e]["consensus_distance"] for s in ss])
                                    for e in range(epochs)],
        })
    print_table(rows, args)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "compare-compression.json")
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"json: {path}")
    plot(rows, args)
    checks(rows)


def print_table(rows, args):
    print(f"\n{args.world_size} peers, {args.epochs} epochs, seeds {args.seeds} "
          f"(accuracy: mean over seeds, min..max)")
    header = (f"{'configuration':<24}{'algorithm':<15}{'acc(avg)':>9}{'min..max':>15}{'acc(r0)':>9}"
              f"{'consensus max/final':>22}{'bytes/step':>12}{'wire B/step':>12}{'s/epoch':>9}")
    print(header)
    for r in rows:
        accs = r["test_accuracy_by_seed"]
        spread = f"{100 * min(accs):.2f}..{100 * max(accs):.2f}"
        cons = f"{r['consensus_distance_max']:.2e}/{r['consensus_distance']:.1e}"
        print(f"{r['label']:<24}{r['algorithm']:<15}{100 * r['test_accuracy']:>8.2f}%{spread:>15}"
              f"{100 * r['test_accuracy_rank0']:>8.2f}%{cons:>22}{r['bytes_per_step']:>12.0f}"
              f"{r['wire_bytes_per_step']:>12.0f}{r['seconds_per_epoch']:>9.2f}")


def checks(rows):
    by = {r["label"]: r for r in rows}
    a2 = by["a2sgd"]["test_accuracy"]
    print("\nA2SGD against dense, Top-K, Gaussian-K and QSGD (AllReduce-SGD, 8 peers):")
    print(f"  A2SGD - dense      = {100 * (a2 - by['dense']['test_accuracy']):+.2f} points "
          f"(within 2: {'yes' if a2 >= by['dense']['test_accuracy'] - 0.02 else 'NO'})")
    for other in ("topk", "gaussk", "qsgd", "qsgd_one_norm"):
        d = a2 - by[other]["test_accuracy"]
        print(f"  A2SGD - {other:<11}= {100 * d:+.2f} points (no worse: {'yes' if d >= 0 else 'NO'})")
    g, c = by["a2sgd_gossip"], by["crossover_sgd"]
    print("gossiped A2SGD means + Crossover-SGD sync against Crossover-SGD:")
    for key, name in (("test_accuracy", "average model"), ("test_accuracy_rank0", "rank 0 model")):
        d = g[key] - c[key]
        print(f"  {name:<14} {100 * d:+.2f} points (within 3: {'yes' if d >= -0.03 else 'NO'})")
    print(f"  bytes/step {g['bytes_per_step']:.0f} vs {c['bytes_per_step']:.0f} "
          f"({c['bytes_per_step'] / g['bytes_per_step']:.0f}x fewer); consensus distance "
          f"(largest epoch end) {g['consensus_distance_max']:.2e} vs {c['consensus_distance_max']:.2e}")


def plot(rows, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, group, title in ((axes[0], "allreduce", "AllReduce-SGD gradients"),
                             (axes[1], "gossip", "Crossover-SGD deployment")):
        for r in rows:
            if r["group"] != group:
                continue
            acc = [100 * a for a in r["accuracy_per_epoch"]]
            ax.plot(range(1, len(acc) + 1), acc, marker="o", label=r["label"])
        ax.set_title(f"{title}, {args.world_size} peers")
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy of the average model (%)")
        ax.set_xticks(range(1, args.epochs + 1))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    labels = [r["label"] for r in rows]
    ax.barh(labels, [r["bytes_per_step"] for r in rows], color="tab:gray")
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("payload bytes per peer per step (log)")
    ax.set_title("traffic")
    ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(f"Fashion-MNIST MLP 784-128-10, mean of seeds {args.seeds}", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    fig.savefig(args.plot, dpi=100)
    print(f"plot: {args.plot}")


def sweep(args):
    """A2SGD's accuracy / traffic trade-off: the model sync period."""
    rows = []
    for seed in args.seeds:
        for group, period in [("allreduce", p) for p in args.sweep_periods] + \
                             [("gossip", p) for p in args.sweep_periods if p > 0]:
            if group == "allreduce":
                algorithm, topology, z = "allreduce_sgd", "ring", {"kind": "a2sgd", "sync_period": period}
            else:
                algorithm, topology = "crossover_sgd", "fair_roulette"
                z = {"kind": "a2sgd", "means": "gossip", "sync": "gossip", "sync_period": period}
            s = run(f"sweep-{group}-p{period}-s{seed}", config_text(args, seed, algorithm, topology, z))
            rows.append({"group": group, "sync_period": period, "seed": seed,
                         "test_accuracy": s["test_accuracy"],
                         "test_accuracy_rank0": s["test_accuracy_rank0"],
                         "consensus_distance_max": max(h["consensus_distance"] for h in s["history"]),
                         "bytes_per_step": s["bytes_per_step"]})
    print(f"\nA2SGD model sync period, {args.world_size} peers, {args.epochs} epochs, seeds {args.seeds}")
    print(f"{'means/sync':<12}{'period':>8}{'acc(avg)':>10}{'acc(r0)':>10}{'consensus max':>15}"
          f"{'bytes/step':>12}")
    summary = []
    for group in ("allreduce", "gossip"):
        for period in args.sweep_periods:
            rs = [r for r in rows if r["group"] == group and r["sync_period"] == period]
            if not rs:
                continue
            row = {"group": group, "sync_period": period,
                   "test_accuracy": mean([r["test_accuracy"] for r in rs]),
                   "test_accuracy_by_seed": [r["test_accuracy"] for r in rs],
                   "test_accuracy_rank0": mean([r["test_accuracy_rank0"] for r in rs]),
                   "consensus_distance_max": mean([r["consensus_distance_max"] for r in rs]),
                   "bytes_per_step": mean([r["bytes_per_step"] for r in rs])}
            summary.append(row)
            print(f"{group:<12}{period:>8}{100 * row['test_accuracy']:>9.2f}%"
                  f"{100 * row['test_accuracy_rank0']:>9.2f}%{row['consensus_distance_max']:>15.2e}"
                  f"{row['bytes_per_step']:>12.0f}")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "compare-compression-sweep.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"json: {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    p.add_argument("--world-size", type=int, default=8)
    p.add_argument("--sync-period", type=int, default=25,
                   help="A2SGD (allreduce): steps between model syncs")
    p.add_argument("--gossip-sync-period", type=int, default=50,
                   help="A2SGD (gossip): steps between Crossover-SGD model exchanges")
    p.add_argument("--plot", default=os.path.join(ROOT, "docs", "compression.png"))
    p.add_argument("--sweep", action="store_true",
                   help="instead: A2SGD accuracy and bytes/step against the model sync period")
    p.add_argument("--sweep-periods", type=int, nargs="+", default=[10, 25, 50, 100, 0],
                   help="--sweep: sync periods (0 = the final sync only; allreduce means only)")
    args = p.parse_args()
    if not os.path.exists(TRAIN):
        raise SystemExit(f"{TRAIN} not built: run scripts/compare-compression.sh")
    if args.sweep:
        sweep(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
