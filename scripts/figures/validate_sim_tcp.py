"""The simulator against real runs under three TCP regimes of the real network (docs/scale.md).

scripts/validate-sim.sh --regimes: the jobs whose real runs lose packets at
the islands' links or whose simulation was off (SGP, Crossover-SGD sync and
overlap, recursive doubling, Rabenseifner) and the ring allreduce as a
control, on both shapes, three rounds; each round runs every job on the
namespace hosts under each regime in turn (tbf queues of 100 ms; of 1,000
ms; of 1,000 ms with TCP connections that start with a window of 300
segments), each against a simulation that replays its compute. Medians of seconds per step, ratio
(simulated / real), and per shape and regime the jobs within 15%.
"""
COMMAND = ["scripts/validate-sim.sh", "--train-limit", "32000", "--rounds", "3", "--jobs",
           "sgp,crossover-sync,crossover-overlap,allreduce-recursive_doubling,allreduce-rabenseifner,allreduce-ring",
           "--regimes", "100,1000,1000:300", "--out", "results/validate-sim-tcp.json"]
JSON = "results/validate-sim-tcp.json"


def render(data):
    """One row per job and shape: per regime the real and simulated seconds per step and their ratio."""
    regimes = data["regimes"]
    head = "| job | shape |" + "".join(f" {g['name']}: real s/step | simulated | ratio |" for g in regimes)
    lines = [head, "|---|---|" + "---|---|---|" * len(regimes)]
    by = {(r["job"], r["shape"], r["queue_ms"], r["initcwnd"]): r for r in data["rows"]}
    pairs = []
    for r in data["rows"]:
        if (r["job"], r["shape"]) not in pairs:
            pairs.append((r["job"], r["shape"]))
    for job, shape in pairs:
        rows = [by.get((job, shape, g["queue_ms"], g["initcwnd"])) for g in regimes]
        cells = "".join(f" {r['real_seconds_per_step']:.4f} | {r['sim_seconds_per_step']:.4f} | {r['ratio']:.2f} |"
                        if r else " | | |" for r in rows)
        lines.append(f"| {job} | {shape} |" + cells)
    lines.append("")
    for key, m in data["summary"].items():
        lines.append(f"- **{key}**: {m['within_15_percent']} of {m['jobs']} jobs within 15%, "
                     f"geometric mean error {m['geometric_mean_error']:.1%}, largest {m['max_error']:.1%}.")
    return "\n".join(lines) + "\n"
