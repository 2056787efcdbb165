#!/usr/bin/env bash
# Runs one file of examples/configs briefly (one epoch on a slice of
# Fashion-MNIST) and checks that it trained: gossamer-train exits 0, rank 0's
# summary names the config's algorithm and world size, and the average
# model's test accuracy is well above chance (10 classes).
# Usage: run_example_config.sh GOSSAMER_TRAIN CONFIG.yaml
set -euo pipefail
train="$1"
config="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
overrides=(--set training.epochs=1 --set data.train_limit=4000 --set data.test_limit=1000)
if [ -n "${GOSSAMER_FASHION_MNIST:-}" ]; then overrides+=(--set "data.path=$GOSSAMER_FASHION_MNIST"); fi
timeout -k 10 240 "$train" --config "$config" "${overrides[@]}" --summary-json "$work/summary.json" >"$work/out" 2>&1 || {
  echo "gossamer-train failed on $config:"
  cat "$work/out"
  exit 1
}
want_algorithm="$(awk '/^algorithm:/{a=1} a&&/^  name:/{print $2; exit}' "$config")"
want_world="$(awk '/^world_size:/{print $2; exit}' "$config")"
jq -e --arg algorithm "${want_algorithm:-crossover_sgd}" --argjson world "${want_world:-4}" \
  '.algorithm == $algorithm and .world_size == $world and .epochs == 1 and .test_accuracy > 0.4' \
  "$work/summary.json" >/dev/null || {
  echo "$config did not train as expected (want ${want_algorithm:-crossover_sgd} on ${want_world:-4} ranks, accuracy > 0.4):"
  jq -c 'del(.history)' "$work/summary.json"
  exit 1
}
jq -r '"'"$(basename "$config")"': " + .algorithm + " on " + (.world_size|tostring) + " ranks, test accuracy " + (.test_accuracy*100|tostring) + "%"' "$work/summary.json"
