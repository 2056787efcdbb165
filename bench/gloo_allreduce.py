#!/usr/bin/python3
"""torch.distributed's gloo backend timed the way bench/allreduce.cpp and
bench/mpi_allreduce.c time ours and Open MPI's: N processes on this machine,
float32 sum in place, default settings.

    /usr/bin/python3 bench/gloo_allreduce.py --world-size 4 --sizes 4,4096,1048576
        [--reps 200] [--min-reps 5] [--warmup 5] [--budget 1.0] [--bind core|none] [--timeout 1800]

Per size, on every rank (mpi_allreduce.c's method):
  1. one call on known inputs (rank r, element i holds r + 1 + i % 13), the
     result checked element by element (a wrong sum fails the run); its time,
     max over ranks, sizes the rest;
  2. warm-ups: about a quarter of --budget, at most --warmup - 1;
  3. repetitions: about --budget seconds, between --min-reps and --reps; each
     refills the vector with 1.0, times one call; the vector is checked after
     the last one.
A repetition's time is the slowest rank's (one MAX reduction at the end); the
reported time is the median over repetitions. algbw = bytes / time, busbw =
algbw * 2 (n-1) / n, GB/s (nccl-tests). Rank r runs on the (r mod C)-th of the
C CPUs allowed with --bind core (the default), as the other two benchmarks
bind theirs. Prints one JSON line per size (rank 0):
  {"impl": "gloo", "algorithm": "default", "transport": "tcp", "world_size",
   "bytes", "seconds", "algbw", "busbw", "reps", "seconds_p10", "seconds_p90",
   "wrong": 0, "torch"}
Exit status 1 with a message on stderr when a rank fails or the run exceeds
--timeout seconds; 2 for bad arguments.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def quantile(values, q):
    """The q-quantile of `values` by linear interpolation (as the C++ benchmark's)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def worker(args):
    """One rank: RANK, WORLD_SIZE and GLOO_FILE from the environment."""
    import time

    import torch
    import torch.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.bind == "core":
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    dist.init_process_group("gloo", init_method="file://" + os.environ["GLOO_FILE"], rank=rank, world_size=n)

    def timed(x):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        return time.perf_counter() - t0

    def check(x, known):
        count = x.numel()
        if known:
            i = torch.arange(count, dtype=torch.int64) % 13
            expected = (n * (n + 1) // 2 + n * i).to(torch.float32)
        else:
            expected = torch.full((count,), float(n), dtype=torch.float32)
        wrong = int((x != expected).sum())
        if wrong:
            raise SystemExit(f"gloo_allreduce: rank {rank}: {wrong} of {count} elements wrong "
                             f"({'first call' if known else 'repetitions'})")

    for size in args.sizes:
        count = size // 4
        x = torch.empty(count, dtype=torch.float32)
        x.copy_((torch.arange(count, dtype=torch.int64) % 13 + rank + 1).to(torch.float32))
        first = torch.tensor([timed(x)], dtype=torch.float64)
        check(x, True)
        dist.all_reduce(first, op=dist.ReduceOp.MAX)
        estimate = max(float(first[0]), 1e-7)
        warmups = int(min(max(math.floor(0.25 * args.budget / estimate), 0), max(args.warmup - 1, 0)))
        reps = int(min(max(math.floor(args.budget / estimate), args.min_reps), max(args.reps, args.min_reps)))
        for _ in range(warmups):
            x.fill_(1.0)
            timed(x)
        times = []
        for _ in range(reps):
            x.fill_(1.0)
            times.append(timed(x))
        check(x, False)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            s = slowest.tolist()
            t = quantile(s, 0.5)
            algbw = size / t / 1e9
            print(json.dumps({"impl": "gloo", "algorithm": "default", "transport": "tcp", "world_size": n,
                              "bytes": size, "seconds": t, "algbw": algbw, "busbw": algbw * 2.0 * (n - 1) / n,
                              "reps": reps, "seconds_p10": quantile(s, 0.1), "seconds_p90": quantile(s, 0.9),
                              "wrong": 0, "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()
    return 0


def launch(args):
    """Starts the ranks, waits for them (bounded by --timeout), passes rank 0's lines through."""
    with tempfile.TemporaryDirectory(prefix="gloo-allreduce-") as tmp:
        procs = []
        for r in range(args.world_size):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world_size), GLOO_FILE=os.path.join(tmp, "rv"))
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--sizes", ",".join(map(str, args.sizes)),
                   "--reps", str(args.reps), "--min-reps", str(args.min_reps), "--warmup", str(args.warmup),
                   "--budget", str(args.budget), "--bind", args.bind]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL))
        try:
            out, _ = procs[0].communicate(timeout=args.timeout)
            for p in procs[1:]:
                p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            print(f"gloo_allreduce: the {args.world_size} ranks did not finish within {args.timeout} s",
                  file=sys.stderr)
            return 1
        failed = [r for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            print(f"gloo_allreduce: ranks {failed} failed", file=sys.stderr)
            return 1
        sys.stdout.write(out.decode())
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--sizes", required=True, help="bytes, comma-separated, positive multiples of 4")
    p.add_argument("--reps", type=int, default=200, help="timed calls per size, at most")
    p.add_argument("--min-reps", type=int, default=5, help="timed calls per size, at least")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per size (the checked one included), at most")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per size, roughly")
    p.add_argument("--bind", choices=["core", "none"], default="core")
    p.add_argument("--timeout", type=float, default=1800, help="bound on the whole run, seconds")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    try:
        args.sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes takes comma-separated byte counts, not '{args.sizes}'")
    if any(s <= 0 or s % 4 for s in args.sizes):
        p.error("sizes must be positive multiples of 4 bytes")
    if args.world_size < 2 or args.reps < 1 or args.min_reps < 1 or args.warmup < 0 or args.budget <= 0:
        p.error("bad --world-size, --reps, --min-reps, --warmup or --budget")
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
