#!/bin/sh
# What security (CURVE on the zmq transport) costs, side by side in one run:
# a 4 MiB point-to-point exchange, a 4 KiB allreduce on 4 ranks and the
# quickstart job's wall time, each without and with CURVE, interleaved;
# medians and ratios; writes results/bench-security.json. See
# scripts/bench_security.py; options are passed through (e.g. --reps 5).
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/bench_security.py "$@"
