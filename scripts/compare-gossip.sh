#!/usr/bin/env bash
# Compares AllReduce-SGD, SGP, Crossover-SGD and hierarchical Crossover-SGD on
# the Fashion-MNIST MLP at 4, 8 and 16 peers (see scripts/compare_gossip.py).
#   scripts/compare-gossip.sh              table, results/compare-gossip.{json,png}
#   scripts/compare-gossip.sh --straggler  one peer slowed 10x, 8 peers
#   scripts/compare-gossip.sh --overlap    seconds per step with/without overlap
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
GOSSAMER_PACKAGES+=(python3-matplotlib)
gossamer_install_deps
gossamer_build --target gossamer-train
exec /usr/bin/python3 scripts/compare_gossip.py "$@"
