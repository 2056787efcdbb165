#!/bin/sh
# Churn soak: gossamer-train under seeded random kill -9 + restart, SIGSTOP,
# new joins and a partition for --minutes, beside a fault-free run; checks
# hangs, crashes, AllReduce-SGD's identical models, SGP's push-sum mass,
# resident memory and accuracy, prints a table and writes results/churn.json.
# See scripts/churn.py; options are passed through.
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/churn.py "$@"
