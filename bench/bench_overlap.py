#!/usr/bin/python3
"""Communication hidden behind backward: gossamer.torch.DistributedOptimizer
under AllReduce-SGD with its bucketed gradient allreduces started during
backward (overlap=True) against the same allreduces started after it
(overlap=False), and DDP on torch's gloo backend and on Gossamer's
("gossamer", gossamer.torch), on two test hosts.

The two hosts are network namespaces joined by a 1 Gbit/s link shaped with
tc tbf (tests/hosts/hosts.py; on loopback the copies would compete with
backward for the same two cores, on a link they wait on the wire instead).
One rank per host, one compute thread each, an MLP whose gradient allreduce
takes a good part of a step. For each model the three runs are interleaved
round by round (--rounds), each --steps steps after 3 warm-up steps; a run's
figure is its median seconds per step, and the table gives the median over
rounds and the ratios. Every gossamer run ends with a digest of the model:
overlap and no overlap must give the same bits (the script fails otherwise).

Writes results/bench-overlap.json: one row per model with model, parameters,
bucket_bytes, batch, transport, step_seconds_no_overlap, step_seconds_overlap,
step_seconds_ddp_gloo, step_seconds_ddp_gossamer, ddp_gossamer_to_gloo,
allreduce_fraction (the share of a no-overlap step spent waiting for the
allreduces), the ratio of overlap to no overlap, backward_seconds_no_overlap
and backward_seconds_overlap (rank 0's median backward pass: with overlap the
transport's work shares the cores with it), cpu_seconds_no_overlap and
cpu_seconds_overlap (rank 0's user + system CPU seconds per step, all its
threads), bit_identical and rounds (each round's medians). DDP runs with bucket_cap_mb = --bucket-mib; --modes leaves
out the DDP runs (their columns are then null).

Needs root for the namespaces; exits 77 (skipped) where they cannot be made.

    bench/bench_overlap.py                      # 3 rounds of 50 steps
    bench/bench_overlap.py --bucket-mib 4       # the figure in docs/python.md
    bench/bench_overlap.py --rounds 1 --steps 10
    bench/bench_overlap.py --bucket-mib 4 --transport socket --modes overlap
"""

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))

# name -> (layer widths, batch size). mlp-11x1024's small first layer is the
# bucket that cannot start before backward ends; mlp-6x1536's is 6 MiB.
MODELS = {
    "mlp-6x1536": ([1024, 1536, 1536, 1536, 1536, 1536, 10], 32),
    "mlp-11x1024": ([256] + [1024] * 10 + [10], 32),
}
MODES = ["no_overlap", "overlap", "ddp_gloo", "ddp_gossamer"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--gbps", type=float, default=1.0, help="the link between the two hosts, Gbit/s")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--bucket-mib", type=float, default=25.0,
                   help="DistributedOptimizer's bucket_bytes, MiB (DDP's bucket_cap_mb likewise)")
    p.add_argument("--batch", type=int, default=0, help="batch size (default: the model's)")
    p.add_argument("--modes", nargs="+", default=MODES, choices=MODES,
                   help="the runs (no_overlap and overlap always)")
    p.add_argument("--transport", default="zmq", choices=["zmq", "socket"],
                   help="DistributedOptimizer's transport (DDP on gossamer: zmq)")
    p.add_argument("--json", default=os.path.join(ROOT, "results", "bench-overlap.json"))
    # Internal: inside the hosts harness, and one rank of one run.
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="", help=argparse.SUPPRESS)
    p.add_argument("--model", default="", help=argparse.SUPPRESS)
    p.add_argument("--address", default="", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.modes = [m for m in MODES if m in set(args.modes) | {"no_overlap", "overlap"}]
    if args.rounds < 1 or args.steps < 1 or args.gbps <= 0:
        p.error("--rounds and --steps must be at least 1, --gbps positive")
    return args


# ---- one rank of one run -------------------------------------------------------
def run_rank(args):
    import torch

    torch.set_num_threads(1)
    widths, batch = MODELS[args.model]
    batch = args.batch or batch
    bucket_bytes = int(args.bucket_mib * 1024 * 1024)
    torch.manual_seed(0)
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers[:-1])
    g = torch.Generator().manual_seed(100 + args.rank)
    x = torch.randn(batch, widths[0], generator=g)
    y = torch.randint(0, widths[-1], (batch,), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    times, waits, backward = [], [], []
    cpu = []  # (user, system) seconds of this process at the first timed step and at the end
    if args.mode in ("ddp_gloo", "ddp_gossamer"):
        import torch.distributed as dist

        import gossamer.torch  # noqa: F401  registers the backend "gossamer"

        os.environ["MASTER_ADDR"] = args.address  # transport.host auto: the address facing rank 0's host
        dist.init_process_group(args.mode[4:], init_method=f"tcp://{args.address}:{args.port}", rank=args.rank,
                                world_size=2,
                                pg_options={"transport": {"kind": "zmq", "host": "auto", "timeout_seconds": 60}}
                                if args.mode == "ddp_gossamer" else None)
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mib)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        for step in range(3 + args.steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            loss_fn(ddp(x), y).backward()
            opt.step()
            if step >= 3:
                times.append(time.perf_counter() - t0)
            if step == 2:
                cpu.append(resource.getrusage(resource.RUSAGE_SELF))
        cpu.append(resource.getrusage(resource.RUSAGE_SELF))
        digest = ""
        dist.destroy_process_group()
    else:
        import gossamer
        import gossamer.torch as gt

        os.environ.update({"RANK": str(args.rank), "WORLD_SIZE": "2",
                           "GOSSAMER_RENDEZVOUS": f"tcp://{args.address}:{args.port}"})
        cfg = {"transport": {"kind": args.transport, "host": "auto", "timeout_seconds": 60},
               "algorithm": {"name": "allreduce_sgd"}}
        with gossamer.Agent.from_env(cfg) as agent:
            opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), model,
                                          agent, overlap=args.mode == "overlap", bucket_bytes=bucket_bytes)
            for step in range(3 + args.steps):
                t0 = time.perf_counter()
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                tf = time.perf_counter()
                loss.backward()
                t1 = time.perf_counter()
                opt.step()
                if step >= 3:
                    times.append(time.perf_counter() - t0)
                    backward.append(t1 - tf)
                    waits.append(time.perf_counter() - t1)
                if step == 2:
                    cpu.append(resource.getrusage(resource.RUSAGE_SELF))
            cpu.append(resource.getrusage(resource.RUSAGE_SELF))
            digest = hashlib.sha256(opt.flat_parameters.detach().numpy().tobytes()).hexdigest()
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"step_seconds": statistics.median(times),
                      "step_wait_seconds": statistics.median(waits) if waits else None,
                      "backward_seconds": statistics.median(backward) if backward else None,
                      "user_seconds": (cpu[1].ru_utime - cpu[0].ru_utime) / args.steps,
                      "system_seconds": (cpu[1].ru_stime - cpu[0].ru_stime) / args.steps,
                      "digest": digest, "parameters": params}), flush=True)


# ---- inside the harness: the runs, interleaved ---------------------------------
def run_inside(args):
    hosts = json.loads(os.environ["GOSSAMER_HOSTS"])
    address = hosts[0]["address"]
    port = 29700 + os.getpid() % 200
    rows = []
    for name in args.models:
        rounds = []
        for rnd in range(args.rounds):
            medians = {}
            for mode in args.modes:
                port += 2
                procs = [subprocess.Popen(
                    ["ip", "netns", "exec", hosts[r]["namespace"], "/usr/bin/python3", os.path.abspath(__file__),
                     "--rank", str(r), "--mode", mode, "--model", name, "--steps", str(args.steps),
                     "--bucket-mib", str(args.bucket_mib), "--batch", str(args.batch),
                     "--transport", args.transport, "--address", address, "--port", str(port)],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    env=dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), OMP_NUM_THREADS="1",
                             GLOO_SOCKET_IFNAME="eth0"))  # each host's veth
                    for r in range(2)]
                outs = []
                for r, proc in enumerate(procs):
                    out, err = proc.communicate(timeout=900)
                    if proc.returncode != 0:
                        raise SystemExit(f"bench_overlap: {name} {mode} rank {r} exited {proc.returncode}:\n{err}")
                    outs.append(json.loads(out.strip().splitlines()[-1]))
                medians[mode] = outs[0]
                bwd = outs[0].get("backward_seconds")
                print(f"  round {rnd + 1} {name} {mode}: {outs[0]['step_seconds']:.3f} s/step"
                      + (f", backward {bwd:.3f} s" if bwd is not None else "")
                      + f", cpu {outs[0]['user_seconds']:.3f} s user + {outs[0]['system_seconds']:.3f} s system per step",
                      file=sys.stderr, flush=True)
            rounds.append(medians)
        med = {m: statistics.median(r[m]["step_seconds"] for r in rounds) if m in args.modes else None
               for m in MODES}
        wait = statistics.median(r["no_overlap"]["step_wait_seconds"] for r in rounds)
        digests = {r[m]["digest"] for r in rounds for m in ("overlap", "no_overlap")}
        rows.append({"model": name, "parameters": rounds[0]["overlap"]["parameters"],
                     "bucket_bytes": int(args.bucket_mib * 1024 * 1024),
                     "batch": args.batch or MODELS[name][1], "link_gbps": args.gbps, "steps": args.steps,
                     "step_seconds_no_overlap": med["no_overlap"], "step_seconds_overlap": med["overlap"],
                     "step_seconds_ddp_gloo": med["ddp_gloo"], "step_seconds_ddp_gossamer": med["ddp_gossamer"],
                     "ddp_gossamer_to_gloo": med["ddp_gossamer"] / med["ddp_gloo"]
                     if med["ddp_gossamer"] and med["ddp_gloo"] else None,
                     "allreduce_fraction": wait / med["no_overlap"],
                     "overlap_ratio": med["overlap"] / med["no_overlap"],
                     "transport": args.transport,
                     "backward_seconds_no_overlap": statistics.median(
                         r["no_overlap"]["backward_seconds"] for r in rounds),
                     "backward_seconds_overlap": statistics.median(r["overlap"]["backward_seconds"] for r in rounds),
                     "cpu_seconds_no_overlap": statistics.median(
                         r["no_overlap"]["user_seconds"] + r["no_overlap"]["system_seconds"] for r in rounds),
                     "cpu_seconds_overlap": statistics.median(
                         r["overlap"]["user_seconds"] + r["overlap"]["system_seconds"] for r in rounds),
                     "bit_identical": len(digests) == 1,
                     "rounds": [{m: r[m]["step_seconds"] for m in args.modes} for r in rounds]})
    print(json.dumps(rows))


def main():
    args = parse_args()
    if args.rank >= 0:
        return run_rank(args)
    if args.inside:
        return run_inside(args)
    spec = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    spec.write(f"world_size: 2\nnetwork:\n  islands: [[0], [1]]\n  inside_gbps: {args.gbps}\n"
               f"  between_gbps: {args.gbps}\n")
    spec.close()
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "tests/hosts/hosts.py"), "run", spec.name, "--",
           "/usr/bin/python3", os.path.abspath(__file__), "--inside", "--rounds", str(args.rounds),
           "--steps", str(args.steps), "--gbps", str(args.gbps), "--models", *args.models,
           "--bucket-mib", str(args.bucket_mib), "--batch", str(args.batch), "--modes", *args.modes,
           "--transport", args.transport]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    os.unlink(spec.name)
    if done.returncode == 77:
        print("bench_overlap: skipped (network namespaces cannot be made here: needs root)", file=sys.stderr)
        sys.exit(77)
    if done.returncode != 0:
        sys.exit(f"bench_overlap: the runs failed (exit {done.returncode})")
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{'model':<12}{'params':>11}{'no overlap':>12}{'overlap':>9}{'ratio':>7}{'ddp gloo':>10}"
          f"{'ddp gossamer':>14}{'ratio':>7}{'allreduce %':>13}{'same bits':>11}")
    for r in rows:
        def cell(v, width, fmt):
            return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"
        print(f"{r['model']:<12}{r['parameters']:>11,}{r['step_seconds_no_overlap']:>11.3f}s"
              f"{r['step_seconds_overlap']:>8.3f}s{r['overlap_ratio']:>7.2f}{cell(r['step_seconds_ddp_gloo'], 9, '.3f')}s"
              f"{cell(r['step_seconds_ddp_gossamer'], 13, '.3f')}s{cell(r['ddp_gossamer_to_gloo'], 7, '.2f')}"
              f"{100 * r['allreduce_fraction']:>12.0f}%{str(r['bit_identical']):>11}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    if not all(r["bit_identical"] for r in rows):
        sys.exit("bench_overlap: overlap and no overlap ended with different models")


if __name__ == "__main__":
    main()
