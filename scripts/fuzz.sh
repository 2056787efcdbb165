#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) in a sanitizer build and runs each
# for a while, several at once (up to nproc):
#
#   scripts/fuzz.sh [seconds]     (default 30; e.g. scripts/fuzz.sh 600)
#
# Configures $GOSSAMER_FUZZ_BUILD_DIR (default build-fuzz/) with clang and
# -DGOSSAMER_FUZZ=ON when it is not configured yet. Each target starts from
# a copy of its seed corpus (tests/fuzz/corpus/<target>/; the copy, with what
# the fuzzer adds, is in <build>/fuzz-work/<target>/). Prints a table (target,
# seconds, execs, result), writes results/fuzz.json, and exits 1 if a target
# found a crash: its input is in <build>/crashes/<target>/, and the script
# says how to keep it in the corpus.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-30}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [seconds]  (a whole number >= 1; default 30)" >&2
  exit 2
fi
build="${GOSSAMER_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="$(nproc)"

source scripts/deps.sh
GOSSAMER_FUZZ_BUILD_DIR="$build" gossamer_build_fuzz

targets=()
for src in "$root"/tests/fuzz/fuzz_*.cpp; do
  t="$(basename "$src" .cpp)"
  targets+=("$t")
done

logs="$build/fuzz-logs"
mkdir -p "$logs"
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, ${jobs} at a time (logs in $logs)"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  (
    rc=0
    bash "$root/tests/fuzz/run_fuzzer.sh" "$build/tests/fuzz/$t" "$seconds" "$build/fuzz-work/$t" \
      "$root/tests/fuzz/corpus/$t" "$build/crashes/$t" >"$logs/$t.log" 2>&1 || rc=$?
    echo "$rc" >"$logs/$t.rc"
  ) &
  running=$((running + 1))
done
wait

mkdir -p "$root/results"
failed=0
json="["
printf '%-20s %8s %12s %10s  %s\n' target seconds execs execs/s result
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  rc="$(cat "$logs/$t.rc")"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  ran="$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)"
  if [ "$rc" -eq 0 ]; then
    result=clean
  else
    result="crash (exit $rc)"
    failed=1
  fi
  printf '%-20s %8s %12s %10s  %s\n' "$t" "${ran:-?}" "${execs:-?}" "${rate:-?}" "$result"
  [ "$json" = "[" ] || json+=","
  json+="{\"target\":\"$t\",\"seconds\":${ran:-null},\"execs\":${execs:-null},\"execs_per_second\":${rate:-null},"
  json+="\"clean\":$([ "$rc" -eq 0 ] && echo true || echo false),\"exit\":$rc}"
done
json+="]"
echo "{\"seconds_each\":$seconds,\"targets\":$json}" >"$root/results/fuzz.json"
echo "wrote results/fuzz.json"

if [ "$failed" -ne 0 ]; then
  echo
  echo "A target found a crash; its input is in $build/crashes/<target>/ (see $logs/<target>.log)."
  echo "Reproduce it:   $build/tests/fuzz/<target> $build/crashes/<target>/crash-<sha1>"
  echo "Fix the decoder, then keep the input as a regression test:"
  echo "  cp $build/crashes/<target>/crash-<sha1> tests/fuzz/corpus/<target>/"
  exit 1
fi
