#!/usr/bin/env bash
# "Why users pick gossip": times one Crossover-SGD exchange of the MLP's
# parameter vector against one ring allreduce of it, with 8 peers as separate
# processes over zmq on loopback (tcp, then ipc). Prints the table and writes
# results/bench-gossip.json. Extra arguments go to the benchmark, e.g.
#   scripts/bench-gossip.sh --world-size 4 --reps 200 --json results/bench-gossip-n4.json
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-bench-gossip
build="${GOSSAMER_BUILD_DIR:-$root/build}"

mkdir -p results
"$build/bench/gossip_exchange" --json results/bench-gossip.json "$@"
