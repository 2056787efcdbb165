#!/usr/bin/env bash
# What the run metrics cost on the quickstart job: run.metrics on and off,
# interleaved, median step time and their ratio (docs/metrics.md). Writes
# results/metrics-overhead.json. Options: scripts/metrics_overhead.py --help.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/deps.sh"
gossamer_build --target gossamer-train
exec /usr/bin/python3 "$root/scripts/metrics_overhead.py" "$@"
