#!/usr/bin/python3
"""Checks of Gossamer's Python package on a torch device (CUDA): the
collectives on device tensors against the same calls on CPU copies, the cost
of staging a device tensor through host memory, and the CNN example trained
under bfloat16 autocast. Run on a machine with a GPU (scripts/device-check.sh),
or on the CPU as a dry run.

    PYTHONPATH=build/python /usr/bin/python3 bench/device_checks.py tensors \\
        [--world-size 4] [--device cuda|cpu] [--sizes 1,1000,1048579,4194347] --json OUT.json
    PYTHONPATH=build/python /usr/bin/python3 bench/device_checks.py staging \\
        [--world-size 4] [--device cuda|cpu] [--mib 64] [--reps 10] --json OUT.json
    PYTHONPATH=build/python /usr/bin/python3 bench/device_checks.py train \\
        [--world-size 4] [--device cuda|cpu] [--epochs 3] [--limit N] [--data DIR] --json OUT.json

--device defaults to cuda when torch sees one, else cpu. Each subcommand
starts --world-size rank processes on this machine (this script again, with
RANK, WORLD_SIZE and GOSSAMER_RENDEZVOUS set; zmq over TCP on 127.0.0.1, no
membership service); train lets the example start its own. It prints a table
last and writes the JSON file (check, ok, device, world size, torch version,
GPU, date, commit and rows; every row names its device) even when a check
fails. Exit status: 0 when every row passed, 1 when one failed (a rank that
exits with an error or runs past --timeout is a failed row), 77 when none
failed but some were skipped (train: DDP over "gossamer" where its extension
is not built), 2 for bad arguments.

tensors   Per rank, seeded per rank: tensors of float32, bfloat16 and float16
          of each --sizes element count (one above 2^22 elements only in a
          dtype where it spans more than one 16 MiB staging chunk: the
          default's 2^22 + 43 in float32). For each: agent.allreduce (sum and
          average) and agent.broadcast (root N-1) of the tensor on --device,
          and one gossip exchange (Crossover-SGD through
          gossamer.torch.DistributedOptimizer: one step of SGD with lr 0 on a
          single parameter, so the step is the mixing alone; Agent.exchange
          takes CPU float32 arrays only), each against the same call on a CPU
          copy. A row passes when the device tensor is still on its device,
          its bits equal those of the CPU tensor taken through the same
          collectives (a device tensor is staged in 16 MiB chunks, one
          collective each, gossamer/_staging.py), and it is within the bound
          (row field "bound") of the CPU call on the whole tensor: 0 (the same
          bits) for float32 in one chunk, broadcast and the gossip exchange;
          for 16-bit, and for float32 in several chunks (where a chunk's ring
          segments differ from the whole tensor's, so sums are added in
          another order), twice the bound of docs/collectives.md ("16-bit
          vectors": a sum within gamma * sum_i |x_i| of the exact one, gamma =
          (N-1)u / (1 - (N-1)u), u the unit roundoff, 2^-24 for float32; an
          average rounds once more). Every allreduce result, device and CPU,
          must also be within that bound of the float64 sum of all ranks'
          inputs. Then torch.distributed over the backend "gossamer" (its
          c10d extension; c10d-* rows): all_reduce, broadcast and all_gather
          of the device tensor against the same on a CPU copy, the same bits
          (the backend stages a device tensor whole).
staging   A --mib MiB float32 allreduce (sum) of a device tensor staged in
          chunks of each --chunk-mib (4, 16 and 64 MiB; the pipeline of
          Agent.allreduce, gossamer/_staging.py) against the same of a CPU
          tensor. Two more sides per chunk size take the staged call apart:
          the CPU allreduce in the same chunks (the collectives alone,
          cpu_chunked_seconds) and the pipeline's copies of the device
          tensor with no collective (copies_seconds), every rank copying at
          once. --reps interleaved repetitions (the order rotating) after
          --warmup, a barrier before each timed call (CUDA synchronised
          before and after it), the slowest rank's time per repetition (an
          allreduce of the times with op max); one row per chunk size with
          the medians and their ratio, and on CUDA the median time of
          copying the whole tensor to pinned memory and back (rank 0's,
          copy_down_seconds and copy_up_seconds). The row of the library's chunk size
          (16 MiB) passes when the sums are right, the tensor stayed on its
          device and device / CPU <= --max-ratio (1.15); the others are
          reported; in a dry run no ratio is judged.
train     Under --autocast bfloat16 on --device: Crossover-SGD with
          gossamer.torch.DistributedOptimizer (examples/python/
          train_fashion_mnist.py, which starts --world-size ranks itself),
          and DDP over the backends "gossamer", "gloo" and, with --device
          cuda, "nccl" (one round of bench/bench_ddp.py each: the example's
          CNN, data and shard). Rows give the test accuracy and the seconds
          per epoch (the example's per-epoch time, its evaluation included;
          for DDP, bench_ddp's median step times the steps of an epoch); a
          row passes at --min-accuracy (0.89), or, with --limit (train on
          that many images, for a dry run), above 0.2. One epoch is not
          enough for 0.89: the example reached 0.868 after one epoch in
          float32 (README.md) and 0.865 under bfloat16 autocast on the CPU
          (this script, 2026-11-29), DDP 0.872 (docs/python.md); 0.89 takes
          two or three epochs (--epochs 3: 0.901). A run that cannot be made
          (the example without --device, the backend "gossamer" not built)
          is a skipped row saying why, and so is DDP over NCCL when NCCL
          refuses ranks that share a GPU ("Duplicate GPU detected").

On --device cpu the "device" side is a dry run: allreduce and broadcast take
a CPU tensor through the staging pipeline with synchronous copies
(gossamer._staging.SyncOps, the 16 MiB chunks a device tensor gets), the
gossip exchange goes through DistributedOptimizer's float32 host copy (forced,
as bindings/python/tests/test_torch.py does), and rows say "dry_run": true.
"""

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "python", "train_fashion_mnist.py")
BENCH_DDP = os.path.join(ROOT, "bench", "bench_ddp.py")  # DDP over the example's CNN, data and shard
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
DEFAULT_SIZES = "1,1000,1048579,4194347"  # 2^20 + 3, 2^22 + 43: float32 of 2^22 + 43 is 2 staging chunks
DTYPES = ["float32", "bfloat16", "float16"]
ONE_CHUNK_ROW_LIMIT = 1 << 22  # elements: a tensor above this in one staging chunk adds only time
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
FLOAT16_SUBNORMAL = 2.0 ** -24  # docs/collectives.md: added to the bound for float16
LAUNCHER_VARIABLES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                      "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "GOSSAMER_RENDEZVOUS"]


# ---- one rank ----------------------------------------------------------------------
def make_agent(rank, world_size):
    """This rank's gossamer.Agent: zmq over TCP on 127.0.0.1, no membership
    service, Crossover-SGD (4 segments, fair roulette) for the gossip
    exchange; the rendezvous from $GOSSAMER_RENDEZVOUS."""
    import gossamer

    cfg = {"transport": {"kind": "zmq", "host": "127.0.0.1", "protocol": "tcp", "timeout_seconds": 120},
           "membership": {"enabled": False},
           "topology": {"kind": "fair_roulette"},
           "algorithm": {"name": "crossover_sgd", "segments": 4}}
    return gossamer.Agent(cfg, rank, world_size, os.environ["GOSSAMER_RENDEZVOUS"])


def rank_data(rank, elements, dtype):
    """Rank `rank`'s input of `elements` elements, a CPU tensor of `dtype`:
    standard normal float32 values (seeded by rank and size) rounded to it."""
    import torch

    g = torch.Generator().manual_seed(1_000_003 * (rank + 1) + elements)
    return torch.randn(elements, generator=g).to(dtype)


def bits(t):
    """The tensor's raw bits as an integer CPU tensor (compares -0.0, +0.0
    and NaNs exactly)."""
    import torch

    t = t.detach().cpu().contiguous()
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def as_float64(t):
    """A tensor (any device and float dtype) as a float64 NumPy array."""
    return t.detach().cpu().double().numpy()


def staged_allreduce(agent, tensor, op, chunk_bytes=None, sync=True):
    """`tensor` (any device) allreduced through the staging pipeline: the
    chunks and collectives Agent.allreduce gives a device tensor
    (gossamer/_staging.py), here also for a CPU tensor. chunk_bytes: the
    library's unless given; sync: synchronous copies (else the device's own)."""
    from gossamer import _staging

    _staging.staged(tensor, lambda host: agent.allreduce_async(host, op), lambda w: w.wait(),
                    chunk_bytes=chunk_bytes or _staging.DEFAULT_CHUNK_BYTES, ops=_staging.SyncOps() if sync else None)


def staged_broadcast(agent, tensor, root):
    """As staged_allreduce, for Agent.broadcast."""
    from gossamer import _staging

    _staging.staged(tensor, lambda host: agent.broadcast(host, root), lambda _: None, ops=_staging.SyncOps())


def exact_sums(world_size, elements, dtype):
    """(sum_i x_i, sum_i |x_i|) over all ranks' inputs, float64 NumPy arrays."""
    import numpy as np

    total = np.zeros(elements)
    magnitude = np.zeros(elements)
    for r in range(world_size):
        x = as_float64(rank_data(r, elements, dtype))
        total += x
        magnitude += np.abs(x)
    return total, magnitude


def allreduce_bound(dtype_name, op, n, total, magnitude):
    """The per-element bound of docs/collectives.md on |result - exact| for
    an allreduce of n ranks (gamma over n-1 hops; an average rounds once more,
    and its division may round too), float64 NumPy array."""
    import numpy as np

    u = UNIT_ROUNDOFF[dtype_name]
    gamma = (n - 1) * u / (1 - (n - 1) * u)
    if op == "sum":
        bound = gamma * magnitude
    else:
        bound = (1 + u) * gamma * magnitude / n + 2 * u * np.abs(total) / n
    if dtype_name == "float16":
        bound = bound + FLOAT16_SUBNORMAL
    return bound


def bound_text(dtype_name, op, zero):
    """The bound a row checks, in words (the row's "bound")."""
    if zero:
        return "0 (bit-identical)"
    u = {"float32": "2^-24", "bfloat16": "2^-8", "float16": "2^-11"}[dtype_name]
    one = "gamma*S" if op == "sum" else "(1+u)*gamma*S/N + 2u*|sum x_i|/N"
    sub = " + 2^-24" if dtype_name == "float16" else ""
    return f"2*({one}{sub}), S = sum_i |x_i|, gamma = (N-1)u/(1-(N-1)u), u = {u}"


def max_ratio(diff, bound):
    """max(diff / bound) over the elements with a positive bound (None if none)."""
    import numpy as np

    pos = bound > 0
    return float(np.max(diff[pos] / bound[pos])) if pos.any() else None


def check_allreduce(agent, device, dry, mine, op, total, magnitude, row):
    """One allreduce row: the device tensor against the CPU call on the whole
    tensor, the CPU tensor through the same chunks, and the exact sum."""
    import numpy as np

    dtype_name = row["dtype"]
    n = agent.world_size
    cpu = mine.clone()
    agent.allreduce(cpu, op=op)
    chunked = mine.clone()
    staged_allreduce(agent, chunked, op)
    if dry:
        dev = mine.clone()
        staged_allreduce(agent, dev, op)
    else:
        dev = mine.to(device)
        agent.allreduce(dev, op=op)
    stayed = dev.device.type == device.type
    target = total if op == "sum" else total / n
    exact_bound = allreduce_bound(dtype_name, op, n, total, magnitude)
    err_dev = np.abs(as_float64(dev) - target)
    err_cpu = np.abs(as_float64(cpu) - target)
    diff = np.abs(as_float64(dev) - as_float64(cpu))
    zero = dtype_name == "float32" and row["chunks"] == 1
    diff_bound = np.zeros_like(diff) if zero else 2 * exact_bound
    same_chunks = bool((bits(dev) == bits(chunked)).all())
    within = bool((diff <= diff_bound).all())
    exact_ok = bool((err_dev <= exact_bound).all() and (err_cpu <= exact_bound).all())
    row.update(op=f"allreduce-{op}", max_abs_diff=float(diff.max()), bound=bound_text(dtype_name, op, zero),
               max_diff_over_bound=max_ratio(diff, diff_bound), differing=int((diff > 0).sum()),
               same_bits_as_cpu_chunks=same_chunks,
               max_error_vs_exact=float(max(err_dev.max(), err_cpu.max())),
               max_error_over_exact_bound=max_ratio(np.maximum(err_dev, err_cpu), exact_bound),
               stayed_on_device=stayed, ok=stayed and same_chunks and within and exact_ok)
    return row


def check_broadcast(agent, device, dry, mine, row):
    """One broadcast row (root N-1): device, CPU and root's input, the same bits."""
    root = agent.world_size - 1
    expected = rank_data(root, mine.numel(), mine.dtype)
    cpu = mine.clone()
    agent.broadcast(cpu, root)
    if dry:
        dev = mine.clone()
        staged_broadcast(agent, dev, root)
    else:
        dev = mine.to(device)
        agent.broadcast(dev, root)
    stayed = dev.device.type == device.type
    diff = (dev.detach().cpu().double() - cpu.double()).abs()
    same = bool((bits(dev) == bits(cpu)).all() and (bits(cpu) == bits(expected)).all())
    row.update(op=f"broadcast-root{root}", max_abs_diff=float(diff.max()), bound=bound_text(row["dtype"], "", True),
               max_diff_over_bound=None, differing=int((diff > 0).sum()), same_bits_as_cpu_chunks=same,
               stayed_on_device=stayed, ok=stayed and same)
    return row


def gossip_once(agent, data, force_host_copy):
    """One Crossover-SGD exchange of `data` (a copy; its device and dtype)
    through gossamer.torch.DistributedOptimizer: SGD with lr 0 and a zero
    gradient, so the step is the mixing alone. With force_host_copy a CPU
    float32 parameter takes the float32 host-copy path of a device model.
    Returns the mixed flat parameters."""
    import torch
    import gossamer.torch as gt

    p = torch.nn.Parameter(data.clone())
    saved = gt._needs_host_copy
    if force_host_copy:
        gt._needs_host_copy = lambda device, dtype: True
    try:
        opt = gt.DistributedOptimizer(torch.optim.SGD([p], lr=0.0), [p], agent)
    finally:
        gt._needs_host_copy = saved
    opt.zero_grad()
    opt.step()
    return opt.flat_parameters.detach()


def check_gossip(agent, device, dry, mine, row):
    """One gossip row: the exchange on the device against the same on the
    CPU (the same bits: both mix a float32 host copy the same way)."""
    dev = gossip_once(agent, mine if dry else mine.to(device), dry)
    cpu = gossip_once(agent, mine, False)
    stayed = dev.device.type == device.type
    diff = (dev.cpu().double() - cpu.double()).abs()
    same = bool((bits(dev) == bits(cpu)).all())
    row.update(op="gossip-crossover_sgd", max_abs_diff=float(diff.max()), bound=bound_text(row["dtype"], "", True),
               max_diff_over_bound=None, differing=int((diff > 0).sum()), same_bits_as_cpu_chunks=same,
               changed=not bool((bits(cpu) == bits(mine)).all()), stayed_on_device=stayed, ok=stayed and same)
    return row


def sizes_for(sizes, dtype):
    """The --sizes that `dtype`'s rows check: each of at most
    ONE_CHUNK_ROW_LIMIT elements, and a larger one only where it spans more
    than one staging chunk in that dtype (2^22 + 43 elements: float32 only),
    since a larger tensor in one chunk takes the path of a smaller one."""
    import torch
    from gossamer import _staging

    size = torch.tensor([], dtype=dtype).element_size()
    return [n for n in sizes
            if n <= ONE_CHUNK_ROW_LIMIT or len(_staging.chunks(n, size, _staging.DEFAULT_CHUNK_BYTES)) > 1]


def rank_tensors(args, agent, device, dry):
    """The tensors check's rows on this rank (every rank makes the same calls)."""
    import torch
    from gossamer import _staging

    rows = []
    for dtype_name in DTYPES:
        dtype = getattr(torch, dtype_name)
        for elements in sizes_for(args.sizes, dtype):
            mine = rank_data(agent.rank, elements, dtype)
            total, magnitude = exact_sums(agent.world_size, elements, dtype)
            chunks = len(_staging.chunks(elements, mine.element_size(), _staging.DEFAULT_CHUNK_BYTES))

            def base():
                return {"check": "tensors", "dtype": dtype_name, "elements": elements, "device": str(device),
                        "dry_run": dry, "world_size": agent.world_size, "chunks": chunks}

            for op in ("sum", "average"):
                rows.append(check_allreduce(agent, device, dry, mine, op, total, magnitude, base()))
            rows.append(check_broadcast(agent, device, dry, mine, base()))
            if agent.world_size > 1:
                rows.append(check_gossip(agent, device, dry, mine, base()))
    return rows


def c10d_rows(args, rank, n, device, dry):
    """The tensors check's rows of torch.distributed over the backend
    "gossamer" on this rank: all_reduce (sum, waited on through its
    future), broadcast (root N-1) and all_gather of the tensor on --device
    against the same call on a CPU copy. The backend stages a device tensor
    whole through host memory (one collective), so a row passes when the
    device result is still on its device and has the CPU result's bits, for
    every dtype. One skipped row when the extension is not built."""
    import datetime
    import torch
    import torch.distributed as dist
    import gossamer.torch as gt

    if not gt.HAS_PROCESS_GROUP:
        return [{"check": "tensors", "op": "c10d", "device": str(device), "dry_run": dry, "ok": None,
                 "skipped": "gossamer.torch.HAS_PROCESS_GROUP is False: gossamer._c10d was not built"}]
    dist.init_process_group("gossamer", init_method="env://", rank=rank, world_size=n,  # MASTER_ADDR, _PORT
                            timeout=datetime.timedelta(seconds=120),
                            pg_options={"gossamer_config": {"transport": {"kind": "zmq", "host": "127.0.0.1",
                                                                          "timeout_seconds": 60}}})
    root = n - 1
    rows = []
    for dtype_name in DTYPES:
        dtype = getattr(torch, dtype_name)
        for elements in sizes_for(args.sizes, dtype):
            mine = rank_data(rank, elements, dtype)
            for op in ("all_reduce-sum", "broadcast", "all_gather"):
                results = {}
                for side in ("device", "cpu"):
                    x = mine.clone() if side == "cpu" or dry else mine.to(device)
                    if op == "all_reduce-sum":
                        got = dist.all_reduce(x, async_op=True).get_future().wait()[0]
                        same_object = got.data_ptr() == x.data_ptr()
                    elif op == "broadcast":
                        dist.broadcast(x, root)
                        got, same_object = x, True
                    else:
                        outs = [torch.empty_like(x) for _ in range(n)]
                        dist.all_gather(outs, x)
                        got, same_object = torch.cat(outs), True
                    results[side] = (got, same_object)
                (dev, same_object), (cpu, _) = results["device"], results["cpu"]
                diff = (dev.detach().cpu().double() - cpu.double()).abs()
                same = bool((bits(dev) == bits(cpu)).all())
                stayed = dev.device.type == ("cpu" if dry else device.type)
                rows.append({"check": "tensors", "op": f"c10d-{op}", "dtype": dtype_name, "elements": elements,
                             "device": str(device), "dry_run": dry, "world_size": n, "chunks": 1,
                             "max_abs_diff": float(diff.max()), "bound": "0 (the same bits)",
                             "differing": int((diff > 0).sum()), "same_bits_as_cpu_chunks": same,
                             "future_holds_the_tensor": same_object, "stayed_on_device": stayed,
                             "ok": same and stayed and same_object})
    dist.barrier()
    dist.destroy_process_group()
    return rows


def chunked_allreduce(agent, tensor, op, chunk_bytes):
    """`tensor` (CPU) allreduced in place in the chunks of chunk_bytes that the
    staging pipeline uses, one collective per chunk in order, with no copies:
    the collectives of a staged call alone."""
    from gossamer import _staging

    flat = tensor.view(-1)
    for r in _staging.chunks(flat.numel(), flat.element_size(), chunk_bytes):
        agent.allreduce(flat[r.start:r.stop], op=op)


def staged_copies(tensor, chunk_bytes, sync):
    """`tensor` (any device) taken through the staging pipeline in chunks of
    chunk_bytes with no collective: each chunk down to its host slot and back,
    the copies of a staged call alone (the tensor keeps its values)."""
    from gossamer import _staging

    _staging.staged(tensor, lambda host: None, lambda _: None, chunk_bytes=chunk_bytes,
                    ops=_staging.SyncOps() if sync else None)


def staging_sides(chunk_sizes):
    """The timed sides of the staging check: the CPU call, then per chunk
    size the chunked collectives alone, the pipeline's copies alone and the
    staged call."""
    return ["cpu"] + [f"{kind}@{c}" for c in chunk_sizes for kind in ("cpu", "copies", "device")]


def side_tensor(side, tensors):
    """The tensor a side of the staging check works on: the CPU one for "cpu" and "cpu@C", else the device one."""
    return tensors["cpu" if side.partition("@")[0] == "cpu" else "device"]


def staging_call(agent, side, x, dry):
    """Runs one side of the staging check on `x`, its tensor (side_tensor)."""
    kind, _, chunk = side.partition("@")
    if side == "cpu":
        agent.allreduce(x, op="sum")
    elif kind == "cpu":
        chunked_allreduce(agent, x, "sum", int(chunk))
    elif kind == "copies":
        staged_copies(x, int(chunk), sync=dry)
    else:  # what Agent.allreduce does with a device tensor, at this chunk size
        staged_allreduce(agent, x, "sum", chunk_bytes=int(chunk), sync=dry)


def rank_staging(args, agent, device, dry):
    """The staging check's rows on this rank: interleaved timed calls (the
    order rotating every repetition, a barrier before each) of a CPU
    allreduce, and for each --chunk-mib the same CPU allreduce in chunks (the
    collectives alone), the pipeline's copies of a device tensor alone, and
    the device tensor's staged allreduce. The times are the slowest rank's.
    One row per chunk size; the default chunk size's row is the judged one."""
    import numpy as np
    import torch
    from gossamer import _staging

    n = agent.world_size
    elements = args.mib * (1 << 20) // 4
    chunk_sizes = [c << 20 for c in args.chunk_mib]
    sides = staging_sides(chunk_sizes)
    tensors = {"cpu": torch.empty(elements), "device": torch.empty(elements, device="cpu" if dry else device)}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = {side: [] for side in sides}
    correct = True
    want = n * (n + 1) / 2
    for rep in range(args.warmup + args.reps):
        for i in range(len(sides)):
            side = sides[(i + rep) % len(sides)]
            x = side_tensor(side, tensors)
            x.fill_(agent.rank + 1)
            sync()
            agent.barrier()
            t0 = time.perf_counter()
            staging_call(agent, side, x, dry)
            sync()
            dt = time.perf_counter() - t0
            if rep in (0, args.warmup + args.reps - 1):
                expect = agent.rank + 1 if side.startswith("copies@") else want
                correct = correct and float(x.min()) == expect and float(x.max()) == expect
            if rep >= args.warmup:
                times[side].append(dt)
    copies = {"copy_down_seconds": None, "copy_up_seconds": None}
    if not dry and device.type == "cuda":  # the copies alone: the whole tensor to pinned memory and back
        pinned = torch.empty(elements, pin_memory=True)
        down, up = [], []
        for _ in range(5):
            sync()
            t0 = time.perf_counter()
            pinned.copy_(tensors["device"], non_blocking=True)
            sync()
            t1 = time.perf_counter()
            tensors["device"].copy_(pinned, non_blocking=True)
            sync()
            down.append(t1 - t0)
            up.append(time.perf_counter() - t1)
        copies = {"copy_down_seconds": statistics.median(down), "copy_up_seconds": statistics.median(up)}
    slowest = np.array([t for side in sides for t in times[side]])
    agent.allreduce(slowest, op="max")
    med = {side: statistics.median(slowest[i * args.reps:(i + 1) * args.reps].tolist())
           for i, side in enumerate(sides)}
    cpu_s = med["cpu"]
    stayed = tensors["device"].device.type == ("cpu" if dry else device.type)
    rows = []
    for c in chunk_sizes:
        dev_s = med[f"device@{c}"]
        judged = not dry and c == _staging.DEFAULT_CHUNK_BYTES
        row = {"check": "staging", "device": str(device), "dry_run": dry, "world_size": n, "dtype": "float32",
               "op": "sum", "bytes": elements * 4, "chunk_bytes": c, "chunks": -(-elements * 4 // c),
               "default_chunk": c == _staging.DEFAULT_CHUNK_BYTES, "reps": args.reps, "warmup": args.warmup,
               "cpu_seconds": cpu_s, "cpu_chunked_seconds": med[f"cpu@{c}"],
               "copies_seconds": med[f"copies@{c}"], "device_seconds": dev_s, "ratio": dev_s / cpu_s,
               "max_ratio": args.max_ratio, "correct": correct, "stayed_on_device": stayed,
               "ratio_judged": judged, **copies,
               "ok": correct and stayed and (not judged or dev_s / cpu_s <= args.max_ratio)}
        if dry:
            row["note"] = ("dry run: the 'device' side is a CPU tensor taken through the staging pipeline "
                           "(synchronous copies); its ratio is reported, not judged")
        rows.append(row)
    return rows


def run_rank(args):
    """One rank process: its rows as one JSON line on stdout."""
    import torch

    torch.set_num_threads(1)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(args.device)
    dry = device.type == "cpu"
    with make_agent(rank, n) as agent:
        if args.check == "tensors":
            rows = rank_tensors(args, agent, device, dry)
        else:
            rows = rank_staging(args, agent, device, dry)
        agent.barrier()
    if args.check == "tensors" and n > 1:
        rows += c10d_rows(args, rank, n, device, dry)
    print(json.dumps({"rank": rank, "rows": rows}), flush=True)
    return 0


# ---- the launcher ----------------------------------------------------------------------
def tail(path, chars=3000):
    """The last `chars` characters of a text file ('' if unreadable)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


def child_env(env):
    """`env` with PYTHONPATH's entries made absolute (the children may run
    elsewhere than the caller's directory)."""
    env = dict(env)
    if env.get("PYTHONPATH"):
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else p for p in parts)
    return env


def launch_ranks(args):
    """Starts --world-size rank processes of this script and waits for them
    (at most --timeout seconds in all; the late ones are killed). Returns one
    dict per rank: rank, returncode, rows (None if it printed none), error."""
    from bench_ddp import free_port  # this script's folder, bench/, is on sys.path

    tmp = tempfile.mkdtemp(prefix=f"device-checks-{args.check}-")
    port = free_port()  # the c10d store's (rank 0 listens on it)
    procs = []
    for r in range(args.world_size):
        env = child_env(dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world_size), OMP_NUM_THREADS="1",
                             GOSSAMER_RENDEZVOUS=os.path.join(tmp, "rendezvous"), MASTER_ADDR="127.0.0.1",
                             MASTER_PORT=str(port)))
        cmd = [sys.executable, os.path.abspath(__file__), args.check, "--rank", str(r),
               "--world-size", str(args.world_size), "--device", args.device]
        if args.check == "tensors":
            cmd += ["--sizes", ",".join(map(str, args.sizes))]
        else:
            cmd += ["--mib", str(args.mib), "--reps", str(args.reps), "--warmup", str(args.warmup),
                    "--max-ratio", str(args.max_ratio), "--chunk-mib", ",".join(map(str, args.chunk_mib))]
        log = os.path.join(tmp, f"rank-{r}")
        with open(log + ".out", "w") as out, open(log + ".err", "w") as err:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=err))
    deadline = time.monotonic() + args.timeout
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    results = []
    for r, p in enumerate(procs):
        late = p.poll() is None
        if late:
            p.kill()
            p.wait(timeout=30)
        out = tail(os.path.join(tmp, f"rank-{r}.out"), 10 ** 8).strip().splitlines()
        rows = None
        if p.returncode == 0 and out:
            try:
                rows = json.loads(out[-1])["rows"]
            except (ValueError, KeyError):
                rows = None
        error = None
        if late:
            error = f"killed after the --timeout of {args.timeout:.0f} s (output in {tmp})"
        elif p.returncode != 0 or rows is None:
            error = f"exited {p.returncode} (output in {tmp}): {tail(os.path.join(tmp, f'rank-{r}.err'))}"
        results.append({"rank": r, "returncode": p.returncode, "rows": rows, "error": error})
    if all(res["error"] is None for res in results):
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def merge_rows(results, check, device):
    """One row per check over all ranks (rows in the same order on every
    rank): ok and stayed on every rank, the largest differences and counts
    of differing elements, changed on some rank, and one failed row per rank
    that failed."""
    good = [res["rows"] for res in results if res["rows"] is not None]
    merged = []
    if good and all(len(rows) == len(good[0]) for rows in good):
        for parts in zip(*good):
            row = dict(parts[0])
            for key, value in row.items():
                values = [p.get(key) for p in parts]
                if isinstance(value, bool):
                    row[key] = any(values) if key == "changed" else all(values)
                elif (key.startswith("max_") or key == "differing") and all(v is not None for v in values):
                    row[key] = max(values)
            if "changed" in row:  # an exchange that moved nothing on any rank checked nothing
                row["ok"] = row["ok"] and row["changed"]
            row["ranks"] = len(parts)
            merged.append(row)
    elif good:
        merged.append({"check": check, "device": device, "ok": False,
                       "error": "the ranks returned different numbers of rows"})
    for res in results:
        if res["error"] is not None:
            merged.append({"check": check, "device": device, "rank": res["rank"], "ok": False,
                           "error": res["error"]})
    return merged


# ---- train ------------------------------------------------------------------------------
def run_example(cmd, env, timeout):
    """Runs the example in a session of its own (it forks its ranks); kills
    that session past `timeout` seconds. Returns (returncode or None on
    timeout, output)."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            rc = None
        log.seek(0)
        return rc, log.read()


def train_runs(args):
    """The train check's runs: (name, DDP backend or None)."""
    import torch
    import torch.distributed

    backends = ["gossamer", "gloo"]
    if args.device.startswith("cuda") and torch.distributed.is_available() and torch.distributed.is_nccl_available():
        backends.append("nccl")
    return [("crossover-sgd", None)] + [(f"ddp-{b}", b) for b in backends]


def missing_for(backend):
    """Why the run with DDP over `backend` (None: Crossover-SGD) cannot be
    made, or None if it can."""
    if backend == "gossamer":
        import gossamer.torch as gt

        if not gt.HAS_PROCESS_GROUP:
            return ("gossamer.torch.HAS_PROCESS_GROUP is False: the c10d extension gossamer._c10d was not built "
                    "against this torch")
    return None


def nccl_refusal(world_size):
    """The skip reason of DDP over NCCL with more ranks than GPUs."""
    import torch

    gpus = torch.cuda.device_count()
    return (f"NCCL refuses more than one rank on a GPU (\"Duplicate GPU detected\"): {world_size} ranks, "
            f"{gpus} GPU{'s' if gpus != 1 else ''}")


def run_train(args):
    """The train check's rows: one run per algorithm or DDP backend."""
    env = child_env({k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES})  # it launches itself
    rows = []
    tmp = tempfile.mkdtemp(prefix="device-checks-train-")
    for name, backend in train_runs(args):
        row = {"check": "train", "run": name, "device": args.device, "dry_run": args.device == "cpu",
               "world_size": args.world_size, "autocast": "bfloat16", "epochs": args.epochs,
               "train_images": args.limit or 60000, "test_images": args.test_limit or 10000,
               "accuracy": None, "seconds_per_epoch": None}
        missing = missing_for(backend)
        if missing:
            row.update(ok=None, skipped=missing)
            rows.append(row)
            print(f"  {name}: skipped ({missing})", file=sys.stderr, flush=True)
            continue
        results = os.path.join(tmp, f"{name}.json")
        if backend is None:  # the example, Crossover-SGD
            cmd = [sys.executable, EXAMPLE, "--results", results]
        else:  # DDP over the example's CNN and data: one round of bench_ddp.py
            cmd = [sys.executable, BENCH_DDP, "--rounds", "1", "--backends", backend, "--json", results]
        cmd += ["--world-size", str(args.world_size), "--epochs", str(args.epochs), "--autocast", "bfloat16",
                "--data", args.data, "--device", args.device]
        if args.limit:
            cmd += ["--train-limit", str(args.limit)]
        if args.test_limit:
            cmd += ["--test-limit", str(args.test_limit)]
        t0 = time.monotonic()
        rc, output = run_example(cmd, env, args.timeout)
        row["wall_seconds"] = time.monotonic() - t0
        row["command"] = " ".join(cmd[1:])
        if rc != 0 and backend == "nccl" and "Duplicate GPU detected" in output:
            row.update(ok=None, skipped=nccl_refusal(args.world_size))  # the "where it runs"
        elif rc != 0 or not os.path.exists(results):
            row.update(ok=False, error=(f"killed after the --timeout of {args.timeout:.0f} s" if rc is None
                                        else f"exited {rc}") + ": " + output[-3000:])
        else:
            with open(results) as f:
                result = json.load(f)
            if backend is None:
                seconds = [h["seconds"] for h in result.get("history", [])]
                per_epoch = statistics.mean(seconds) if seconds else None
            else:  # bench_ddp's median step (after warm-up) times the steps of an epoch
                result = dict(result[backend], algorithm=f"DDP over {backend}")
                per_epoch = result["step_seconds"] * result["steps_per_epoch"]
            threshold = 0.2 if args.limit else args.min_accuracy
            row.update(accuracy=result["test_accuracy"], algorithm=result.get("algorithm"),
                       seconds_per_epoch=per_epoch, min_accuracy=threshold,
                       ok=result["test_accuracy"] >= threshold)
        rows.append(row)
        print(f"  {name}: accuracy {row['accuracy']}, ok {row['ok']}", file=sys.stderr, flush=True)
        if args.json:  # the runs so far, should the check be stopped before it ends (main writes the whole)
            with open(args.json, "w") as f:
                json.dump({"check": "train", "partial": True, "rows": rows}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    return rows


# ---- tables and main ----------------------------------------------------------------------
def cell(value, fmt):
    """A table cell: '-' for None, else `value` formatted."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format(value, fmt)


COLUMNS = {
    "tensors": [("op", "op", "<22", ""), ("dtype", "dtype", "<9", ""), ("elements", "elements", ">9", ""),
                ("device", "device", "<7", ""), ("chunks", "chunks", ">6", ""),
                ("max_abs_diff", "max|dev-cpu|", ">13", ".3g"), ("max_diff_over_bound", "/bound", ">7", ".2f"),
                ("same_bits_as_cpu_chunks", "bits=chunks", ">11", ""),
                ("max_error_over_exact_bound", "err/bound", ">9", ".2f"), ("stayed_on_device", "stayed", ">6", "")],
    "staging": [("device", "device", "<7", ""), ("bytes", "bytes", ">10", ""), ("chunk_bytes", "chunk", ">9", ""),
                ("cpu_seconds", "cpu s", ">9", ".4f"), ("cpu_chunked_seconds", "chunked s", ">9", ".4f"),
                ("copies_seconds", "copies s", ">9", ".4f"), ("device_seconds", "device s", ">9", ".4f"),
                ("ratio", "ratio", ">6", ".3f"), ("correct", "sums", ">5", ""), ("dry_run", "dry run", ">7", "")],
    "train": [("run", "run", "<14", ""), ("device", "device", "<7", ""), ("epochs", "epochs", ">6", ""),
              ("train_images", "images", ">7", ""), ("accuracy", "accuracy", ">9", ".4f"),
              ("seconds_per_epoch", "s/epoch", ">8", ".1f")],
}


def print_table(check, rows):
    """The check's rows as a table, with ok (PASS, FAIL, SKIP) last."""
    cols = COLUMNS[check]
    print(" ".join(format(head, align) for _, head, align, _ in cols) + "  ok")
    for row in rows:
        if "error" in row and "op" not in row and "run" not in row:
            who = f"rank {row['rank']}: " if "rank" in row else ""
            print(f"FAIL {who}{row.get('error', '')[-400:]}")
            continue
        status = "SKIP" if row.get("ok") is None else ("PASS" if row["ok"] else "FAIL")
        line = " ".join(format(cell(row.get(key), fmt), align) for key, _, align, fmt in cols) + f"  {status}"
        if row.get("skipped"):
            line += f"  ({row['skipped']})"
        elif row.get("error"):
            line += f"  (...{row['error'][-400:]})"
        print(line)


def commit():
    """The tree's commit (short): $GOSSAMER_DEVICE_COMMIT where set (the
    device tool's copy of the tree may carry another checkout's .git), else
    git's HEAD, or None outside a git checkout."""
    if os.environ.get("GOSSAMER_DEVICE_COMMIT"):
        return os.environ["GOSSAMER_DEVICE_COMMIT"]
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def parse_args():
    """The subcommand and its options; --device defaults to cuda if torch sees one."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="check", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--world-size", type=int, default=4, help="rank processes (default 4)")
    common.add_argument("--device", help="cuda or cpu (default: cuda if torch.cuda.is_available(), else cpu)")
    common.add_argument("--json", help="write the result here")
    common.add_argument("--timeout", type=float, help="bound on the ranks of the whole check, seconds "
                        "(default 300; train: on each run of the example, 1800)")
    common.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    t = sub.add_parser("tensors", parents=[common], help="collectives on device tensors against CPU copies")
    t.add_argument("--sizes", default=DEFAULT_SIZES, help=f"element counts, comma-separated ({DEFAULT_SIZES})")
    s = sub.add_parser("staging", parents=[common], help="allreduce time of a device tensor against a CPU one")
    s.add_argument("--mib", type=int, default=64, help="float32 MiB allreduced (default 64)")
    s.add_argument("--reps", type=int, default=10, help="timed calls per side (default 10)")
    s.add_argument("--warmup", type=int, default=2, help="untimed calls per side first (default 2)")
    s.add_argument("--max-ratio", type=float, default=1.15, help="device / CPU time that passes (default 1.15)")
    s.add_argument("--chunk-mib", default="4,16,64",
                   help="staging chunk sizes timed, MiB, comma-separated (default 4,16,64; "
                        "the library's, 64, is judged)")
    r = sub.add_parser("train", parents=[common], help="the CNN example under bfloat16 autocast")
    r.add_argument("--epochs", type=int, default=3,
                   help="the example's default: one epoch reaches about 0.87 on the CPU")
    r.add_argument("--limit", type=int, default=0, help="train on only this many images (dry run; 0: all)")
    r.add_argument("--test-limit", type=int, default=0, help="evaluate on only this many images (0: all 10,000)")
    r.add_argument("--data", default=DEFAULT_DATA, help=f"directory of the idx .gz files ({DEFAULT_DATA})")
    r.add_argument("--min-accuracy", type=float, default=0.89, help="accuracy that passes without --limit")
    args = p.parse_args()
    if args.world_size < 1:
        p.error("--world-size must be at least 1")
    if args.timeout is None:
        args.timeout = 1800.0 if args.check == "train" else 300.0
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device != "cpu" and not args.device.startswith("cuda"):
        p.error(f"--device must be cuda or cpu, not {args.device!r}")
    if args.check == "tensors":
        try:
            args.sizes = [int(v) for v in args.sizes.split(",")]
        except ValueError:
            p.error(f"--sizes must be comma-separated element counts, not {args.sizes!r}")
        if any(v < 1 for v in args.sizes):
            p.error("--sizes must be positive")
    if args.check == "staging":
        if args.mib < 1 or args.reps < 1 or args.warmup < 0:
            p.error("--mib and --reps must be at least 1, --warmup at least 0")
        try:
            args.chunk_mib = [int(v) for v in args.chunk_mib.split(",")]
        except ValueError:
            p.error(f"--chunk-mib must be comma-separated MiB, not {args.chunk_mib!r}")
        if not args.chunk_mib or any(v < 1 for v in args.chunk_mib):
            p.error("--chunk-mib must be positive")
    if args.check == "train" and (args.epochs < 1 or args.limit < 0):
        p.error("--epochs must be at least 1, --limit at least 0")
    return args


def environment(args):
    """What the JSON records of the machine and the software."""
    import torch

    info = {"check": args.check, "world_size": args.world_size, "device": args.device,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": commit(),
            "machine": f"{platform.node()} {os.cpu_count()} CPUs", "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": None,
            "argv": sys.argv[1:]}
    if args.device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
    return info


def main():
    """A rank's work (hidden --rank), or a check: its ranks, table, JSON and exit status."""
    args = parse_args()
    if args.rank >= 0:
        return run_rank(args)
    info = environment(args)
    if args.device.startswith("cuda") and info["gpu"] is None:
        rows = [{"check": args.check, "device": args.device, "ok": False,
                 "error": f"--device {args.device}, but torch.cuda.is_available() is False"}]
    elif args.check == "train":
        rows = run_train(args)
    else:
        rows = merge_rows(launch_ranks(args), args.check, args.device)
    failed = [r for r in rows if r.get("ok") is False]
    skipped = [r for r in rows if r.get("ok") is None]
    info.update(ok=not failed and bool(rows), failed=len(failed), skipped=len(skipped), rows=rows)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    print(f"{args.check}: {args.world_size} ranks on {args.device}"
          + (f" ({info['gpu']})" if info["gpu"] else " (dry run)" if args.device == "cpu" else "")
          + f", torch {info['torch']}, commit {info['commit']}, {info['date']}")
    print_table(args.check, rows)
    print(f"{len(rows) - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped"
          + (f"; wrote {args.json}" if args.json else ""), flush=True)
    if failed or not rows:
        return 1
    return 77 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
