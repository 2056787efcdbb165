#!/usr/bin/env bash
# Trains one config briefly over two transports and checks that they give the
# same run: every epoch's training loss, consensus distance and test accuracy
# (average model and rank 0) equal to the last bit. A transport delivers bytes;
# it must not change what is learned.
# Usage: compare_transports.sh GOSSAMER_TRAIN CONFIG.yaml KIND_A KIND_B [KEY=VALUE...]
# The KEY=VALUE overrides apply to the KIND_B run only (its transport keys).
set -euo pipefail
train="$1"
config="$2"
kind_a="$3"
kind_b="$4"
shift 4
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--set training.epochs=2 --set data.train_limit=4000 --set data.test_limit=1000)
if [ -n "${GOSSAMER_FASHION_MNIST:-}" ]; then common+=(--set "data.path=$GOSSAMER_FASHION_MNIST"); fi
extra=()
for kv in "$@"; do extra+=(--set "$kv"); done
run() {
  local name="$1"
  shift
  timeout -k 10 240 "$train" --config "$config" "${common[@]}" "$@" --summary-json "$work/$name.json" >"$work/$name.out" 2>&1 || {
    echo "gossamer-train failed over $name:"
    cat "$work/$name.out"
    exit 1
  }
}
run "$kind_a" --set "transport.kind=$kind_a"
run "$kind_b" --set "transport.kind=$kind_b" "${extra[@]}"
fields='[.transport, [.history[] | [.train_loss, .consensus_distance, .test_accuracy, .test_accuracy_rank0]]]'
a="$(jq -c "$fields" "$work/$kind_a.json")"
b="$(jq -c "$fields" "$work/$kind_b.json")"
# Each ran over its own transport and has both epochs: two empty histories would compare equal.
for one in "$kind_a:$a" "$kind_b:$b"; do
  jq -e --arg kind "${one%%:*}" '.[0] == $kind and (.[1] | length) == 2' <<<"${one#*:}" >/dev/null || {
    echo "the run over ${one%%:*} is not two epochs over that transport: ${one#*:}"
    exit 1
  }
done
if [ "$(jq -c '.[1]' <<<"$a")" != "$(jq -c '.[1]' <<<"$b")" ]; then
  echo "the runs differ:"
  echo "  $a"
  echo "  $b"
  exit 1
fi
echo "$kind_a and $kind_b: the same loss, consensus distance and accuracies in every epoch: $(jq -c '.[1]' <<<"$a")"
