#!/usr/bin/python3
"""Every training algorithm simulated at scale, ranked by time to agreement (docs/scale.md).

For each world size (--world-sizes) and each job of sim_jobs.JOBS (--jobs),
gossamer-sim runs the job's config with its overrides on islands of 64 ranks
(fewer ranks: one island): 10 Gbit/s and 20 us inside an island, 1 Gbit/s and
20 ms into each island, 50 ms of compute per step, --steps steps, the model of
the config (101,770 float32); the AllReduce-SGD jobs, which agree after
every step, run --replicated-steps steps. --allreduce replaces the other
jobs' allreduce (DiLoCo's outer step, A2SGD's). Each run has --timeout seconds of wall time; one
that takes longer is killed and reported as such.

Ranks start apart (rank r at r), so the consensus distance starts at
sqrt((N^2 - 1) / 12); a job's time to agreement is the simulated time at which
every rank had finished the first step after which the distance was at most
--target times that (a replicated model, AllReduce-SGD's, agrees after its
first step). A job whose consensus follows gossamer-topology's mixing
analysis of its start (--from-ramp) step for step (FOLLOWS_RAMP:
Crossover-SGD's sync mode; its overlap mode one step later; A2SGD at every
sync_period-th step) and that stops short of it (--steps-for a job too slow
to simulate for long) gets the steps that the analysis needs, mapped to the
job's steps, and a time for them: its first step as simulated, then the rest
at the simulated rate of the steps after the first (over whole sync periods
for A2SGD, whose run then needs 1 + a multiple of sync_period steps). Jobs
that do not get there within the steps run are listed last. --merge puts an earlier run's
rows first (a world size run apart). --cfg hands SimGrid configuration items
to every run (docs/scale.md runs with network/crosstraffic:0).

Prints a table and writes results/sim-scale.json: arguments and rows (job,
config, overrides, world_size, islands, algorithm, topology, simulated seconds
per step (gossamer-sim's, to the last rank's return, a final flush included),
step_end_seconds (when every rank had finished each step), consensus_distance per step, initial_distance,
consensus_distance_after_100_steps (null where fewer steps ran), steps_to_target, seconds_to_target, bytes
sent and between islands, wall seconds, peak resident bytes, timed_out).

    scripts/sim-scale.sh [--world-sizes 64,256] [--jobs sgp,...] [--steps 20] [--steps-at 256=100]
                         [--cfg network/crosstraffic:0] [--target 0.01]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

# scripts/ is on the path when run as a script
from sim_jobs import JOBS, REPLICATED, from_ramp_distances, start_distance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
ISLAND = 64  # ranks per island from 128 ranks on
# Gossip jobs whose consensus, trained on a zero gradient, is the topology's
# mixing applied to the start: job -> (topology, segments, delay, period).
# The analysis's mixing round k (1, 2, ...) is the job's step delay + period k.
# Crossover-SGD's sync mode mixes within each step; its overlap mode finishes
# step k's round at step k + 1 from a snapshot that, with no local progress,
# is the model itself; A2SGD's models move only at its model exchange, one
# Crossover-SGD round every sync_period (50) steps
# (examples/configs/a2sgd-gossip.yaml). tests/sim_follows_mixing.sh checks
# all three at 64 ranks; their configs' seed is 42.
FOLLOWS_RAMP = {"crossover-sync": ("fair_roulette", 4, 0, 1), "crossover-overlap": ("fair_roulette", 4, 1, 1),
                "a2sgd": ("fair_roulette", 4, 0, 50)}


def time_to_target(row, target):
    """(steps, simulated seconds) until the distance is at most target x initial; (None, None) if never."""
    if row["replicated_model"]:
        return 1, row["step_end_seconds"][0]
    for s, d in enumerate(row["consensus_distance"]):
        if d <= target * row["initial_distance"]:
            return s + 1, row["step_end_seconds"][s]
    return None, None


def step_seconds(row):
    """Simulated seconds per step until every rank had finished its last step (a final flush left out)."""
    return row["step_end_seconds"][-1] / len(row["step_end_seconds"])


def ramp_steps_to_target(topology, segments, n, seed, target, most):
    """Steps until gossamer-topology --from-ramp's distance is at most target x its start (None: not in most)."""
    d = from_ramp_distances(topology, n, segments, most, seed)
    return next((k + 1 for k, v in enumerate(d) if v <= target * start_distance(n)), None)


def run_job(job, n, args, tmp):
    config, sets = JOBS[job]
    steps = args.replicated_steps if job in REPLICATED else args.steps_at.get(n, args.steps)
    steps = args.steps_for.get(f"{job}@{n}", args.steps_for.get(job, steps))
    if args.allreduce and job not in REPLICATED:
        sets = [s for s in sets if not s.startswith("collectives.allreduce=")] + [
            f"collectives.allreduce={args.allreduce}"]
    islands = n // ISLAND if n >= 2 * ISLAND else 1
    out = os.path.join(tmp, f"{job}-{n}.json")
    cmd = ["/usr/bin/time", "-f", "%M", os.path.join(BUILD, "apps", "gossamer-sim"),
           os.path.join(ROOT, "examples", "configs", config + ".yaml"),
           "--world-size", str(n), "--islands", str(islands), "--steps", str(steps),
           "--step-seconds", "0.05", "--inside-latency-us", "20", "--json", out,
           "--set", "network.inside_gbps=10", "--set", "network.between_gbps=1",
           "--set", "network.between_delay_ms=20"]
    for s in sets:
        cmd += ["--set", s]
    for c in args.cfg:
        cmd += ["--cfg", c]
    row = {"job": job, "config": config, "overrides": sets, "world_size": n, "islands": islands,
           "steps": steps, "timed_out": False}
    t0 = time.monotonic()
    # A session of its own, so that a run past the timeout is killed whole
    # (/usr/bin/time and gossamer-sim under it).
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        row.update(timed_out=True, wall_seconds=time.monotonic() - t0)
        return row
    if p.returncode != 0:
        sys.stderr.write(stdout[-2000:] + stderr[-4000:])
        raise SystemExit(f"sim-scale: {job} at {n} ranks failed ({p.returncode})")
    with open(out) as f:
        result = json.load(f)
    row.update(result)
    row["job"] = job
    row["peak_resident_bytes"] = int(stderr.strip().splitlines()[-1]) * 1024
    row["initial_distance"] = 0.0 if result["replicated_model"] else start_distance(n)
    row["steps_to_target"], row["seconds_to_target"] = time_to_target(row, args.target)
    d = row["consensus_distance"]
    row["consensus_distance_after_100_steps"] = d[99] if len(d) >= 100 else None
    # A job of FOLLOWS_RAMP whose run stopped short of the target: its
    # consensus follows the mixing analysis applied to its start exactly
    # (docs/scale.md), which says how many steps it would take.
    if row["seconds_to_target"] is None and job in FOLLOWS_RAMP:
        topology, segments, delay, period = FOLLOWS_RAMP[job]
        k = ramp_steps_to_target(topology, segments, n, 42, args.target, 60)
        row["predicted_steps_to_target"] = None if k is None else delay + period * k
        # The first step as simulated, then the rate of the steps after it:
        # a first step can differ (an overlap step has no round to finish),
        # and A2SGD's rate holds only over whole periods, each with its model
        # exchange, so its run is a period longer than the first step.
        t = row["step_end_seconds"]
        if k is not None and len(t) >= 2 and (len(t) - 1) % period == 0:
            rate = (t[-1] - t[0]) / (len(t) - 1)
            row["predicted_seconds_to_target"] = t[0] + (row["predicted_steps_to_target"] - 1) * rate
    return row


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world-sizes", default="64,256")
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--replicated-steps", type=int, default=2, help="steps of the AllReduce-SGD jobs")
    ap.add_argument("--allreduce", default="",
                    help="the allreduce of the other jobs (default: theirs, ring; at thousands of ranks a ring "
                         "allreduce is 2(N-1) rounds of N messages)")
    ap.add_argument("--target", type=float, default=0.01, help="agreement: distance at most this x the initial")
    ap.add_argument("--timeout", type=float, default=600, help="wall seconds per job")
    ap.add_argument("--steps-at", action="append", default=[], metavar="RANKS=N",
                    help="--steps at one world size (repeatable)")
    ap.add_argument("--steps-for", action="append", default=[], metavar="JOB[@RANKS]=N",
                    help="steps of one job (at one world size), whatever the others run (repeatable)")
    ap.add_argument("--cfg", action="append", default=[], metavar="KEY:VALUE",
                    help="a SimGrid configuration item for every run (gossamer-sim --cfg; repeatable)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "sim-scale.json"))
    ap.add_argument("--merge", default="", help="a results file of an earlier run whose rows come first")
    args = ap.parse_args(argv)
    args.steps_for = {k: int(v) for k, v in (x.split("=", 1) for x in args.steps_for)}
    args.steps_at = {int(k): int(v) for k, v in (x.split("=", 1) for x in args.steps_at)}
    sizes = [int(x) for x in args.world_sizes.split(",")]
    jobs = args.jobs.split(",")
    for j in jobs:
        if j not in JOBS:
            raise SystemExit(f"sim-scale: unknown job {j} ({', '.join(JOBS)})")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rows = []
    if args.merge:
        with open(args.merge) as f:
            earlier = json.load(f)
        rows = earlier["rows"]
        args.merged = earlier["arguments"]
    print(f"{'ranks':>6} {'job':<30} {'s/step':>8} {'to target':>10} {'steps':>5} {'wall s':>7} {'GB':>5}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            for job in jobs:
                r = run_job(job, n, args, tmp)
                rows.append(r)
                with open(args.out, "w") as f:  # so far
                    json.dump({"arguments": vars(args), "rows": rows}, f, indent=1)
                if r["timed_out"]:
                    print(f"{n:>6} {job:<30} killed after {r['wall_seconds']:.0f} s of wall time", flush=True)
                    continue
                to = "never" if r["seconds_to_target"] is None else f"{r['seconds_to_target']:.3f}"
                if r.get("predicted_seconds_to_target") is not None:
                    to = f"~{r['predicted_seconds_to_target']:.3f}"
                print(f"{n:>6} {job:<30} {step_seconds(r):>8.3f} {to:>10} "
                      f"{r['steps_to_target'] or '-':>5} {r['wall_seconds']:>7.1f} "
                      f"{r['peak_resident_bytes'] / 1e9:>5.1f}", flush=True)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
