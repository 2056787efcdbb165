#!/usr/bin/python3
"""Simulated consensus against the mixing analysis: per-step contraction at scale.

For each topology (--topologies; its gossip config: fair_roulette and
bandwidth_roulette under Crossover-SGD, directed_exponential under SGP) at
--world-size ranks in islands of 64 (10 Gbit/s and 20 us inside, 1 Gbit/s and
20 ms between), gossamer-sim runs --steps steps with no gradient and records
the consensus distance d_k after each step. The measured per-step contraction
is the geometric mean of d_{k+1}^2 / d_k^2 over the steps before d falls
below 1e-6 of its start. The prediction is build/apps/gossamer-topology's
mean-square rate per round averaged over directions (ms-avg: the mean
eigenvalue of (I - J) E[W^T (I - J) W] (I - J) on the disagreement space)
of the same topology, world size, segments and seed, estimated over
--rounds rounds; its worst direction's rate (ms-rate) is kept beside it.
Those two hold for any start; the run starts from one (rank r at r), which
for topologies that mix unevenly (islands, a cycle of offsets) lies along
directions that shrink at neither rate. So the analysis is also applied to
that start: gossamer-topology --from-ramp moves the run's sampled elements by
the topology's mixing matrices, step by step, and its contraction (same
definition) is the prediction the run is compared with.

Writes results/sim-mixing.json (rows: topology, config, world size, steps,
consensus distances, measured contraction, the predicted ones (averaged
and worst direction; from the run's start, with its distances), the ratio of
the measured to the one from the run's start,
simulated seconds per step, wall seconds of the simulation and of the
analysis) and prints a table.

    scripts/sim-mixing.sh [--world-size 1024] [--steps 20] [--rounds 100] [--topologies a,b]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

from sim_jobs import from_ramp_distances  # scripts/ is on the path when run as a script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
CONFIGS = {
    "fair_roulette": "quickstart-crossover",
    "bandwidth_roulette": "bandwidth-roulette",
    "directed_exponential": "sgp",
}


def measured_rate(distances):
    d0 = distances[0]
    pairs = [(a, b) for a, b in zip(distances, distances[1:]) if a > 1e-6 * d0 and b > 1e-6 * d0]
    if not pairs:
        return None, 0
    logs = [2 * math.log(b / a) for a, b in pairs]
    return math.exp(sum(logs) / len(logs)), len(pairs)


def predicted_rate(topology, n, islands, segments, rounds, seed):
    exe = os.path.join(BUILD, "apps", "gossamer-topology")
    cmd = [exe, "--world-size", str(n), "--steps", "1", "--segments", str(segments), "--seed", str(seed),
           "--topology", topology, "--expected", str(rounds), "--set", f"network.islands={islands}",
           "--set", "network.inside_gbps=10", "--set", "network.between_gbps=1"]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - t0
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == topology and len(fields) >= 5 and re.match(r"^[0-9.]+$", fields[4]):
            return float(fields[3]), float(fields[4]), wall
    raise SystemExit(f"sim-mixing: no expected-mixing row for {topology} in gossamer-topology's output")


def ramp_distances(topology, n, islands, segments, steps, seed):
    """gossamer-topology --from-ramp on this script's network: distances after each step, and wall seconds."""
    t0 = time.monotonic()
    d = from_ramp_distances(topology, n, segments, steps, seed,
                            [f"network.islands={islands}", "network.inside_gbps=10", "network.between_gbps=1"])
    return d, time.monotonic() - t0


def equal_islands(n, per):
    k = max(1, n // per)
    return "[" + ",".join("[" + ",".join(str(r) for r in range(i * per, min(n, (i + 1) * per))) + "]"
                          for i in range(k)) + "]"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--topologies", default=",".join(CONFIGS))
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "sim-mixing.json"))
    args = ap.parse_args(argv)
    n = args.world_size
    islands = equal_islands(n, 64)
    rows = []
    print(f"{'topology':<22} {'ranks':>6} {'measured':>9} {'from ramp':>9} {'ratio':>6} {'sim s/step':>10} "
          f"{'sim wall s':>10}", flush=True)
    for topology in args.topologies.split(","):
        config = CONFIGS[topology]
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [os.path.join(BUILD, "apps", "gossamer-sim"), f"examples/configs/{config}.yaml", "--world-size",
                   str(n), "--steps", str(args.steps), "--step-seconds", "0.05", "--inside-latency-us", "20",
                   "--set", f"network.islands={islands}", "--set", "network.inside_gbps=10",
                   "--set", "network.between_gbps=1", "--set", "network.between_delay_ms=20",
                   "--set", "run.metrics=false", "--json", out.name]
            subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
            with open(out.name) as f:
                sim = json.load(f)
        rate, used = measured_rate(sim["consensus_distance"])
        seed = 42
        segments = 4 if topology != "directed_exponential" else 1
        worst, predicted, analysis_wall = predicted_rate(topology, n, islands, segments, args.rounds, seed)
        ramp, ramp_wall = ramp_distances(topology, n, islands, segments, args.steps, seed)
        ramp_rate, _ = measured_rate(ramp)
        ratio = rate / ramp_rate if rate is not None and ramp_rate else None
        rows.append({"topology": topology, "config": config, "world_size": n, "steps": args.steps,
                     "segments": segments, "consensus_distance": sim["consensus_distance"],
                     "measured_rate": rate, "steps_used": used, "predicted_rate": predicted,
                     "predicted_worst_rate": worst, "ramp_distance": ramp, "ramp_rate": ramp_rate,
                     "ramp_wall_seconds": ramp_wall, "ratio": ratio,
                     "simulated_seconds_per_step": sim["simulated_seconds_per_step"],
                     "sim_wall_seconds": sim["wall_seconds"], "analysis_wall_seconds": analysis_wall,
                     "rounds": args.rounds})
        shown = f"{rate:9.4f}" if rate is not None else "        -"
        print(f"{topology:<22} {n:>6} {shown} {ramp_rate or 0:9.4f} "
              f"{(f'{ratio:6.3f}' if ratio is not None else '     -')} {sim['simulated_seconds_per_step']:10.3f} "
              f"{sim['wall_seconds']:10.1f}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
