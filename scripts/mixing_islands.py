#!/usr/bin/python3
"""Expected mixing of the fair and the bandwidth-aware roulette on two islands.

Runs build/apps/gossamer-topology on 8 ranks in two islands of 4
(network.islands [[0,1,2,3],[4,5,6,7]], 10 Gbit/s inside, 0.1 Gbit/s
between), 4 segments of the MLP, seed 42, E[W] estimated over --rounds rounds:

  once for 12 steps with the default exponent (1), keeping its output;
  once per exponent (--exponents, default 0,0.5,1,2) for 1 step, keeping the
  last table's rows: slem, gap, ms_rate, ms_avg, cross, cross_stderr,
  messages_per_rank, exact_gap and exact_cross (null where not computed).

For each exponent's row (and the fair roulette's, from the first exponent's
run) it also models the time a rank takes to send its segments one after
the other at its link's rate, without contention: segments per round x
(cross x segment_bytes / between + (1 - cross) x segment_bytes / inside),
segment_bytes 100 kB (the MLP's 407 kB in 4 segments), the exact share where
there is one.

Writes results/mixing-islands.json: arguments (of the 12-step run), output
(its stdout), inside_gbps, between_gbps, segment_bytes, and rows (topology,
bandwidth_exponent (null for the fair roulette), the fields above,
modelled_send_seconds).

    scripts/mixing-islands.sh [--rounds 20000] [--exponents 0,0.5,1,2] [--out FILE]
"""
import argparse
import json
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
ISLANDS = "[[0,1,2,3],[4,5,6,7]]"
BETWEEN_GBPS = 0.1
SEGMENT_BYTES = 100e3
FIELDS = ["slem", "gap", "ms_rate", "ms_avg", "cross", "cross_stderr", "messages_per_rank", "exact_gap", "exact_cross"]


def arguments(steps, rounds, exponent=None):
    args = ["--world-size", "8", "--steps", str(steps), "--segments", "4", "--seed", "42",
            "--set", f"network.islands={ISLANDS}", "--set", f"network.between_gbps={BETWEEN_GBPS:g}",
            "--set", "topology.kind=bandwidth_roulette"]
    if exponent is not None:
        args += ["--set", f"topology.bandwidth_exponent={exponent:g}"]
    return args + ["--topology", "fair_roulette,bandwidth_roulette", "--expected", str(rounds)]


def topology(args):
    exe = os.path.join(BUILD, "apps", "gossamer-topology")
    if not os.path.exists(exe):
        raise SystemExit(f"{exe} is not built")
    return subprocess.run([exe] + args, cwd=ROOT, capture_output=True, text=True, check=True).stdout


def expected_rows(output):
    """topology -> the fields of the expected-mixing table at the end of the output."""
    lines = output.splitlines()
    head = max(i for i, line in enumerate(lines) if line.startswith("topology") and "exact gap" in line)
    rows = {}
    for line in lines[head + 1:]:
        cells = line.split()
        if len(cells) != len(FIELDS) + 1:
            break
        rows[cells[0]] = {k: None if v == "-" else float(v) for k, v in zip(FIELDS, cells[1:])}
    return rows


def rates(output):
    """(inside, between) Gbit/s as the output states them."""
    m = re.search(r"([0-9.e+-]+) Gbit/s inside, ([0-9.e+-]+) between", output)
    if not m:
        raise SystemExit("gossamer-topology's output names no link rates")
    return float(m.group(1)), float(m.group(2))


def modelled(row, inside, between):
    cross = row["exact_cross"] if row["exact_cross"] is not None else row["cross"]
    per_byte = cross / (between * 1e9 / 8) + (1 - cross) / (inside * 1e9 / 8)
    return row["messages_per_rank"] * SEGMENT_BYTES * per_byte


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20000, help="rounds E[W] is estimated over")
    ap.add_argument("--exponents", default="0,0.5,1,2")
    ap.add_argument("--out", default="results/mixing-islands.json")
    args = ap.parse_args()
    main_args = arguments(12, args.rounds)
    output = topology(main_args)
    inside, between = rates(output)
    rows = []
    for k, exponent in enumerate(float(e) for e in args.exponents.split(",")):
        found = expected_rows(topology(arguments(1, args.rounds, exponent)))
        if k == 0:
            rows.append({"topology": "fair_roulette", "bandwidth_exponent": None, **found["fair_roulette"]})
        rows.append({"topology": "bandwidth_roulette", "bandwidth_exponent": exponent, **found["bandwidth_roulette"]})
    for row in rows:
        row["modelled_send_seconds"] = modelled(row, inside, between)
    doc = {"arguments": main_args, "output": output, "inside_gbps": inside, "between_gbps": between,
           "segment_bytes": SEGMENT_BYTES, "rows": rows}
    path = os.path.join(ROOT, args.out)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for row in rows:
        print(f"{row['topology']:<20} {'' if row['bandwidth_exponent'] is None else row['bandwidth_exponent']:>5} "
              f"gap {row['exact_gap'] if row['exact_gap'] is not None else row['gap']:.4g}  "
              f"cross {row['exact_cross'] if row['exact_cross'] is not None else row['cross']:.4g}  "
              f"send {1e3 * row['modelled_send_seconds']:.2f} ms")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
