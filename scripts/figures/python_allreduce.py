"""Allreduce from Python against the same call from C++ and against
torch.distributed's gloo (docs/python.md).

4 processes on one machine, ranks bound to cores, float32 sums at 4 KiB to
64 MiB: gossamer.Agent.allreduce on a numpy array, build/bench/allreduce's
Communicator::allreduce (both the ring over zmq tcp) and
torch.distributed.all_reduce with gloo (its own algorithm); each time the
median over 10 calls of the slowest rank's time, the median of 3 interleaved
rounds (bench/bench_python.py).
"""
COMMAND = ["scripts/bench-python.sh"]
JSON = "results/bench-python.json"
COLUMNS = [("gossamer-python", "Python"), ("gossamer-cpp", "C++"), ("torch-gloo", "torch gloo")]


def _size(b, largest):
    """4 KiB, 64 MiB; the largest size also in floats: "64 MiB (16 M floats)"."""
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            label = "%g %s" % (b / f, unit)
            break
    else:
        label = "%d B" % b
    if b == largest and b >= 4 << 20:
        label += " (%g M floats)" % (b / 4 / (1 << 20))
    return label


def _ms(seconds):
    """Milliseconds, three or four digits: 1.78, 32.5, 274.6."""
    v = seconds * 1e3
    return "%.2f" % v if v < 10 else "%.1f" % v


def render(data):
    """The table: per size, each implementation's time per call in ms, then
    Python's time over C++'s and over gloo's."""
    t = {(r["impl"], r["bytes"]): r["seconds"] for r in data}
    impls = [(i, label) for i, label in COLUMNS if any(r["impl"] == i for r in data)]
    ratios = [(other, label) for other, label in (("gossamer-cpp", "C++"), ("torch-gloo", "gloo"))
              if any(i == other for i, _ in impls) and any(i == "gossamer-python" for i, _ in impls)]
    head = ["size"] + [f"{label} (ms)" for _, label in impls] + [f"Python / {label}" for _, label in ratios]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sizes = sorted({r["bytes"] for r in data})
    for b in sizes:
        cells = [_size(b, sizes[-1])] + [_ms(t[(i, b)]) if (i, b) in t else "-" for i, _ in impls]
        for other, _ in ratios:
            p, o = t.get(("gossamer-python", b)), t.get((other, b))
            cells.append("%.2f" % (p / o) if p and o else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
