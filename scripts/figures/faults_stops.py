"""A SIGSTOP of 10 s with the defaults, per algorithm and mode
(docs/operations.md).

8 gossamer-train processes over zmq on loopback with the defaults
(membership.suspect_seconds 3), the Fashion-MNIST MLP, for Crossover-SGD
and SGP (sync and async), hierarchical and AllReduce-SGD
(scripts/faults.py, scenario stop-defaults): rank 3 stopped at 5% of the
fault-free run's time and continued 10 s later, beside the fault-free run
of the same seed. Whether every rank finished, accuracy, the seconds until
the survivors' view left the stopped rank out (detection) and until every
survivor had stepped in that view, the view changes (its removal and its
return), and whether that second figure is within suspect_seconds + 0.5 s.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _faults import mode_of, number, percent  # noqa: E402

COMMAND = ["scripts/faults.sh", "--algorithms", "crossover,crossover-async,sgp,sgp-async,hierarchical,allreduce",
           "--scenarios", "stop-defaults", "--out", "results/faults-stops.json"]
JSON = "results/faults-stops.json"
SUSPECT_SECONDS = 3.0  # membership.suspect_seconds's default


def render(data):
    """The table: one row per algorithm and mode."""
    lines = ["| algorithm | mode | survivors | all finished | accuracy % (fault-free) | detection s "
             "| every survivor stepped, s | within suspect_seconds + 0.5 s | view changes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        name, mode = mode_of(row)
        stepped = row["every_stepped_seconds"]
        within = "-" if stepped is None else ("yes" if stepped <= SUSPECT_SECONDS + 0.5 else "no")
        lines.append(f"| {name} | {mode} | {row['survivors']} | {'yes' if row['survivors_finished'] else 'no'} "
                     f"| {percent(row['test_accuracy'])} ({percent(row['baseline_accuracy'])}) "
                     f"| {number(row['detection_seconds'], '.2f')} | {number(stepped, '.2f')} | {within} "
                     f"| {row['view_changes']} |")
    return "\n".join(lines) + "\n"
