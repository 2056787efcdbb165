#!/usr/bin/env bash
# Allreduce from Python against the same call from C++ and against
# torch.distributed's gloo (bench/bench_python.py): builds the Python module
# and build/bench/allreduce, then runs it with the module on PYTHONPATH;
# writes results/bench-python.json. See docs/python.md, "Performance".
# Options are passed through (e.g. --rounds 5 --sizes 4096,1048576).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-bench-allreduce gossamer_python_core
build="${GOSSAMER_BUILD_DIR:-$root/build}"
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" exec /usr/bin/python3 bench/bench_python.py \
  --cpp-bench "$build/bench/allreduce" "$@"
