#!/usr/bin/python3
"""Non-IID data: AllReduce-SGD, Crossover-SGD, SGP and the heterogeneity-
corrected gossip algorithms (gradient tracking over Crossover-SGD and over SGP,
D² with Crossover-SGD on the ring beside it, quasi-global momentum in its
heavy-ball and Nesterov forms)
trained side by side on the Fashion-MNIST MLP, each peer's label mix drawn
from a Dirichlet distribution with concentration alpha (smaller: more skew).

Run through scripts/compare-noniid.sh (which installs and builds first).

For each world size and alpha every algorithm trains the same job
(examples/configs/noniid-crossover.yaml's model, data and training keys:
seed 42, batch 32, learning rate 0.01, momentum 0.9) with its own
algorithm and topology; runs are taken in the order world size, alpha,
algorithm. Prints a table and writes results/compare-noniid.json: one row per
run with algorithm, world_size, alpha, epochs, test_accuracy (the average of
the ranks' models' accuracies, as gossamer-train reports it),
consensus_distance, bytes_per_step and seconds.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_job import TRAIN, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")
WORK = os.path.join(RESULTS, "compare-noniid")

# label: (algorithm.name, topology.kind, extra algorithm keys, extra topology keys)
ALGORITHMS = {
    "allreduce_sgd": ("allreduce_sgd", "ring", {}, {}),
    "crossover_sgd": ("crossover_sgd", "fair_roulette", {"segments": 4}, {}),
    "sgp": ("sgp", "directed_exponential", {}, {}),
    "gradient_tracking": ("gradient_tracking", "fair_roulette", {"segments": 4, "base": "crossover_sgd"}, {}),
    "gradient_tracking_sgp": ("gradient_tracking", "directed_exponential", {"base": "sgp"}, {}),
    # D² needs a fixed symmetric mixing matrix with eigenvalues above -1/3:
    # the ring, keeping half of each rank's own model (eigenvalues >= 0).
    "d2": ("d2", "ring", {"segments": 4, "base": "crossover_sgd"}, {"self_weight": 0.5}),
    "crossover_sgd_ring": ("crossover_sgd", "ring", {"segments": 4}, {"self_weight": 0.5}),
    # Quasi-global momentum in its two forms (algorithm.nesterov).
    "quasi_global_momentum_heavy_ball": ("quasi_global_momentum", "fair_roulette",
                                         {"segments": 4, "base": "crossover_sgd", "nesterov": "false"}, {}),
    "quasi_global_momentum_nesterov": ("quasi_global_momentum", "fair_roulette",
                                       {"segments": 4, "base": "crossover_sgd", "nesterov": "true"}, {}),
}


def config_text(label, world_size, alpha, epochs, transport):
    name, topology, extra, topology_extra = ALGORITHMS[label]
    lines = [
        f"world_size: {world_size}", "seed: 42",
        "transport:", f"  kind: {transport}", "  timeout_seconds: 60",
        "topology:", f"  kind: {topology}"] + [f"  {k}: {v}" for k, v in topology_extra.items()] + [
        "algorithm:", f"  name: {name}"] + [f"  {k}: {v}" for k, v in extra.items()] + [
        "model:", "  kind: mlp", "  hidden: [128]",
        "data:", "  partition: non_iid", f"  dirichlet_alpha: {alpha}", "  standardize: true",
        "training:", f"  epochs: {epochs}", "  batch_size: 32", "  learning_rate: 0.01", "  momentum: 0.9"]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"of {','.join(ALGORITHMS)}")
    p.add_argument("--alphas", default="1.0,0.5,0.1,0.05")
    p.add_argument("--world-sizes", default="8,16")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-processes", type=int, default=16,
                   help="larger world sizes run as threads of one process over inproc")
    p.add_argument("--out", default=os.path.join(RESULTS, "compare-noniid.json"))
    args = p.parse_args()
    if not os.path.exists(TRAIN):
        raise SystemExit(f"{TRAIN} not built: run scripts/compare-noniid.sh")
    labels = args.algorithms.split(",")
    for label in labels:
        if label not in ALGORITHMS:
            raise SystemExit(f"unknown algorithm {label!r} (of {', '.join(ALGORITHMS)})")
    os.makedirs(WORK, exist_ok=True)
    rows = []
    print(f"{'algorithm':<32}{'N':>4}{'alpha':>7}{'acc %':>8}{'consensus':>11}{'bytes/step':>12}{'s':>7}",
          flush=True)
    for n in [int(x) for x in args.world_sizes.split(",")]:
        transport = "inproc" if n > args.max_processes else "zmq"
        for alpha in [float(x) for x in args.alphas.split(",")]:
            for label in labels:
                tag = f"{label}-n{n}-a{alpha}"
                cfg = os.path.join(WORK, tag + ".yaml")
                with open(cfg, "w") as f:
                    f.write(config_text(label, n, alpha, args.epochs, transport))
                s, seconds = train(tag, cfg, WORK, timeout=3600)
                row = {"algorithm": label, "algorithm_name": ALGORITHMS[label][0],
                       "topology": ALGORITHMS[label][1], "world_size": n, "alpha": alpha,
                       "epochs": args.epochs, "test_accuracy": s["test_accuracy"],
                       "consensus_distance": s["consensus_distance"], "bytes_per_step": s["bytes_per_step"],
                       "seconds": seconds}
                rows.append(row)
                print(f"{label:<32}{n:>4}{alpha:>7}{100 * row['test_accuracy']:>8.2f}"
                      f"{row['consensus_distance']:>11.2e}{row['bytes_per_step']:>12.0f}{seconds:>7.0f}",
                      flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, f,
                  indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
