#!/usr/bin/env bash
# DiLoCo (quickstart-diloco.yaml) against AllReduce-SGD (quickstart-allreduce.yaml),
# 3 interleaved rounds, then DiLoCo's variants (see scripts/compare_diloco.py).
# Prints both tables and writes results/compare-diloco.json.
#   scripts/compare-diloco.sh [--rounds 3]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-train
exec /usr/bin/python3 scripts/compare_diloco.py "$@"
