"""Point-to-point latency and bandwidth of libfabric tcp and shm against zmq tcp
and ipc (docs/libfabric.md).

Two processes on one host (bench/p2p.cpp through scripts/bench-p2p.sh): latency
is half the median round trip of a ping-pong, bandwidth a window of
back-to-back messages (128 MiB / size, 2 to 64) over the time until the
receiver's acknowledgement; each figure is the median of 3 rounds, the four
transports interleaved per size.
"""
COMMAND = ["scripts/bench-p2p.sh"]
JSON = "results/bench-p2p.json"
TRANSPORTS = [("libfabric-tcp", "lf tcp"), ("libfabric-shm", "lf shm"), ("zmq-tcp", "zmq tcp"), ("zmq-ipc", "zmq ipc")]
# The sizes the table shows, of the 13 the script measures (8 B, then 16 B to 64 MiB by factors of 4).
SIZES = [8, 64, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
# The comparison the docs single out: libfabric shm against zmq ipc streaming 4 MiB messages.
HIGHLIGHT = 4 << 20


def size(b):
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b} B"


def render(data):
    """The table: per size, each transport's one-way latency in µs and streaming
    bandwidth in GB/s, and the bandwidth ratios libfabric shm / zmq ipc and
    libfabric tcp / zmq tcp; the 4 MiB shm-against-ipc figures in bold."""
    at = {(r["transport"], r["bytes"]): r for r in data}
    names = [label for _, label in TRANSPORTS]
    lines = ["| size | latency µs: " + " | ".join(names) + " | bandwidth GB/s: " + " | ".join(names)
             + " | bw lf shm / zmq ipc | bw lf tcp / zmq tcp |",
             "|" + "---|" * (1 + 2 * len(TRANSPORTS) + 2)]

    def bold(text, on):
        return f"**{text}**" if on else text

    for b in SIZES:
        if not any((t, b) in at for t, _ in TRANSPORTS):
            continue
        row = at.get
        cells = [size(b)]
        cells += [f"{row((t, b))['latency_us']:.1f}" if row((t, b)) else "-" for t, _ in TRANSPORTS]
        cells += [bold(f"{row((t, b))['bandwidth_gbps']:.3f}", b == HIGHLIGHT and t in ("libfabric-shm", "zmq-ipc"))
                  if row((t, b)) else "-" for t, _ in TRANSPORTS]
        for lf, zmq in (("libfabric-shm", "zmq-ipc"), ("libfabric-tcp", "zmq-tcp")):
            x, y = row((lf, b)), row((zmq, b))
            cells.append(bold(f"{x['bandwidth_gbps'] / y['bandwidth_gbps']:.2f}x", b == HIGHLIGHT and lf == "libfabric-shm")
                         if x and y else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
