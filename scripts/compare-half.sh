#!/usr/bin/env bash
# AllReduce-SGD with float32 gradients against compression.kind bf16 and fp16
# (16-bit gradients with error feedback), 4 and 8 peers, side by side (see
# scripts/compare_half.py). Prints the table and writes results/compare-half.json.
#   scripts/compare-half.sh [--world-sizes 4 8]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-train
exec /usr/bin/python3 scripts/compare_half.py "$@"
