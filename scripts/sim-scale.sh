#!/usr/bin/env bash
# Every training algorithm's step simulated at scale (gossamer-sim, the
# simgrid transport), ranked by simulated time to a target consensus
# distance; writes results/sim-scale.json. See scripts/sim_scale.py.
#   scripts/sim-scale.sh [--world-sizes 64,256] [--jobs sgp,...] [--steps 20] [--steps-at 256=100]
#                        [--cfg network/crosstraffic:0] [--target 0.01] [--timeout 600]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-sim
exec /usr/bin/python3 scripts/sim_scale.py "$@"
