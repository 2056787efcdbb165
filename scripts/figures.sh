#!/usr/bin/env bash
# Regenerates the figures README.md and docs/ quote (scripts/figures.py; one
# module per figure in scripts/figures/, its data in docs/figures/).
#   scripts/figures.sh [--render-only | --list | --check] [NAME ...]
# Measure on an otherwise idle machine: each figure's command runs its own
# benchmark, interleaved where it compares.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/figures.py "$@"
