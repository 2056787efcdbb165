#!/usr/bin/env bash
# The main job: trains the Fashion-MNIST MLP with 4 peers (one process each,
# ZeroMQ over loopback), first with Crossover-SGD, then with AllReduce-SGD,
# writes both JSON summaries to results/quickstart.json, and draws each run
# directory's report (gossamer-report) and the two runs side by side. Also
# builds the Python package in build/python (gossamer._core and, when
# libtorch-dev is found, gossamer._c10d), which PYTHONPATH=build/python imports.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-train
build="${GOSSAMER_BUILD_DIR:-$root/build}"
# The Python package's extensions, those this configuration has (none when
# GOSSAMER_BUILD_PYTHON is off or pybind11 is missing; no _c10d without
# libtorch-dev). Its pure-Python modules are copied at configure time.
targets_help="$(cmake --build "$build" --target help)"
python_targets=()
for target in gossamer_python_core gossamer_python_c10d; do
  if grep -qw "$target" <<<"$targets_help"; then python_targets+=("$target"); fi
done
if [ ${#python_targets[@]} -gt 0 ]; then
  gossamer_build --target "${python_targets[@]}"
fi

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
