#!/usr/bin/env bash
# Cross build and test for 64-bit Arm under user-mode emulation, on an x86-64
# Debian 12 machine:
#   scripts/cross-test.sh aarch64          the unit and conformance suites, then
#                                          the quickstart's 4-process job
#   scripts/cross-test.sh aarch64 --unit   the unit suite only (scripts/test.sh)
#   --build-only                           with either: build, run nothing
# Installs what is missing (scripts/deps.sh, gossamer_install_cross_deps):
# Debian's cross compiler, qemu-user-static, and the libraries as multiarch
# :arm64 packages (adding the arm64 architecture to dpkg first). Registers qemu-aarch64 with the
# kernel's binfmt_misc when it is not registered yet (mounting binfmt_misc if
# needed): a process that starts another aarch64 program, as gossamer-train's
# launcher and the multi-process tests do, needs it; the unit suite does not.
# Builds in build-aarch64/ ($GOSSAMER_CROSS_BUILD_DIR) with
# cmake/toolchains/aarch64-linux-gnu.cmake (libfabric included; no Python,
# examples or benchmarks), and runs the tests with ctest, which starts each through
# qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR). Exits non-zero when a build,
# a test or the job fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh

arch="${1:-}"
mode=all
build_only=0
if [ "$arch" != aarch64 ]; then
  echo "usage: scripts/cross-test.sh aarch64 [--unit] [--build-only]" >&2
  exit 2
fi
shift
for option in "$@"; do
  case "$option" in
    --unit) mode=--unit ;;
    --build-only) build_only=1 ;;
    *)
      echo "cross-test.sh: unknown option '$option' (--unit, --build-only)" >&2
      exit 2
      ;;
  esac
done
start=$(date +%s)
phase() { echo "cross-test.sh: $1 at $(($(date +%s) - start)) s"; }

sudo=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
# shellcheck disable=SC2034  # read by name (gossamer_install_cross_deps)
GOSSAMER_CROSS_BUILD_TOOLS=(ninja-build ccache)
gossamer_install_cross_deps GOSSAMER_CROSS_BUILD_TOOLS
# The sparse data of apps/sparse, which unit tests read (as scripts/test.sh).
scripts/spam-data.sh >/dev/null
phase "dependencies and data ready"

# binfmt_misc: the kernel hands aarch64 ELF files to qemu-aarch64, so that an
# exec of one (the launcher's ranks) works as it does on the real machine.
register_binfmt() {
  local dir=/proc/sys/fs/binfmt_misc
  [ -e "$dir/qemu-aarch64" ] && return 0
  if [ ! -e "$dir/register" ]; then
    $sudo mount -t binfmt_misc binfmt_misc "$dir" 2>/dev/null || return 1
  fi
  [ -e "$dir/qemu-aarch64" ] && return 0
  # qemu-user-static's rule: the aarch64 ELF header, the static qemu, flag F
  # (the interpreter is opened now, so it works in other mount namespaces).
  grep -v '^#' /usr/lib/binfmt.d/qemu-aarch64.conf | $sudo tee "$dir/register" >/dev/null || return 1
  [ -e "$dir/qemu-aarch64" ]
}
if [ "$mode" = all ] && [ "$build_only" = 0 ]; then
  if ! register_binfmt; then
    echo "cross-test.sh: cannot register qemu-aarch64 with binfmt_misc (needs root);" \
      "the conformance suite and the job start aarch64 processes and need it" >&2
    exit 1
  fi
fi

build="${GOSSAMER_CROSS_BUILD_DIR:-$root/build-aarch64}"
suites="unit"
targets=(gossamer_unit_tests)
if [ "$mode" = all ]; then
  suites="unit;conformance"
  targets+=(gossamer_conformance_tests gossamer-train)
fi
gossamer_build_cross "$build" "${targets[@]}" -- -DGOSSAMER_WITH_LIBFABRIC=ON -DGOSSAMER_BUILD_PYTHON=OFF \
  -DGOSSAMER_BUILD_BENCH=OFF -DGOSSAMER_BUILD_EXAMPLES=OFF "-DGOSSAMER_TEST_SUITES=$suites"
phase "aarch64 build done"
[ "$build_only" = 1 ] && exit 0

status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 900 -R "^unit:" || status=$?
phase "unit suite done under qemu-aarch64 (status $status)"
if [ "$mode" = all ]; then
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 900 -R "^conformance:" || status=$?
  phase "conformance suite done under qemu-aarch64 (status $status)"
  # The main job: 4 processes, ZeroMQ on loopback, Crossover-SGD, through
  # the launcher, which execs the aarch64 program once per rank. Emulated,
  # rank 0's evaluation of the average model at an epoch's end takes longer
  # than the config's 30 s receive timeout that the other ranks wait in.
  mkdir -p results
  summary="results/cross-aarch64-quickstart.json"
  rm -f "$summary"
  "$build/apps/gossamer-train" --config examples/configs/quickstart-crossover.yaml \
    --set transport.timeout_seconds=600 --summary-json "$summary" || status=$?
  # The x86-64 run reaches 85.9%; a broken kernel or exchange lands far below.
  if [ -f "$summary" ]; then
    jq -r '"aarch64 quickstart: " + .algorithm + ", " + (.world_size|tostring) + " ranks: test accuracy "
           + ((.test_accuracy*100*100|round)/100|tostring) + "%"' "$summary"
    jq -e '.world_size == 4 and .test_accuracy >= 0.80' "$summary" >/dev/null || {
      echo "cross-test.sh: the aarch64 job did not reach 80% test accuracy with 4 ranks" >&2
      status=1
    }
  else
    status=1
  fi
  phase "4-process quickstart job done under qemu-aarch64 (status $status)"
fi
exit "$status"
