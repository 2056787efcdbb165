"""Non-IID data: the plain and the heterogeneity-corrected gossip algorithms
against AllReduce-SGD (docs/algorithms.md).

The Fashion-MNIST MLP, 3 epochs, each peer's labels drawn from a Dirichlet
distribution (alpha 1.0, 0.5, 0.1, 0.05), 8 and 16 peers as processes over
zmq on loopback (scripts/compare_noniid.py): test accuracy of the average
model per algorithm (render), and consensus distance and payload bytes per
peer per step (render_consensus).
"""
COMMAND = ["scripts/compare-noniid.sh"]
JSON = "results/compare-noniid.json"

LABELS = {
    "allreduce_sgd": "AllReduce-SGD",
    "crossover_sgd": "Crossover-SGD",
    "sgp": "SGP",
    "gradient_tracking": "GT (Crossover)",
    "gradient_tracking_sgp": "GT (SGP)",
    "d2": "D² (ring)",
    "crossover_sgd_ring": "Crossover (ring)",
    "quasi_global_momentum_heavy_ball": "QGM, heavy ball",
    "quasi_global_momentum_nesterov": "QGM, Nesterov",
}


def _grid(data, value):
    rows = data["rows"]
    algorithms = []
    for r in rows:
        if r["algorithm"] not in algorithms:
            algorithms.append(r["algorithm"])
    keys = []
    for r in rows:
        if (r["world_size"], r["alpha"]) not in keys:
            keys.append((r["world_size"], r["alpha"]))
    lines = ["| N | α | " + " | ".join(LABELS.get(a, a) for a in algorithms) + " |",
             "|---|---|" + "---|" * len(algorithms)]
    for n, alpha in keys:
        cells = []
        for a in algorithms:
            match = [r for r in rows if r["algorithm"] == a and r["world_size"] == n and r["alpha"] == alpha]
            cells.append(value(match[0]) if match else "")
        lines.append(f"| {n} | {alpha:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(data):
    """Test accuracy (%) of the average model, one row per world size and alpha."""
    return _grid(data, lambda r: f"{100 * r['test_accuracy']:.2f}")


def render_consensus(data):
    """Consensus distance at the end, and payload bytes per peer per step (kB)."""
    return _grid(data, lambda r: f"{r['consensus_distance']:.1e}, {r['bytes_per_step'] / 1000:.0f} kB")
