"""The seed papers' synchronisation-time tables simulated (docs/scale.md).

scripts/sim-papers.sh: paper 000's Table 2 (ring, hierarchical, 2D-torus and
2D-TGA allreduce of 3,231,961 float32 at 32..512 workers, alpha 0.7 us,
56 Gbit/s, 16 groups) and paper 003's Table 3 (HiPS, mesh and ring on
BCube(n, h-1) and the hD-torus, 4 MiB at 10 Gbit/s) in SimGrid, beside the
papers' formulas, with the ratio.
"""
COMMAND = ["scripts/sim-papers.sh"]
JSON = "results/sim-papers.json"


def _ms(x):
    return f"{x * 1e3:.3f}"


def render(data):
    """Paper 000's table: one row per algorithm, a column pair per worker count."""
    rows = [r for r in data["rows"] if r["paper"] == "000"]
    workers = sorted({r["workers"] for r in rows})
    algorithms = []
    for r in rows:
        if r["algorithm"] not in algorithms:
            algorithms.append(r["algorithm"])
    by = {(r["algorithm"], r["workers"]): r for r in rows}
    lines = ["| algorithm |" + "".join(f" N={n}: paper ms / simulated ms (simulated / paper) |" for n in workers),
             "|---|" + "---|" * len(workers)]
    for a in algorithms:
        cells = ""
        for n in workers:
            r = by.get((a, n))
            if r and r.get("ratio") is not None:
                cells += f" {_ms(r['paper_seconds'])} / {_ms(r['simulated_seconds'])} ({r['ratio']:.2f}) |"
            else:
                cells += f" {_ms(r['paper_seconds'])} / failed |" if r else " |"
        lines.append(f"| {a} |" + cells)
    return "\n".join(lines) + "\n"


def render_hips(data):
    """Paper 003's table: one row per topology, shape and algorithm."""
    lines = ["| topology | (n, h) | servers | algorithm | paper GST ms | simulated ms | ratio | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        if r["paper"] != "003":
            continue
        if r.get("ratio") is None:
            lines.append(f"| {r['topology']} | ({r['n']}, {r['h']}) | {r['workers']} | {r['algorithm']} | "
                         f"{_ms(r['paper_seconds'])} | failed (see below) | | |")
            continue
        lines.append(f"| {r['topology']} | ({r['n']}, {r['h']}) | {r['workers']} | {r['algorithm']} | "
                     f"{_ms(r['paper_seconds'])} | {_ms(r['simulated_seconds'])} | {r['ratio']:.2f} | "
                     f"{r['wall_seconds']:.1f} |")
    return "\n".join(lines) + "\n"
