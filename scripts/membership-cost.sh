#!/bin/sh
# Steps per second with and without the membership service (on by default),
# interleaved, medians and ratio; writes results/membership-cost.json. See
# scripts/membership_cost.py; options are passed through (e.g. --reps 5).
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/membership_cost.py "$@"
