#!/usr/bin/env bash
# Encode+decode throughput (GB/s of input) of each gradient compressor (none,
# A2SGD, A2SGD keeping its error vector, Top-K 1%, QSGD s=4) at 1M, 16M and 64M
# floats, next to this machine's single-thread memcpy bandwidth measured in
# the same run (interleaved repetitions, medians), and the payload bytes per
# worker per step. Prints the table and writes results/bench-compress.json
# (compressor, floats, gbps, memcpy_gbps, bytes_per_step, ...). Extra
# arguments go to the benchmark, e.g.
#   scripts/bench-compress.sh --floats 16M --reps 20
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-bench-compress
build="${GOSSAMER_BUILD_DIR:-$root/build}"

mkdir -p results
"$build/bench/compress" --json results/bench-compress.json "$@"
