#!/usr/bin/env bash
# The whole test suite (what CI runs: .ci/run). Three builds:
#   build/       gcc, Release: the library, the programs, the examples, the
#                Python package and the unit, conformance and multi-process
#                suites; its ctest runs them with the programs', Python's and
#                the lint cases;
#   build-fuzz/  clang with the address and undefined-behaviour sanitizers:
#                the fuzz targets, whose ctest replays every fuzz corpus;
#   build-aarch64/  Debian's aarch64 cross compiler: the unit suite, run
#                under qemu-aarch64 (scripts/cross-test.sh aarch64 --unit).
# The sanitizer and aarch64 builds compile, one after the other, while the
# main build's tests run (they wait on sockets and timers more than they
# compute). With ccache installed (deps.sh
# installs it), sources compiled before, in any clone, come from its cache.
# Every phase prints when it ended. Timed fuzzing is scripts/fuzz.sh's; the
# unit and conformance suites under the sanitizers are scripts/asan.sh's and
# scripts/tsan.sh's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
start=$(date +%s)
phase() { echo "test.sh: $1 at $(($(date +%s) - start)) s"; }
gossamer_install_cross_deps GOSSAMER_TEST_PACKAGES
# The sparse data of apps/sparse (npm corpus -> LIBSVM; its tests read it when present).
scripts/spam-data.sh >/dev/null
phase "dependencies and data ready"
build="${GOSSAMER_BUILD_DIR:-$root/build}"
fuzz="${GOSSAMER_FUZZ_BUILD_DIR:-$root/build-fuzz}"
gossamer_build
phase "main build done"
cross="${GOSSAMER_CROSS_BUILD_DIR:-$root/build-aarch64}"
gossamer_build_fuzz >"$fuzz.log" 2>&1 &
fuzz_build=$!
{ while kill -0 "$fuzz_build" 2>/dev/null; do sleep 1; done
  bash scripts/cross-test.sh aarch64 --unit --build-only; } >"$cross.log" 2>&1 &
cross_build=$!
status=0
# Each suite's output is kept, so that the end of the run (all that a CI log
# may show) can repeat what failed: each failed case's output's end, then the names.
logs=()
suite() {  # suite LOG ctest-arguments...: runs ctest, its output also to LOG
  local log="$1" rc=0
  shift
  logs+=("$log")
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  return "$rc"
}
report_failures() {
  local log
  for log in "${logs[@]}"; do
    grep -qE '[*]{3}|  Failed  ' "$log" || continue
    # The last 40 lines of each failed case's own output, then the names.
    awk 'function flush(  i) {
           for (i = (n > 40 ? n - 40 : 0); keep && i < n; i++) print buf[i]
           keep = 0; n = 0
         }
         /^ *[0-9]+\/[0-9]+ Test +#/ { flush(); if ($0 ~ /\*\*\*|  Failed  /) { keep = 1; print } next }
         /^ +Start +[0-9]+:/ || /^[0-9]+% tests passed/ { flush(); next }
         keep { buf[n++] = $0 }
         END { flush() }' "$log"
    echo "test.sh: failed in $log (their outputs' ends above):"
    grep -E '^ *[0-9]+/[0-9]+ Test +#.*([*]{3}|  Failed  )' "$log" || true
  done
}
suite "$build/ctest-main.log" --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 600 || status=$?
phase "main suite done (status $status)"
if ! wait "$fuzz_build"; then
  tail -50 "$fuzz.log"
  echo "test.sh: the sanitizer build failed (log: $fuzz.log)" >&2
  [ "$status" -eq 0 ] || report_failures
  exit 1
fi
phase "sanitizer build done"
suite "$fuzz/ctest-fuzz.log" --test-dir "$fuzz" --output-on-failure -j "$(nproc)" --timeout 900 || status=$?
phase "fuzz corpora replayed (status $status)"
if ! wait "$cross_build"; then
  tail -50 "$cross.log"
  echo "test.sh: the aarch64 build failed (log: $cross.log)" >&2
  [ "$status" -eq 0 ] || report_failures
  exit 1
fi
phase "aarch64 build done"
bash scripts/cross-test.sh aarch64 --unit || status=$?
phase "aarch64 unit suite done under qemu-aarch64 (status $status)"
[ "$status" -eq 0 ] || report_failures
exit "$status"
