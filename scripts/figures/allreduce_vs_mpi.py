"""Our allreduce against Open MPI's MPI_Allreduce on one machine (README.md,
docs/collectives.md).

4 processes, ranks bound to cores on both sides, float32 sums in place at
4 KiB and 64 MiB: the ring and `auto` over the socket and zmq transports (tcp
and ipc), Open MPI over its tcp BTL and with its defaults (shared memory,
"sm"). A measurement is the median over calls of the slowest rank's time, the
median of 3 interleaved rounds (scripts/bench-allreduce.sh). Ratio = MPI's
time / ours: above 1, ours is faster.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _allreduce import duration, find, pair, size  # noqa: E402

COMMAND = ["scripts/bench-allreduce.sh", "--world-sizes", "4", "--sizes", "4096,67108864",
           "--algorithms", "ring,auto"]
JSON = "results/bench-allreduce.json"


def _cells(data):
    """The measurements both views quote: the ring at the largest size over zmq
    ipc, zmq tcp and socket ipc, `auto` over socket tcp at the smallest, and
    MPI's beside them, at the largest world size measured."""
    n = max(r["world_size"] for r in data)
    ours = [r["bytes"] for r in data if r["world_size"] == n]
    big, small = max(ours), min(ours)
    return n, big, small, {
        "zmq-ipc": find(data, n, big, "ring", "zmq-ipc"),
        "zmq-tcp": find(data, n, big, "ring", "zmq-tcp"),
        "socket-ipc": find(data, n, big, "ring", "socket-ipc"),
        "sm": find(data, n, big, "mpi", "sm"),
        "tcp": find(data, n, big, "mpi", "tcp"),
        "auto": find(data, n, small, "auto", "socket-tcp"),
        "auto-mpi": find(data, n, small, "mpi", "tcp"),
    }


def _t(row):
    return duration(row["seconds"]) if row else "-"


def _ratio(ours, mpi, bold=False):
    """MPI's time / ours, "1.27x" ("-" when either is missing); bold above 1."""
    if not ours or not mpi:
        return "-"
    r = mpi["seconds"] / ours["seconds"]
    return f"**{r:.2f}x**" if bold and r >= 1 else f"{r:.2f}x"


def render(data):
    """The table of docs/collectives.md: at the largest size, the ring over zmq
    ipc, zmq tcp and socket ipc next to MPI's shared memory and tcp, with the
    ratios below (bold where ours is faster); at the smallest size, `auto` over
    socket tcp against MPI tcp."""
    _, big, small, c = _cells(data)
    socket_ipc = _t(c["socket-ipc"])
    if c["socket-ipc"] and c["sm"]:
        socket_ipc += f" ({_ratio(c['socket-ipc'], c['sm'])} MPI sm)"
    small_pair = pair(c["auto"]["seconds"], c["auto-mpi"]["seconds"]) if c["auto"] and c["auto-mpi"] else "-"
    small_ratio = f"MPI's time {_ratio(c['auto'], c['auto-mpi'])} ours" if c["auto"] and c["auto-mpi"] else ""
    lines = [
        f"| | ring zmq ipc | MPI sm | ring zmq tcp | MPI tcp | ring socket ipc "
        f"| {size(small)} `auto` socket tcp / MPI tcp |",
        "|---|---|---|---|---|---|---|",
        f"| {size(big)} | {_t(c['zmq-ipc'])} | {_t(c['sm'])} | {_t(c['zmq-tcp'])} | {_t(c['tcp'])} | {socket_ipc} "
        f"| {small_pair} |",
        f"| ratio | {_ratio(c['zmq-ipc'], c['sm'], True)} | | {_ratio(c['zmq-tcp'], c['tcp'], True)} | | "
        f"| {small_ratio} |",
    ]
    return "\n".join(lines) + "\n"


def render_headline(data):
    """README's headline table: ours, Open MPI's and the ratio for the ring over
    zmq ipc (against MPI's shared memory) and zmq tcp at the largest size, and
    `auto` over socket tcp at the smallest."""
    _, big, small, c = _cells(data)
    rows = [(f"{size(big)} ring, zmq over ipc (single copy) vs MPI shared memory", c["zmq-ipc"], c["sm"]),
            (f"{size(big)} ring, zmq over tcp vs MPI tcp", c["zmq-tcp"], c["tcp"]),
            (f"{size(small)} `auto`, socket over tcp vs MPI tcp", c["auto"], c["auto-mpi"])]
    lines = ["| | ours | Open MPI | MPI's time / ours |", "|---|---|---|---|"]
    for label, ours, mpi in rows:
        lines.append(f"| {label} | {_t(ours)} | {_t(mpi)} | {_ratio(ours, mpi)} |")
    return "\n".join(lines) + "\n"
