#!/usr/bin/python3
"""Churn soak: gossamer-train under seeded random kills, stops, restarts,
joins and a partition, beside a fault-free run of the same length.

For each algorithm the script starts the job (8 processes over ZeroMQ on
loopback, default settings, membership.max_world_size 12, epochs enough to
outlast the soak, the stop file set), and every 10-40 s (seeded) does one of:

  kill      kill -9 of a live rank (never the last four), restarted 1-3 s
            later with the README's command (`--job ID --rank R --rejoin`)
  stop      SIGSTOP of a live rank for 5-15 s, then SIGCONT
  join      a new process with `gossamer-train --join ID` (up to rank 11)

and one partition of ranks 0-3 from 4-7 for 10 s at a seeded time in the
first half (faults.partition, set when the job starts). No event comes in
the last 40 s. After --minutes it
creates the stop file: every rank stops after the epoch that sees it. Then
it checks, and writes to results/churn.json per algorithm:

  events           how many of each kind were injected (and the partition)
  hangs            processes still running 300 s after the stop file
  crashes          processes that exited with a status other than 0 and that
                   the script did not kill: every process it started, and
                   the launcher (crashed: each one's rank, exit status and
                   last error lines)
  hash_mismatches  AllReduce-SGD: epochs whose consensus distance (the
                   survivors' models, compared by an allreduce) is above
                   1e-9, that is whose models were not identical on every
                   member; other algorithms: null
  mass_error       SGP: |sum of the final view's push-sum weights - its
                   size| (every view change restarts the weights at 1, the
                   mixing keeps their sum); other algorithms: null
  rss_start_mib, rss_end_mib
                   resident memory of the job's rank processes, summed over
                   those running, 60 s after the start and just before the
                   stop file (the per-process mean is also given)
  accuracy, fault_free_accuracy
                   the final average model's test accuracy, and that of the
                   same job run as long without faults

Usage: scripts/churn.sh [--minutes 30] [--algorithms crossover,sgp,allreduce] [--seed 1]
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faults import rank_pids, write_results  # noqa: E402  (the launcher's rank processes, from /proc)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGORITHMS = {
    "crossover": "examples/configs/quickstart-crossover.yaml",
    "sgp": "examples/configs/sgp.yaml",
    "allreduce": "examples/configs/quickstart-allreduce.yaml",
}
WORLD, CAPACITY = 8, 12


def rss_kib(pid):
    """Resident memory of process `pid`, KiB (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def signal_quietly(pid, sig):
    """Sends `sig` to `pid` unless it is gone already (killed meanwhile)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def records(run_dir, rank):
    path = os.path.join(run_dir, f"rank-{rank}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().endswith("}")]


class Job:
    """One gossamer-train job and the processes started into it."""

    def __init__(self, binary, config, tmp, sets):
        self.binary, self.config, self.tmp, self.sets = binary, config, tmp, sets
        self.log_path = os.path.join(tmp, "log")
        self.log = open(self.log_path, "w")
        self.launcher = subprocess.Popen([binary, "--config", config, "--progress", "off"] + self.args(),
                                         stdout=self.log, stderr=subprocess.STDOUT)
        self.started = {}  # global rank -> Popen of the newest process started by the script
        self.all_started = []  # (global rank, Popen, log path) of every process started by the script
        self.killed = set()  # pids killed by the script
        self.job = None

    def args(self):
        return [a for kv in self.sets for a in ("--set", kv)]

    def job_id(self):
        while self.job is None:
            with open(self.log_path) as f:
                m = re.search(r"gossamer-train: job ([A-Za-z0-9]{6})", f.read())
            if m:
                self.job = m.group(1)
            elif self.launcher.poll() is not None:
                raise RuntimeError("the job ended before it printed its id")
            else:
                time.sleep(0.05)
        return self.job

    def pids(self):
        """Global rank -> pid of every live rank process."""
        out = rank_pids(self.launcher.pid)
        for rank, p in self.started.items():
            if p.poll() is None:
                out[rank] = p.pid
        return {r: pid for r, pid in out.items() if pid not in self.killed and rss_kib(pid) is not None}

    def start(self, how, rank):
        path = os.path.join(self.tmp, f"started-{rank}-{len(self.all_started)}.log")
        with open(path, "w") as log:
            self.started[rank] = subprocess.Popen([self.binary, "--config", self.config, "--progress", "off"] + how +
                                                  self.args(), stdout=log, stderr=subprocess.STDOUT)
        self.all_started.append((rank, self.started[rank], path))


def run(binary, config, minutes, rng, churn, timeout=300, keep=False):
    """Runs the job for `minutes`, with events if `churn`; returns the measurements.
    `keep`: leave the run's directory (logs, records) and print its path."""
    with tempfile.TemporaryDirectory() as scratch:
        tmp = tempfile.mkdtemp(prefix="gossamer-churn-") if keep else scratch
        if keep:
            print(f"keeping {tmp}", file=sys.stderr)
        run_dir, stop = os.path.join(tmp, "run"), os.path.join(tmp, "stop")
        sets = [f"world_size={WORLD}", "training.epochs=100000", f"run.dir={run_dir}", f"training.stop_file={stop}",
                f"membership.max_world_size={CAPACITY}"]
        events = {"kill": 0, "stop": 0, "join": 0, "partition": 0}
        if churn:
            at = rng.uniform(30, 60 * minutes / 2)
            sets += ["faults.enabled=true", "faults.partition=0,1,2,3|4,5,6,7",
                     f"faults.partition_start_seconds={at:.1f}", "faults.partition_seconds=10"]
            events["partition"] = 1
        job = Job(binary, os.path.join(ROOT, config), tmp, sets)
        timers = []
        start = time.time()
        rss_start = rss_end = None
        try:
            job_id = job.job_id()
            next_event = start + (rng.uniform(10, 40) if churn else 1e18)
            while time.time() - start < 60 * minutes:
                time.sleep(0.2)
                if job.launcher.poll() is not None and not any(p.poll() is None for p in job.started.values()):
                    break
                if rss_start is None and time.time() - start >= 60:
                    rss_start = [rss_kib(pid) for pid in job.pids().values()]
                # No event in the last 40 s: a process restarted or joining
                # then would still be loading the data set when the job ends.
                if time.time() < next_event or time.time() - start > 60 * minutes - 40:
                    continue
                next_event = time.time() + rng.uniform(10, 40)
                live = job.pids()
                kind = rng.choice(["kill", "stop", "join"])
                if kind == "join" and max(list(live) + list(job.started)) + 1 >= CAPACITY:
                    kind = "kill"
                if kind in ("kill", "stop") and len(live) <= 4:
                    continue
                events[kind] += 1
                if kind == "join":
                    job.start(["--join", job_id], max(list(live) + list(job.started)) + 1)
                    continue
                rank = rng.choice(sorted(live))
                pid = live[rank]
                if kind == "kill":
                    os.kill(pid, signal.SIGKILL)
                    job.killed.add(pid)
                    t = threading.Timer(rng.uniform(1, 3), job.start, (["--job", job_id, "--rank", str(rank),
                                                                       "--rejoin"], rank))
                else:
                    os.kill(pid, signal.SIGSTOP)
                    t = threading.Timer(rng.uniform(5, 15), signal_quietly, (pid, signal.SIGCONT))
                t.start()
                timers.append(t)
            for t in timers:
                t.join()
            rss_end = [rss_kib(pid) for pid in job.pids().values()]
            open(stop, "w").close()
            stopped = time.time()
            hangs = 0
            for p in [job.launcher] + [x[1] for x in job.all_started]:
                try:
                    p.wait(timeout=max(1.0, timeout - (time.time() - stopped)))
                except subprocess.TimeoutExpired:
                    hangs += 1
        finally:
            for p in [job.launcher] + [x[1] for x in job.all_started]:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            job.log.close()
        with open(job.log_path) as f:
            log = f.read()
        # The launcher reports rank processes it saw die; those the script
        # killed are not crashes. Started processes count by exit status.
        crashed = [(rank, p.returncode, path) for rank, p, path in job.all_started if p.returncode not in (0, -9, None)]
        crashes = len(crashed)
        if job.launcher.returncode not in (0, None):
            crashes += 1
        why = []  # each crashed process's last error lines
        for rank, code, path in crashed:
            with open(path) as f:
                errors = [l for l in f.read().splitlines() if "error" in l]
            why.append({"rank": rank, "exit": code, "errors": errors[-5:]})
        summary_path = os.path.join(run_dir, "summary.json")
        summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {}
        survivors = summary.get("survivors", [])
        history = summary.get("history", [])
        low = min(survivors) if survivors else 0
        epochs = [r for r in records(run_dir, low) if r["kind"] == "epoch"]
        mismatches = sum(1 for r in epochs if r.get("consensus_distance", 0) > 1e-9)
        weights = []
        for rank in survivors:
            steps = [r for r in records(run_dir, rank) if r["kind"] == "step" and "push_sum_weight" in r]
            if steps:
                weights.append(steps[-1]["push_sum_weight"])

        def mib(xs):
            xs = [x for x in (xs or []) if x is not None]
            return (sum(xs) / 1024, sum(xs) / 1024 / len(xs)) if xs else (None, None)

        return {"events": events, "hangs": hangs, "crashes": crashes, "exit": job.launcher.returncode,
                "epochs": len(history), "survivors": survivors, "accuracy": summary.get("test_accuracy"),
                "consensus_mismatch_epochs": mismatches,
                "mass_error": abs(sum(weights) - len(weights)) if len(weights) == len(survivors) and weights else None,
                "rss_start_mib": mib(rss_start), "rss_end_mib": mib(rss_end), "wall_seconds": time.time() - start,
                "log_tail": "\n".join(l for l in log.splitlines() if "error" in l)[-2000:], "crashed": why}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/apps/gossamer-train"))
    ap.add_argument("--algorithms", default="crossover,sgp,allreduce", help=f"of {','.join(ALGORITHMS)}")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/churn.json"))
    ap.add_argument("--hang-seconds", type=float, default=300,
                    help="how long the processes may take to end after the stop file")
    ap.add_argument("--keep", action="store_true", help="keep each run's directory (logs, records)")
    args = ap.parse_args()
    rows = []
    print(f"{'algorithm':10} {'kills':>5} {'stops':>5} {'joins':>5} {'hangs':>5} {'crashes':>7} {'mismatch':>8} "
          f"{'mass err':>8} {'RSS 1 min MiB':>13} {'RSS end MiB':>11} {'acc %':>6} {'fault-free %':>12}")
    for algo in args.algorithms.split(","):
        rng = random.Random(f"{args.seed}-{algo}")
        churned = run(args.binary, ALGORITHMS[algo], args.minutes, rng, True, args.hang_seconds, args.keep)
        clean = run(args.binary, ALGORITHMS[algo], args.minutes, rng, False, args.hang_seconds, args.keep)
        row = {"algorithm": algo, "config": ALGORITHMS[algo], "minutes": args.minutes, "seed": args.seed,
               "events": churned["events"], "hangs": churned["hangs"], "crashes": churned["crashes"],
               "exit_status": churned["exit"],
               "hash_mismatches": churned["consensus_mismatch_epochs"] if algo == "allreduce" else None,
               "mass_error": churned["mass_error"] if algo == "sgp" else None,
               "rss_start_mib": churned["rss_start_mib"][0], "rss_end_mib": churned["rss_end_mib"][0],
               "rss_start_mib_per_process": churned["rss_start_mib"][1],
               "rss_end_mib_per_process": churned["rss_end_mib"][1],
               "final_members": churned["survivors"], "epochs": churned["epochs"],
               "accuracy": churned["accuracy"], "fault_free_accuracy": clean["accuracy"],
               "fault_free_epochs": clean["epochs"], "crashed": churned["crashed"]}
        rows.append(row)
        e = row["events"]

        def f(v, fmt):
            return "-" if v is None else format(v, fmt)

        print(f"{algo:10} {e['kill']:5d} {e['stop']:5d} {e['join']:5d} {row['hangs']:5d} {row['crashes']:7d} "
              f"{f(row['hash_mismatches'], '8d')} {f(row['mass_error'], '8.2g')} "
              f"{f(row['rss_start_mib_per_process'], '13.1f')} {f(row['rss_end_mib_per_process'], '11.1f')} "
              f"{f(100 * row['accuracy'] if row['accuracy'] else None, '6.2f')} "
              f"{f(100 * row['fault_free_accuracy'] if row['fault_free_accuracy'] else None, '12.2f')}", flush=True)
        if churned["log_tail"]:
            print(churned["log_tail"], file=sys.stderr)
        for c in churned["crashed"]:
            print(f"crashed: a process of rank {c['rank']} (exit {c['exit']}): " + " | ".join(c["errors"]),
                  file=sys.stderr)
    write_results(args.out, rows)


if __name__ == "__main__":
    main()
