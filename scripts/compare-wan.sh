#!/usr/bin/env bash
# Compares the algorithms across a slow link: Fashion-MNIST on two islands of
# 4 test hosts (10 Gbit/s inside, 100 Mbit/s and 20 ms between; network
# namespaces, needs root), time to 84% test accuracy, final accuracy and bytes
# across the slow link per algorithm; writes results/compare-wan.json. See
# scripts/compare_wan.py --help for the options.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
exec /usr/bin/python3 scripts/compare_wan.py "$@"
