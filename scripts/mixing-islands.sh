#!/bin/sh
# Expected mixing of the fair and the bandwidth-aware roulette on two islands
# of 4 ranks (10 Gbit/s inside, 0.1 Gbit/s between), computed by
# gossamer-topology: its output for 12 steps, and the gap of E[W] and the
# share of segments that cross per bandwidth exponent; writes
# results/mixing-islands.json (docs/mixing.md). See scripts/mixing_islands.py.
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/mixing_islands.py "$@"
