"""Simulated consensus at scale against the mixing analysis (docs/scale.md).

scripts/sim-mixing.sh: gossamer-sim at 1,024 ranks in 16 islands of 64
(10 Gbit/s inside, 1 Gbit/s and 20 ms between), 20 steps, ranks starting
apart; the per-step contraction of the consensus distance squared (geometric
mean) beside gossamer-topology's predictions: from the run's own start (the
topology's mixing matrices applied to it, --from-ramp), and the mean-square
rates per round for any start, averaged over directions (ms-avg) and in the
worst direction (ms-rate), 100 rounds.
"""
COMMAND = ["scripts/sim-mixing.sh", "--world-size", "1024"]
JSON = "results/sim-mixing.json"


def _rate(v):
    return f"{v:.4f}" if v is not None else "-"


def render(data):
    """One row per topology."""
    lines = ["| topology | ranks | measured contraction per step | predicted from the run's start | ratio "
             "| predicted, average direction | predicted, worst direction | simulated s/step "
             "| simulation wall s | analysis wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        lines.append(f"| `{r['topology']}` | {r['world_size']} | {_rate(r['measured_rate'])} "
                     f"| {_rate(r['ramp_rate'])} | {ratio} | {r['predicted_rate']:.4f} "
                     f"| {r['predicted_worst_rate']:.4f} | {r['simulated_seconds_per_step']:.3f} "
                     f"| {r['sim_wall_seconds']:.0f} | {r['analysis_wall_seconds'] + r['ramp_wall_seconds']:.0f} |")
    return "\n".join(lines) + "\n"
