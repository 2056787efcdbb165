#!/usr/bin/python3
"""Runs gossamer-admm (2D-TGA-ADMM, the 2D-TGA-ADMM paper (Wang et al.) Algorithm 2) on the SpamAssassin
logistic regression once per allreduce algorithm and compares them: iterations
to f_rerr <= 1e-3 (Eq. 9), the convergence curves side by side (Figs. 5b/6b),
updating and synchronisation wait seconds per iteration (Table 4; the median
over --repeats interleaved rounds), and the
test accuracy of the consensus model against the centrally trained one.

Run through scripts/compare-admm.sh (which builds and makes the data first).
Writes results/compare-admm.json and, with matplotlib, results/compare-admm.png.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
ADMM = os.path.join(BUILD, "apps", "gossamer-admm")
CONFIG = os.path.join(ROOT, "examples", "configs", "sparse", "admm-spam.yaml")
RESULTS = os.path.join(ROOT, "results")
WORK = os.path.join(RESULTS, "compare-admm")
ROW_KEYS = ["allreduce_algorithm", "world_size", "iterations_to_1e-3", "update_seconds_per_iteration",
            "sync_wait_seconds_per_iteration", "test_accuracy", "central_test_accuracy"]


def run(algorithm, args, round_):
    os.makedirs(WORK, exist_ok=True)
    out = os.path.join(WORK, f"{algorithm}-{round_}.json")
    log = os.path.join(WORK, f"{algorithm}-{round_}.log")
    cmd = [ADMM, "--config", CONFIG, "--summary-json", out,
           "--set", f"collectives.allreduce={algorithm}",
           "--set", f"world_size={args.world_size}",
           "--set", f"admm.max_iterations={args.max_iterations}",
           "--set", f"admm.tolerance={args.tolerance}"] + [x for kv in args.set for x in ("--set", kv)]
    print("$ " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd), flush=True)
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout)
    if proc.returncode != 0:
        sys.stderr.write(open(log).read())
        raise SystemExit(f"gossamer-admm with {algorithm} failed ({proc.returncode}); log: {log}")
    with open(out) as f:
        return json.load(f)


def print_table(rows):
    head = f"{'allreduce':<13}{'ranks':>6}{'iters to 1e-3':>15}{'update s/iter':>15}{'sync wait s/iter':>18}" \
           f"{'test acc':>10}{'central acc':>13}"
    print(head)
    print("-" * len(head))
    for r in rows:
        its = "-" if r["iterations_to_1e-3"] is None else str(r["iterations_to_1e-3"])
        print(f"{r['allreduce_algorithm']:<13}{r['world_size']:>6}{its:>15}"
              f"{r['update_seconds_per_iteration']:>15.4f}{r['sync_wait_seconds_per_iteration']:>18.4f}"
              f"{100 * r['test_accuracy']:>9.2f}%{100 * r['central_test_accuracy']:>12.2f}%")


def print_curves(rows):
    names = [r["allreduce_algorithm"] for r in rows]
    print("\nf_rerr per iteration (Eq. 9)")
    print(f"{'iter':>5}" + "".join(f"{n:>14}" for n in names))
    longest = max(len(r["curve"]) for r in rows)
    for i in range(longest):
        cells = []
        for r in rows:
            c = r["curve"]
            cells.append(f"{c[i]['f_rerr']:>14.6e}" if i < len(c) else f"{'':>14}")
        print(f"{i + 1:>5}" + "".join(cells))
    # How far apart the curves are: the allreduce changes only the summation order.
    common = min(len(r["curve"]) for r in rows)
    spread = max((max(r["curve"][i]["f_rerr"] for r in rows) - min(r["curve"][i]["f_rerr"] for r in rows))
                 / max(r["curve"][i]["f_rerr"] for r in rows) for i in range(common))
    print(f"largest relative spread of f_rerr between the algorithms over {common} iterations: {spread:.2e}")
    return spread


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plot)")
        return
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    styles = ["-", "--", ":"]
    for k, r in enumerate(rows):
        its = [c["iteration"] for c in r["curve"]]
        ax[0].semilogy(its, [c["f_rerr"] for c in r["curve"]], styles[k % 3], label=r["allreduce_algorithm"])
    ax[0].axhline(1e-3, color="grey", lw=0.5)
    ax[0].set_xlabel("ADMM iteration")
    ax[0].set_ylabel("f_rerr")
    ax[0].set_title(f"Convergence, {rows[0]['world_size']} ranks")
    ax[0].legend()
    names = [r["allreduce_algorithm"] for r in rows]
    upd = [r["update_seconds_per_iteration"] for r in rows]
    syn = [r["sync_wait_seconds_per_iteration"] for r in rows]
    ax[1].bar(names, upd, label="updating")
    ax[1].bar(names, syn, bottom=upd, label="sync wait")
    ax[1].set_ylabel("seconds per iteration")
    ax[1].set_title("Updating vs synchronisation wait")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {os.path.relpath(path, ROOT)}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithms", default="ring,tga2d,hierarchical",
                   help="collectives.allreduce values, comma-separated (default ring,tga2d,hierarchical)")
    p.add_argument("--world-size", type=int, default=8)
    p.add_argument("--max-iterations", type=int, default=100)
    p.add_argument("--tolerance", type=float, default=1e-3, help="f_rerr at which a run stops")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE passed on to gossamer-admm")
    p.add_argument("--repeats", type=int, default=3,
                   help="rounds over the algorithms, interleaved; times are the median over the rounds")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run at most")
    p.add_argument("--output", default=os.path.join(RESULTS, "compare-admm.json"))
    args = p.parse_args()
    algorithms = args.algorithms.split(",")
    runs = {a: [] for a in algorithms}
    for round_ in range(args.repeats):
        for a in algorithms:
            runs[a].append(run(a, args, round_))
    summaries = []
    for a in algorithms:
        s = dict(runs[a][0])  # the curve is the same in every round (checked below)
        for key in ("update_seconds_per_iteration", "sync_wait_seconds_per_iteration"):
            s[key + "_rounds"] = [r[key] for r in runs[a]]
            s[key] = statistics.median(s[key + "_rounds"])
        for r in runs[a][1:]:
            if [c["f_rerr"] for c in r["curve"]] != [c["f_rerr"] for c in s["curve"]]:
                print(f"note: {a}: the curve differs between rounds")
        summaries.append(s)
    rows = [{**{k: s[k] for k in ROW_KEYS}, "curve": [c["f_rerr"] for c in s["curve"]],
             "update_seconds_per_iteration_rounds": s["update_seconds_per_iteration_rounds"],
             "sync_wait_seconds_per_iteration_rounds": s["sync_wait_seconds_per_iteration_rounds"]}
            for s in summaries]
    print()
    print_table(summaries)
    spread = print_curves(summaries)
    gaps = [abs(s["test_accuracy"] - s["central_test_accuracy"]) for s in summaries]
    print(f"largest gap between consensus and central test accuracy: {100 * max(gaps):.2f} points")
    doc = {"command": " ".join(["scripts/compare-admm.sh"] + sys.argv[1:]),
           "repeats": args.repeats,
           "times": "median over the rounds of each run's mean per iteration; update: the longest rank's, "
                    "sync wait: the mean over the ranks",
           "config": os.path.relpath(CONFIG, ROOT),
           "reference_objective": summaries[0]["reference_objective"],
           "curve_spread": spread,
           "rows": rows}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"results: {os.path.relpath(args.output, ROOT)}")
    plot(summaries, os.path.splitext(args.output)[0] + ".png")


if __name__ == "__main__":
    main()
