#!/usr/bin/python3
"""The simulator against real runs: the same jobs on namespace hosts and in gossamer-sim.

For each network shape (--shapes) and each job (--jobs), per round (--rounds):

  real: scripts/hosts.sh runs the job (gossamer-train, one rank per network
        namespace host, links shaped with tc tbf, the delay between islands
        added by faults.island_delay) for one epoch of --train-limit samples,
        with metrics on (run.metrics_every 1) into a run directory;
  sim:  build/apps/gossamer-sim runs the same config, with the same overrides,
        on the platform of the same shape (--tbf: tc tbf's buckets, counting
        TCP's framing; --receive-unshaped: a host's ingress is not shaped
        there either) for as many steps as a whole run (--whole-run: the
        optimizer knows the last step, as the real run's session tells it), each rank
        replaying the compute_s that it recorded at each step of the real run
        (--compute-from), into a run directory of its own.

Both sides' seconds per step come from their run directories alike: per rank,
the time between its step records at step --skip and at its last step over
the steps between, averaged over ranks (the real records' time is the
machine's, the simulated ones' the simulation's). Rounds interleave real and
simulated runs job by job; with several rounds the medians are compared.

The real network's TCP regime: each tbf's queue (--queue-ms, default 100 ms
at its rate) and the hosts' initial TCP window (--initcwnd segments, default
the kernel's 10); --regimes QUEUE_MS[:INITCWND],... runs each job under
several, interleaved within each round, each against a simulation that
replays its own real run's compute.

Prints a table (shape, job, [regime,] real and simulated seconds per step, ratio,
error) and writes results/validate-sim.json: arguments, shapes, and rows
(shape, job, config, overrides, hosts, queue_ms, initcwnd, real_seconds_per_step,
sim_seconds_per_step, ratio (sim / real), error (|ratio - 1|), the rounds'
values, steps, real and simulated bytes sent, and the real runs' medians of
packets the islands' links dropped, TCP segments retransmitted and TCP
retransmission timeouts: scripts/hosts.sh --link-stats), and per shape the geometric
mean error (exp(mean(log(ratio)))'s distance from 1 taken per job's |log|),
the largest and the jobs within 15% (per shape and regime with --regimes).

    scripts/validate-sim.sh [--shapes a,b] [--jobs ring,crossover-sync,...] [--rounds 1]
        [--queue-ms 100] [--initcwnd N] [--regimes 100,1000,1000:300]
"""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

from sim_jobs import JOBS  # scripts/ is on the path when run as a script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
ISLANDS = [[0, 1, 2, 3], [4, 5, 6, 7]]

# name -> (inside_gbps, between_gbps, between_delay_ms)
SHAPES = {
    "lan-wan": (1.0, 0.1, 10.0),  # a 1 Gbit/s cluster, 100 Mbit/s and 10 ms to the other one
    "edge": (0.2, 0.05, 5.0),  # edge sites: 200 Mbit/s inside, 50 Mbit/s and 5 ms between
}

# The real network's regime unless told: tbf queues of 100 ms, the kernel's initial TCP window.
DEFAULT_REGIME = (100.0, None)

# What the real runs' links saw (hosts.sh --link-stats), summed over links or hosts.
LINK_COUNTERS = ("real_island_link_drops", "real_tcp_retransmitted_segments", "real_tcp_timeouts")


def seconds_per_step(run_dir, skip):
    """Mean over ranks of (time at last step - time at step `skip`) / steps between; steps; bytes sent."""
    rates, steps, sent = [], 0, 0
    files = sorted(glob.glob(os.path.join(run_dir, "rank-*.jsonl")))
    if not files:
        raise SystemExit(f"validate-sim: no rank-*.jsonl in {run_dir}")
    for path in files:
        done, points = 0, []
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("kind") != "step":
                    continue
                done += r.get("steps", 1)
                points.append((done, r["time"]))
                sent += sum(r.get("sent_bytes", {}).values())
        window = [p for p in points if p[0] >= skip]
        if len(window) < 2:
            raise SystemExit(f"validate-sim: {path} has {done} steps, too few after step {skip}")
        (s0, t0), (s1, t1) = window[0], window[-1]
        rates.append((t1 - t0) / (s1 - s0))
        steps = max(steps, done)
    return statistics.mean(rates), steps, sent


def run(cmd, what, timeout):
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"validate-sim: {what} failed ({p.returncode})")
    return p.stdout


def network_sets(shape):
    inside, between, delay = SHAPES[shape]
    return [f"network.islands={json.dumps(ISLANDS, separators=(',', ':'))}", f"network.inside_gbps={inside:g}",
            f"network.between_gbps={between:g}", f"network.between_delay_ms={delay:g}"]


def write_spec(path, shape, delay_ms=None):
    """Writes the hosts spec (tests/hosts/hosts.py) of `shape`: 8 hosts in ISLANDS, the shape's rates, its delay
    between islands or `delay_ms`; returns `path`."""
    inside, between, delay = SHAPES[shape]
    with open(path, "w") as f:
        f.write(f"world_size: 8\nnetwork:\n  islands: {json.dumps(ISLANDS)}\n  inside_gbps: {inside:g}\n"
                f"  between_gbps: {between:g}\n  between_delay_ms: {delay if delay_ms is None else delay_ms:g}\n")
    return path


def parse_regimes(text, what="validate-sim: --regimes"):
    """`--regimes` "100,1000,1000:300": each item a tbf queue in ms and, after a colon, an initial TCP window in
    segments (none: the kernel's); a list of (queue_ms, initcwnd or None). Refuses bad items, naming `what`."""
    regimes = []
    for item in text.split(","):
        queue, _, window = item.partition(":")
        try:
            regime = (float(queue), int(window) if window else None)
        except ValueError:
            raise SystemExit(f"{what} item '{item}': QUEUE_MS or QUEUE_MS:SEGMENTS") from None
        if not 1 <= regime[0] <= 60000 or (regime[1] is not None and not 1 <= regime[1] <= 1000):
            raise SystemExit(f"{what} item '{item}': a queue in [1, 60000] ms, a window in "
                             "[1, 1000] segments")
        if regime in regimes:
            raise SystemExit(f"{what} item '{item}' is listed twice")
        regimes.append(regime)
    return regimes


def regime_name(regime):
    """"queue 100 ms" or "queue 1000 ms, initcwnd 300"."""
    queue, window = regime
    return f"queue {queue:g} ms" + (f", initcwnd {window}" if window else "")


def one_round(shape, job, tmp, args, k, regime):
    """Round `k` of `job` on `shape` under `regime` (queue ms, initcwnd): its real run on the namespace hosts, then
    its simulation replaying that run's compute; their seconds per step, steps, bytes and link counters."""
    config, sets = JOBS[job]
    cfg = os.path.join(ROOT, "examples", "configs", config + ".yaml")
    common = sets + ["training.epochs=1", f"data.train_limit={args.train_limit}", "data.test_limit=200",
                     "run.metrics=true", "run.metrics_every=1", "membership.enabled=false"]
    spec = write_spec(os.path.join(tmp, f"{shape}.yaml"), shape)
    queue_ms, initcwnd = regime
    tag = "" if regime == DEFAULT_REGIME else f"-q{queue_ms:g}" + (f"-w{initcwnd}" if initcwnd else "")
    real_dir = os.path.join(tmp, f"real-{shape}-{job}{tag}-{k}")
    links = real_dir + ".links.json"
    cmd = ["bash", "scripts/hosts.sh", "--spec", spec, "--config", cfg, "--timeout", "600",
           "--summary-json", os.path.join(tmp, "summary.json"), "--link-stats", links, "--queue-ms",
           f"{queue_ms:g}"]
    if initcwnd:
        cmd += ["--initcwnd", str(initcwnd)]
    for s in common + [f"run.dir={real_dir}"]:
        cmd += ["--set", s]
    if not (args.reuse and glob.glob(os.path.join(real_dir, "rank-*.jsonl"))):
        run(cmd, f"the real run of {job} on {shape}", 700)
    real, steps, real_sent = seconds_per_step(real_dir, args.skip)
    seen = {}
    if os.path.exists(links):  # (real runs kept from before link stats have none)
        with open(links) as f:
            seen = json.load(f)

    sim_dir = os.path.join(tmp, f"sim-{shape}-{job}{tag}-{k}")
    for old in glob.glob(os.path.join(sim_dir, "*")):
        os.remove(old)
    cmd = [os.path.join(BUILD, "apps", "gossamer-sim"), cfg, "--world-size", "8", "--steps", str(steps),
           "--receive-unshaped", "--tbf", "--whole-run", "--inside-latency-us", f"{args.inside_latency_us:g}",
           "--compute-from", real_dir]
    for c in args.cfg:
        cmd += ["--cfg", c]
    for s in common + network_sets(shape) + [f"run.dir={sim_dir}"]:
        cmd += ["--set", s]
    run(cmd, f"the simulation of {job} on {shape}", 600)
    sim, _, sim_sent = seconds_per_step(sim_dir, args.skip)
    return {"real": real, "sim": sim, "steps": steps, "real_bytes_sent": real_sent, "sim_bytes_sent": sim_sent,
            "overrides": sets, "real_island_link_drops": sum(seen.get("island_link_drops", [])),
            "real_tcp_retransmitted_segments": sum(seen.get("tcp_retransmitted_segments", [])),
            "real_tcp_timeouts": sum(seen.get("tcp_timeouts", []))}


def job_row(shape, job, regime, rounds):
    """One job's row on one shape under one regime: the medians of its rounds and their ratio."""
    real = statistics.median(r["real"] for r in rounds)
    sim = statistics.median(r["sim"] for r in rounds)
    ratio = sim / real
    return {"shape": shape, "job": job, "config": JOBS[job][0], "overrides": JOBS[job][1], "hosts": 8,
            "inside_gbps": SHAPES[shape][0], "between_gbps": SHAPES[shape][1],
            "between_delay_ms": SHAPES[shape][2], "queue_ms": regime[0], "initcwnd": regime[1],
            "real_seconds_per_step": real, "sim_seconds_per_step": sim, "ratio": ratio, "error": abs(ratio - 1),
            "real_rounds": [r["real"] for r in rounds], "sim_rounds": [r["sim"] for r in rounds],
            "steps": rounds[0]["steps"], "real_bytes_sent": rounds[0]["real_bytes_sent"],
            "sim_bytes_sent": rounds[0]["sim_bytes_sent"],
            **{key: statistics.median(r[key] for r in rounds) for key in LINK_COUNTERS}}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--train-limit", type=int, default=16000, help="training samples (8 ranks x 32: 62 steps)")
    ap.add_argument("--skip", type=int, default=5, help="steps before the timed window")
    ap.add_argument("--queue-ms", type=float, default=None,
                    help="the real runs' tbf queues, milliseconds at their rates (hosts.sh --queue-ms; default 100)")
    ap.add_argument("--initcwnd", type=int, default=None,
                    help="the real runs' TCP connections start with a window of this many segments "
                    "(hosts.sh --initcwnd; default: the kernel's, 10)")
    ap.add_argument("--regimes", default=None,
                    help="run each job under several real-network regimes, interleaved: QUEUE_MS[:INITCWND],... "
                    "(replaces --queue-ms and --initcwnd; e.g. 100,1000,1000:300)")
    ap.add_argument("--inside-latency-us", type=float, default=30)
    ap.add_argument("--cfg", action="append", default=None,
                    help="SimGrid --cfg items (default: latency and bandwidth factors 1: --tbf counts TCP's "
                    "framing itself; cross traffic on, SimGrid's stand-in for TCP's acknowledgements)")
    ap.add_argument("--keep", help="keep the run directories under this directory")
    ap.add_argument("--reuse", action="store_true",
                    help="with --keep: simulate again against the real runs kept there instead of running them")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "validate-sim.json"))
    args = ap.parse_args(argv)
    if args.cfg is None:
        args.cfg = ["network/latency-factor:1", "network/bandwidth-factor:1"]
    if args.regimes and (args.queue_ms is not None or args.initcwnd is not None):
        raise SystemExit("validate-sim: --regimes replaces --queue-ms and --initcwnd; give one or the other")
    queue_ms = DEFAULT_REGIME[0] if args.queue_ms is None else args.queue_ms
    args.regimes = parse_regimes(args.regimes or f"{queue_ms:g}" + (
        f":{args.initcwnd}" if args.initcwnd is not None else ""))
    shapes, jobs = args.shapes.split(","), args.jobs.split(",")
    for s in shapes:
        if s not in SHAPES:
            raise SystemExit(f"validate-sim: unknown shape {s} ({', '.join(SHAPES)})")
    for j in jobs:
        if j not in JOBS:
            raise SystemExit(f"validate-sim: unknown job {j} ({', '.join(JOBS)})")

    rows = []
    several = len(args.regimes) > 1
    regime_head = f" {'regime':<28}" if several else ""
    print(f"{'shape':<8} {'job':<30}{regime_head} {'real s/step':>12} {'sim s/step':>12} {'ratio':>7} {'error':>7}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="validate-sim-") as scratch:
        tmp = os.path.abspath(args.keep) if args.keep else scratch
        os.makedirs(tmp, exist_ok=True)
        for shape in shapes:
            for job in jobs:
                rounds = {g: [] for g in args.regimes}
                for k in range(args.rounds):  # the regimes interleave round by round
                    for g in args.regimes:
                        rounds[g].append(one_round(shape, job, tmp, args, k, g))
                for g in args.regimes:
                    row = job_row(shape, job, g, rounds[g])
                    rows.append(row)
                    named = f" {regime_name(g):<28}" if several else ""
                    print(f"{shape:<8} {job:<30}{named} {row['real_seconds_per_step']:12.4f} "
                          f"{row['sim_seconds_per_step']:12.4f} {row['ratio']:7.3f} {row['error']:7.1%}", flush=True)
    summary = {}
    for shape in shapes:
        for g in args.regimes:
            key = f"{shape}, {regime_name(g)}" if several else shape
            of = [r for r in rows if r["shape"] == shape and (r["queue_ms"], r["initcwnd"]) == g]
            logs = [abs(math.log(r["ratio"])) for r in of]
            summary[key] = {"geometric_mean_error": math.exp(statistics.mean(logs)) - 1,
                            "max_error": max(r["error"] for r in of), "jobs": len(logs),
                            "within_15_percent": sum(1 for r in of if r["error"] <= 0.15)}
            print(f"{key}: geometric mean error {summary[key]['geometric_mean_error']:.1%}, "
                  f"largest {summary[key]['max_error']:.1%} over {len(logs)} jobs")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"arguments": vars(args), "shapes": {k: dict(zip(["inside_gbps", "between_gbps",
                                                                    "between_delay_ms"], v))
                                                        for k, v in SHAPES.items() if k in shapes},
                   "regimes": [{"queue_ms": q, "initcwnd": w, "name": regime_name((q, w))} for q, w in args.regimes],
                   "summary": summary, "rows": rows}, f, indent=1)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
