#!/usr/bin/env bash
# gossamer-sparse with 3 processes for a few rounds, each model with the
# existing sparse method and with direct transmission: the two models must
# have the same CRC (bit for bit) and direct transmission must send fewer
# elements. Skips (77) without the SpamAssassin files (scripts/spam-data.sh).
#   tests/sparse_sync_methods.sh GOSSAMER_SPARSE SOURCE_DIR
set -euo pipefail
exe="$1"
src="$2"
# shellcheck source=support/spam_data.sh
source "$(dirname "${BASH_SOURCE[0]}")/support/spam_data.sh" "$src"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# What the ranks leave in TMPDIR when killed (ZeroMQ's ipc:// directories)
# goes with the test's own directory.
export TMPDIR="$work"
# Four runs of a few seconds each, each bounded so that all four fit in
# ctest's TIMEOUT (300 s): timeout(1) signals the run's process group (the
# program and the rank processes it starts), SIGKILL 5 s later.
for model in fm lr; do
  for method in existing direct; do
    timeout -k 5 60 "$exe" --config "$src/examples/configs/sparse/sparse-sync.yaml" \
      --summary-json "$work/$model-$method.json" \
      --set world_size=3 --set sparse.model=$model --set sparse.method=$method --set sparse.rounds=6 \
      --set sparse.batch_size=32 --set sparse.factors=4 --set "sparse.train=$data/spam-train.libsvm" \
      --set "sparse.test=$data/spam-test.libsvm" >"$work/$model-$method.out" 2>&1 || {
      status=$?
      echo "$model $method: gossamer-sparse exited with $status$([ $status = 124 ] && echo ' (still running after 60 s)'):"
      cat "$work/$model-$method.out"
      exit 1
    }
  done
  e="$work/$model-existing.json"
  d="$work/$model-direct.json"
  crc_e="$(jq -r .crc32c "$e")"
  crc_d="$(jq -r .crc32c "$d")"
  sent_e="$(jq '.elements_reduce + .elements_broadcast + .elements_direct' "$e")"
  sent_d="$(jq '.elements_reduce + .elements_broadcast + .elements_direct' "$d")"
  echo "$model: crc existing $crc_e direct $crc_d; elements existing $sent_e direct $sent_d"
  [ "$crc_e" = "$crc_d" ] || { echo "$model: the models differ"; exit 1; }
  [ "$sent_d" -lt "$sent_e" ] || { echo "$model: direct transmission sent no fewer elements"; exit 1; }
done
