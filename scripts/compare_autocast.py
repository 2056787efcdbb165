#!/usr/bin/python3
"""The Python CNN example (examples/python/train_fashion_mnist.py) trained in
float32 and under torch.autocast("cpu", dtype=bfloat16), side by side.

Run through scripts/compare-autocast.sh (which installs and builds first).
Each round runs the example once per precision (interleaved), with the same
seed, world size, data and algorithm; a row per run gives the test accuracy
of the average model and the wall seconds. Writes results/compare-autocast.json
(rows: autocast, round, world_size, algorithm, epochs, train_limit,
test_accuracy, wall_seconds) and prints the table with the accuracy gap.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "python", "train_fashion_mnist.py")
WORK = os.path.join(ROOT, "results", "compare-autocast")


def run(precision, rnd, args, env):
    """One run of the example; returns its result JSON. Raises SystemExit with its output if it fails."""
    out = os.path.join(WORK, f"{precision}-{rnd}.json")
    cmd = ["/usr/bin/python3", EXAMPLE, "--world-size", str(args.world_size), "--epochs", str(args.epochs),
           "--train-limit", str(args.train_limit), "--autocast", precision, "--results", out]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit(f"{precision} run {rnd} failed (exit {proc.returncode})")
    with open(out) as f:
        result = json.load(f)
    print(f"  {precision} round {rnd}: {100 * result['test_accuracy']:.2f}% in {result['wall_seconds']:.1f} s",
          file=sys.stderr, flush=True)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=0, help="training images used (0: all 60,000)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved runs of each precision")
    p.add_argument("--json", default=os.path.join(ROOT, "results", "compare-autocast.json"))
    args = p.parse_args()
    os.makedirs(WORK, exist_ok=True)
    env = dict(os.environ)
    build_python = os.path.join(os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build")), "python")
    env["PYTHONPATH"] = build_python + os.pathsep + env.get("PYTHONPATH", "")
    rows = []
    for rnd in range(args.rounds):
        for precision in ("none", "bfloat16"):
            r = run(precision, rnd, args, env)
            rows.append({"autocast": precision, "round": rnd, "world_size": r["world_size"],
                         "algorithm": r["algorithm"], "epochs": r["epochs"], "train_limit": args.train_limit,
                         "test_accuracy": r["test_accuracy"], "wall_seconds": r["wall_seconds"]})
    print(f"{'precision':<22}{'runs':>5}{'test acc (median)':>19}{'wall s (median)':>17}")
    med = {}
    for precision, label in (("none", "float32"), ("bfloat16", "autocast bfloat16")):
        mine = [r for r in rows if r["autocast"] == precision]
        med[precision] = statistics.median(r["test_accuracy"] for r in mine)
        print(f"{label:<22}{len(mine):>5}{100 * med[precision]:>18.2f}%"
              f"{statistics.median(r['wall_seconds'] for r in mine):>17.1f}")
    print(f"gap: {100 * (med['bfloat16'] - med['none']):+.2f} points")
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
