#!/usr/bin/python3
"""Allreduce from Python against the same call from C++ and against
torch.distributed's gloo backend: N processes on this machine, the same
sizes, interleaved rounds.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_python.py
        [--world-size 4] [--sizes 4096,...,67108864] [--rounds 3] [--reps 10]

impls (one job of N processes per impl and round, every size in it):
  gossamer-python  gossamer.Agent.allreduce(numpy float32 array, op="sum", algorithm=A)
  gossamer-python-bfloat16, gossamer-python-float16
                   the same call on a torch.bfloat16 / torch.float16 tensor of as
                   many elements (half the bytes on the wire; not in the default
                   --impls)
  gossamer-cpp     build/bench/allreduce: Communicator::allreduce, the same transport and algorithm
  torch-gloo       torch.distributed.all_reduce(tensor) with the gloo backend
Every row names its dtype; "bytes" is the float32 vector's size, the 16-bit
rows have as many elements ("wire_bytes": half of it).
Method (the C++ benchmark's): per repetition refill the vector, barrier, time
one call; the slowest rank's time is the repetition's; a round's figure is the
median over repetitions, and the reported one the median over rounds. Rank r
runs on CPU r mod C (as the C++ benchmark's --bind core). Prints a table with
the ratios and writes one JSON row per impl and size to --json.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DEFAULT_SIZES = [4096, 65536, 1048576, 16777216, 67108864]


def reps_for(size, reps):
    """Timed calls per round at `size` bytes: `reps` from 1 MiB up, more below
    (as many as `reps` calls of 1 MiB take bytes, at most 50 times `reps`),
    so that a small size's median is not decided by a handful of calls that
    the machine's other work happened to slow."""
    return max(reps, min(50 * reps, reps * (1 << 20) // max(size, 1)))


def bind(rank):
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


def worker(args):
    """One rank of a Python job; rank 0 prints {bytes: [seconds per rep]}."""
    import numpy as np

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    bind(rank)
    sizes = [int(s) for s in args.sizes.split(",")]
    half = {"gossamer-python-bfloat16": "bfloat16", "gossamer-python-float16": "float16"}.get(args.worker)
    if args.worker == "gossamer-python" or half:
        import gossamer

        # No membership service: the C++ side's Communicator has none either.
        cfg = {"transport": {"kind": "zmq", "host": "127.0.0.1", "protocol": "tcp", "timeout_seconds": 120},
               "collectives": {"chunk_bytes": args.chunk_bytes}, "membership": {"enabled": False}}
        agent = gossamer.Agent(cfg, rank, n, os.environ["GOSSAMER_RENDEZVOUS"])

        def call(x):
            agent.allreduce(x, op="sum", algorithm=args.algorithm)

        barrier = agent.barrier

        def slowest(times):
            t = np.array(times)
            agent.allreduce(t, op="max")
            return t.tolist()

        if half:
            import torch

            def make(elems):
                return torch.empty(elems, dtype=getattr(torch, half))

            def fill(x, value):
                x.fill_(value)
        else:

            def make(elems):
                return np.empty(elems, dtype=np.float32)

            def fill(x, value):
                x.fill(value)
    else:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="file://" + os.environ["GLOO_FILE"], rank=rank, world_size=n)

        def call(x):
            dist.all_reduce(x)

        barrier = dist.barrier

        def slowest(times):
            t = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.tolist()

        def make(elems):
            return torch.empty(elems, dtype=torch.float32)

        def fill(x, value):
            x.fill_(value)

    out = {}
    for size in sizes:
        x = make(size // 4)
        times = []
        for rep in range(args.warmup + reps_for(size, args.reps)):
            fill(x, rank + 1)
            barrier()
            t0 = time.perf_counter()
            call(x)
            dt = time.perf_counter() - t0
            if rep == 0 and float(x[0]) != n * (n + 1) / 2:
                raise SystemExit(f"{args.worker}: wrong sum {float(x[0])} at {size} bytes")
            if rep >= args.warmup:
                times.append(dt)
        out[size] = slowest(times)
    if args.worker == "gossamer-python" or half:
        agent.close()
    else:
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(out))


def run_python_job(impl, args):
    procs = []
    with tempfile.TemporaryDirectory(prefix="bench-python-") as tmp:  # the job's rendezvous and gloo's file
        for r in range(args.world_size):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world_size), OMP_NUM_THREADS="1",
                       GOSSAMER_RENDEZVOUS=os.path.join(tmp, "rv"), GLOO_FILE=os.path.join(tmp, "gloo"))
            cmd = [sys.executable, __file__, "--worker", impl, "--sizes", ",".join(map(str, args.sizes)),
                   "--reps", str(args.reps), "--warmup", str(args.warmup), "--algorithm", args.algorithm,
                   "--chunk-bytes", str(args.chunk_bytes)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
        try:
            outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"{impl}: a rank failed ({[p.returncode for p in procs]})")
    data = json.loads(outs[0].strip().splitlines()[-1])
    return {int(k): statistics.median(v) for k, v in data.items()}


def run_cpp_job(args):
    """One launch of the C++ benchmark per size, with that size's repetitions."""
    result = {}
    for size in args.sizes:
        out = tempfile.mktemp(suffix=".json")
        reps = str(reps_for(size, args.reps))
        cmd = [args.cpp_bench, "--world-size", str(args.world_size), "--transports", "zmq-tcp", "--algorithms",
               args.algorithm, "--sizes", str(size), "--reps", reps, "--min-reps", reps, "--warmup",
               str(args.warmup), "--chunk-bytes", str(args.chunk_bytes), "--bind", "core", "--no-calibration",
               "--json", out, "--quiet"]  # auto picks by size, as the Python side's does
        subprocess.run(cmd, check=True, timeout=args.timeout, stdout=subprocess.DEVNULL)
        with open(out) as f:
            rows = json.load(f)
        os.unlink(out)
        result.update({r["bytes"]: r["seconds"] for r in rows if r.get("impl") == "gossamer"})
    return result


def human(b):
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return f"{b // f} {unit}"
    return f"{b} B"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="bytes, comma-separated")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every impl")
    p.add_argument("--reps", type=int, default=10,
                   help="timed calls per round from 1 MiB up; more below (reps_for: 4 KiB gets 50x)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per size and round")
    p.add_argument("--algorithm", default="ring", help="Gossamer's allreduce algorithm (both sides)")
    p.add_argument("--chunk-bytes", type=int, default=1 << 20)
    p.add_argument("--impls", default="gossamer-python,gossamer-cpp,torch-gloo")
    p.add_argument("--cpp-bench", default=os.path.join(ROOT, "build", "bench", "allreduce"))
    p.add_argument("--json", default=os.path.join(ROOT, "results", "bench-python.json"))
    p.add_argument("--timeout", type=float, default=600, help="bound on each job, seconds")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    impls = args.impls.split(",")
    samples = {i: {s: [] for s in args.sizes} for i in impls}
    for rnd in range(args.rounds):
        for impl in impls:  # interleaved: every impl once per round
            got = run_cpp_job(args) if impl == "gossamer-cpp" else run_python_job(impl, args)
            for s in args.sizes:
                samples[impl][s].append(got[s])
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    med = {i: {s: statistics.median(v) for s, v in samples[i].items()} for i in impls}
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    rows = []
    for i in impls:
        for s in args.sizes:
            dtype = i.rsplit("-", 1)[1] if i.endswith("16") else "float32"
            rows.append({"impl": i, "world_size": args.world_size, "bytes": s, "dtype": dtype,
                         "wire_bytes": s // 2 if dtype != "float32" else s, "seconds": med[i][s],
                         "rounds": samples[i][s], "algorithm": args.algorithm if i != "torch-gloo" else "gloo",
                         "transport": "zmq-tcp" if i != "torch-gloo" else "gloo-tcp", "reps": reps_for(s, args.reps),
                         "date": stamp, "machine": f"{platform.node()} {os.cpu_count()} CPUs"})
    head = f"{'size':>8} " + " ".join(f"{i + ' ms':>20}" for i in impls)
    has = lambda i: i in impls  # noqa: E731
    if has("gossamer-python") and has("gossamer-cpp"):
        head += f" {'python/cpp':>11}"
    if has("gossamer-python") and has("torch-gloo"):
        head += f" {'python/gloo':>12}"
    print(f"allreduce, {args.world_size} processes, {args.algorithm} over zmq-tcp (gloo: its own), "
          f"median of {args.rounds} rounds x {args.reps} reps (more below 1 MiB), {stamp}")
    print(head)
    for s in args.sizes:
        line = f"{human(s):>8} " + " ".join(f"{1e3 * med[i][s]:>20.3f}" for i in impls)
        if has("gossamer-python") and has("gossamer-cpp"):
            line += f" {med['gossamer-python'][s] / med['gossamer-cpp'][s]:>11.3f}"
        if has("gossamer-python") and has("torch-gloo"):
            line += f" {med['gossamer-python'][s] / med['torch-gloo'][s]:>12.3f}"
        print(line)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
