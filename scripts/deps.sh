#!/usr/bin/env bash
# Installs the Debian packages Gossamer needs, if any are missing (Debian 12).
# Sourced by scripts/quickstart.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail

GOSSAMER_PACKAGES=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev libfabric-dev libeigen3-dev libyaml-cpp-dev zlib1g-dev
  catch2 libcli11-dev nlohmann-json3-dev jq
  dataset-fashion-mnist
  python3-dev python3-numpy python3-torch python3-pybind11 pybind11-dev python3-pytest openmpi-bin
)
# What only the test suite needs (scripts/test.sh): clang and its libFuzzer
# runtime (libclang_rt.fuzzer-x86_64.a) for the fuzz targets of tests/fuzz.
GOSSAMER_TEST_PACKAGES=(clang libclang-rt-14-dev)

# Installs the packages of GOSSAMER_PACKAGES and the lists named as arguments
# (e.g. GOSSAMER_TEST_PACKAGES) that are missing.
gossamer_install_deps() {
  local missing=()
  local p list wanted=("${GOSSAMER_PACKAGES[@]}")
  for list in "$@"; do
    local -n extra="$list"
    wanted+=("${extra[@]}")
  done
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "gossamer: installing missing packages: ${missing[*]}" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "gossamer: not root and no sudo; install: ${missing[*]}" >&2
      return 1
    fi
  fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Configures (once) and builds the tree in $GOSSAMER_BUILD_DIR (default build/).
gossamer_build() {
  local root build
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  build="${GOSSAMER_BUILD_DIR:-$root/build}"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$build" -j "$(nproc)" "$@"
}

# Configures (once, with clang and GOSSAMER_FUZZ=ON) and builds the fuzz
# targets in $GOSSAMER_FUZZ_BUILD_DIR (default build-fuzz/).
gossamer_build_fuzz() {
  local root build
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  build="${GOSSAMER_FUZZ_BUILD_DIR:-$root/build-fuzz}"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DGOSSAMER_FUZZ=ON -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$build" -j "$(nproc)" --target gossamer_fuzzers "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  gossamer_install_deps
fi
