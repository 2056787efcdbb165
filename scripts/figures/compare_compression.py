"""Compressed gradient exchanges against the uncompressed algorithms, 8 peers
(docs/compression.md).

The Fashion-MNIST MLP, 5 epochs, 8 processes over zmq on loopback, seeds
42, 43 and 44 interleaved (scripts/compare_compression.py): AllReduce-SGD
dense, A2SGD (model sync every 25 steps, or only the final one), Top-K 1%,
Gaussian-K 1%, QSGD s=4 (buckets of 512, or one norm), and Crossover-SGD
uncompressed and with gossiped A2SGD means: accuracy of the average model
(mean, min..max over seeds) and of rank 0's, consensus distance, bytes per
step, seconds per epoch, and the checks A2SGD is held to.
"""
COMMAND = ["scripts/compare-compression.sh"]
JSON = "results/compare-compression.json"
BASELINES = {"topk": "Top-K", "gaussk": "Gaussian-K", "qsgd": "QSGD"}


def table(rows):
    first = rows[0]
    lines = [f"{first['world_size']} peers, {first['epochs']} epochs, seeds {first['seeds']} "
             f"(accuracy: mean over seeds, min..max)",
             f"{'configuration':<24}{'algorithm':<15}{'acc(avg)':>9}{'min..max':>15}{'acc(r0)':>9}"
             f"{'consensus max/final':>22}{'bytes/step':>12}{'wire B/step':>12}{'s/epoch':>9}"]
    for r in rows:
        accs = r["test_accuracy_by_seed"]
        spread = f"{100 * min(accs):.2f}..{100 * max(accs):.2f}"
        cons = f"{r['consensus_distance_max']:.2e}/{r['consensus_distance']:.1e}"
        lines.append(f"{r['label']:<24}{r['algorithm']:<15}{100 * r['test_accuracy']:>8.2f}%{spread:>15}"
                     f"{100 * r['test_accuracy_rank0']:>8.2f}%{cons:>22}{r['bytes_per_step']:>12.0f}"
                     f"{r['wire_bytes_per_step']:>12.0f}{r['seconds_per_epoch']:>9.2f}")
    return lines


def checks(rows):
    by = {r["label"]: r for r in rows}
    if "a2sgd" not in by or "dense" not in by:
        return []
    a2 = by["a2sgd"]["test_accuracy"]
    named = ["dense"] + [name for label, name in BASELINES.items() if label in by]
    lines = [f"A2SGD against {', '.join(named[:-1])} and {named[-1]} (AllReduce-SGD, {by['a2sgd']['world_size']} peers):",
             f"  A2SGD - dense      = {100 * (a2 - by['dense']['test_accuracy']):+.2f} points "
             f"(within 2: {'yes' if a2 >= by['dense']['test_accuracy'] - 0.02 else 'NO'})"]
    for other in ("topk", "gaussk", "qsgd", "qsgd_one_norm"):
        if other in by:
            d = a2 - by[other]["test_accuracy"]
            lines.append(f"  A2SGD - {other:<11}= {100 * d:+.2f} points (no worse: {'yes' if d >= 0 else 'NO'})")
    if "a2sgd_gossip" in by and "crossover_sgd" in by:
        g, c = by["a2sgd_gossip"], by["crossover_sgd"]
        lines.append("gossiped A2SGD means + Crossover-SGD sync against Crossover-SGD:")
        for key, name in (("test_accuracy", "average model"), ("test_accuracy_rank0", "rank 0 model")):
            d = g[key] - c[key]
            lines.append(f"  {name:<14} {100 * d:+.2f} points (within 3: {'yes' if d >= -0.03 else 'NO'})")
        lines.append(f"  bytes/step {g['bytes_per_step']:.0f} vs {c['bytes_per_step']:.0f} "
                     f"({c['bytes_per_step'] / g['bytes_per_step']:.0f}x fewer); consensus distance "
                     f"(largest epoch end) {g['consensus_distance_max']:.2e} vs {c['consensus_distance_max']:.2e}")
    return lines


def render(data):
    """The table and its checks, as the script prints them."""
    lines = table(data)
    found = checks(data)
    if found:
        lines += [""] + found
    return "```\n" + "\n".join(lines) + "\n```\n"


def render_consensus(data):
    """The epoch-end consensus distance per epoch (mean over seeds) of the two gossip rows."""
    lines = []
    for r in data:
        if r["group"] == "gossip":
            values = "".join(f"{v:.3g}".ljust(9) for v in r["consensus_per_epoch"])
            lines.append((f"{r['label']:<16}" + values).rstrip())
    return "```\n" + "\n".join(lines) + "\n```\n"
