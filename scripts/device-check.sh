#!/usr/bin/env bash
# The GPU machine's checks (docs/python.md, "On a GPU"), in one command: unpacks
# the Debian packages that scripts/device-deps.sh collected, builds the SDK and
# the Python package against that machine's own Python and torch 2.x, and runs
#
#   1  the package and the torch.distributed backend build and import; the
#      ported c10d module (bindings/python/tests/test_c10d.py) runs
#   2  CUDA float32, bfloat16 and float16 tensors through allreduce, broadcast
#      and a gossip exchange equal the CPU results     (bench/device_checks.py tensors)
#   3  the CNN example trains on the GPU under bf16 autocast: Crossover-SGD,
#      DDP on "gossamer", "gloo" and "nccl"             (bench/device_checks.py train)
#   4  a 64 MiB CUDA allreduce against the same CPU one (bench/device_checks.py staging)
#   5  a core per rank (scripts/bench-allreduce.sh, ranks bound to cores):
#      ring and auto at 4, 8 and 16 ranks over zmq tcp (check-5-allreduce.json),
#      then the composite transport (zmq ipc, socket ipc, libfabric shm inside
#      a host, zmq tcp between two hosts of 4) against all-zmq at 8 ranks
#      (check-5-composite.json); 4 KiB to 64 MiB
#
# Results go to $OUT (the device tool's folder; results/device here): one JSON
# file per check while it runs, merged at the end into device-checks.json
# (scripts/device_summary.py; the data of the figure device-checks), with
# device-check.json (each step's exit status and seconds) and device-check.log. A
# step that fails, or runs past its cap (GOSSAMER_DEVICE_CAP_<step> seconds,
# timeout(1)), is recorded and the next one runs; all of them end by a deadline
# (GOSSAMER_DEVICE_DEADLINE, 570 s), so the summary is always written. The script
# exits 0 when every step passed (77, a check with a part skipped, counts). The default order puts the
# long steps last: build 1 2 4 3 5.
#
#   through the device tool, after scripts/device-deps.sh here:
#     run(command="bash scripts/device-check.sh", carry=[".device"], timeout_s=600)
#     run(command="bash scripts/device-check.sh build 5", carry=[".device"])   # some steps
#   here, a dry run on the CPU with the system's packages:
#     scripts/device-check.sh --local build 1 2 4
#
# Steps: build 1 2 3 4 5 (default: build 1 2 4 3 5; each check needs build,
# which a warm machine keeps in build-device/). GOSSAMER_DEVICE_TRAIN_ARGS and
# GOSSAMER_DEVICE_ALLREDUCE_ARGS add options to steps 3 and 5.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
local_run=0
if [ "${1:-}" = "--local" ]; then
  local_run=1
  shift
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build 1 2 4 3 5)
out="${OUT:-$root/results/device}"
mkdir -p "$out"
log="$out/device-check.log"
summary="$out/device-check.json"
: >"$log"
build="${GOSSAMER_DEVICE_BUILD:-$root/build-device}"
prefix="${GOSSAMER_DEVICE_PREFIX:-/tmp/gossamer-prefix}"
arch_lib="lib/x86_64-linux-gnu"

say() { echo "device-check: $*" | tee -a "$log" >&2; }

# The device machine's python3 holds torch; here, Debian's.
if [ "$local_run" = 1 ]; then
  python=/usr/bin/python3
else
  python="$(command -v python3)"
fi

# ---- the packages: unpacked into a private prefix, never into / ----------------
if [ "$local_run" = 0 ]; then
  if ! compgen -G "$root/.device/debs/*.deb" >/dev/null; then
    say "no .device/debs/*.deb: run scripts/device-deps.sh here and carry .device"
    exit 1
  fi
  if [ ! -f "$prefix/.unpacked" ]; then
    mkdir -p "$prefix"
    for deb in "$root"/.device/debs/*.deb; do dpkg -x "$deb" "$prefix" || { say "dpkg -x $deb failed"; exit 1; }; done
    touch "$prefix/.unpacked"
  fi
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$prefix/usr/$arch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LIBRARY_PATH="$prefix/usr/$arch_lib${LIBRARY_PATH:+:$LIBRARY_PATH}"  # for -l of pkg-config (which drops -L of /usr/lib)
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  export PKG_CONFIG_LIBDIR="$prefix/usr/$arch_lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export GOSSAMER_NO_APT=1  # scripts/deps.sh: the packages are here already
  data_args=(--data "$prefix/usr/share/datasets/fashion-mnist")
else
  data_args=()
fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export GOSSAMER_BUILD_DIR="$build"
export PYTHONUNBUFFERED=1

declare -A status seconds
declare -A cap=([build]=150 [1]=200 [2]=130 [3]=160 [4]=75 [5]=55)
# The whole run ends by this many seconds after its start (GOSSAMER_DEVICE_DEADLINE;
# the device tool stops a command at 600 s): a step gets its cap or what is left
# before it, less 15 s for the summary, and one that would get under 20 s is
# skipped (exit 125), so that the summary and the figure's file are always written.
start_s=$(date +%s)
deadline_s=$((start_s + ${GOSSAMER_DEVICE_DEADLINE:-570}))
cap_of() {  # cap_of NAME: the step's cap, seconds (GOSSAMER_DEVICE_CAP_<NAME> over the default)
  printenv "GOSSAMER_DEVICE_CAP_$1" || echo "${cap[$1]}"
}
run_step() {  # run_step NAME COMMAND...: runs it under its cap, logs it, records exit status and time
  local name="$1" t0 rc limit left
  shift
  limit="$(cap_of "$name")"
  left=$((deadline_s - $(date +%s) - 15))
  [ "$left" -ge "$limit" ] || limit=$left
  if [ "$limit" -lt 20 ]; then
    say "step $name: skipped, ${left} s left before the run's deadline"
    status[$name]=125
    seconds[$name]=0
    return 125
  fi
  say "step $name (cap $limit s): $*"
  t0=$(date +%s%N)
  # timeout(1) runs programs: the step's shell functions reach it through bash's exported functions
  timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" >>"$log" 2>&1
  rc=$?
  [ $rc != 124 ] || say "step $name: past its cap of $limit s"
  status[$name]=$rc
  local ms=$((($(date +%s%N) - t0) / 1000000))
  seconds[$name]=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
  say "step $name: exit $rc after ${seconds[$name]} s"
  return $rc
}

configure_and_build() {
  local torch_prefix pybind_dir cmake_prefix extra=()
  torch_prefix="$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')" || return 1
  pybind_dir="$("$python" -m pybind11 --cmakedir 2>/dev/null || true)"
  cmake_prefix="$torch_prefix"
  [ -z "$pybind_dir" ] || extra+=("-Dpybind11_DIR=$pybind_dir")
  if [ "$local_run" = 0 ]; then
    cmake_prefix="$prefix/usr;$cmake_prefix"
    extra+=("-DCMAKE_CXX_FLAGS=-isystem $prefix/usr/include")  # for headers found through no CMake config
    # The GPU machine's g++ first on the PATH is a wrapper that links libstdc++
    # statically: in a Python module that exports a second copy of it, and
    # std::regex (the config parser) crashed on the mixed locale data. Take the
    # compiler it wraps where there is one, and keep any static copy private.
    local cxx
    for cxx in "$(dirname "$(command -v g++)")/g++-real" /usr/bin/g++-real /usr/bin/g++-13 /usr/bin/g++; do
      if [ -x "$cxx" ] && echo '#include <regex>
int main() { return std::regex("[a-z]+").mark_count(); }' | "$cxx" -std=c++20 -x c++ - -o /tmp/cxx-probe; then
        extra+=("-DCMAKE_CXX_COMPILER=$cxx")
        break
      fi
    done
    extra+=("-DCMAKE_MODULE_LINKER_FLAGS=-Wl,--exclude-libs,ALL")
  fi
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGOSSAMER_BUILD_TESTS=OFF -DGOSSAMER_BUILD_EXAMPLES=OFF -DGOSSAMER_BUILD_C=OFF \
      -DPython3_EXECUTABLE="$python" -DCMAKE_PREFIX_PATH="$cmake_prefix" "${extra[@]}" || return 1
  fi
  grep -E '^CMAKE_CXX_COMPILER:|^CMAKE_MODULE_LINKER_FLAGS:' "$build/CMakeCache.txt"
  cmake --build "$build" -j "$(nproc)" --target gossamer_python_core gossamer-bench-allreduce || return 1
  # libstdc++ inside the module, and exported, is what crashed before (see above).
  echo "libstdc++ symbols exported by _core: $(nm -D --defined-only "$build"/python/gossamer/_core*.so | grep -c 'St6locale')"
  # The backend is its own target: a torch whose c10d the extension does not
  # compile against leaves the rest of the checks runnable.
  if grep -q gossamer_python_c10d "$build/build.ninja"; then
    cmake --build "$build" -j "$(nproc)" --target gossamer_python_c10d || return 2
  else
    echo "the c10d backend was not configured (torch headers or libraries not found)"
    return 2
  fi
}

check_import() {
  "$python" - <<'EOF' || return 1
import json, os, sys
import torch
import gossamer, gossamer.torch as gt
row = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.cuda.is_available(),
       "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
       "cxx11_abi": getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None),
       "gossamer": getattr(gossamer, "__version__", None), "backend": gt.HAS_PROCESS_GROUP}
print(json.dumps(row))
json.dump(row, open(os.path.join(os.environ["OUT_DIR"], "check-1-import.json"), "w"), indent=1)
sys.exit(0 if row["backend"] else 3)
EOF
  # Each case's outcome and seconds (a JUnit file) and the failures' tracebacks.
  "$python" -m pytest -q -rfE --tb=short --durations=15 -p no:cacheprovider \
    --junitxml="$OUT_DIR/check-1-pytest.xml" bindings/python/tests/test_c10d.py
}

# Check 5: ring and auto at 4, 8 and 16 ranks, then the composite transport
# against all-zmq at 8 ranks (libfabric's shm last, in a run of its own,
# which may fail where the machine lacks what shm needs).
check_allreduce() {
  local sizes=4096,65536,1048576,16777216,67108864 rc=0 tmp
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2086
  bash scripts/bench-allreduce.sh --world-sizes 4,8,16 --algorithms ring,auto --no-mpi --no-gloo --rounds 1 \
    --budget 0.3 --transports zmq-tcp --sizes "$sizes" --json "$out/check-5-allreduce.json" \
    ${GOSSAMER_DEVICE_ALLREDUCE_ARGS:-} || rc=1
  # shellcheck disable=SC2086
  bash scripts/bench-allreduce.sh --world-sizes 8 --algorithms ring --no-mpi --no-gloo --rounds 1 --budget 0.3 \
    --transports zmq-tcp,zmq-ipc,composite-zmq-ipc,composite-socket-ipc --sizes "$sizes" \
    --json "$tmp/composite.json" ${GOSSAMER_DEVICE_ALLREDUCE_ARGS:-} || rc=1
  if "$build/bench/allreduce" --help 2>/dev/null | grep -q composite-libfabric-shm; then
    # shellcheck disable=SC2086
    bash scripts/bench-allreduce.sh --world-sizes 8 --algorithms ring --no-mpi --no-gloo --rounds 1 --budget 0.3 \
      --transports composite-libfabric-shm --sizes "$sizes" --json "$tmp/composite-shm.json" \
      ${GOSSAMER_DEVICE_ALLREDUCE_ARGS:-} || echo "check 5: composite-libfabric-shm failed (recorded, not fatal)"
  fi
  "$python" -c 'import json, sys
rows = []
for path in sys.argv[2:]:
    rows += json.load(open(path))
json.dump(rows, open(sys.argv[1], "w"), indent=1)' "$out/check-5-composite.json" "$tmp"/composite*.json || rc=1
  rm -rf "$tmp"
  return $rc
}

export OUT_DIR="$out" root build prefix python local_run out log
export -f say configure_and_build check_import check_allreduce
say "machine: $(nproc) cores; $(nvidia-smi -L 2>/dev/null | head -1 || echo 'no nvidia-smi'); python $python"
for step in "${steps[@]}"; do
  case "$step" in
    build) run_step build configure_and_build ;;
    1) run_step 1 check_import ;;
    # Each check's own --timeout ends it (and writes its JSON) before its cap would kill it.
    2) run_step 2 "$python" bench/device_checks.py tensors --json "$out/check-2-tensors.json" \
         --timeout $(($(cap_of 2) - 15)) ;;
    3) # shellcheck disable=SC2086
       run_step 3 "$python" bench/device_checks.py train --json "$out/check-3-train.json" "${data_args[@]}" \
         --timeout 45 ${GOSSAMER_DEVICE_TRAIN_ARGS:-} ;;
    4) run_step 4 "$python" bench/device_checks.py staging --json "$out/check-4-staging.json" \
         --timeout $(($(cap_of 4) - 15)) ;;
    5) run_step 5 check_allreduce ;;
    *) say "unknown step $step (build 1 2 3 4 5)"; exit 2 ;;
  esac
done

{
  echo "{"
  first=1
  for step in "${steps[@]}"; do
    [ "$first" = 1 ] || echo ","
    first=0
    printf '  "%s": {"exit": %s, "seconds": %s}' "$step" "${status[$step]}" "${seconds[$step]}"
  done
  echo
  echo "}"
} >"$summary"
say "summary ($summary):"
cat "$summary" >&2
# One file for the figure device-checks (scripts/figures/device_checks.py);
# the check files it holds go, which keeps $OUT under the device tool's 8 files.
if "$python" scripts/device_summary.py "$out" -o "$out/device-checks.json"; then
  rm -f "$out"/check-*.json
fi
# 77: a check that passed with a part skipped (NCCL's refusal of 4 ranks on one GPU).
for step in "${steps[@]}"; do [ "${status[$step]}" = 0 ] || [ "${status[$step]}" = 77 ] || exit 1; done
