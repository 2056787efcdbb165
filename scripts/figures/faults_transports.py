"""Joins and restarts with the defaults over the socket transport and libfabric's tcp provider (docs/operations.md).

The same runs as faults-membership (scripts/faults.py: 8 gossamer-train
processes on loopback, 10 epochs of the Fashion-MNIST MLP, Crossover-SGD,
SGP, hierarchical and AllReduce-SGD): two ranks join with `--join` (job
started with membership.max_world_size 10), and a rank killed with kill -9 is
restarted 2 s later with the README's command and nothing else set, over
`transport.kind: socket` and over `transport.kind: libfabric` with the tcp
provider. Survivors (expected), whether all finished and the launcher exited
0, accuracy beside the fault-free run, the view changes, the seconds until
every survivor stepped again after the kill, and the seconds from a joining
or restarted process's start, and from its start record (data loaded, model
built), until the view that took it in.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _faults import join_row  # noqa: E402

COMMAND = ["scripts/faults.sh", "--transport", "socket,libfabric-tcp", "--scenarios", "join,restart-defaults",
           "--out", "results/faults-transports.json"]
JSON = "results/faults-transports.json"


def render(data):
    """The table: one row per transport, algorithm and scenario."""
    lines = ["| transport | algorithm | scenario | survivors (expected) | all finished, exit 0 | accuracy % (fault-free) "
             "| view changes | every survivor stepped, s | taken in after process start, s | after its start record, s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        done = row["survivors_finished"] and row["exit_status"] == 0
        lines.append(f"| {row['transport']} | " + " | ".join(join_row(row, done)) + " |")
    return "\n".join(lines) + "\n"
