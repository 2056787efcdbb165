#!/usr/bin/python3
"""DistributedDataParallel on torch.distributed's gloo backend against DDP on
Gossamer's backend "gossamer" (gossamer.torch), training the Python example's
CNN on Fashion-MNIST (examples/python/train_fashion_mnist.py: its data, shard
and model) with the same seed.

Each round runs the two backends one after the other (interleaved, gloo
first in odd rounds, gossamer first in even ones), every rank a process on
loopback with one compute thread. A run trains --epochs epochs with Adam and
reports the test accuracy of the model (the same on every rank: DDP
allreduces the gradients) and the median seconds per step after 3 warm-up
steps. The table gives per backend the median over rounds, the ratio of
gossamer's step time to gloo's and the accuracy difference.

--device runs the model and data on that torch device, --autocast the
forward pass under torch.autocast, and --backends picks the backends (nccl
too; the ratios need gloo and gossamer).

Writes results/bench-ddp.json: world_size, epochs, train_images, device,
autocast, rounds (each run's accuracy and step seconds) and, per backend,
test_accuracy and step_seconds (medians) and steps_per_epoch, plus, when
both ran, step_ratio (gossamer / gloo) and accuracy_difference_points
(gossamer - gloo).

    bench/bench_ddp.py                      # 4 ranks, 3 rounds, all 60,000 images
    bench/bench_ddp.py --rounds 1 --train-limit 3000
    bench/bench_ddp.py --rounds 1 --device cuda --autocast bfloat16 --backends gloo nccl
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
BACKENDS = ["gloo", "gossamer"]
AUTOCAST = {"none": None, "bfloat16": "bfloat16", "float16": "float16"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=0, help="training images in all (0: all 60,000)")
    p.add_argument("--test-limit", type=int, default=0, help="test images (0: all 10,000)")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--transport", default="zmq", help="the gossamer backend's transport.kind")
    p.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS + ["nccl"],
                   help="the torch.distributed backends to run (step_ratio needs gloo and gossamer)")
    p.add_argument("--device", default="cpu", help="torch device of the model and data (cpu, cuda, cuda:N)")
    p.add_argument("--autocast", choices=list(AUTOCAST), default="none",
                   help="run the forward pass under torch.autocast with this dtype (float32 master weights)")
    p.add_argument("--json", default=os.path.join(ROOT, "results", "bench-ddp.json"))
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--backend", default="", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args()


def run_rank(args):
    """One rank of one run: DDP training, then the test accuracy."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
    import train_fashion_mnist as example  # the data, the shard and the model

    import gossamer.torch  # noqa: F401  registers the backend "gossamer"

    torch.set_num_threads(1)
    rank, n = args.rank, args.world_size
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=n,
                            pg_options={"transport": {"kind": args.transport, "host": "127.0.0.1"}}
                            if args.backend == "gossamer" else None)
    x_train, y_train = example.load(args.data, "train")
    x_test, y_test = example.load(args.data, "test")
    if args.test_limit:
        x_test, y_test = x_test[:args.test_limit], y_test[:args.test_limit]
    shard = example.shard(len(x_train), args.train_limit, args.seed, rank, n)  # the example's
    device = torch.device(args.device)
    x_train, y_train = (t.to(device) for t in example.tensors(x_train[shard], y_train[shard]))
    x_test, y_test = (t.to(device) for t in example.tensors(x_test, y_test))
    dtype = getattr(torch, AUTOCAST[args.autocast]) if AUTOCAST[args.autocast] else torch.bfloat16

    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(example.Net().to(device))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps = len(x_train) // args.batch_size
    times = []
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(args.seed + 1 + epoch))
        for s in range(steps):
            idx = perm[s * args.batch_size:(s + 1) * args.batch_size]
            t0 = time.perf_counter()
            opt.zero_grad()
            with torch.autocast(device.type, dtype=dtype, enabled=AUTOCAST[args.autocast] is not None):
                logits = model(x_train[idx])
            F.cross_entropy(logits.float(), y_train[idx]).backward()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()  # the step's kernels, not only their launch
            times.append(time.perf_counter() - t0)
    model.eval()
    lo, hi = rank * len(x_test) // n, (rank + 1) * len(x_test) // n
    with torch.no_grad():
        correct = (model.module(x_test[lo:hi]).argmax(1) == y_test[lo:hi]).sum().double()
    counts = torch.stack([correct.cpu(), torch.tensor(float(hi - lo), dtype=torch.float64)])
    dist.all_reduce(counts)
    dist.destroy_process_group()
    print(json.dumps({"test_accuracy": float(counts[0] / counts[1]), "step_seconds": statistics.median(times[3:]),
                      "steps": len(times)}), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, backend):
    """One run of `backend`: rank 0's result."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r), "--backend", backend,
                               "--port", str(port), "--world-size", str(args.world_size), "--epochs",
                               str(args.epochs), "--train-limit", str(args.train_limit), "--test-limit",
                               str(args.test_limit), "--batch-size", str(args.batch_size), "--seed", str(args.seed),
                               "--data", args.data, "--transport", args.transport, "--device", args.device,
                               "--autocast", args.autocast],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(args.world_size)]
    outs = []
    for r, p in enumerate(procs):
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"bench_ddp: {backend} rank {r} exited {p.returncode}:\n{err}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs[0]


def main():
    args = parse_args()
    if args.rank >= 0:
        return run_rank(args)
    rounds = []
    for rnd in range(args.rounds):
        result = {}
        for backend in (args.backends if rnd % 2 == 0 else args.backends[::-1]):
            result[backend] = run(args, backend)
            print(f"  round {rnd + 1} {backend}: accuracy {100 * result[backend]['test_accuracy']:.2f}%, "
                  f"{result[backend]['step_seconds'] * 1000:.1f} ms/step", file=sys.stderr, flush=True)
        rounds.append(result)
    summary = {"world_size": args.world_size, "epochs": args.epochs,
               "train_images": args.train_limit or 60000, "test_images": args.test_limit or 10000,
               "batch_size": args.batch_size, "seed": args.seed, "device": args.device,
               "autocast": args.autocast, "rounds": rounds}
    for b in args.backends:
        summary[b] = {"test_accuracy": statistics.median(r[b]["test_accuracy"] for r in rounds),
                      "step_seconds": statistics.median(r[b]["step_seconds"] for r in rounds),
                      "steps_per_epoch": rounds[0][b]["steps"] // args.epochs}
    print(f"{'backend':<10}{'test accuracy':>15}{'ms/step':>10}")
    for b in args.backends:
        print(f"{b:<10}{100 * summary[b]['test_accuracy']:>14.2f}%{1000 * summary[b]['step_seconds']:>10.1f}")
    if "gloo" in summary and "gossamer" in summary:
        summary["step_ratio"] = summary["gossamer"]["step_seconds"] / summary["gloo"]["step_seconds"]
        summary["accuracy_difference_points"] = 100 * (summary["gossamer"]["test_accuracy"] -
                                                       summary["gloo"]["test_accuracy"])
        print(f"gossamer / gloo step time {summary['step_ratio']:.2f}, accuracy difference "
              f"{summary['accuracy_difference_points']:+.2f} points")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
