#!/usr/bin/env bash
# The simulator against real runs: each training job on 8 network-namespace
# hosts in two islands (scripts/hosts.sh, tc tbf) and in gossamer-sim on the
# same platform, replaying each rank's recorded compute; prints real and
# simulated seconds per step side by side and writes results/validate-sim.json.
# Needs root (namespaces). See scripts/validate_sim.py for the options.
#   scripts/validate-sim.sh [--shapes lan-wan,edge] [--jobs allreduce-ring,sgp] [--rounds 1]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-sim gossamer-train
exec /usr/bin/python3 scripts/validate_sim.py "$@"
