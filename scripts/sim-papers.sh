#!/usr/bin/env bash
# The seed papers' synchronisation-time tables simulated: paper 000's Table 2
# (ring, hierarchical, 2D-torus, 2D-TGA allreduce at 32..512 workers) and
# paper 003's Table 3 (HiPS, mesh and ring on BCube and torus), each beside
# the paper's formula with the ratio; writes results/sim-papers.json. See
# scripts/sim_papers.py for the settings.
#   scripts/sim-papers.sh [--workers 32,64,128,256,512] [--hips-shapes 4x2,8x3]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-bench-sim-allreduce
exec /usr/bin/python3 scripts/sim_papers.py "$@"
