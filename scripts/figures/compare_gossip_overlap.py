"""Seconds per step of Crossover-SGD and SGP with and without overlap (docs/algorithms.md).

8 peers over zmq on loopback, one epoch on 30,000 images, 5 interleaved
repetitions of each algorithm and mode (scripts/compare_gossip.py --overlap):
the median over repetitions of the seconds per step averaged over ranks.
"""
COMMAND = ["scripts/compare-gossip.sh", "--overlap", "--reps", "5"]
JSON = "results/compare-gossip-overlap.json"


def render(data):
    """The table as the script prints it: sync and overlap seconds per step, and their ratio."""
    lines = [f"{'algorithm':<16}{'sync s/step':>13}{'overlap s/step':>16}{'ratio':>8}"]
    for m in data["medians"]:
        lines.append(f"{m['algorithm']:<16}{m['sync_seconds_per_step']:>13.5f}"
                     f"{m['overlap_seconds_per_step']:>16.5f}{m['ratio']:>8.3f}")
    return "```\n" + "\n".join(lines) + "\n```\n"
