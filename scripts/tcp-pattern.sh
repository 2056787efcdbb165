#!/usr/bin/env bash
# SGP's exchange pattern over plain TCP sockets on 8 namespace hosts (no
# Gossamer code; tc tbf links shaped as validate-sim's lan-wan or edge),
# against gossamer-sim's SGP on the same platform, rounds interleaved;
# prints both sides' seconds per step and their ratio, and writes
# results/tcp-pattern.json. Needs root (namespaces). See
# scripts/tcp_pattern.py for the options.
#   scripts/tcp-pattern.sh [--shape lan-wan] [--queue-ms 100] [--steps 60] [--rounds 3] [--initcwnd 300]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-sim
exec /usr/bin/python3 scripts/tcp_pattern.py "$@"
