#!/usr/bin/env bash
# Runs the unit and conformance suites under ThreadSanitizer and reports
# every data race, lock-order inversion or other report it makes:
#
#   scripts/tsan.sh [catch2 test spec...]   (default: every test but SimGrid's)
#
# Configures $GOSSAMER_TSAN_BUILD_DIR (default build-tsan/) with clang and
# -fsanitize=thread: the SDK, the transports, the libraries of apps/ and the
# unit and conformance suites (no programs, Python or C ABI). Runs each suite
# once with scripts/tsan.supp (libzmq and libsodium are not instrumented);
# SimGrid's tests are left out by default, since its actors switch stacks
# under the tool. Prints each suite's test result and report count, keeps
# the reports in <build>/tsan-logs/, writes results/tsan.json, and exits 1
# if a suite failed or any report was made. Takes about 25 minutes on 2
# cores (a third of it the build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${GOSSAMER_TSAN_BUILD_DIR:-$root/build-tsan}"
spec=("$@")
[ "${#spec[@]}" -gt 0 ] || spec=("~simgrid*")
for tool in clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "tsan.sh: $tool is missing (apt-get install clang cmake)" >&2; exit 2; }
done

# deps.sh's build: configured once (Ninja and ccache when installed), the
# compilers and flags from the environment, which CMake reads at that first
# configure.
# The commit the binaries are built from, taken before the build (-dirty
# with uncommitted changes to tracked files); the json also says whether
# HEAD moved while the suites ran.
built="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ "$built" = unknown ] || git diff --quiet HEAD -- 2>/dev/null || built="$built-dirty"
source scripts/deps.sh
CC=clang CXX=clang++ CFLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  CXXFLAGS="-fsanitize=thread -fno-omit-frame-pointer" LDFLAGS=-fsanitize=thread \
  GOSSAMER_BUILD_DIR="$build" GOSSAMER_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo \
-DGOSSAMER_APPS_LIBRARIES_ONLY=ON -DGOSSAMER_BUILD_EXAMPLES=OFF -DGOSSAMER_BUILD_BENCH=OFF \
-DGOSSAMER_BUILD_PYTHON=OFF -DGOSSAMER_BUILD_C=OFF -DGOSSAMER_TEST_SUITES=unit;conformance" \
  gossamer_build --target gossamer_unit_tests gossamer_conformance_tests
scripts/spam-data.sh >/dev/null  # the sparse-data tests' files (data/spam), as scripts/test.sh makes them

logs="$build/tsan-logs"
rm -rf "$logs"
mkdir -p "$logs" "$root/results"
failed=0
json="["
printf '%-12s %8s %8s %8s\n' suite tests reports seconds
for suite in unit conformance; do
  start=$SECONDS
  rc=0
  # suppress_equal_addresses=0: one report per racing pair of places, not
  # one per address (Catch2's shared state would otherwise hide all but one).
  TSAN_OPTIONS="halt_on_error=0 suppress_equal_addresses=0 second_deadlock_stack=1 exitcode=66 \
suppressions=$root/scripts/tsan.supp log_path=$logs/$suite" \
    "$build/tests/gossamer_${suite}_tests" "${spec[@]}" >"$logs/$suite.out" 2>&1 || rc=$?
  # Reports, and the tool's fatal messages ("==PID==ThreadSanitizer: ...
  # Dying", exit code 66 as well): a child forked from a threaded process
  # that starts threads dies so, with that one line in its log file.
  reports="$(cat "$logs/$suite".* 2>/dev/null | grep -cE '^WARNING: ThreadSanitizer|^==[0-9]+==ThreadSanitizer: ' \
    || true)"
  # The tool's exit code (66) replaces Catch2's when it made reports: the
  # tests' own verdict is Catch2's summary line.
  tests=failed
  grep -q '^All tests passed' "$logs/$suite.out" && tests=passed
  printf '%-12s %8s %8s %8s\n' "$suite" "$tests" "$reports" "$((SECONDS - start))"
  if [ "$tests" != passed ] || [ "$reports" -ne 0 ]; then failed=1; fi
  json+="{\"suite\": \"$suite\", \"tests\": \"$tests\", \"exit_code\": $rc, \"reports\": $reports, \"seconds\": $((SECONDS - start))},"
done
json="${json%,}]"
head_now="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf '{"commit": "%s", "head_at_end": "%s", "date": "%s", "spec": "%s", "suites": %s}\n' \
  "$built" "$head_now" "$(date -u '+%Y-%m-%d %H:%M UTC')" "${spec[*]}" "$json" >"$root/results/tsan.json"
[ "${built%-dirty}" = "$head_now" ] || echo "tsan: HEAD moved from $built to $head_now during the run" >&2
echo "tsan: reports in $logs/<suite>.<pid>, test output in $logs/<suite>.out; results/tsan.json"
exit "$failed"
