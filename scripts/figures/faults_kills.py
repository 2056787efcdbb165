"""Twenty kills -9 in one job, per algorithm and mode (docs/operations.md).

8 gossamer-train processes over zmq on loopback with the defaults, the
Fashion-MNIST MLP, for Crossover-SGD and SGP (sync and async), hierarchical
and AllReduce-SGD (scripts/faults.py, scenario repeated-kills): 20 kills -9
of ranks 1-7, each restarted 2 s later with the README's command, at least
8 s apart, every other one aimed at the end of an epoch (its flush; in async
mode its agreement). Whether every rank finished (launcher and every last
restarted process exit 0, every epoch done), how many warnings the
survivors logged that an agreement saw a rank fail ("the ranks cannot
agree ... folding in what arrived"), the seconds until every survivor had stepped in
the view without the killed rank (median and worst over the 20 kills), and
the final accuracy (not comparable with a fault-free run's: the job trains
as many epochs as the kills take).
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _faults import mode_of, number, percent  # noqa: E402

COMMAND = ["scripts/faults.sh", "--algorithms", "crossover,crossover-async,sgp,sgp-async,hierarchical,allreduce",
           "--scenarios", "repeated-kills", "--out", "results/faults-kills.json"]
JSON = "results/faults-kills.json"


def render(data):
    """The table: one row per algorithm and mode, then the totals."""
    lines = ["| algorithm | mode | kills (aimed at an epoch's end) | all finished | \"cannot agree\" warnings "
             "| every survivor stepped, s: p50 / worst | epochs | accuracy % |",
             "|---|---|---|---|---|---|---|---|"]
    everything = []
    for row in data["rows"]:
        times = [x for kind, x in row["every_stepped_per_fault"] if kind == "kill" and x is not None]
        everything += times
        kills = len(row["every_stepped_per_fault"])
        aimed = sum(1 for a in row.get("kill_aims", []) if a == "epoch-end")
        missing = kills - len(times)
        steps = (f"{number(statistics.median(times), '.2f')} / {number(max(times), '.2f')}" if times else "-")
        if missing:
            steps += f" ({missing} not measured)"
        name, mode = mode_of(row)
        lines.append(f"| {name} | {mode} | {kills} ({aimed}) | {'yes' if row['survivors_finished'] else 'no'} "
                     f"| {row.get('agreement_saw_failure', 0)} | {steps} | {row['epochs']} "
                     f"| {percent(row['test_accuracy'])} |")
    if everything:
        lines.append(f"| all | | {len(everything)} measured | | | {statistics.median(everything):.2f} / "
                     f"{max(everything):.2f} | | |")
    return "\n".join(lines) + "\n"
