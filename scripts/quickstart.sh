#!/usr/bin/env bash
# The main job: trains the Fashion-MNIST MLP with 4 peers (one process each,
# ZeroMQ over loopback), first with Crossover-SGD, then with AllReduce-SGD,
# and writes both JSON summaries to results/quickstart.json.
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
  "$build/examples/gossamer-train" --config "examples/configs/quickstart-${algo}.yaml" \
    --summary-json "results/quickstart-${algo}.json"
done
jq -s '.' results/quickstart-crossover.json results/quickstart-allreduce.json > results/quickstart.json
echo "== summaries (results/quickstart.json)"
jq -c '.[] | del(.history)' results/quickstart.json
jq -r '"Crossover-SGD " + ((.[0].test_accuracy*100*100|round)/100|tostring) + "% vs AllReduce-SGD "
       + ((.[1].test_accuracy*100*100|round)/100|tostring) + "% test accuracy (average model)"' \
  results/quickstart.json
echo "== both runs took $(( $(date +%s) - start )) s"
