#!/usr/bin/python3
"""Runs the same Fashion-MNIST jobs on two test hosts (tests/hosts: network
namespaces joined by a 10 Gbit/s link, 4 ranks on each) over zmq tcp
everywhere and over the composite transport (a local transport between the
ranks of one host, zmq tcp between hosts), interleaved round by round, and
prints per job and transport the median seconds per epoch and its ratio to
all-zmq (below 1: the composite transport is faster). Writes
results/compare-composite.json: one row per (job, transport) with job,
transport, local, rounds, seconds_per_epoch (each round's), median_seconds_per_epoch,
ratio_to_zmq, final_accuracy (median) and ranks.

Needs root for the namespaces (scripts/hosts.sh); exits 77 where they cannot
be made.

    scripts/compare-composite.sh                 # 5 rounds of 3 epochs
    scripts/compare-composite.sh --rounds 2 --epochs 1 --jobs allreduce
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JOBS = {
    "allreduce": "examples/configs/quickstart-allreduce.yaml",
    "crossover": "examples/configs/quickstart-crossover.yaml",
}

# name -> (description of the local side, overrides)
TRANSPORTS = {
    "zmq": ("zmq tcp", ["transport.kind=zmq"]),
    "composite_zmq": ("zmq ipc", ["transport.kind=composite", "transport.local=zmq",
                                  "transport.local_protocol=ipc"]),
    "composite_socket": ("socket ipc", ["transport.kind=composite", "transport.local=socket",
                                        "transport.local_protocol=ipc"]),
    "composite_shm": ("libfabric shm", ["transport.kind=composite", "transport.local=libfabric",
                                        "transport.provider=shm"]),
}


def have_libfabric():
    build = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
    return os.path.exists(os.path.join(build, "transports", "libgossamer_transport_libfabric.a"))


def run(job, transport, args, work):
    summary = os.path.join(work, f"{job}-{transport}.json")
    cmd = [os.path.join(ROOT, "scripts/hosts.sh"), "--spec", args.spec, "--ranks-per-host", str(args.ranks_per_host),
           "--config", JOBS[job], "--summary-json", summary, "--timeout", str(args.timeout),
           "--set", f"training.epochs={args.epochs}"]
    for o in TRANSPORTS[transport][1] + args.set:
        cmd += ["--set", o]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode == 77:
        sys.stderr.write(p.stderr)
        sys.exit(77)
    if p.returncode != 0:
        raise RuntimeError(f"{job} over {transport} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-800:]}")
    with open(summary, encoding="utf-8") as f:
        s = json.load(f)
    print(f"   {job:<10} {transport:<14} {s['seconds_per_epoch']:.2f} s/epoch  {s['test_accuracy'] * 100:.2f}%",
          flush=True)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default=",".join(JOBS), help="comma-separated, of: " + ", ".join(JOBS))
    ap.add_argument("--transports", default=None,
                    help="comma-separated, of: " + ", ".join(TRANSPORTS) + " (default: all that are built)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--spec", default="tests/hosts/two-hosts.yaml")
    ap.add_argument("--ranks-per-host", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run")
    ap.add_argument("--timeout", type=int, default=900, help="bound on each run, seconds")
    ap.add_argument("--json", default="results/compare-composite.json")
    args = ap.parse_args()
    jobs = [j for j in args.jobs.split(",") if j]
    transports = ([t for t in args.transports.split(",") if t] if args.transports else
                  [t for t in TRANSPORTS if t != "composite_shm" or have_libfabric()])
    for name, known in (("job", JOBS), ("transport", TRANSPORTS)):
        bad = [x for x in (jobs if name == "job" else transports) if x not in known]
        if bad:
            ap.error(f"unknown {name}(s) {bad}; known: {', '.join(known)}")
    if "zmq" not in transports:
        ap.error("the comparison needs zmq (the baseline) among --transports")
    runs = {(j, t): [] for j in jobs for t in transports}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            print(f"== round {r + 1}/{args.rounds}", flush=True)
            for j in jobs:
                # Alternate which transport goes first, so neither always runs on a warmer machine.
                order = transports if r % 2 == 0 else list(reversed(transports))
                for t in order:
                    runs[(j, t)].append(run(j, t, args, work))
    rows = []
    print()
    print(f"{'job':<10} {'transport':<14} {'local side':<14} {'s/epoch (median)':>17} {'vs zmq':>7} {'accuracy':>9}")
    for j in jobs:
        base = statistics.median(s["seconds_per_epoch"] for s in runs[(j, "zmq")])
        for t in transports:
            secs = [s["seconds_per_epoch"] for s in runs[(j, t)]]
            med = statistics.median(secs)
            acc = statistics.median(s["test_accuracy"] for s in runs[(j, t)])
            rows.append({"job": j, "transport": t, "local": TRANSPORTS[t][0], "rounds": args.rounds,
                         "epochs": args.epochs, "seconds_per_epoch": secs, "median_seconds_per_epoch": med,
                         "ratio_to_zmq": med / base, "final_accuracy": acc,
                         "ranks": runs[(j, t)][0]["world_size"]})
            print(f"{j:<10} {t:<14} {TRANSPORTS[t][0]:<14} {med:>17.3f} {med / base:>7.3f} {acc * 100:>8.2f}%")
    out = os.path.join(ROOT, args.json)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
