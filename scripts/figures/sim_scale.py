"""Every training algorithm's step in a SimGrid simulation at scale (docs/scale.md).

gossamer-sim through scripts/sim-scale.sh: the example configs at 64 and 256
ranks in islands of 64 (10 Gbit/s and 20 us inside, 1 Gbit/s and 20 ms
between), 50 ms of compute per step, 20 steps; simulated seconds per step,
the bytes that crossed between islands per step and rank, the consensus
distance after the last step, and the simulation's wall time.
"""
COMMAND = ["scripts/sim-scale.sh"]
JSON = "results/sim-scale.json"


def render(data):
    """One row per world size and algorithm, fastest step first within a world size."""
    lines = ["| ranks | islands | algorithm | s/step (simulated) | MB between islands per step and rank "
             "| consensus distance after 20 steps | wall s |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(data, key=lambda r: (r["world_size"], r["simulated_seconds_per_step"])):
        per = r["bytes_between_islands"] / r["steps"] / r["world_size"] / 1e6
        dist = "replicated" if r["replicated_model"] else f"{r['consensus_distance'][-1]:.3g}"
        lines.append(f"| {r['world_size']} | {r['islands']} | {r['algorithm']} | "
                     f"{r['simulated_seconds_per_step']:.3f} | {per:.3f} | {dist} | {r['wall_seconds']:.1f} |")
    return "\n".join(lines) + "\n"
