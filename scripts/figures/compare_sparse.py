"""Sparse synchronisation: elements sent and seconds per epoch of the existing
method against direct transmission (docs/sparse-sync.md).

gossamer-sparse on the SpamAssassin features, the factorization machine and
logistic regression, 4 and 8 processes over zmq ipc, global batches of 256,
512 and 1024 rows, one epoch, dense allreduce, the existing method and
direct transmission interleaved over 3 repeats, each method's run with the
median epoch time kept (scripts/compare_sparse.py; data measured before it
kept the fastest, and say so): the forms of the paper's Table II (elements
sent) and Table III (seconds per epoch), and whether both sparse methods
gave the same model bit for bit.
"""
COMMAND = ["scripts/compare-sparse.sh"]
JSON = "results/compare-sparse.json"


def configurations(data):
    """(model, world size, batch) -> {method: row}, in the JSON's order."""
    found = {}
    for r in data:
        found.setdefault((r["model"], r["world_size"], r["batch_size"]), {})[r["method"]] = r
    return found


def render(data):
    """Both tables as the script prints them."""
    configs = configurations(data)
    lines = ["Table II form: elements sent per epoch (all ranks), float64 values",
             f"{'model':5} {'N':>2} {'batch':>5} | {'existing R=B':>12} | {'direct R':>10} {'direct B':>10} "
             f"{'direct D':>10} | {'rate':>5}"]
    for (model, world, batch), m in configs.items():
        e, d = m["existing"], m["direct"]
        rate = (d["elements_reduce"] + d["elements_broadcast"] + d["elements_direct"]) / max(
            1, e["elements_reduce"] + e["elements_broadcast"])
        lines.append(f"{model:5} {world:>2} {batch:>5} | {e['elements_reduce']:>12.3e} | {d['elements_reduce']:>10.3e} "
                     f"{d['elements_broadcast']:>10.3e} {d['elements_direct']:>10.3e} | {rate:5.3f}")
    repeats = data[0].get("repeats", 3) if data else 3
    statistic = "the median" if data and data[0].get("statistic") == "median" else "fastest"
    lines += ["",
              f"Table III form: seconds per epoch (slowest rank; {statistic} of {repeats} runs); "
              "reduce+direct / broadcast / compute",
              f"{'model':5} {'N':>2} {'batch':>5} | {'direct R+D':>10} {'B':>7} {'C':>7} {'total':>7} | "
              f"{'exist R+D':>10} {'B':>7} {'C':>7} {'total':>7} | {'rate':>5} | {'dense':>7} | same bits"]
    for (model, world, batch), m in configs.items():
        line = f"{model:5} {world:>2} {batch:>5} |"
        for method in ("direct", "existing"):
            r = m[method]
            line += (f" {r['reduce_seconds']:>10.4f} {r['broadcast_seconds']:>7.4f} "
                     f"{r['compute_seconds']:>7.4f} {r['epoch_seconds']:>7.4f} |")
        rate = m["direct"]["epoch_seconds"] / m["existing"]["epoch_seconds"]
        same = m["direct"]["identical_to_existing"]
        crcs = ",".join(sorted({str(m["existing"]["crc32c"]), str(m["direct"]["crc32c"])}))
        lines.append(f"{line} {rate:5.3f} | {m['direct']['dense_epoch_seconds']:7.4f} | "
                     f"{'yes' if same else 'NO ' + crcs}")
    return "```\n" + "\n".join(lines) + "\n```\n"
