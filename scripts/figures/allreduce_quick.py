"""The quick allreduce comparison with Open MPI (docs/collectives.md).

4 processes, ranks bound to cores on both sides, float32 sums in place at
4 KiB, 1 MiB and 64 MiB: the ring over the socket and zmq transports (tcp and
ipc) against Open MPI over its tcp BTL and with its defaults (shared memory,
"sm"); each time the median over calls of the slowest rank's time, the median
of 3 interleaved rounds with a smaller time budget than the full comparison
(scripts/bench-allreduce.sh --quick).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _allreduce import duration, find, size  # noqa: E402

COMMAND = ["scripts/bench-allreduce.sh", "--quick"]
JSON = "results/bench-allreduce-quick.json"
KINDS = ["socket", "zmq", "libfabric"]
MEDIA = ["tcp", "ipc", "shm"]


def _order(transport):
    """tcp before ipc (and libfabric's shm), then socket, zmq, libfabric."""
    kind, _, medium = transport.partition("-")
    return (MEDIA.index(medium) if medium in MEDIA else len(MEDIA), KINDS.index(kind) if kind in KINDS else len(KINDS),
            transport)


def render(data):
    """The table: per size (and world size, when several were measured), the
    time per call of each of our algorithms over each transport, then MPI's
    over tcp and over shared memory."""
    ours = sorted({(r["algorithm"], r["transport"]) for r in data if r["impl"] == "gossamer"},
                  key=lambda at: (_order(at[1]), at[0]))
    mpi = sorted({r["transport"] for r in data if r["impl"] == "openmpi"}, key=lambda t: (t != "tcp", t))
    worlds = sorted({r["world_size"] for r in data})
    head = ["size"] + [f"{a} {t.replace('-', ' ')}" for a, t in ours] + [f"MPI {t}" for t in mpi]
    if len(worlds) > 1:
        head.insert(0, "processes")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in worlds:
        for b in sorted({r["bytes"] for r in data if r["world_size"] == n}):
            found = [find(data, n, b, a, t) for a, t in ours] + [find(data, n, b, "mpi", t) for t in mpi]
            cells = [size(b)] + [duration(r["seconds"]) if r else "-" for r in found]
            if len(worlds) > 1:
                cells.insert(0, str(n))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
