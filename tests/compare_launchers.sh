#!/usr/bin/env bash
# Trains one config briefly under gossamer-train's own launcher, under Open
# MPI's mpirun, under MPICH's mpiexec (when installed), under torchrun
# (--no_python), and with the variables that
# Slurm's srun and MPICH's Hydra set (4 processes started here with
# SLURM_PROCID / SLURM_NTASKS / SLURM_NNODES=1 / SLURM_JOB_ID, and with
# PMI_RANK / PMI_SIZE / MASTER_ADDR / MASTER_PORT), and checks that the five
# runs are the same run: every epoch's loss, consensus distance and
# accuracies equal to the last bit. Who starts the ranks must not change what
# is learned; under mpirun and torchrun the ranks find each other through the
# launchers' variables (gossamer/launch_env.hpp). Without MPICH's
# mpiexec.mpich its run is left out and the last line says so ("mpich:
# skipped"); the other runs are still compared.
# Every run is bounded (timeout, the sum under ctest's TIMEOUT of 600 s), and
# the ranks this script starts itself are ended on every way out.
# Usage: compare_launchers.sh GOSSAMER_TRAIN CONFIG.yaml
set -euo pipefail
train="$1"
config="$2"
work="$(mktemp -d)"
# The background ranks of bylaunchervars still running: on any exit, each
# one's timeout(1) gets SIGTERM (it passes it on to its rank, and SIGKILL
# 5 s later), and what is left after 10 s gets SIGKILL.
pids=()
cleanup() {
  local p alive i
  if [ ${#pids[@]} -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 100; ++i)); do
      alive=0
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
      [ "$alive" = 0 ] && break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# Each run takes a few seconds; 6 runs of at most 90 s (and 5 s to end) fit in 600 s.
limit=90
# The launchers' runs find each other in ${TMPDIR}/gossamer-rendezvous-*
# (gossamer/launch_env.hpp): under this test's own directory, removed with
# it, and apart from any other job's (another clone's run of this test).
export TMPDIR="$work"
common=(--config "$config" --set training.epochs=2 --set data.train_limit=4000 --set data.test_limit=1000)
if [ -n "${GOSSAMER_FASHION_MNIST:-}" ]; then common+=(--set "data.path=$GOSSAMER_FASHION_MNIST"); fi
n=4
# A port for a launcher's rendezvous: below the kernel's ephemeral range
# (32768 and up, where the other tests' connections take theirs, so a
# random pick there can be taken by the time the launcher binds it), and
# free now on every address, as torchrun binds [::].
free_port() {
  /usr/bin/python3 - <<'PY'
import random
import socket

for _ in range(200):
    port = random.randrange(20000, 32768)
    try:
        for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((addr, port))
    except OSError:
        continue
    print(port)
    break
else:
    raise SystemExit("no free port in [20000, 32768)")
PY
}
run() {
  local name="$1"
  shift
  timeout -k 5 "$limit" "$@" >"$work/$name.out" 2>&1 || {
    local status=$?
    echo "gossamer-train failed under $name (exit $status$([ $status = 124 ] && echo ", still running after $limit s")):"
    cat "$work/$name.out"
    exit 1
  }
}
run self "$train" "${common[@]}" --set world_size=$n --summary-json "$work/self.json"
# Rank 0 writes the summary; the others get the same flag and write nothing.
run mpirun mpirun --allow-run-as-root --oversubscribe -n $n "$train" "${common[@]}" --summary-json "$work/mpirun.json"
launchers=(mpirun torchrun srun hydra)
skipped=()
# MPICH's own mpiexec (Hydra), when installed beside Open MPI (Debian: mpich).
if command -v mpiexec.mpich >/dev/null; then
  run mpich mpiexec.mpich -n $n "$train" "${common[@]}" --summary-json "$work/mpich.json"
  launchers+=(mpich)
else
  echo "mpich: skipped (mpiexec.mpich not found)"
  skipped+=("mpich: skipped (mpiexec.mpich not found)")
fi
port="$(free_port)"
run torchrun /usr/bin/python3 -m torch.distributed.run --nproc_per_node $n --redirects 1 --tee 1 \
  --master_addr 127.0.0.1 --master_port $port --no_python "$train" "${common[@]}" --summary-json "$work/torchrun.json"
# Processes started the way srun or Hydra starts them: only the variables
# say which rank each is.
# The ranks are waited for in the order they end: the first that fails ends
# the test at once (cleanup ends the others), not when its peers time out.
bylaunchervars() {
  local name="$1"
  shift
  local r ended pid status p rest
  local -A rank_of=()
  pids=()
  for ((r = 0; r < n; ++r)); do
    env "$@" "$(vars "$r")" timeout -k 5 "$limit" "$train" "${common[@]}" --summary-json "$work/$name.json" \
      >"$work/$name.out$r" 2>&1 &
    pids+=($!)
    rank_of[$!]=$r
  done
  for ((ended = 0; ended < n; ++ended)); do
    status=0
    wait -n -p pid "${pids[@]}" || status=$?
    r=${rank_of[$pid]}
    rest=()
    for p in "${pids[@]}"; do [ "$p" = "$pid" ] || rest+=("$p"); done
    pids=("${rest[@]}")
    [ "$status" = 0 ] || {
      echo "gossamer-train failed under $name-style variables (rank $r, exit $status$([ "$status" = 124 ] &&
        echo ", still running after $limit s")):"
      cat "$work/$name.out$r"
      exit 1
    }
  done
}
vars() { echo "SLURM_PROCID=$1"; }
bylaunchervars srun SLURM_NTASKS=$n SLURM_NNODES=1 SLURM_JOB_ID=$$ SLURM_STEP_ID=0 TMPDIR="$work"
port="$(free_port)"
vars() { echo "PMI_RANK=$1"; }
bylaunchervars hydra PMI_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
fields='[.world_size, [.history[] | [.train_loss, .consensus_distance, .test_accuracy, .test_accuracy_rank0]]]'
self="$(jq -c "$fields" "$work/self.json")"
# Both epochs are there: runs with empty histories would compare equal.
jq -e '.[1] | length == 2' <<<"$self" >/dev/null || { echo "the own launcher's run is not two epochs: $self"; exit 1; }
for l in "${launchers[@]}"; do
  other="$(jq -c "$fields" "$work/$l.json")"
  if [ "$self" != "$other" ]; then
    echo "the run under $l differs from gossamer-train's own:"
    echo "  self:  $self"
    echo "  $l: $other"
    exit 1
  fi
done
echo "own launcher and ${launchers[*]}: the same run in every epoch: $self"
if [ ${#skipped[@]} -gt 0 ]; then printf '%s\n' "${skipped[@]}"; fi
