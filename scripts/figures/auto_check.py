"""How well `auto` picks an allreduce algorithm (README.md, docs/collectives.md).

One sweep of scripts/bench-allreduce.sh --auto-check: the seven algorithms and
`auto` at 2, 4 and 8 processes, 4 B to 16 MiB, over the socket and zmq
transports (tcp and ipc), ranks bound to cores, 3 launches per world size,
each calibrating the cost model at its start. A cell (world size, transport,
size) passes when the algorithm `auto` picks is within 10% of the fastest
measured one (algorithms that send the same messages count as one candidate);
the median over the launches' picks decides.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _allreduce import size  # noqa: E402

COMMAND = ["scripts/bench-allreduce.sh", "--auto-check", "--transports", "socket-tcp,socket-ipc,zmq-tcp,zmq-ipc"]
JSON = "results/bench-allreduce-auto.json"
GOAL_MISSED_EXIT = 3  # a cell's pick beyond 10% of the fastest: stored and shown all the same
KINDS = ["socket", "zmq", "libfabric"]
MEDIA = ["tcp", "ipc", "shm"]


def _checks(data):
    """The auto rows that carry a check, in the JSON's order."""
    return [r for r in data if r.get("algorithm") == "auto" and "auto_check" in r]


def _tolerance(checks):
    """The check's bound on pick / fastest (1.10)."""
    return checks[0]["auto_check"]["tolerance"] if checks else 1.10


def _percent(tol):
    """1.10 as "10%"."""
    return f"{round((tol - 1) * 100)}%"


def _listing(items):
    """"a", "a and b", "a, b and c"."""
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _order(name, known):
    """Sort key: the known names in their order, then the others."""
    return (known.index(name) if name in known else len(known), name)


def _kinds(checks):
    """{transport kind: its media}: socket, zmq, libfabric; tcp, ipc, shm."""
    kinds = {}
    for r in checks:
        kind, _, medium = r["transport"].partition("-")
        kinds.setdefault(kind, set()).add(medium)
    return {k: sorted(kinds[k], key=lambda m: _order(m, MEDIA))
            for k in sorted(kinds, key=lambda k: _order(k, KINDS))}


def _transports(checks):
    """The transports in words: "socket and zmq, each over tcp and ipc" when
    every kind ran over the same media, else "socket tcp, ipc and zmq tcp"."""
    kinds = _kinds(checks)
    media = list(kinds.values())
    if all(m == media[0] for m in media):
        return f"{_listing(kinds)}{', each' if len(kinds) > 1 else ''} over {_listing(media[0])}"
    return _listing(f"{k} {', '.join(m)}" for k, m in kinds.items())


def _scope(checks):
    """'2, 4, 8 ranks bound to cores; 4 B-16 MiB': the cells checked ("bound
    to cores" only when every rank was)."""
    worlds = sorted({r["world_size"] for r in checks})
    sizes = sorted({r["bytes"] for r in checks})
    bound = " bound to cores" if {r.get("binding") for r in checks} == {"core"} else ""
    return f"{', '.join(map(str, worlds))} ranks{bound}; {size(sizes[0])}-{size(sizes[-1])}"


def _launch_misses(row):
    """(picks beyond the tolerance, picks): every launch's pick on its own,
    its candidate's time against the fastest candidate's."""
    c = row["auto_check"]
    beyond = total = 0
    for pick, count in c["picks"].items():
        seconds = next((g["seconds"] for g in c["candidates"] if pick in g["algorithms"]), row["seconds"])
        beyond += count if seconds / c["fastest_seconds"] > c["tolerance"] else 0
        total += count
    return beyond, total


def render(data):
    """The sweep's result: the cells whose pick is within 10% of the fastest,
    out of all, then per transport kind (its media pooled) those cells, the
    cells where `auto`'s own time (its choice made inside every call) is within
    10%, and the single launches' picks beyond 10%."""
    checks = _checks(data)
    tol = _tolerance(checks)
    passed = sum(r["auto_check"]["pass"] for r in checks)
    lines = [f"`auto`'s pick is within {_percent(tol)} of the fastest in **{passed} of {len(checks)}** cells "
             f"({_scope(checks)}):", "",
             f"| transports | cells within {_percent(tol)} of the fastest | `auto`'s own time within {_percent(tol)} "
             f"| single launches' picks beyond {_percent(tol)} |",
             "|---|---|---|---|"]
    for kind, media in _kinds(checks).items():
        rows = [r for r in checks if r["transport"].split("-")[0] == kind]
        ok = sum(r["auto_check"]["pass"] for r in rows)
        own = sum(r["auto_check"]["auto_own_ratio"] <= tol for r in rows)
        misses = [_launch_misses(r) for r in rows]
        lines.append(f"| {kind} {', '.join(media)} | **{ok} of {len(rows)}** | {own} of {len(rows)} "
                     f"| {sum(m for m, _ in misses)} of {sum(n for _, n in misses)} |")
    return "\n".join(lines) + "\n"


def render_headline(data):
    """README's sentence: the cells where `auto`'s pick is within 10% of the
    fastest measured algorithm, out of all, and what they span."""
    checks = _checks(data)
    passed = sum(r["auto_check"]["pass"] for r in checks)
    return (f"`auto` picks an algorithm within {_percent(_tolerance(checks))} of the fastest measured one in "
            f"{passed} of {len(checks)} cells ({_scope(checks)}; {_transports(checks)}).\n")
