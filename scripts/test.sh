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
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 600 || status=$?
phase "main suite done (status $status)"
if ! wait "$fuzz_build"; then
  tail -50 "$fuzz.log"
  echo "test.sh: the sanitizer build failed (log: $fuzz.log)" >&2
  exit 1
fi
phase "sanitizer build done"
ctest --test-dir "$fuzz" --output-on-failure -j "$(nproc)" --timeout 900 || status=$?
phase "fuzz corpora replayed (status $status)"
if ! wait "$cross_build"; then
  tail -50 "$cross.log"
  echo "test.sh: the aarch64 build failed (log: $cross.log)" >&2
  exit 1
fi
phase "aarch64 build done"
bash scripts/cross-test.sh aarch64 --unit || status=$?
phase "aarch64 unit suite done under qemu-aarch64 (status $status)"
exit "$status"
