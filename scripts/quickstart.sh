#!/usr/bin/env bash
# The main job: trains the Fashion-MNIST MLP with 4 peers (one process each,
# ZeroMQ over loopback), first with Crossover-SGD, then with AllReduce-SGD,
# writes both JSON summaries to results/quickstart.json, and draws each run
# directory's report (gossamer-report) and the two runs side by side.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-train
build="${GOSSAMER_BUILD_DIR:-$root/build}"

mkdir -p results
start=$(date +%s)
for algo in crossover allreduce; do
  echo "== ${algo}: examples/configs/quickstart-${algo}.yaml"
  "$build/apps/gossamer-train" --config "examples/configs/quickstart-${algo}.yaml" \
    --summary-json "results/quickstart-${algo}.json"
done
jq -s '.' results/quickstart-crossover.json results/quickstart-allreduce.json > results/quickstart.json
echo "== summaries (results/quickstart.json)"
jq -c '.[] | del(.history)' results/quickstart.json
jq -r '"Crossover-SGD " + ((.[0].test_accuracy*100*100|round)/100|tostring) + "% vs AllReduce-SGD "
       + ((.[1].test_accuracy*100*100|round)/100|tostring) + "% test accuracy (average model)"' \
  results/quickstart.json
echo "== both runs took $(( $(date +%s) - start )) s"
# Plots and a Markdown summary of each run directory, and the two overlaid.
crossover_dir="$(jq -r .run_dir results/quickstart-crossover.json)"
allreduce_dir="$(jq -r .run_dir results/quickstart-allreduce.json)"
echo "== gossamer-report $crossover_dir"
scripts/gossamer-report "$crossover_dir" | tail -n 1
scripts/gossamer-report "$allreduce_dir" | tail -n 1
echo "== gossamer-report --compare (results/quickstart-report)"
scripts/gossamer-report --compare "$crossover_dir" "$allreduce_dir" --labels Crossover-SGD,AllReduce-SGD \
  --out results/quickstart-report | tail -n 1
