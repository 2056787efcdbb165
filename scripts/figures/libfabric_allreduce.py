"""Ring allreduce over zmq and libfabric, tcp and shared memory (docs/libfabric.md).

4 processes on one host (bench/allreduce.cpp through scripts/bench-allreduce.sh
--quick), float32 sum at 4 KiB, 1 MiB and 64 MiB, without Open MPI: time per
call (median over repetitions of the slowest rank, the round with the median
time of 3) and busbw in GB/s, the four transports interleaved per size.
"""
COMMAND = ["scripts/bench-allreduce.sh", "--quick", "--no-mpi",
           "--transports", "zmq-tcp,zmq-ipc,libfabric-tcp,libfabric-shm",
           "--json", "results/bench-allreduce-libfabric.json"]
JSON = "results/bench-allreduce-libfabric.json"
TRANSPORTS = [("zmq-tcp", "zmq tcp"), ("zmq-ipc", "zmq ipc"), ("libfabric-tcp", "libfabric tcp"),
              ("libfabric-shm", "libfabric shm")]


def size(b):
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b} B"


def duration(s):
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1e-2:
        return f"{s * 1e3:.2f} ms"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def render(data):
    """The table: per size, each transport's time per call of the ring allreduce
    and its busbw in GB/s."""
    rows = [r for r in data if r["impl"] == "gossamer" and r["algorithm"] == "ring"]
    at = {(r["transport"], r["bytes"]): r for r in rows}
    lines = ["| size | " + " | ".join(label for _, label in TRANSPORTS) + " |",
             "|" + "---|" * (1 + len(TRANSPORTS))]
    for b in sorted({r["bytes"] for r in rows}):
        cells = [size(b)]
        for t, _ in TRANSPORTS:
            r = at.get((t, b))
            cells.append(f"{duration(r['seconds'])}, {r['busbw']:.3f}" if r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
