"""The table of scripts/compare_composite.py's results, shared by the composite figures."""
JOBS = {"allreduce": "AllReduce-SGD (ring)", "crossover": "Crossover-SGD"}


def table(rows):
    """Per job (allreduce first) the median seconds per epoch over each transport, in the
    script's order, with the ratio to zmq tcp everywhere beside the composite ones."""
    transports = list(dict.fromkeys(r["transport"] for r in rows))
    local = {r["transport"]: r["local"] for r in rows}
    jobs = sorted({r["job"] for r in rows}, key=lambda j: (list(JOBS).index(j) if j in JOBS else len(JOBS), j))
    at = {(r["job"], r["transport"]): r for r in rows}
    heads = [f"all {local[t]}" if t == "zmq" else f"composite, {local[t]} inside" for t in transports]
    lines = ["| job | " + " | ".join(heads) + " |", "|" + "---|" * (1 + len(transports))]
    for j in jobs:
        cells = [JOBS.get(j, j)]
        for t in transports:
            r = at.get((j, t))
            if r is None:
                cells.append("-")
            elif t == "zmq":
                cells.append(f"{r['median_seconds_per_epoch']:.2f} s")
            else:
                cells.append(f"{r['median_seconds_per_epoch']:.2f} s ({r['ratio_to_zmq']:.3f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
