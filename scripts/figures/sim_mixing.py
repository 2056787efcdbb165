"""Simulated consensus at scale against the mixing analysis (docs/scale.md).

scripts/sim-mixing.sh: gossamer-sim at 1,024 ranks in 16 islands of 64
(10 Gbit/s inside, 1 Gbit/s and 20 ms between), 20 steps, ranks starting
apart; the per-step contraction of the consensus distance squared (geometric
mean) beside gossamer-topology's mean-square rates per round, averaged over
directions (ms-avg) and in the worst direction (ms-rate), 100 rounds.
"""
COMMAND = ["scripts/sim-mixing.sh", "--world-size", "1024"]
JSON = "results/sim-mixing.json"


def render(data):
    """One row per topology."""
    lines = ["| topology | ranks | measured contraction per step | predicted, average direction | ratio "
             "| predicted, worst direction | simulated s/step | simulation wall s | analysis wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        measured = f"{r['measured_rate']:.4f}" if r["measured_rate"] is not None else "-"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        lines.append(f"| `{r['topology']}` | {r['world_size']} | {measured} | {r['predicted_rate']:.4f} | {ratio} "
                     f"| {r['predicted_worst_rate']:.4f} | {r['simulated_seconds_per_step']:.3f} "
                     f"| {r['sim_wall_seconds']:.0f} | {r['analysis_wall_seconds']:.0f} |")
    return "\n".join(lines) + "\n"
