#!/usr/bin/python3
"""Runs gossamer-sparse (examples/configs/sparse/sparse-sync.yaml) for each model (fm,
lr), world size (4, 8) and global batch size (rows per round over all ranks,
split evenly), with the three methods dense, existing and direct interleaved
(repeats: the fastest run's seconds, the least disturbed on a shared host;
the median is in the JSON too). Prints:

  Table II form: elements (float64 values) sent per epoch by all ranks: the
  existing method's reduce (= broadcast) and, with direct transmission, its
  reduce, broadcast and direct elements; the decreasing rate
  (reduce + broadcast + direct) / (2 reduce of the existing method).
  Table III form: seconds per epoch (the slowest rank), reduce+direct /
  broadcast / compute for direct and existing, the rate direct / existing,
  and dense allreduce's seconds per epoch.

Fails (exit 1) unless existing and direct give the same model CRC in every
configuration. Writes results/compare-sparse.json: one row per configuration
and sparse method with model, world_size, batch_size, method, elements_reduce,
elements_direct, elements_broadcast, epoch_seconds, reduce_seconds,
broadcast_seconds, compute_seconds, dense_epoch_seconds, identical_to_existing,
crc32c, test_accuracy, rounds_per_epoch.

    scripts/compare-sparse.sh                        # defaults below
    scripts/compare-sparse.sh --repeats 1 --rounds 8  # quicker: 8 rounds per epoch at most
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ["dense", "existing", "direct"]


def run(args, work, model, world, batch, method, rep):
    summary = os.path.join(work, f"{model}-{world}-{batch}-{method}-{rep}.json")
    exe = os.path.join(os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build")), "apps",
                       "gossamer-sparse")
    sets = [f"world_size={world}", f"sparse.model={model}", f"sparse.batch_size={batch // world}",
            f"sparse.method={method}", f"sparse.rounds={args.rounds}", f"sparse.epochs={args.epochs}",
            f"sparse.factors={args.factors}", f"sparse.learning_rate={args.fm_rate if model == 'fm' else args.lr_rate}"]
    cmd = [exe, "--config", args.config, "--summary-json", summary]
    for s in sets + args.set:
        cmd += ["--set", s]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"gossamer-sparse failed: {' '.join(cmd)}")
    with open(summary) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="examples/configs/sparse/sparse-sync.yaml")
    ap.add_argument("--models", default="fm,lr")
    ap.add_argument("--worlds", default="4,8")
    ap.add_argument("--batches", default="256,512,1024", help="global batch sizes (rows per round)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per epoch at most (0: whole epochs)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--factors", type=int, default=8)
    ap.add_argument("--fm-rate", type=float, default=0.01, help="learning rate of the factorization machine")
    ap.add_argument("--lr-rate", type=float, default=0.1, help="learning rate of logistic regression")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each method, interleaved; the median run is reported")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--set", action="append", default=[], help="extra KEY=VALUE for gossamer-sparse")
    ap.add_argument("--out", default="results/compare-sparse.json")
    args = ap.parse_args()

    rows, ok = [], True
    configs = [(m, int(w), int(b)) for m in args.models.split(",") for w in args.worlds.split(",")
               for b in args.batches.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for model, world, batch in configs:
            runs = {m: [] for m in METHODS}
            for rep in range(args.repeats):
                order = METHODS if rep % 2 == 0 else METHODS[::-1]
                for method in order:
                    runs[method].append(run(args, work, model, world, batch, method, rep))
            results[(model, world, batch)] = runs

    # Each method's run with the median epoch time (the lower middle one at an
    # even count) stands for it: every column of a row comes from that one
    # run, so that its phases add up to its total.
    def typical(rs):
        return sorted(rs, key=lambda r: r["epoch_seconds"])[(len(rs) - 1) // 2]

    print("Table II form: elements sent per epoch (all ranks), float64 values")
    print(f"{'model':5} {'N':>2} {'batch':>5} | {'existing R=B':>12} | {'direct R':>10} {'direct B':>10} "
          f"{'direct D':>10} | {'rate':>5}")
    for (model, world, batch), runs in results.items():
        e, d = runs["existing"][0], runs["direct"][0]
        rate = (d["elements_reduce"] + d["elements_broadcast"] + d["elements_direct"]) / max(
            1, e["elements_reduce"] + e["elements_broadcast"])
        print(f"{model:5} {world:>2} {batch:>5} | {e['elements_reduce']:>12.3e} | {d['elements_reduce']:>10.3e} "
              f"{d['elements_broadcast']:>10.3e} {d['elements_direct']:>10.3e} | {rate:5.3f}")
    print()
    print(f"Table III form: seconds per epoch (slowest rank; the median of {args.repeats} runs); "
          "reduce+direct / broadcast / compute")
    print(f"{'model':5} {'N':>2} {'batch':>5} | {'direct R+D':>10} {'B':>7} {'C':>7} {'total':>7} | "
          f"{'exist R+D':>10} {'B':>7} {'C':>7} {'total':>7} | {'rate':>5} | {'dense':>7} | same bits")
    for (model, world, batch), runs in results.items():
        line = f"{model:5} {world:>2} {batch:>5} |"
        for method in ("direct", "existing"):
            t = typical(runs[method])
            line += (f" {t['reduce_seconds']:>10.4f} {t['broadcast_seconds']:>7.4f} "
                     f"{t['compute_seconds']:>7.4f} {t['epoch_seconds']:>7.4f} |")
        dense = typical(runs["dense"])["epoch_seconds"]
        rate = typical(runs["direct"])["epoch_seconds"] / typical(runs["existing"])["epoch_seconds"]
        crcs = {r["crc32c"] for r in runs["existing"] + runs["direct"]}
        same = len(crcs) == 1
        ok = ok and same
        print(f"{line} {rate:5.3f} | {dense:7.4f} | {'yes' if same else 'NO ' + ','.join(sorted(crcs))}")
        for method in ("existing", "direct"):
            rs = runs[method]
            t = typical(rs)
            rows.append({
                "model": model, "world_size": world, "batch_size": batch, "method": method,
                "elements_reduce": rs[0]["elements_reduce"], "elements_direct": rs[0]["elements_direct"],
                "elements_broadcast": rs[0]["elements_broadcast"],
                "statistic": "median", "epoch_seconds": t["epoch_seconds"], "reduce_seconds": t["reduce_seconds"],
                "broadcast_seconds": t["broadcast_seconds"], "compute_seconds": t["compute_seconds"],
                "epoch_seconds_runs": [r["epoch_seconds"] for r in rs],
                "dense_epoch_seconds": dense, "identical_to_existing": same,
                "crc32c": rs[0]["crc32c"], "test_accuracy": rs[0]["test_accuracy"],
                "rounds_per_epoch": rs[0]["rounds_per_epoch"], "repeats": args.repeats,
            })
    os.makedirs(os.path.dirname(os.path.join(ROOT, args.out)), exist_ok=True)
    with open(os.path.join(ROOT, args.out), "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    print(f"\nwrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
