"""Joins, restarts and pauses with the defaults (docs/operations.md).

8 gossamer-train processes over zmq on loopback, 10 epochs of the
Fashion-MNIST MLP, for Crossover-SGD, SGP, hierarchical and AllReduce-SGD
(scripts/faults.py): two new ranks join with `--join` (job started with
membership.max_world_size 10), a rank killed with kill -9 is restarted 2 s
later with the README's command and nothing else set, a rank is stopped for
10 s. Survivors (expected), whether all finished, accuracy
beside the fault-free run, the view changes, the seconds until every
survivor stepped again after the kill or stop, and the seconds from a
joining or restarted process's start, and from its start record (data
loaded, model built), until the view that took it in.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _faults import join_row  # noqa: E402

COMMAND = ["scripts/faults.sh", "--scenarios", "join,restart-defaults,stop-defaults", "--out",
           "results/faults-membership.json"]
JSON = "results/faults-membership.json"


def render(data):
    """The table: one row per algorithm and scenario."""
    lines = ["| algorithm | scenario | survivors (expected) | all finished | accuracy % (fault-free) | view changes "
             "| every survivor stepped, s | taken in after process start, s | after its start record, s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        lines.append("| " + " | ".join(join_row(row, row["survivors_finished"])) + " |")
    return "\n".join(lines) + "\n"
