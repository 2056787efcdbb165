#!/usr/bin/env bash
# Simulated consensus at scale against the mixing analysis: gossamer-sim's
# per-step contraction of the consensus distance for fair roulette, bandwidth
# roulette and the directed exponential graph, beside the mean-square rate
# that gossamer-topology predicts for them; writes results/sim-mixing.json.
# See scripts/sim_mixing.py.
#   scripts/sim-mixing.sh [--world-size 1024] [--steps 20] [--rounds 100]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-sim gossamer-topology
exec /usr/bin/python3 scripts/sim_mixing.py "$@"
