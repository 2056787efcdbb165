#!/usr/bin/env bash
# Compressed gradient exchanges on the Fashion-MNIST MLP with 8 peers (paper
# 002): AllReduce-SGD dense vs A2SGD vs Top-K 1% vs Gaussian-K 1% vs QSGD s=4, and A2SGD with
# gossiped means + periodic Crossover-SGD model sync vs uncompressed
# Crossover-SGD; same epochs, several seeds (see scripts/compare_compression.py).
# Prints the table and the issue-5 checks, writes results/compare-compression.json
# and the plot docs/compression.png. Extra arguments go to the script, e.g.
#   scripts/compare-compression.sh --epochs 3 --seeds 42
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
GOSSAMER_PACKAGES+=(python3-matplotlib)
gossamer_install_deps
gossamer_build --target gossamer-train
exec /usr/bin/python3 scripts/compare_compression.py "$@"
