"""Churn soak (docs/operations.md).

8 gossamer-train processes over zmq on loopback with default settings and
room for 12 (membership.max_world_size), for Crossover-SGD, SGP and
AllReduce-SGD: every 10-40 s (seeded) a kill -9 followed by a restart with
the README's command, a SIGSTOP of 5-15 s, or a new rank joining, and one
4|4 partition of 10 s (scripts/churn.py); beside a fault-free run of the
same length.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _faults import NAMES, number, percent  # noqa: E402

COMMAND = ["scripts/churn.sh", "--minutes", "4", "--hang-seconds", "120"]
JSON = "results/churn.json"


def render(data):
    """The table: one row per algorithm."""
    lines = ["| algorithm | minutes | kills + restarts | stops | joins | partitions | hangs | crashes "
             "| hash mismatches | mass error | RSS per process after 1 min, MiB | at the end, MiB "
             "| accuracy % (fault-free) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        e = row["events"]
        lines.append(f"| {NAMES.get(row['algorithm'], row['algorithm'])} | {row['minutes']:g} | {e['kill']} | "
                     f"{e['stop']} | {e['join']} | {e['partition']} | {row['hangs']} | {row['crashes']} | "
                     f"{number(row['hash_mismatches'], 'd')} | {number(row['mass_error'], '.2g')} | "
                     f"{number(row['rss_start_mib_per_process'], '.1f')} | "
                     f"{number(row['rss_end_mib_per_process'], '.1f')} | {percent(row['accuracy'])} "
                     f"({percent(row['fault_free_accuracy'])}) |")
    return "\n".join(lines) + "\n"
