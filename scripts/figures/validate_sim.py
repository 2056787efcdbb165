"""The simulator against real runs on the namespace hosts (docs/scale.md).

scripts/validate-sim.sh: 14 jobs (AllReduce-SGD over seven allreduce
algorithms, Crossover-SGD in three modes, SGP, hierarchical, DiLoCo, A2SGD),
each for one epoch of 32,000 samples on 8 namespace hosts in two islands of 4
(tc tbf links) and in gossamer-sim on the same platform replaying the time
each rank spent on its own work, three rounds interleaved; the medians of seconds
per step of both, their ratio, what the real runs' islands' links dropped and
TCP sent again, and per shape the geometric mean and the largest error.
"""
COMMAND = ["scripts/validate-sim.sh", "--train-limit", "32000", "--rounds", "3"]
JSON = "results/validate-sim.json"


def render(data):
    """One row per job and shape, then the summary per shape."""
    shapes = list(data["shapes"])
    counted = all("real_island_link_drops" in r for r in data["rows"])
    extra = " real drops / TCP resent |" if counted else ""
    head = "| job |" + "".join(f" {s}: real s/step | simulated | ratio |{extra}" for s in shapes)
    lines = [head, "|---|" + ("---|---|---|" + ("---|" if counted else "")) * len(shapes)]
    jobs = []
    for r in data["rows"]:
        if r["job"] not in jobs:
            jobs.append(r["job"])
    by = {(r["shape"], r["job"]): r for r in data["rows"]}
    for j in jobs:
        cells = ""
        for s in shapes:
            r = by.get((s, j))
            cells += (f" {r['real_seconds_per_step']:.4f} | {r['sim_seconds_per_step']:.4f} | {r['ratio']:.2f} |"
                      if r else " | | |")
            if counted:
                cells += (f" {r['real_island_link_drops']:.0f} / {r['real_tcp_retransmitted_segments']:.0f} |"
                          if r else " |")
        lines.append(f"| {j} |" + cells)
    lines.append("")
    for s in shapes:
        v = data["shapes"][s]
        m = data["summary"][s]
        within = sum(1 for r in data["rows"] if r["shape"] == s and r["error"] <= 0.15)
        lines.append(f"- **{s}** ({v['inside_gbps']:g} Gbit/s inside, {v['between_gbps']:g} Gbit/s and "
                     f"{v['between_delay_ms']:g} ms between): geometric mean error {m['geometric_mean_error']:.1%}, "
                     f"largest {m['max_error']:.1%}; {within} of {m['jobs']} jobs within 15%.")
    return "\n".join(lines) + "\n"
