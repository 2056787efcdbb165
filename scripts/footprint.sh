#!/usr/bin/env bash
# What Gossamer costs an embedding program, per build profile: the stripped
# size of libgossamer_c, and the resident memory, threads and sockets of a
# process with an idle agent and with one training a 100k-parameter model
# (bindings/c/examples/footprint.c; 2 ranks on loopback, zmq and socket).
# Profiles: full (the build directory, $GOSSAMER_BUILD_DIR or build/) and
# minimal (build-minimal/: no libfabric, Python, programs, tests, examples or
# benchmarks). Prints a table and writes results/footprint.json.
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
exec /usr/bin/python3 scripts/footprint.py "full=${GOSSAMER_BUILD_DIR:-$root/build}" "minimal=$root/build-minimal"
