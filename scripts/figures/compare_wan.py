"""The algorithms across a slow link (docs/hosts.md).

Fashion-MNIST on 8 test hosts in two islands of 4 (network namespaces,
tests/hosts/two-islands.yaml: 10 Gbit/s inside an island, 100 Mbit/s and
20 ms between), 6 epochs, every algorithm one after the other
(scripts/compare_wan.py): training time until the average model first
reaches 84%, final accuracy, bytes across the slow link, seconds per epoch.
Needs root (the namespaces).
"""
COMMAND = ["scripts/compare-wan.sh"]
JSON = "results/compare-wan.json"
NAMES = {
    "allreduce_ring": "AllReduce-SGD, ring",
    "allreduce_hierarchical": "AllReduce-SGD, hierarchical allreduce (groups of 4)",
    "crossover_uniform": "Crossover-SGD, fair roulette",
    "crossover_bandwidth": "Crossover-SGD, bandwidth roulette",
    "hierarchical_crossover": "hierarchical Crossover-SGD (groups = islands)",
    "a2sgd": "A2SGD (gossip means)",
    "diloco_allreduce": "DiLoCo, outer allreduce (H = 50)",
    "diloco_gossip": "DiLoCo, outer gossip",
    "diloco_noloco": "DiLoCo, outer noloco (NoLoCo's outer step, γ 0.7)",
}


def render(data):
    """The table: per algorithm, time to the target accuracy, final accuracy,
    bytes across the slow link, seconds per epoch, and how much sooner than
    ring AllReduce-SGD it reached the target."""
    done = [r for r in data if "error" not in r]
    target = done[0]["target_accuracy"] if done else 0.84
    ring = next((r["seconds_to_target"] for r in done if r["algorithm"] == "allreduce_ring"), None)
    lines = [f"| algorithm | to {100 * target:.0f}% (s) | final | across the slow link | s / epoch | vs ring |",
             "|---|---|---|---|---|---|"]
    for r in data:
        name = NAMES.get(r["algorithm"], r["algorithm"])
        if "error" in r:
            lines.append(f"| {name} | failed | | | | |")
            continue
        t = r["seconds_to_target"]
        lines.append(f"| {name} | {'never' if t is None else format(t, '.1f')} | {100 * r['final_accuracy']:.2f}% | "
                     f"{r['slow_link_bytes'] / 1e6:,.0f} MB | {r['seconds_per_epoch']:.1f} | "
                     f"{format(ring / t, '.1f') + 'x' if ring and t else '-'} |")
    return "\n".join(lines) + "\n"
