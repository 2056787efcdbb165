"""Helpers shared by the allreduce figures (not a figure: its name starts with _).

The rows are those of scripts/bench-allreduce.sh's JSON: one per measurement,
with impl ("gossamer" or "openmpi"), algorithm, transport ("socket-tcp",
"zmq-ipc", ...; MPI's "tcp" or "sm"), world_size, bytes and seconds.
"""


def size(b):
    """A byte count as the docs write it: 4 B, 4 KiB, 64 MiB."""
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return "%g %s" % (b / f, unit)
    return "%d B" % b


def duration(s, unit=None):
    """Seconds as the docs write a time: 40.5 µs, 1.26 ms, 81.7 ms, 1.20 s
    (three or four digits); `unit` forces "µs", "ms" or "s"."""
    unit = unit or ("µs" if s < 1e-3 else "ms" if s < 1 else "s")
    v = s * {"µs": 1e6, "ms": 1e3, "s": 1.0}[unit]
    return ("%.2f %s" if v < 10 else "%.1f %s") % (v, unit)


def unit_of(s):
    """The unit duration() writes `s` in."""
    return duration(s).split()[-1]


def pair(a, b):
    """Two times side by side: "40.5 / 38.1 µs", the unit once when they share it."""
    if unit_of(a) == unit_of(b):
        return "%s / %s" % (duration(a).split()[0], duration(b))
    return "%s / %s" % (duration(a), duration(b))


def find(rows, world_size, nbytes, algorithm, transport):
    """The measurement of one allreduce (algorithm "mpi": Open MPI's), or None."""
    for r in rows:
        if r["world_size"] != world_size or r["bytes"] != nbytes or r["transport"] != transport:
            continue
        if (r["impl"] == "openmpi") == (algorithm == "mpi") and (algorithm == "mpi" or r["algorithm"] == algorithm):
            return r
    return None

