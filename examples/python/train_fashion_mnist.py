#!/usr/bin/python3
"""Decentralized training of a small CNN on Fashion-MNIST with PyTorch and
Gossamer: every rank trains on its own shard with Adam, and Crossover-SGD
mixes the models between steps (no parameter server, no allreduce of
gradients).

Run it with any launcher (the same script, unchanged):

    /usr/bin/python3 examples/python/train_fashion_mnist.py               # starts 4 ranks itself
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 4 --redirects 1 --tee 1 \\
        examples/python/train_fashion_mnist.py
    mpirun -n 4 /usr/bin/python3 examples/python/train_fashion_mnist.py

With ``--autocast bfloat16`` (or ``float16``) the forward pass runs under
``torch.autocast(device type, dtype=...)``: the parameters, the optimizer state
and what Gossamer exchanges stay float32 (master weights), only the layers'
arithmetic is 16-bit. ``--device cuda`` trains on the GPU (every rank on the
same one, or ``cuda:N``); Gossamer stages the exchanges through host memory.

Rank 0 prints one line per epoch and writes results/python-fashion-mnist.json
(world_size, launcher, algorithm, optimizer, autocast, device, test_accuracy,
wall_seconds, the per-epoch history, and run_dir: every rank's metrics
records, with the step losses and rank 0's epoch records, which
scripts/gossamer-report plots). The data are Debian's dataset-fashion-mnist
files, read here (no downloads).
"""

import argparse
import gzip
import json
import os
import multiprocessing
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

import gossamer
import gossamer.torch as gt

DEFAULT_CONFIG = {
    "transport": {"kind": "zmq", "host": "127.0.0.1", "protocol": "tcp", "timeout_seconds": 60},
    "topology": {"kind": "fair_roulette"},
    "algorithm": {"name": "crossover_sgd", "segments": 4},
}


def read_idx(path, kind):
    """An idx file (gzip or not) as a uint8 array: images (N, 28, 28) or labels (N,).
    Raises ValueError for a file that is not what it claims to be."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic, dims = (2051, 3) if kind == "images" else (2049, 1)
    if len(raw) < 4 + 4 * dims or int.from_bytes(raw[:4], "big") != magic:
        raise ValueError(f"{path}: not an idx {kind} file (magic {int.from_bytes(raw[:4], 'big')}, want {magic})")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    need = 4 + 4 * dims + int(np.prod(shape))
    if len(raw) != need:
        raise ValueError(f"{path}: {len(raw)} bytes, the header {shape} needs {need}")
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    """The split's images (N, 28, 28) and labels (N,) as uint8 arrays."""
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), "images")
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), "labels")
    if len(x) != len(y):
        raise ValueError(f"{data_dir}: {len(x)} {split} images but {len(y)} labels")
    return x, y


def tensors(x, y):
    """uint8 images and labels as normalised float32 (N, 1, 28, 28) and int64 (N,)
    tensors; a rank converts only its own shard."""
    x = torch.from_numpy((x.astype(np.float32) / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def shard(count, limit, seed, rank, n):
    """Indices of rank `rank`'s training images of `count` (the first `limit`
    of a seeded permutation when limit > 0), every rank's shard of one size
    so that each takes as many steps (the last few of an uneven split are
    left out)."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    used = (min(limit, count) if limit else count) // n * n
    return order[:used][rank::n].numpy()


class Net(torch.nn.Module):
    """conv 5x5x32 - pool - conv 5x5x64 - pool - fc 128 - fc 10 (about 0.2 M parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def evaluate(model, x, y, agent):
    """Accuracy of `model` on the test set, split over the ranks."""
    lo = agent.rank * len(x) // agent.world_size
    hi = (agent.rank + 1) * len(x) // agent.world_size
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:min(i + 1000, hi)]).argmax(1) == y[i:min(i + 1000, hi)]).sum())
                      for i in range(lo, hi, 1000))
    model.train()
    counts = np.array([correct, hi - lo], dtype=np.float64)
    agent.allreduce(counts, op="sum")
    return counts[0] / counts[1]


def train(args, data=None):
    """One rank's training; `data` is ((train images, labels), (test images,
    labels)) as load() returns them, read here when None."""
    start = time.monotonic()
    config = args.config if args.config else DEFAULT_CONFIG
    agent = gossamer.Agent.from_env(config)
    launcher = os.environ.get("GOSSAMER_EXAMPLE_LAUNCHER", agent.launcher)
    rank, n = agent.rank, agent.world_size
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))

    (x_train, y_train), (x_test, y_test) = data or (load(args.data, "train"), load(args.data, "test"))
    if args.test_limit:
        x_test, y_test = x_test[:args.test_limit], y_test[:args.test_limit]
    mine = shard(len(x_train), args.train_limit, args.seed, rank, n)
    if len(mine) < args.batch_size:
        raise ValueError(f"each rank's shard holds {len(mine)} training images, fewer than --batch-size "
                         f"{args.batch_size}: raise --train-limit or lower --batch-size")
    device = torch.device(args.device)
    x_train, y_train = (t.to(device) for t in tensors(x_train[mine], y_train[mine]))
    x_test, y_test = (t.to(device) for t in tensors(x_test, y_test))

    autocast_dtype = {"none": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.autocast]
    model = Net().to(device)
    gt.broadcast_parameters(model, agent)  # every rank starts from rank 0's model
    steps_per_epoch = len(x_train) // args.batch_size
    opt = gt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=args.lr), model, agent,
                                  total_steps=steps_per_epoch * args.epochs)
    history = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.monotonic()
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(args.seed + epoch))
        loss_sum = 0.0
        for s in range(steps_per_epoch):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad()
            with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16,
                                enabled=autocast_dtype is not None):
                logits = model(x_train[idx])
            loss = F.cross_entropy(logits.float(), y_train[idx])
            loss.backward()
            opt.step()
            loss_sum += float(loss)
            agent.note_metric("loss", float(loss))  # the step record's loss (docs/metrics.md)
        opt.flush()
        consensus = gt.consensus_distance(model, agent)
        own = opt.flat_parameters.clone()
        gt.average_parameters(model, agent)  # evaluate the average model ...
        acc = evaluate(model, x_test, y_test, agent)
        opt.flat_parameters.copy_(own)       # ... and keep training each rank's own
        loss_avg = np.array([loss_sum / steps_per_epoch])
        agent.allreduce(loss_avg)
        history.append({"epoch": epoch, "train_loss": float(loss_avg[0]), "test_accuracy": acc,
                        "consensus_distance": consensus, "seconds": time.monotonic() - t0})
        if rank == 0:  # an epoch record, as gossamer-train writes: gossamer-report plots it
            agent.emit_metrics("epoch", epoch=epoch, loss=float(loss_avg[0]), test_accuracy=acc,
                               consensus_distance=consensus, seconds=time.monotonic() - t0)
            print(f"epoch {epoch}/{args.epochs}  loss {loss_avg[0]:.4f}  test acc (avg model) {100 * acc:.2f}%  "
                  f"consensus {consensus:.3e}  {time.monotonic() - t0:.1f} s", flush=True)
    gt.average_parameters(model, agent)
    acc = evaluate(model, x_test, y_test, agent)
    result = {"world_size": n, "launcher": launcher, "algorithm": agent.algorithm, "optimizer": "Adam",
              "autocast": args.autocast, "device": str(device),
              "transport": agent.transport, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
              "test_accuracy": acc, "wall_seconds": time.monotonic() - start, "history": history,
              "run_dir": agent.run_dir}
    agent.close()
    if rank == 0:
        print(f"final test accuracy {100 * acc:.2f}% (average model, {n} peers, {launcher})", flush=True)
        if args.results:
            os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
            with open(args.results, "w") as f:
                json.dump(result, f, indent=1)
    return 0


def launch_self(args):
    """No launcher around us: fork args.world_size ranks of this process.
    The data are read once, here, and the forked ranks share them; torch and
    Gossamer are imported once (forking is safe: nothing has started a thread
    yet)."""
    data = (load(args.data, "train"), load(args.data, "test"))
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="gossamer-rendezvous-") as rendezvous:  # removed when the ranks end
        procs = [ctx.Process(target=run_forked_rank, args=(args, r, rendezvous, data))
                 for r in range(args.world_size)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    return 0 if all(p.exitcode == 0 for p in procs) else 1


def run_forked_rank(args, rank, rendezvous, data):
    """One rank started by launch_self: the launcher variables, then train()."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(args.world_size), GOSSAMER_RENDEZVOUS=rendezvous,
                      GOSSAMER_EXAMPLE_LAUNCHER="self", OMP_NUM_THREADS="1")
    sys.exit(train(args, data))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="Gossamer YAML config (default: Crossover-SGD over zmq on loopback)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory of the idx .gz files")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=0, help="use only this many training images (0: all)")
    p.add_argument("--test-limit", type=int, default=0, help="evaluate on only this many test images (0: all)")
    p.add_argument("--world-size", type=int, default=4, help="ranks to start when no launcher started us")
    p.add_argument("--results", default="results/python-fashion-mnist.json", help="rank 0 writes its JSON here")
    p.add_argument("--device", default="cpu",
                   help="torch device of the model and data: cpu, cuda, cuda:N (the exchanges are staged on the host)")
    p.add_argument("--autocast", choices=["none", "bfloat16", "float16"], default="none",
                   help="run the forward pass under torch.autocast with this dtype (float32 master weights)")
    args = p.parse_args()
    for name in ("epochs", "train_limit", "test_limit"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.batch_size < 1 or args.world_size < 1:
        p.error("--batch-size and --world-size must be >= 1")
    if args.autocast == "float16" and torch.device(args.device).type == "cpu":
        p.error("--autocast float16 needs a CUDA --device (autocast on the CPU takes bfloat16)")
    if gossamer.discover_launch() is None and args.world_size > 1:
        return launch_self(args)
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
