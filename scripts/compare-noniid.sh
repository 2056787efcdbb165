#!/usr/bin/env bash
# Non-IID data (Dirichlet alpha 1.0, 0.5, 0.1, 0.05; 8 and 16 peers):
# AllReduce-SGD, Crossover-SGD, SGP, gradient tracking, D² and quasi-global
# momentum side by side (see scripts/compare_noniid.py; its options pass
# through, e.g. --alphas 0.1 --world-sizes 8).
#   scripts/compare-noniid.sh    table, results/compare-noniid.json
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-train
exec /usr/bin/python3 scripts/compare_noniid.py "$@"
