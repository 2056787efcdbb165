#!/usr/bin/env bash
# What Gossamer costs an embedding program, per build profile: the stripped
# size of libgossamer_c, and the resident memory, threads and sockets of a
# process with an idle agent and with one training a 100k-parameter model
# (bindings/c/examples/footprint.c; 2 ranks on loopback, zmq and socket).
# Profiles: full (the build directory, $GOSSAMER_BUILD_DIR or build/) and
# minimal (build-minimal/: no libfabric, Python, programs, tests, examples or
# benchmarks), each also cross-built for aarch64 (build-aarch64-full/ with
# libfabric, build-aarch64-minimal/ without; neither has Python, which is not
# part of libgossamer_c) and run under qemu-aarch64. Prints a table and writes
# results/footprint.json.
#   scripts/footprint.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer_c gossamer_c_footprint
GOSSAMER_BUILD_DIR="$root/build-minimal" \
  GOSSAMER_CMAKE_ARGS="-DGOSSAMER_WITH_LIBFABRIC=OFF -DGOSSAMER_BUILD_PYTHON=OFF -DGOSSAMER_BUILD_TESTS=OFF \
-DGOSSAMER_BUILD_APPS=OFF -DGOSSAMER_BUILD_EXAMPLES=OFF -DGOSSAMER_BUILD_BENCH=OFF" \
  gossamer_build --target gossamer_c gossamer_c_footprint
gossamer_install_cross_deps
library_only=(-DGOSSAMER_BUILD_PYTHON=OFF -DGOSSAMER_BUILD_TESTS=OFF -DGOSSAMER_BUILD_APPS=OFF
  -DGOSSAMER_BUILD_EXAMPLES=OFF -DGOSSAMER_BUILD_BENCH=OFF)
gossamer_build_cross "$root/build-aarch64-full" gossamer_c gossamer_c_footprint -- \
  -DGOSSAMER_WITH_LIBFABRIC=ON "${library_only[@]}"
gossamer_build_cross "$root/build-aarch64-minimal" gossamer_c gossamer_c_footprint -- \
  -DGOSSAMER_WITH_LIBFABRIC=OFF "${library_only[@]}"
exec /usr/bin/python3 scripts/footprint.py "full=${GOSSAMER_BUILD_DIR:-$root/build}" "minimal=$root/build-minimal" \
  "full=$root/build-aarch64-full" "minimal=$root/build-aarch64-minimal"
