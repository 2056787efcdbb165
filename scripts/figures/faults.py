"""Fault scenarios under the membership service (docs/operations.md).

8 gossamer-train processes over zmq on loopback, 10 epochs of the
Fashion-MNIST MLP, for Crossover-SGD, SGP, hierarchical and AllReduce-SGD:
kill -9 of one peer and of three, SIGSTOP for 10 s, a kill -9 followed by a
restart with --rejoin, and a 4+4 partition for 10 s, each beside the
fault-free run of the same seed (scripts/faults.py): survivors, accuracy,
detection and resume times, steps lost, steps to reconverge.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _faults import NAMES, number, percent  # noqa: E402

COMMAND = ["scripts/faults.sh"]
JSON = "results/faults.json"


def render(data):
    """The table: one row per algorithm and scenario."""
    lines = ["| algorithm | scenario | survivors | all finished | accuracy % (fault-free) | detection s | resume s "
             "| steps lost | reconverge steps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        lines.append(f"| {NAMES.get(row['algorithm'], row['algorithm'])} | {row['scenario']} | {row['survivors']} | "
                     f"{'yes' if row['survivors_finished'] else 'no'} | "
                     f"{percent(row['test_accuracy'])} ({percent(row['baseline_accuracy'])}) | "
                     f"{number(row['detection_seconds'], '.2f')} | {number(row['resume_seconds'], '.2f')} | "
                     f"{row['steps_lost']} | {number(row['reconverge_steps'], 'd')} |")
    return "\n".join(lines) + "\n"
