"""A2SGD's accuracy and bytes per step against its model sync period
(docs/compression.md).

The setup of compare-compression (the Fashion-MNIST MLP, 8 peers, 5 epochs,
seeds 42-44) with A2SGD only, its means averaged by allreduce or gossiped,
the models synchronised every 10, 25, 50 or 100 steps or only after the last
(scripts/compare_compression.py --sweep): accuracy of the average model and
of rank 0's, largest epoch-end consensus distance, bytes per step.
"""
COMMAND = ["scripts/compare-compression.sh", "--sweep"]
JSON = "results/compare-compression-sweep.json"


def render(data):
    """The table as the script prints it: one row per means/sync kind and period (0: final sync only)."""
    lines = [f"{'means/sync':<12}{'period':>8}{'acc(avg)':>10}{'acc(r0)':>10}{'consensus max':>15}{'bytes/step':>12}"]
    for r in data:
        lines.append(f"{r['group']:<12}{r['sync_period']:>8}{100 * r['test_accuracy']:>9.2f}%"
                     f"{100 * r['test_accuracy_rank0']:>9.2f}%{r['consensus_distance_max']:>15.2e}"
                     f"{r['bytes_per_step']:>12.0f}")
    return "```\n" + "\n".join(lines) + "\n```\n"
