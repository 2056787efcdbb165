#!/usr/bin/python3
"""Fault scenarios on gossamer-train: peers killed, stopped, for each algorithm.

For every algorithm the script runs the job once without faults (the
baseline, same seed) and once per scenario, 8 peer processes over ZeroMQ on
loopback with default settings (the membership service is on), and injects the fault from outside
with signals, after the first epoch, at fractions of the rest of the
baseline's training time:

  kill-1     kill -9 of one peer (rank 3) at 30%
  kill-3     kill -9 of ranks 3, 5, 6 at 10%, 30% and 50%
  partition  ranks 0-3 and 4-7 cut off from each other for 10 s from 1.5
             epochs in (faults.partition): both halves go on as two views;
             when it heals, the half whose view is older joins the other
  stop-10s   SIGSTOP of rank 3 at 5% for 10 s, then SIGCONT (the others
             remove it after membership.suspect_seconds and take it back
             when it resumes and asks: it finishes with them)
  rejoin     kill -9 of rank 3 at 30%, and 2 s later a new process for
             rank 3 (gossamer-train --rank 3 --rejoin): it loads its newest
             checkpoint (checkpoint.every_steps 100), asks to join, receives
             the model and finishes with the others
  join       membership.max_world_size 10: at 30% a process started with
             `gossamer-train --join ID` (the id the launcher printed), 2 s
             later a second one: ranks 8 and 9 are taken in and finish with
             the others (10 survivors)
  restart-defaults
             kill -9 of rank 3 at 30%, and 2 s later the README's command
             (`gossamer-train --job ID --rank 3 --rejoin`) with nothing else
             set: no checkpoint, the job's defaults
  stop-defaults
             SIGSTOP of rank 3 at 5% for 10 s with the defaults
  stop-60s   SIGSTOP of rank 3 at 5% for 60 s with the defaults (past the
             transport's timeout): it is removed, and taken back when it
             resumes; the job trains eight times the epochs so that it
             outlasts the stop (its accuracy is not comparable with the
             fault-free run's)
  repeated-kills
             --kills (20) kills -9 in one job, each of one of ranks 1-7 (a seeded
             order, every rank in turn), each followed 2 s later by the
             README's restart command for it, at least 8 s apart; every other
             kill is aimed at the end of an epoch (0-300 ms before the next
             epoch line the launcher is predicted to print, from the period
             of the last ones: inside the epoch's flush, in async mode its
             agreement), the others at a random point of an epoch; the job
             trains as many epochs as that takes (not in the default list;
             accuracy not comparable with the fault-free run's). The row
             gives every kill's every_stepped time, how many were aimed at
             an epoch's end, and how many times a survivor's agreement saw a
             rank fail ("cannot agree" in the logs)
  none       the fault-free run itself, as a row (not in the default list)
  straggler  rank 3 sleeps after each step for 9 of the fault-free run's
             step times: a 10x straggler (not in the default list)

Algorithms: crossover, sgp, hierarchical, allreduce (the default list),
sgp-async, crossover-async, hierarchical-async and hierarchical-sgp-async
(algorithm.mode=async; the last with SGP between the group leaders),
diloco, d2, gradient-tracking and qgm-async (quasi_global_momentum, async).
For SGP the rows also give the lowest and highest push-sum weight of any
rank after any step.

It prints one row per (algorithm, scenario) and writes results/faults.json
with the fields: algorithm, scenario, world_size, survivors,
survivors_finished (every surviving rank completed every epoch, exit status
0), test_accuracy (the survivors' average model), baseline_accuracy,
detection_seconds (from the fault until the survivors started the view
change), resume_seconds (from the fault until the new view was installed on
the rank that wrote the summary), every_stepped_seconds (from the fault
until every member of the first view without the lost rank had completed a
step in it, from the ranks' step records: what users feel; the worst over
the run's faults, every_stepped_p50_seconds their median, and
every_stepped_per_fault each), steps_lost (steps the ranks furthest
behind skipped to realign), steps_per_second (survivors' mean over the run)
and baseline_steps_per_second; for rejoin also reconverge_steps: steps from
the rejoin to the end of the first epoch whose consensus distance is back at
or below the largest one the fault-free run had up to that epoch (epoch
granularity); view_changes (view records of the lowest surviving rank);
joins: for each rank taken in (join, restart-defaults, rejoin) the seconds
from its process's start until the view that took it in was installed
(seconds), and from its start record (written once it has loaded the data
and built its model: from_ready_seconds);
step rates of the lowest surviving rank over the 5 s before the first fault
and the 5 s after every survivor stepped again (rate_before, rate_after).

--transport socket (or libfabric-tcp, or a comma-separated list, run in
turn) runs every job over the native socket transport (or libfabric's tcp
provider) instead of ZeroMQ (the "transport" field of each row).

Usage: scripts/faults.sh [--algorithms crossover,sgp,hierarchical,allreduce] [--transport zmq|socket|libfabric-tcp]
                         [--scenarios kill-1,kill-3,stop-10s,rejoin,partition,join,restart-defaults,
                                      stop-defaults,stop-60s,repeated-kills] [--epochs N] [--kills 20]
       scripts/faults.sh --algorithms sgp,sgp-async --scenarios none,straggler,kill-1 --epochs 20
       scripts/faults.sh --algorithms crossover,crossover-async,sgp,sgp-async,hierarchical,allreduce \
                         --scenarios repeated-kills
"""
import argparse
import glob
import json
import math
import re
import statistics
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --transport name -> its --set overrides
TRANSPORTS = {
    "zmq": ("transport.kind=zmq",),
    "socket": ("transport.kind=socket",),
    "libfabric-tcp": ("transport.kind=libfabric", "transport.provider=tcp"),
}

# name -> (config, --set overrides)
ALGORITHMS = {
    "crossover": ("examples/configs/quickstart-crossover.yaml", ()),
    "sgp": ("examples/configs/sgp.yaml", ()),
    "hierarchical": ("examples/configs/hierarchical.yaml", ()),
    "allreduce": ("examples/configs/quickstart-allreduce.yaml", ()),
    "sgp-async": ("examples/configs/sgp.yaml", ("algorithm.mode=async",)),
    "crossover-async": ("examples/configs/quickstart-crossover.yaml", ("algorithm.mode=async",)),
    "hierarchical-async": ("examples/configs/hierarchical.yaml", ("algorithm.mode=async",)),
    "hierarchical-sgp-async": ("examples/configs/hierarchical.yaml",
                               ("algorithm.mode=async", "algorithm.inter_algorithm=sgp")),
    "diloco": ("examples/configs/quickstart-diloco.yaml", ()),
    "d2": ("examples/configs/quickstart-crossover.yaml",
           ("algorithm.name=d2", "topology.kind=ring", "topology.self_weight=0.5")),
    "gradient-tracking": ("examples/configs/quickstart-crossover.yaml", ("algorithm.name=gradient_tracking",)),
    "qgm-async": ("examples/configs/quickstart-crossover.yaml",
                  ("algorithm.name=quasi_global_momentum", "algorithm.mode=async")),
}
DEFAULT_ALGORITHMS = "crossover,sgp,hierarchical,allreduce"

# scenario -> list of (fraction of the baseline's wall time, action, rank)
SCENARIOS = {
    "kill-1": [(0.3, "kill", 3)],
    "kill-3": [(0.1, "kill", 3), (0.3, "kill", 5), (0.5, "kill", 6)],
    "stop-10s": [(0.05, "stop", 3), (None, "cont", 3)],
    "rejoin": [(0.3, "kill", 3), (None, "restart", 3)],
    "join": [(0.3, "join", 8), (None, "join", 9)],
    "restart-defaults": [(0.3, "kill", 3), (None, "restart-job", 3)],
    "stop-defaults": [(0.05, "stop", 3), (None, "cont", 3)],
    "stop-60s": [(0.05, "stop", 3), (None, "cont-60", 3)],
    # Set in the config (the fault injector's partition), not by a signal.
    "partition": [],
    # Driven by repeated_kills, not by this table.
    "repeated-kills": [],
    # The fault-free run itself (the baseline), as a row.
    "none": [],
    # Rank 3 sleeps after each step for 9 of the baseline's step times.
    "straggler": [],
}
DEFAULT_SCENARIOS = "kill-1,kill-3,stop-10s,rejoin,partition,join,restart-defaults,stop-defaults"


def rank_pids(launcher_pid):
    """Global rank -> pid of the launcher's rank processes (from /proc)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if b"--rank" in args:
                out[int(args[args.index(b"--rank") + 1])] = int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return out


def finished_count(log):
    """How many of the launcher's own 8 processes finished, from its last
    report ("N of 8 ranks did not finish (...)" or "every rank finished,
    some in a process restarted ... (replaced: ...; finished: ...)"); all 8
    when it made none. Processes restarted in place of killed ones are
    counted by the caller."""
    import re
    reports = re.findall(r"(?:ranks did not finish|every rank finished[^(]*) \(([^)]*)\)", log)
    if not reports:
        return 8
    m = re.search(r"finished: ([0-9, -]+)$", reports[-1])
    if not m:
        return 0
    n = 0
    for part in m.group(1).split(","):
        a, _, b = part.strip().partition("-")
        n += int(b) - int(a) + 1 if b else 1
    return n


def rendezvous_of(pid):
    """The --rendezvous argument of a rank process."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        args = f.read().split(b"\0")
    return args[args.index(b"--rendezvous") + 1].decode()


def write_results(path, rows):
    """Writes {command, date, rows} as JSON to `path` (folders made) and says so."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, fh,
                  indent=1)
    print(f"wrote {path}")


def read_records(run_dir):
    """Global rank -> its metrics records (run.dir's rank-R.jsonl), in order."""
    out = {}
    for path in glob.glob(os.path.join(run_dir, "rank-*.jsonl")):
        rank = int(os.path.basename(path)[5:-6])
        with open(path) as f:
            out[rank] = [json.loads(line) for line in f if line.strip().endswith("}")]
    return out


def every_stepped(records, fault_time, lost_rank):
    """Seconds from `fault_time` until every member of the first view that
    left out `lost_rank` (installed after the fault) had completed a step in
    it or a later view, from the members' step records; None if none did."""
    views = [r for r in records.get(min(records), []) if r["kind"] == "view" and r["time"] >= fault_time and
             lost_rank not in r["members"]]
    if not views:
        return None
    view = views[0]
    latest = fault_time
    for member in view["members"]:
        first = next((r["time"] for r in records.get(member, []) if r["kind"] == "step" and
                      r.get("view", 0) >= view["view"] and r["time"] >= fault_time), None)
        if first is None:
            return None
        latest = max(latest, first)
    return latest - fault_time


def step_rate(records, rank, t0, t1):
    """Steps per second of `rank` between times t0 and t1 (its step records)."""
    steps = [r for r in records.get(rank, []) if r["kind"] == "step" and t0 <= r["time"] <= t1]
    return len(steps) / (t1 - t0) if steps and t1 > t0 else None


REPEATED_KILLS = 20  # repeated-kills
KILL_SPACING = 8.0  # seconds, at least, between two kills of repeated-kills


def repeated_kills(proc, log_path, restart, events, aims, kills=REPEATED_KILLS, seed=1):
    """repeated-kills: `kills` kills -9 of ranks 1-7 (each rank in turn, in a
    seeded order per cycle), at least KILL_SPACING s apart, each followed 2 s
    later by restart(rank) (which returns the new process's pid); odd ones
    aimed at an epoch's end, from the times the launcher's "epoch k/" lines
    appeared (polled every 10 ms). Appends (time, action, rank) to `events`
    and "epoch-end" or "mid-epoch" per kill to `aims`."""
    import random
    rng = random.Random(seed)
    pids = {}  # rank -> pid of the newest process this function started for it
    stamps, seen = [], 0

    def watch():
        nonlocal seen
        with open(log_path) as f:
            n = len(re.findall(r"epoch \d+/", f.read()))
        if n > seen:
            stamps.extend([time.time()] * (n - seen))
            seen = n

    def sleep_until(t):
        while time.time() < t:
            if proc.poll() is not None:
                raise RuntimeError(f"repeated-kills: the job ended after {len(aims)} kills")
            watch()
            time.sleep(0.01)

    order = []
    last = time.time() - KILL_SPACING
    for i in range(kills):
        if not order:
            order = rng.sample(range(1, 8), 7)
        victim = order.pop()
        sleep_until(last + KILL_SPACING)
        recent = stamps[-6:]
        gaps = [b - a for a, b in zip(recent, recent[1:]) if b > a]
        period = statistics.median(gaps) if gaps else 1.0
        if i % 2 == 1 and gaps:
            when = stamps[-1]
            while when - 0.3 < time.time() + 0.05:
                when += period
            when -= rng.uniform(0.0, 0.3)
            aims.append("epoch-end")
        else:
            when = time.time() + rng.uniform(0.0, period)
            aims.append("mid-epoch")
        sleep_until(when)
        pid = pids.get(victim) or rank_pids(proc.pid).get(victim)
        if pid is None:
            raise RuntimeError(f"repeated-kills: rank {victim} is not running")
        os.kill(pid, signal.SIGKILL)
        last = time.time()
        events.append((last, "kill", victim))
        sleep_until(last + 2.0)
        pids[victim] = restart(victim)
        events.append((time.time(), "restart-job", victim))


def run(binary, config, epochs, scenario, baseline, timeout, extra=(), kills=REPEATED_KILLS):
    """Runs the job. The faults are placed after rank 0 printed its first
    epoch, at fractions of the rest of the baseline's training time
    (`baseline`, seconds). "{tmp}" in `extra` is the run's temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        sets = ["world_size=8", f"training.epochs={epochs}", f"run.dir={tmp}/run"]
        sets += [kv.replace("{tmp}", tmp) for kv in extra]
        cmd = [binary, "--config", os.path.join(ROOT, config), "--summary-json", summary]
        cmd += [a for kv in sets for a in ("--set", kv)]
        started = []  # (process, log path, rank, start time): restarted and joining ranks
        start = time.time()
        log_path = os.path.join(tmp, "log")
        log = open(log_path, "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
        events, aims = [], []

        def job_id():
            """The job id the launcher printed."""
            with open(log_path) as f:
                return re.search(r"gossamer-train: job ([A-Za-z0-9]{6})", f.read()).group(1)

        def start_process(how, rank):
            """Starts gossamer-train with the arguments `how` for `rank` (its
            log in tmp, counted in `started`) and returns it."""
            rlog_path = os.path.join(tmp, f"started-{rank}-{len(started)}.log")
            with open(rlog_path, "w") as rlog:
                p = subprocess.Popen([binary, "--config", os.path.join(ROOT, config)] + how +
                                     [a for kv in sets for a in ("--set", kv)],
                                     stdout=rlog, stderr=subprocess.STDOUT, text=True)
            started.append((p, rlog_path, rank, time.time()))
            return p

        try:
            first_epoch = None
            if SCENARIOS.get(scenario) or scenario == "repeated-kills":
                while first_epoch is None and proc.poll() is None and time.time() - start < timeout:
                    with open(log_path) as f:
                        if "epoch 1/" in f.read():
                            first_epoch = time.time()
                    time.sleep(0.02)
            rdv = None
            if scenario == "repeated-kills":
                job = job_id()
                repeated_kills(proc, log_path,
                               lambda rank: start_process(["--job", job, "--rank", str(rank), "--rejoin"], rank).pid,
                               events, aims, kills)
            for frac, action, rank in SCENARIOS.get(scenario, []):
                if action in ("restart", "restart-job", "join"):
                    if frac is None:
                        time.sleep(max(0.0, events[-1][0] + 2.0 - time.time()))
                    else:
                        time.sleep(max(0.0, first_epoch + frac * baseline * (epochs - 1) / epochs - time.time()))
                    job = job_id()
                    if action == "restart":  # the rendezvous directory and a checkpoint
                        how = ["--rank", str(rank), "--rendezvous", rdv, "--rejoin"]
                    elif action == "restart-job":  # the README's command
                        how = ["--job", job, "--rank", str(rank), "--rejoin"]
                    else:
                        how = ["--join", job]
                    start_process(how, rank)
                    events.append((time.time(), action, rank))
                    continue
                if action.startswith("cont"):
                    when = events[-1][0] + (60.0 if action == "cont-60" else 10.0)
                else:
                    when = first_epoch + frac * baseline * (epochs - 1) / epochs
                time.sleep(max(0.0, when - time.time()))
                pid = None
                deadline = time.time() + 5
                while pid is None and time.time() < deadline:
                    pid = rank_pids(proc.pid).get(rank)
                    if pid is None:
                        time.sleep(0.05)
                if pid is None:
                    raise RuntimeError(f"{scenario}: rank {rank} is not running (the run ended before the fault)")
                rdv = rendezvous_of(pid)
                sig = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}.get(action, signal.SIGCONT)
                os.kill(pid, sig)
                events.append((time.time(), action, rank))
            proc.wait(timeout=timeout)
            for p, _, _, _ in started:
                p.wait(timeout=max(1.0, timeout - (time.time() - start)))
        except BaseException:
            for p in [proc] + [x[0] for x in started]:
                p.kill()
                p.wait()
            raise
        finally:
            log.close()
        wall = time.time() - start
        with open(log_path) as f:
            out = f.read()
        result = {"exit": proc.returncode, "wall": wall, "events": events, "aims": aims, "log": out, "started": []}
        for p, path, rank, at in started:
            with open(path) as f:
                result["started"].append({"rank": rank, "at": at, "exit": p.returncode, "log": f.read()})
        # Only the failures of the started processes count against the job
        # (one this script killed later exits with -9).
        result["restarted_exit"] = max([0] + [x["exit"] for x in result["started"]])
        result["restarted_log"] = "".join(x["log"] for x in result["started"])
        result["records"] = read_records(os.path.join(tmp, "run"))
        if os.path.exists(summary):
            with open(summary) as f:
                result["summary"] = json.load(f)
        return result


def last_started(started, rank):
    """The newest of the processes started for `rank` (run()'s "started" entries)."""
    return [x for x in started if x["rank"] == rank][-1]


def survivors_finished(scenario, summary, expected, epochs_run, finished, run):
    """Every survivor completed every epoch: as many survivors as expected, a
    history of every epoch, and either the launcher's report names that many
    finished or, with repeated kills (where a rank's processes come and go),
    the launcher and the newest process started for each rank exited 0."""
    if len(summary.get("survivors", [])) != expected or len(summary.get("history", [])) != epochs_run:
        return False
    if scenario != "repeated-kills":
        return finished == expected
    started = run["started"]
    return run["exit"] == 0 and all(x["exit"] == 0 for x in started if x is last_started(started, x["rank"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/apps/gossamer-train"))
    ap.add_argument("--algorithms", default=DEFAULT_ALGORITHMS, help=f"of {','.join(ALGORITHMS)}")
    ap.add_argument("--scenarios", default=DEFAULT_SCENARIOS, help=f"of {','.join(SCENARIOS)}")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--kills", type=int, default=REPEATED_KILLS, help="kills of the repeated-kills scenario")
    ap.add_argument("--transport", default="zmq",
                    help=f"the transports to run over, in turn: of {','.join(TRANSPORTS)} (default zmq, the configs' own)")
    ap.add_argument("--timeout", type=float, default=900, help="bound on each run, seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/faults.json"))
    args = ap.parse_args()

    rows = []
    header = (f"{'algorithm':13} {'scenario':16} {'surv':>4} {'finished':>8} {'acc %':>6} {'base %':>6} "
              f"{'detect s':>8} {'resume s':>8} {'all s':>6} {'views':>5} {'ready s':>7} {'lost st':>7} "
              f"{'steps/s':>8} {'base st/s':>9} {'reconv st':>9} {'min w':>8} {'max w':>6}")
    print(header)
    transports = args.transport.split(",")
    for name in transports:
        if name not in TRANSPORTS:
            raise SystemExit(f"--transport: unknown transport {name!r} (of {', '.join(TRANSPORTS)})")
    for transport in transports:
        if len(transports) > 1:
            print(f"transport {transport}", flush=True)
        for algo in args.algorithms.split(","):
            config, algo_sets = ALGORITHMS[algo]
            algo_sets = algo_sets + TRANSPORTS[transport]
            base = run(args.binary, config, args.epochs, "none", 0, args.timeout, algo_sets)
            if base["exit"] != 0 or "summary" not in base:
                print(base["log"][-3000:], file=sys.stderr)
                raise SystemExit(f"{algo}: the fault-free run failed (exit {base['exit']})")
            bs = base["summary"]
            for scenario in args.scenarios.split(","):
                extra = ("membership.rejoin=true",) if scenario == "stop-10s" else ()
                if scenario == "rejoin":
                    extra = ("membership.rejoin=true", "checkpoint.every_steps=100", "checkpoint.dir={tmp}/ck")
                if scenario == "partition":
                    start = 1.5 * bs["history"][0]["seconds"]
                    extra = ("membership.rejoin=true", "faults.enabled=true", "faults.partition=0,1,2,3|4,5,6,7",
                             f"faults.partition_start_seconds={start:.2f}", "faults.partition_seconds=10")
                if scenario == "join":
                    extra = ("membership.max_world_size=10",)
                if scenario in ("restart-defaults", "stop-defaults"):
                    extra = ()
                if scenario == "stop-60s":  # a job that outlasts the stop: eight times the epochs
                    extra = (f"training.epochs={8 * args.epochs}",)
                epochs_run = {"stop-60s": 8 * args.epochs}.get(scenario, args.epochs)
                if scenario == "repeated-kills":  # a job that outlasts the kills, from the fault-free epoch times
                    epoch_seconds = min(h["seconds"] for h in bs["history"][1:] or bs["history"])
                    epochs_run = max(args.epochs, math.ceil((args.kills * (KILL_SPACING + 1.5) + 30) / epoch_seconds))
                    extra = (f"training.epochs={epochs_run}",)
                if scenario == "straggler":
                    extra = ("training.straggler_rank=3", f"training.straggler_delay_seconds={9 / bs['steps_per_second']:.5f}")
                r = base if scenario == "none" else run(args.binary, config, args.epochs, scenario, bs["wall_seconds"],
                                                        args.timeout, algo_sets + extra, args.kills)
                s = r.get("summary", {})
                faults = [e for e in r["events"] if e[1] in ("kill", "stop")]
                # (A partition has no signal time to measure from: its detection is
                # membership.suspect_seconds by construction.)
                lost = s.get("lost", [])
                first_fault = faults[0][0] if faults else None
                resume = [l["resumed_at_unix_seconds"] - f[0] for l, f in zip(lost, faults)]
                detect = [l["resumed_at_unix_seconds"] - l["agreement_seconds"] - f[0] for l, f in zip(lost, faults)]
                restarts = len(r["started"])
                expected = 8 - len([e for e in r["events"] if e[1] == "kill"]) + restarts
                survivors = len(s.get("survivors", []))
                finished = finished_count(r["log"]) + len([x for x in r["started"] if x["exit"] == 0])
                records = r["records"]
                low = min(s.get("survivors", [0]))
                views = [x for x in records.get(low, []) if x["kind"] == "view" and x["view"] != 0]
                stepped = [every_stepped(records, f[0], f[2]) for f in faults]
                joins = []
                for x in r["started"]:
                    took = [v for v in views if x["rank"] in v["joined"] and v["time"] >= x["at"]]
                    # Its process's start record: written once it has loaded the data and built the model.
                    ready = [y["time"] for y in records.get(x["rank"], []) if y["kind"] == "start" and y["time"] >= x["at"]]
                    joins.append({"rank": x["rank"], "seconds": took[0]["time"] - x["at"] if took else None,
                                  "from_ready_seconds": took[0]["time"] - ready[0] if took and ready else None})
                rate_before = rate_after = None
                if faults:
                    rate_before = step_rate(records, low, faults[0][0] - 5, faults[0][0])
                    if stepped and stepped[0] is not None:
                        back = faults[0][0] + stepped[0]
                        rate_after = step_rate(records, low, back, back + 5)
                reconverge = None
                joined = s.get("joined", [])
                if scenario == "rejoin" and joined and lost:
                    # Back at the fault-free run's level: the first epoch after the
                    # rejoin whose consensus distance is at most the largest the
                    # baseline had up to that epoch.
                    spe = s["steps_per_epoch"]
                    base_cd = [h["consensus_distance"] for h in bs["history"]]
                    back = joined[0]["step"]
                    for h in s["history"][back // spe:]:
                        if h["consensus_distance"] <= max(base_cd[: h["epoch"]]):
                            reconverge = h["epoch"] * spe - back
                            break
                row = {
                    "algorithm": algo,
                    "config": config,
                    "transport": transport,
                    "scenario": scenario,
                    "world_size": 8,
                    "expected_survivors": expected,
                    "survivors": survivors,
                    # Every survivor completed every epoch (the launcher's report names them finished).
                    "survivors_finished": survivors_finished(scenario, s, expected, epochs_run, finished, r),
                    "exit_status": r["exit"] if r.get("restarted_exit", 0) == 0 else r["restarted_exit"],
                    "test_accuracy": s.get("test_accuracy"),
                    "baseline_accuracy": bs["test_accuracy"],
                    "detection_seconds": max(detect) if detect else None,
                    "resume_seconds": max(resume) if resume else None,
                    "every_stepped_seconds": max(stepped) if stepped and None not in stepped else None,
                    "every_stepped_per_fault": [[fault[1], x] for fault, x in zip(faults, stepped)],
                    "every_stepped_p50_seconds": statistics.median([x for x in stepped if x is not None])
                    if any(x is not None for x in stepped) else None,
                    "kill_aims": r["aims"],
                    "agreement_saw_failure": (r["log"] + r.get("restarted_log", "")).count("cannot agree"),
                    "view_changes": len(views),
                    "joins": joins,
                    "rate_before": rate_before,
                    "rate_after": rate_after,
                    "steps_lost": sum(l["steps_skipped"] for l in lost),
                    "lost_ranks": [l["rank"] for l in lost],
                    "rejoined": scenario in ("stop-10s", "partition", "rejoin", "restart-defaults", "stop-defaults",
                                             "stop-60s") and survivors == 8,
                    "reconverge_steps": reconverge,
                    "steps_per_second": s.get("steps_per_second"),
                    "push_sum_weight_min": s.get("push_sum_weight_min"),
                    "push_sum_weight_max": s.get("push_sum_weight_max"),
                    "baseline_steps_per_second": bs["steps_per_second"],
                    "epochs": epochs_run,
                    "wall_seconds": r["wall"],
                    "first_fault_after_seconds": (first_fault - (r["events"][0][0] if r["events"] else 0)) if faults else None,
                }
                rows.append(row)

                def f(v, fmt):
                    return format(v, fmt) if isinstance(v, (int, float)) and v is not None else "-"

                join_s = [j["from_ready_seconds"] for j in joins if j["from_ready_seconds"] is not None]
                print(f"{algo:13} {scenario:16} {survivors:4d} {str(row['survivors_finished']):>8} "
                      f"{f(100 * (row['test_accuracy'] or 0), '6.2f')} {f(100 * row['baseline_accuracy'], '6.2f')} "
                      f"{f(row['detection_seconds'], '8.2f')} {f(row['resume_seconds'], '8.2f')} "
                      f"{f(row['every_stepped_seconds'], '6.2f')} {len(views):5d} "
                      f"{f(max(join_s) if join_s else None, '7.2f')} {row['steps_lost']:7d} "
                      f"{f(row['steps_per_second'], '8.1f')} {f(row['baseline_steps_per_second'], '9.1f')} "
                      f"{f(row['reconverge_steps'], '9d')} {f(row['push_sum_weight_min'], '8.2g')} "
                      f"{f(row['push_sum_weight_max'], '6.2f')}", flush=True)
                if r["exit"] != 0 or r.get("restarted_exit", 0) != 0:
                    log = r["log"] + r.get("restarted_log", "")
                    tail = "\n".join(l for l in log.splitlines() if "error" in l or "warning" in l)[-1500:]
                    print(tail, file=sys.stderr)
    for kind in ("kill", "stop"):
        xs = [x for row in rows for action, x in row["every_stepped_per_fault"] if action == kind and x is not None]
        if xs:
            print(f"every survivor stepped again after a {kind}: p50 {statistics.median(xs):.2f} s, "
                  f"worst {max(xs):.2f} s over {len(xs)} faults")
    write_results(args.out, rows)


if __name__ == "__main__":
    main()
