#!/usr/bin/env bash
# Collects the Debian 12 (amd64) packages that the GPU machine lacks into
# .device/debs/ (git-ignored), for scripts/device-check.sh to unpack there.
#
# The GPU machine (the `device` tool's, docs/python.md) has Python 3.12,
# torch 2.x with CUDA, pybind11, CMake and ninja, and reaches no package
# registry: ZeroMQ, yaml-cpp, libsodium, libfabric, the header-only
# libraries and the Fashion-MNIST data travel with the working tree as .deb
# files, which device-check.sh unpacks with `dpkg -x` into a private prefix
# (never into /). About 37 MB, of which the data set is 31 MB.
#
#     scripts/device-deps.sh            # downloads what .device/debs lacks
#     scripts/device-deps.sh --list     # prints the package names
#
# Then, through the device tool:  run(command="bash scripts/device-check.sh",
#                                     carry=[".device"])
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.device/debs"

# Build headers and CMake configs, the shared libraries the build links and
# their own run-time dependencies (libzmq5: norm, pgm, sodium, bsd;
# libfabric1: verbs, rdmacm, psm2 and the netlink libraries verbs loads),
# and the data set of the CNN example.
GOSSAMER_DEVICE_PACKAGES=(
  libzmq3-dev libzmq5 cppzmq-dev libsodium-dev libsodium23 libnorm1 libpgm-5.3-0 libbsd0 libmd0
  libyaml-cpp-dev libyaml-cpp0.7 libeigen3-dev nlohmann-json3-dev libcli11-dev
  libdeflate-dev libdeflate0 zlib1g-dev libisal-dev libisal2
  libfabric-dev libfabric1 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200
  dataset-fashion-mnist
)

if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${GOSSAMER_DEVICE_PACKAGES[@]}"
  exit 0
fi
if [ "$(dpkg --print-architecture)" != amd64 ]; then
  echo "device-deps: the GPU machine is x86-64; run this on an amd64 Debian 12 machine" >&2
  exit 1
fi

mkdir -p "$DEST"
missing=()
for p in "${GOSSAMER_DEVICE_PACKAGES[@]}"; do
  compgen -G "$DEST/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # apt-get download writes into the current directory; as root it warns that
  # the _apt user cannot write there, which is harmless.
  (cd "$DEST" && apt-get download "${missing[@]}")
fi
echo "device-deps: ${#GOSSAMER_DEVICE_PACKAGES[@]} packages in $DEST ($(du -sh "$DEST" | cut -f1))"
