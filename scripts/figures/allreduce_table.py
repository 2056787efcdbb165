"""Our `auto` allreduce against Open MPI and torch's gloo backend, every size
from 4 B to 256 MiB at 4 and 8 processes (README.md, docs/collectives.md).

Default settings on every side: `auto` over the socket and zmq transports over
tcp, Open MPI over its tcp BTL and with its defaults (shared memory, "sm"),
gloo over its tcp. Ranks bound to cores on every side; float32 sums in place;
a measurement is the median over calls of the slowest rank's time, the median
of 3 interleaved rounds (scripts/bench-allreduce.sh). Ratio = their time / ours:
above 1, ours is faster.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _allreduce import duration, find, size  # noqa: E402

COMMAND = ["scripts/bench-allreduce.sh", "--world-sizes", "4,8", "--algorithms", "auto",
           "--transports", "socket-tcp,zmq-tcp", "--json", "results/bench-allreduce-table.json"]
JSON = "results/bench-allreduce-table.json"
HEADLINE_SIZES = [4096, 65536, 1 << 20, 16 << 20, 256 << 20]


def _gloo(rows, n, b):
    """The gloo row of world size n and size b, or None."""
    return next((r for r in rows if r["impl"] == "gloo" and r["world_size"] == n and r["bytes"] == b), None)


def _cells(rows, n, b):
    """socket, zmq, MPI tcp, MPI sm, gloo at (n, b); None where not measured."""
    return (find(rows, n, b, "auto", "socket-tcp"), find(rows, n, b, "auto", "zmq-tcp"),
            find(rows, n, b, "mpi", "tcp"), find(rows, n, b, "mpi", "sm"), _gloo(rows, n, b))


def _t(row):
    return duration(row["seconds"]) if row else "-"


def _ratio(theirs, ours):
    """Their time / ours, "1.27x"; bold where ours is faster; "-" if either is missing."""
    if not theirs or not ours:
        return "-"
    r = theirs["seconds"] / ours["seconds"]
    return f"**{r:.2f}x**" if r >= 1 else f"{r:.2f}x"


def render(data):
    """The whole table: per world size and size, the five times and four ratios
    (Open MPI tcp / socket, Open MPI tcp / zmq, gloo / socket, gloo / zmq)."""
    head = ["ranks", "size", "auto socket tcp", "auto zmq tcp", "MPI tcp", "MPI sm", "gloo",
            "MPI tcp / socket", "MPI tcp / zmq", "gloo / socket", "gloo / zmq"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in sorted({r["world_size"] for r in data}):
        for b in sorted({r["bytes"] for r in data if r["world_size"] == n}):
            sock, zmq, tcp, sm, gloo = _cells(data, n, b)
            cells = [str(n), size(b), _t(sock), _t(zmq), _t(tcp), _t(sm), _t(gloo),
                     _ratio(tcp, sock), _ratio(tcp, zmq), _ratio(gloo, sock), _ratio(gloo, zmq)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_headline(data):
    """README's headline: 4 processes (or the largest world size measured, if
    not 4) at 4 KiB, 64 KiB, 1 MiB, 16 MiB and 256 MiB: the times of `auto`
    over socket and zmq tcp, Open MPI tcp and gloo, then the ratios."""
    worlds = sorted({r["world_size"] for r in data})
    n = 4 if 4 in worlds else worlds[-1]
    sizes = [b for b in HEADLINE_SIZES if any(r["bytes"] == b and r["world_size"] == n for r in data)]
    cells = {b: _cells(data, n, b) for b in sizes}
    lines = ["| %d processes | " % n + " | ".join(size(b) for b in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for label, i in (("`auto`, socket tcp", 0), ("`auto`, zmq tcp", 1), ("Open MPI tcp", 2), ("gloo", 4)):
        lines.append(f"| {label} | " + " | ".join(_t(cells[b][i]) for b in sizes) + " |")
    for label, theirs, ours in (("Open MPI tcp / socket", 2, 0), ("Open MPI tcp / zmq", 2, 1),
                                ("gloo / socket", 4, 0), ("gloo / zmq", 4, 1)):
        lines.append(f"| {label} | " + " | ".join(_ratio(cells[b][theirs], cells[b][ours]) for b in sizes) + " |")
    return "\n".join(lines) + "\n"
