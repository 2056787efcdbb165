#!/usr/bin/env bash
# The quickstart job (Crossover-SGD, 4 segments, the MLP, 3 epochs) on 8 test
# hosts in two islands of 4 (scripts/hosts.sh, tests/hosts/two-islands.yaml:
# 10 Gbit/s inside, 100 Mbit/s and 20 ms between), once per topology: the
# fair roulette, the fair roulette without the 20 ms, and the bandwidth
# roulette at exponents 0.5 and 1 (docs/hosts.md, docs/mixing.md). Writes
# results/islands-training.json: {"rows": [...]}, one row per run with
# topology, bandwidth_exponent (null for the fair roulette), island_delay
# (whether the 20 ms were added) and summary (rank 0's gossamer-train
# summary). Needs root; exits 77 where the namespaces cannot be made.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out=results/islands-training.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # NAME, then the --set options of the run
  local name=$1
  shift
  echo "== $name"
  scripts/hosts.sh --summary-json "$work/$name.json" "$@"
}
run fair_roulette
run fair_roulette-no-delay --set faults.island_delay=false
run bandwidth_roulette-0.5 --set topology.kind=bandwidth_roulette --set topology.bandwidth_exponent=0.5
run bandwidth_roulette-1 --set topology.kind=bandwidth_roulette --set topology.bandwidth_exponent=1

mkdir -p results
/usr/bin/python3 - "$work" "$out" <<'PY'
import json, os, sys
work, out = sys.argv[1:]
runs = [("fair_roulette", "fair_roulette", None, True), ("fair_roulette-no-delay", "fair_roulette", None, False),
        ("bandwidth_roulette-0.5", "bandwidth_roulette", 0.5, True), ("bandwidth_roulette-1", "bandwidth_roulette", 1, True)]
rows = []
for name, topology, exponent, delay in runs:
    with open(os.path.join(work, name + ".json")) as f:
        rows.append({"topology": topology, "bandwidth_exponent": exponent, "island_delay": delay, "summary": json.load(f)})
with open(out, "w") as f:
    json.dump({"rows": rows}, f, indent=1)
    f.write("\n")
PY
echo "wrote $out"
