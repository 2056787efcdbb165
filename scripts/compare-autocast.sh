#!/usr/bin/env bash
# The Python CNN example in float32 and under torch.autocast bfloat16, side by
# side (see scripts/compare_autocast.py). Prints the table and writes
# results/compare-autocast.json.
#   scripts/compare-autocast.sh [--epochs 3] [--train-limit 0 (all)] [--rounds 1]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer_python_core
exec /usr/bin/python3 scripts/compare_autocast.py "$@"
