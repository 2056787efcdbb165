"""Accuracy, consensus, traffic and time of the gossip algorithms against
AllReduce-SGD (docs/algorithms.md).

The Fashion-MNIST MLP, 3 epochs, AllReduce-SGD (ring), SGP, Crossover-SGD
(4 segments) and hierarchical Crossover-SGD at 4, 8 and 16 peers, each a
process over zmq on loopback (scripts/compare_gossip.py): test accuracy of
the average model and of rank 0's, consensus distance, payload bytes per
peer per step, seconds per epoch.
"""
COMMAND = ["scripts/compare-gossip.sh"]
JSON = "results/compare-gossip.json"


def render(data):
    """The table as the script prints it, one row per algorithm and world size."""
    lines = [f"{'algorithm':<28}{'N':>4}{'acc(avg)':>10}{'acc(r0)':>10}{'consensus':>12}{'bytes/step':>12}"
             f"{'s/epoch':>9}".rstrip()]
    for r in data:
        lines.append(f"{r['algorithm']:<28}{r['world_size']:>4}{100 * r['test_accuracy']:>9.2f}%"
                     f"{100 * r['test_accuracy_rank0']:>9.2f}%{r['consensus_distance']:>12.2e}"
                     f"{r['bytes_per_step']:>12.0f}{r['seconds_per_epoch']:>9.2f}")
    return "```\n" + "\n".join(lines) + "\n```\n"
