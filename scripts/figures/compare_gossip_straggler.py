"""The gossip algorithms and AllReduce-SGD with one peer slowed 10x (docs/algorithms.md).

8 peers over zmq on loopback, one epoch on 30,000 images; rank 7 sleeps after
every step for 9 times the unslowed run's median step (scripts/compare_gossip.py
--straggler): the other peers' mean steps per second without and with the
straggler, the drop, the straggler's own rate, and the accuracies.
"""
COMMAND = ["scripts/compare-gossip.sh", "--straggler"]
JSON = "results/compare-gossip-straggler.json"


def render(data):
    """The table as the script prints it, one row per algorithm and mode."""
    lines = [f"{'algorithm':<16}{'mode':<7}{'steps/s':>9}{'w/ straggler':>14}{'drop':>8}"
             f"{'straggler':>11}{'acc':>8}{'acc w/':>8}"]
    for r in data:
        lines.append(f"{r['algorithm']:<16}{r['mode']:<7}{r['steps_per_second']:>9.1f}"
                     f"{r['steps_per_second_with_straggler']:>14.1f}{100 * r['drop']:>7.1f}%"
                     f"{r['straggler_steps_per_second']:>11.1f}{100 * r['test_accuracy']:>7.2f}%"
                     f"{100 * r['test_accuracy_with_straggler']:>7.2f}%")
    return "```\n" + "\n".join(lines) + "\n```\n"
