#!/usr/bin/env bash
# The quickstart job in float32 against compression.kind bf16 and fp16, 4 and 8
# peers, side by side: AllReduce-SGD (16-bit gradients with error feedback) and
# Crossover-SGD (16-bit model segments) (see scripts/compare_half.py). Prints
# the table and writes results/compare-half.json.
#   scripts/compare-half.sh [--world-sizes 4 8] [--algorithms allreduce_sgd crossover_sgd]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-train
exec /usr/bin/python3 scripts/compare_half.py "$@"
