#!/usr/bin/env bash
# Compares the composite transport with zmq everywhere: the same Fashion-MNIST
# jobs on two test hosts of 4 ranks each (network namespaces joined by
# 10 Gbit/s, needs root), interleaved rounds, median seconds per epoch and the
# ratio to all-zmq; writes results/compare-composite.json. See
# scripts/compare_composite.py --help for the options.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
exec /usr/bin/python3 scripts/compare_composite.py "$@"
