#!/usr/bin/python3
"""Trains the quickstart job with DiLoCo (quickstart-diloco.yaml, H = 50) and
with AllReduce-SGD (quickstart-allreduce.yaml), then DiLoCo's variants.

Run through scripts/compare-diloco.sh (which installs and builds first).

The two configs run one after the other, --rounds times (interleaved), each a
gossamer-train job of 4 processes over zmq on loopback; a row per run gives the
test accuracy of the average model, the wall seconds of the summary, seconds
per epoch, the elapsed seconds of the whole process (data loading included)
and the payload bytes each peer sent per step. Then each variant runs once
(`--set algorithm.KEY=VALUE` on quickstart-diloco.yaml): accuracy, bytes per
step and the consensus distance printed after epoch 2 (mid-round).

Writes results/compare-diloco.json: {"runs": [...], "variants": [...]}.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_job import TRAIN, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")
WORK = os.path.join(RESULTS, "compare-diloco")
CONFIGS = {"diloco": "examples/configs/quickstart-diloco.yaml",
           "allreduce": "examples/configs/quickstart-allreduce.yaml"}
# variant label: the --set overrides on quickstart-diloco.yaml
VARIANTS = [
    ("H = 50, allreduce (the config)", []),
    ("`outer: gossip`", ["algorithm.outer=gossip"]),
    ("`overlap: true`", ["algorithm.overlap=true"]),
    ("`outer: gossip`, `overlap: true`", ["algorithm.outer=gossip", "algorithm.overlap=true"]),
    ("`inner_steps: 10`", ["algorithm.inner_steps=10"]),
    ("`inner_steps: 200`", ["algorithm.inner_steps=200"]),
    ("`outer_learning_rate: 1`, `outer_momentum: 0` (model averaging)",
     ["algorithm.outer_learning_rate=1", "algorithm.outer_momentum=0"]),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="interleaved runs of each config")
    p.add_argument("--json", default=os.path.join(RESULTS, "compare-diloco.json"))
    args = p.parse_args()
    if not os.path.exists(TRAIN):
        raise SystemExit(f"{TRAIN} not built: run scripts/compare-diloco.sh")
    os.makedirs(WORK, exist_ok=True)
    runs = []
    for rnd in range(args.rounds):
        for name, config in CONFIGS.items():
            s, elapsed = train(f"{name}-{rnd}", os.path.join(ROOT, config), WORK)
            runs.append({"config": os.path.basename(config), "round": rnd,
                         "test_accuracy": s["test_accuracy"], "wall_seconds": s["wall_seconds"],
                         "seconds_per_epoch": s["seconds_per_epoch"], "elapsed_seconds": elapsed,
                         "bytes_per_step": s["bytes_per_step"], "epochs": s["epochs"]})
    variants = []
    for i, (label, overrides) in enumerate(VARIANTS):
        s, _ = train(f"variant-{i}", os.path.join(ROOT, CONFIGS["diloco"]), WORK, overrides)
        hist = s["history"]
        variants.append({"variant": label, "overrides": overrides, "test_accuracy": s["test_accuracy"],
                         "bytes_per_step": s["bytes_per_step"],
                         "consensus_after_epoch_2": hist[1]["consensus_distance"] if len(hist) > 1 else None,
                         "wall_seconds": s["wall_seconds"]})
    print(f"{'config':<28}{'acc':>8}{'wall s':>8}{'s/epoch':>9}{'elapsed':>9}{'B/step':>10}")
    for r in runs:
        print(f"{r['config']:<28}{100 * r['test_accuracy']:>7.2f}%{r['wall_seconds']:>8.2f}"
              f"{r['seconds_per_epoch']:>9.2f}{r['elapsed_seconds']:>9.2f}{r['bytes_per_step']:>10.0f}")
    print(f"{'variant':<40}{'acc':>8}{'B/step':>10}{'consensus@2':>13}")
    for v in variants:
        c = v["consensus_after_epoch_2"]
        print(f"{v['variant'][:40]:<40}{100 * v['test_accuracy']:>7.2f}%{v['bytes_per_step']:>10.0f}"
              f"{c if c is None else format(c, '.3g'):>13}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"runs": runs, "variants": variants}, f, indent=1)


if __name__ == "__main__":
    main()
