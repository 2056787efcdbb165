#!/usr/bin/python3
"""Fault scenarios on gossamer-train: peers killed, stopped, for each algorithm.

For every algorithm the script runs the job once without faults (the
baseline, same seed) and once per scenario, 8 peer processes over ZeroMQ on
loopback with the membership service on, and injects the fault from outside
with signals at a fraction of the baseline's wall time:

  kill-1     kill -9 of one peer (rank 3) at 50%
  kill-3     kill -9 of ranks 3, 5, 6 at 30%, 45% and 60%
  stop-10s   SIGSTOP of rank 3 at 40% for 10 s, then SIGCONT

It prints one row per (algorithm, scenario) and writes results/faults.json
with the fields: algorithm, scenario, world_size, survivors,
survivors_finished (every surviving rank completed every epoch, exit status
0), test_accuracy (the survivors' average model), baseline_accuracy,
detection_seconds (from the fault until the survivors started the view
change), resume_seconds (from the fault until the new view was installed,
after which every survivor steps again), steps_lost (steps the ranks furthest
behind skipped to realign), steps_per_second (survivors' mean over the run)
and baseline_steps_per_second.

Usage: scripts/faults.sh [--algorithms crossover,sgp,hierarchical,allreduce]
                         [--scenarios kill-1,kill-3,stop-10s] [--epochs N]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALGORITHMS = {
    "crossover": "examples/configs/quickstart-crossover.yaml",
    "sgp": "examples/configs/sgp.yaml",
    "hierarchical": "examples/configs/hierarchical.yaml",
    "allreduce": "examples/configs/quickstart-allreduce.yaml",
}

# scenario -> list of (fraction of the baseline's wall time, action, rank)
SCENARIOS = {
    "kill-1": [(0.5, "kill", 3)],
    "kill-3": [(0.3, "kill", 3), (0.45, "kill", 5), (0.6, "kill", 6)],
    "stop-10s": [(0.4, "stop", 3), (None, "cont", 3)],
}


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


def run(binary, config, epochs, scenario, baseline, timeout):
    """Runs the job; `baseline` (seconds before training starts, seconds of
    training) places the faults."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [binary, "--config", os.path.join(ROOT, config), "--set", "world_size=8",
               "--set", f"training.epochs={epochs}", "--set", "membership.enabled=true",
               "--summary-json", summary]
        start = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        events = []
        try:
            for frac, action, rank in SCENARIOS.get(scenario, []):
                if action == "cont":
                    when = events[-1][0] + 10.0
                else:
                    when = start + baseline[0] + frac * baseline[1]
                time.sleep(max(0.0, when - time.time()))
                pid = None
                deadline = time.time() + 5
                while pid is None and time.time() < deadline:
                    pid = rank_pids(proc.pid).get(rank)
                    if pid is None:
                        time.sleep(0.05)
                if pid is None:
                    raise RuntimeError(f"{scenario}: rank {rank} is not running")
                sig = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "cont": signal.SIGCONT}[action]
                os.kill(pid, sig)
                events.append((time.time(), action, rank))
            out, _ = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        wall = time.time() - start
        result = {"exit": proc.returncode, "wall": wall, "events": events, "log": out}
        if os.path.exists(summary):
            with open(summary) as f:
                result["summary"] = json.load(f)
        return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/examples/gossamer-train"))
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900, help="bound on each run, seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/faults.json"))
    args = ap.parse_args()

    rows = []
    header = (f"{'algorithm':13} {'scenario':9} {'surv':>4} {'finished':>8} {'acc %':>6} {'base %':>6} "
              f"{'detect s':>8} {'resume s':>8} {'lost st':>7} {'steps/s':>8} {'base st/s':>9}")
    print(header)
    for algo in args.algorithms.split(","):
        config = ALGORITHMS[algo]
        base = run(args.binary, config, args.epochs, "none", (0, 0), args.timeout)
        if base["exit"] != 0 or "summary" not in base:
            print(base["log"][-3000:], file=sys.stderr)
            raise SystemExit(f"{algo}: the fault-free run failed (exit {base['exit']})")
        bs = base["summary"]
        for scenario in args.scenarios.split(","):
            # The rank's wall_seconds starts after the data is loaded; the rest is start-up.
            timing = (base["wall"] - bs["wall_seconds"], bs["wall_seconds"])
            r = run(args.binary, config, args.epochs, scenario, timing, args.timeout)
            s = r.get("summary", {})
            faults = [e for e in r["events"] if e[1] in ("kill", "stop")]
            lost = s.get("lost", [])
            first_fault = faults[0][0] if faults else None
            resume = [l["resumed_at_unix_seconds"] - f[0] for l, f in zip(lost, faults)]
            detect = [l["resumed_at_unix_seconds"] - l["agreement_seconds"] - f[0] for l, f in zip(lost, faults)]
            expected = 8 - len([e for e in r["events"] if e[1] == "kill"])
            survivors = len(s.get("survivors", []))
            row = {
                "algorithm": s.get("algorithm", algo),
                "config": config,
                "scenario": scenario,
                "world_size": 8,
                "survivors": survivors,
                "survivors_finished": r["exit"] == 0 and survivors == expected and len(s.get("history", [])) == args.epochs,
                "exit_status": r["exit"],
                "test_accuracy": s.get("test_accuracy"),
                "baseline_accuracy": bs["test_accuracy"],
                "detection_seconds": max(detect) if detect else None,
                "resume_seconds": max(resume) if resume else None,
                "steps_lost": sum(l["steps_skipped"] for l in lost),
                "lost_ranks": [l["rank"] for l in lost],
                "steps_per_second": s.get("steps_per_second"),
                "baseline_steps_per_second": bs["steps_per_second"],
                "epochs": args.epochs,
                "wall_seconds": r["wall"],
                "first_fault_after_seconds": (first_fault - (r["events"][0][0] if r["events"] else 0)) if faults else None,
            }
            rows.append(row)

            def f(v, fmt):
                return format(v, fmt) if isinstance(v, (int, float)) and v is not None else "-"

            print(f"{algo:13} {scenario:9} {survivors:4d} {str(row['survivors_finished']):>8} "
                  f"{f(100 * (row['test_accuracy'] or 0), '6.2f')} {f(100 * row['baseline_accuracy'], '6.2f')} "
                  f"{f(row['detection_seconds'], '8.2f')} {f(row['resume_seconds'], '8.2f')} {row['steps_lost']:7d} "
                  f"{f(row['steps_per_second'], '8.1f')} {f(row['baseline_steps_per_second'], '9.1f')}", flush=True)
            if r["exit"] != 0:
                tail = "\n".join(l for l in r["log"].splitlines() if "error" in l or "warning" in l)[-1500:]
                print(tail, file=sys.stderr)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, fh,
                  indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
