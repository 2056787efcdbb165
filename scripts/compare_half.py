#!/usr/bin/python3
"""The quickstart job in float32 and with compression.kind bf16 and fp16, side
by side: AllReduce-SGD (16-bit gradients with error feedback) and
Crossover-SGD (16-bit model segments on the wire).

Run through scripts/compare-half.sh (which installs and builds first). For each
algorithm and world size, the three runs of its quickstart config
(quickstart-allreduce.yaml, quickstart-crossover.yaml; 4 processes, or N with
--set world_size=N) one after the other over zmq on loopback; a row per run:
test accuracy of the average model, payload bytes per peer per step, seconds
per epoch. Writes results/compare-half.json and prints the table with the
accuracy gap and the bytes' ratio to float32.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_job import TRAIN, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"allreduce_sgd": os.path.join(ROOT, "examples", "configs", "quickstart-allreduce.yaml"),
           "crossover_sgd": os.path.join(ROOT, "examples", "configs", "quickstart-crossover.yaml")}
WORK = os.path.join(ROOT, "results", "compare-half")
KINDS = ["none", "bf16", "fp16"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-sizes", type=int, nargs="+", default=[4, 8])
    p.add_argument("--algorithms", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--json", default=os.path.join(ROOT, "results", "compare-half.json"))
    args = p.parse_args()
    if not os.path.exists(TRAIN):
        raise SystemExit(f"{TRAIN} not built: run scripts/compare-half.sh")
    os.makedirs(WORK, exist_ok=True)
    rows = []
    for algorithm in args.algorithms:
        for n in args.world_sizes:
            for kind in KINDS:
                name = f"{algorithm}-n{n}-{kind}"
                s, _ = train(name, CONFIGS[algorithm], WORK, [f"world_size={n}", f"compression.kind={kind}"])
                print(f"  {name}: {100 * s['test_accuracy']:.2f}%", file=sys.stderr, flush=True)
                rows.append({"algorithm": algorithm, "world_size": n, "compression": kind,
                             "test_accuracy": s["test_accuracy"], "bytes_per_step": s["bytes_per_step"],
                             "seconds_per_epoch": s["seconds_per_epoch"], "epochs": s["epochs"]})
    base = {(r["algorithm"], r["world_size"]): r for r in rows if r["compression"] == "none"}
    print(f"{'algorithm':<14}{'N':>3} {'wire':<8}{'test acc':>9}{'vs float32':>12}{'bytes/step':>12}{'ratio':>7}"
          f"{'s/epoch':>9}")
    for r in rows:
        b = base[(r["algorithm"], r["world_size"])]
        print(f"{r['algorithm']:<14}{r['world_size']:>3} {r['compression'] if r['compression'] != 'none' else 'float32':<8}"
              f"{100 * r['test_accuracy']:>8.2f}%{100 * (r['test_accuracy'] - b['test_accuracy']):>+11.2f} "
              f"{r['bytes_per_step']:>12.0f}{r['bytes_per_step'] / b['bytes_per_step']:>7.3f}"
              f"{r['seconds_per_epoch']:>9.2f}")
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
