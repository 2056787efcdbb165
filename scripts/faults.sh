#!/bin/sh
# Fault scenarios (peers killed, stopped) on 8 gossamer-train processes for
# Crossover-SGD, SGP, hierarchical and AllReduce-SGD; prints a table and
# writes results/faults.json. See scripts/faults.py for the scenarios and
# fields; options are passed through (e.g. --algorithms sgp --scenarios kill-1).
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/faults.py "$@"
