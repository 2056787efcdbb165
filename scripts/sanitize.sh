#!/usr/bin/env bash
# Runs the unit and conformance suites under one of clang's sanitizers and
# reports every report it makes:
#
#   scripts/sanitize.sh thread  [catch2 test spec...]   (scripts/tsan.sh)
#   scripts/sanitize.sh address [catch2 test spec...]   (scripts/asan.sh)
#
# (default spec: every test but SimGrid's, whose actors switch stacks under
# the tools.)
#   thread   -fsanitize=thread in $GOSSAMER_TSAN_BUILD_DIR (default
#            build-tsan/): data races, lock-order inversions, the tool's
#            fatal messages. scripts/tsan.supp (libzmq and libsodium are not
#            instrumented). Writes results/tsan.json; about 33 minutes on 2
#            cores (a third of it the build).
#   address  -fsanitize=address,undefined with LeakSanitizer at each
#            process's exit, in $GOSSAMER_ASAN_BUILD_DIR (default
#            build-asan/), configured as the fuzz targets' build
#            (-DGOSSAMER_FUZZ=ON, -O1): out-of-bounds and use-after-free
#            accesses, leaks, undefined behaviour (which stops the process:
#            -fno-sanitize-recover=all). Writes results/asan.json; about 26
#            minutes on 2 cores busy with other work, the library objects
#            from ccache.
# Both build the SDK, the transports, the libraries of apps/ and the unit and
# conformance suites (no programs, Python or C ABI) with clang, and run each
# suite once. Each prints the suite's test result and report count, keeps
# the reports in <build>/sanitizer-logs/, and exits 1 if a suite failed or
# any report was made. It installs nothing: it needs clang (and, for
# address, libclang-rt-14-dev, which scripts/test.sh installs) besides what
# scripts/quickstart.sh installs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
usage="usage: scripts/sanitize.sh thread|address [catch2 test spec...]"
[ "$#" -ge 1 ] || { echo "$usage" >&2; exit 2; }
kind="$1"
shift
spec=("$@")
[ "${#spec[@]}" -gt 0 ] || spec=("~simgrid*")
case "$kind" in
  thread)
    short=tsan
    build="${GOSSAMER_TSAN_BUILD_DIR:-$root/build-tsan}"
    build_suites() {
      CC=clang CXX=clang++ CFLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
        CXXFLAGS="-fsanitize=thread -fno-omit-frame-pointer" LDFLAGS=-fsanitize=thread \
        GOSSAMER_BUILD_DIR="$build" GOSSAMER_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo \
-DGOSSAMER_APPS_LIBRARIES_ONLY=ON -DGOSSAMER_BUILD_EXAMPLES=OFF -DGOSSAMER_BUILD_BENCH=OFF \
-DGOSSAMER_BUILD_PYTHON=OFF -DGOSSAMER_BUILD_C=OFF -DGOSSAMER_TEST_SUITES=unit;conformance" \
        gossamer_build --target gossamer_unit_tests gossamer_conformance_tests
    }
    # A report, and the tool's fatal messages ("==PID==ThreadSanitizer: ...
    # Dying", exit code 66 as well): a child forked from a threaded process
    # that starts threads dies so, with that one line in its log file.
    reported='^WARNING: ThreadSanitizer|^==[0-9]+==ThreadSanitizer: '
    # suppress_equal_addresses=0: one report per racing pair of places, not
    # one per address (Catch2's shared state would otherwise hide all but one).
    options() {
      echo "TSAN_OPTIONS=halt_on_error=0 suppress_equal_addresses=0 second_deadlock_stack=1 exitcode=66 \
suppressions=$root/scripts/tsan.supp log_path=$1"
    }
    ;;
  address)
    short=asan
    build="${GOSSAMER_ASAN_BUILD_DIR:-$root/build-asan}"
    # The fuzz targets' configuration (-DGOSSAMER_FUZZ=ON: -O1, address and
    # undefined, no recovery), with the two suites: scripts/test.sh's
    # build-fuzz/ compiled the library's sources so, and ccache holds them.
    build_suites() {
      GOSSAMER_FUZZ_BUILD_DIR="$build" GOSSAMER_CMAKE_ARGS="-DGOSSAMER_TEST_SUITES=unit;conformance" \
        gossamer_build_fuzz gossamer_unit_tests gossamer_conformance_tests
    }
    # AddressSanitizer's and LeakSanitizer's errors, and undefined behaviour;
    # not the tool's warnings (a stack switch it cannot follow says
    # "==PID==WARNING: ASan is ignoring requested __asan_handle_no_return").
    reported='^==[0-9]+==ERROR: |: runtime error: '
    options() {
      echo "ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:log_path=$1"
      echo "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$1"
    }
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
for tool in clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "sanitize.sh: $tool is missing (apt-get install clang cmake)" >&2; exit 2; }
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
build_suites
scripts/spam-data.sh >/dev/null  # the sparse-data tests' files (data/spam), as scripts/test.sh makes them

logs="$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs" "$root/results"
failed=0
json="["
printf '%-12s %8s %8s %8s\n' suite tests reports seconds
for suite in unit conformance; do
  start=$SECONDS
  rc=0
  # Each process's reports go to its own file, <suite>.<pid> (a test that
  # runs a child reads the child's: tests/support/process.hpp).
  mapfile -t environment < <(options "$logs/$suite")
  env "${environment[@]}" "$build/tests/gossamer_${suite}_tests" "${spec[@]}" >"$logs/$suite.out" 2>&1 || rc=$?
  reports="$(cat "$logs/$suite".* 2>/dev/null | grep -cE "$reported" || true)"
  # The tool's exit code replaces Catch2's when it made reports: the tests'
  # own verdict is Catch2's summary line.
  tests=failed
  grep -q '^All tests passed' "$logs/$suite.out" && tests=passed
  printf '%-12s %8s %8s %8s\n' "$suite" "$tests" "$reports" "$((SECONDS - start))"
  if [ "$tests" != passed ] || [ "$reports" -ne 0 ]; then failed=1; fi
  json+="{\"suite\": \"$suite\", \"tests\": \"$tests\", \"exit_code\": $rc, \"reports\": $reports, \"seconds\": $((SECONDS - start))},"
done
json="${json%,}]"
head_now="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf '{"sanitizer": "%s", "commit": "%s", "head_at_end": "%s", "date": "%s", "spec": "%s", "suites": %s}\n' \
  "$kind" "$built" "$head_now" "$(date -u '+%Y-%m-%d %H:%M UTC')" "${spec[*]}" "$json" >"$root/results/$short.json"
[ "${built%-dirty}" = "$head_now" ] || echo "$short: HEAD moved from $built to $head_now during the run" >&2
echo "$short: reports in $logs/<suite>.<pid>, test output in $logs/<suite>.out; results/$short.json"
exit "$failed"
