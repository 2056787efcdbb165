#!/usr/bin/python3
"""What security (CURVE on the zmq transport) costs.

Three cases, each run without and with CURVE, interleaved, --reps times:
  exchange-4MiB   bench/p2p over zmq tcp: one-way time of a 4 MiB message
                  (half the ping-pong round trip), seconds
  allreduce-4KiB  bench/allreduce, ring, 4 ranks over zmq tcp: median time per
                  call, seconds
  quickstart      gossamer-train on examples/configs/quickstart-crossover.yaml
                  (4 peers, 3 epochs): wall seconds
The keys are made with gossamer-keygen in a temporary directory (one pair per
rank for the quickstart; the benchmarks' ranks share one, which costs the
same). Prints the medians and the ratio curve/plain; writes
results/bench-security.json with rows case, plain_seconds, curve_seconds.

Usage: scripts/bench-security.sh [--reps 3] [--epochs 3]
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
BUILD = os.path.join(ROOT, "build")


def run(cmd, timeout, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def exchange(transport, env, tmp, timeout):
    out = os.path.join(tmp, "p2p.json")
    run([f"{BUILD}/bench/p2p", "--transports", transport, "--sizes", "4194304", "--budget", "1", "--quiet",
         "--json", out], timeout, env)
    with open(out) as f:
        return json.load(f)[0]["latency_us"] * 1e-6


def allreduce(transport, env, tmp, timeout):
    out = os.path.join(tmp, "allreduce.json")
    run([f"{BUILD}/bench/allreduce", "--world-size", "4", "--transports", transport, "--algorithm", "ring",
         "--sizes", "4096", "--budget", "1", "--quiet", "--json", out], timeout, env)
    with open(out) as f:
        return json.load(f)[0]["seconds"]


def quickstart(curve, keys, epochs, tmp, timeout):
    summary = os.path.join(tmp, "summary.json")
    cmd = [f"{BUILD}/apps/gossamer-train", "--config",
           os.path.join(ROOT, "examples/configs/quickstart-crossover.yaml"), "--summary-json", summary,
           "--set", f"training.epochs={epochs}"]
    if curve:
        cmd += ["--set", "security.enabled=true", "--set", f"security.secret_key={keys}/rank{{rank}}",
                "--set", f"security.public_keys={keys}/admitted"]
    run(cmd, timeout)
    with open(summary) as f:
        return json.load(f)["wall_seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="quickstart epochs")
    ap.add_argument("--timeout", type=float, default=600, help="bound on each run, seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/bench-security.json"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        keys = os.path.join(tmp, "keys")
        os.makedirs(os.path.join(keys, "admitted"))
        for r in range(4):
            run([f"{BUILD}/apps/gossamer-keygen", f"{keys}/rank{r}"], 30)
            os.rename(f"{keys}/rank{r}.pub", f"{keys}/admitted/rank{r}.pub")
        run([f"{BUILD}/apps/gossamer-keygen", f"{keys}/bench"], 30)
        env = dict(os.environ, GOSSAMER_BENCH_CURVE_KEY=f"{keys}/bench")
        cases = {
            "exchange-4MiB": lambda c: exchange("zmq-tcp-curve" if c else "zmq-tcp", env, tmp, args.timeout),
            "allreduce-4KiB": lambda c: allreduce("zmq-tcp-curve" if c else "zmq-tcp", env, tmp, args.timeout),
            "quickstart": lambda c: quickstart(c, keys, args.epochs, tmp, args.timeout),
        }
        runs = {(k, c): [] for k in cases for c in (False, True)}
        for _ in range(args.reps):
            for k, f in cases.items():
                for c in (False, True):
                    runs[(k, c)].append(f(c))
    rows = []
    print(f"{'case':15} {'plain s':>10} {'curve s':>10} {'curve/plain':>12}")
    for k in cases:
        plain, curve = statistics.median(runs[(k, False)]), statistics.median(runs[(k, True)])
        rows.append({"case": k, "plain_seconds": plain, "curve_seconds": curve, "ratio": curve / plain,
                     "runs_plain": runs[(k, False)], "runs_curve": runs[(k, True)]})
        print(f"{k:15} {plain:10.6f} {curve:10.6f} {curve / plain:12.2f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "reps": args.reps,
                   "epochs": args.epochs, "rows": rows}, fh, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
