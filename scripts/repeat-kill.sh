#!/usr/bin/env bash
# Repeats the killed-peer scenario of tests/multiproc/test_trainer.cpp many
# times and counts how the survivors end: gossamer-train with 3 ranks, rank 1
# SIGKILLed once rank 0 printed its first epoch (plus a random 0..500 ms, so
# the kill lands at different points of an exchange). For each survivor it
# records the exit status, the seconds from the kill to its exit, and where
# its error came from (its stderr): a completion-queue error entry ("cq"), the
# pidfd watch ("pidfd"), the heartbeat ("heartbeat"), the other survivor's
# abort ("other"), a request timeout ("timeout"). A survivor still running
# 4 x timeout after the kill is a hang: its threads' stacks are saved
# (gdb) and it is killed. One line per run, then totals. See docs/libfabric.md.
#
#   scripts/repeat-kill.sh --transport libfabric-shm --runs 40
# Options: --transport zmq|socket|libfabric-tcp|libfabric-shm  --runs N
#          --algorithm allreduce_sgd|crossover_sgd  --timeout SECONDS  --out DIR
#          --stacks-after SECONDS (save the stacks of survivors still running
#          that long after the kill, without stopping them: gdbslow<rank>)
#          --hold-lock SECONDS (libfabric shm: force the lock hazard. Rank 1
#          is stopped under gdb when it is about to release a spin lock that
#          lies in a /dev/shm mapping, i.e. while it holds one; it stays
#          stopped that long, so the others run into the lock, and is
#          SIGKILLed there: scripts/hold-shm-lock.py, output in gdbvictim)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GOSSAMER_BUILD_DIR:-$root/build}"
train="$build/apps/gossamer-train"
transport=libfabric-shm
runs=40
algorithm=allreduce_sgd
timeout=5
out=""
stacks_after=""
hold=""
while [ $# -gt 0 ]; do
  case "$1" in
    --transport) transport="$2"; shift ;;
    --runs) runs="$2"; shift ;;
    --algorithm) algorithm="$2"; shift ;;
    --timeout) timeout="$2"; shift ;;
    --out) out="$2"; shift ;;
    --stacks-after) stacks_after="$2"; shift ;;
    --hold-lock) hold="$2"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "repeat-kill: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$train" ] || { echo "repeat-kill: $train not built" >&2; exit 2; }
[ -n "$out" ] || out="$(mktemp -d /tmp/repeat-kill.XXXXXX)"
mkdir -p "$out"
case "$transport" in
  libfabric-*) keys="kind: libfabric
  provider: ${transport#libfabric-}" ;;
  *) keys="kind: $transport" ;;
esac
segments=""  # (only an algorithm that has segments may set them)
case "$algorithm" in
  hierarchical) segments="  segments: 3
  group_size: 2
" ;;
  crossover_sgd | d2 | gradient_tracking | quasi_global_momentum) segments="  segments: 3
" ;;
esac

classify() {  # stderr file -> source of the error
  local f="$1"
  if grep -q "its process exited" "$f"; then echo pidfd
  elif grep -q "libfabric failed a" "$f"; then echo cq
  elif grep -q "no heartbeat" "$f"; then echo heartbeat
  elif grep -q "stopped after an error of its own" "$f"; then echo other
  elif grep -q "timed out" "$f"; then echo timeout
  elif grep -q "peer 1 failed" "$f"; then echo peer1
  else echo unknown; fi
}

hangs=0; clean=0; declare -A sources=()
for ((i = 1; i <= runs; i++)); do
  d="$out/run$i"; mkdir -p "$d"
  cat > "$d/long.yaml" <<YAML
world_size: 3
seed: 7
transport:
  $keys
  timeout_seconds: $timeout
  linger_seconds: 1
topology:
  kind: fair_roulette
algorithm:
  name: $algorithm
${segments}model:
  kind: mlp
  hidden: [32]
data:
  path: /usr/share/datasets/fashion-mnist
  train_limit: 6000
  test_limit: 1000
training:
  epochs: 500
  batch_size: 32
  learning_rate: 0.01
  momentum: 0.9
membership:
  enabled: false
YAML
  pids=()
  for r in 0 1 2; do
    nice -n 19 "$train" --config "$d/long.yaml" --rank "$r" --rendezvous "$d/rdv" >"$d/out$r" 2>"$d/err$r" &
    pids+=($!)
  done
  t0=$(date +%s.%N)
  until grep -q "epoch 1/" "$d/out0" 2>/dev/null; do
    sleep 0.05
    if (( $(echo "$(date +%s.%N) - $t0 > 90" | bc) )); then echo "run $i: no epoch within 90 s" >&2; break; fi
  done
  sleep "0.$(printf '%03d' $((RANDOM % 500)))"
  if [ -n "$hold" ]; then
    HOLD_SECONDS="$hold" gdb -p "${pids[1]}" -batch -x "$root/scripts/hold-shm-lock.py" >"$d/gdbvictim" 2>&1
  else
    kill -9 "${pids[1]}"
  fi
  killed=$(date +%s.%N)
  { wait "${pids[1]}"; } 2>/dev/null
  rm -f /dev/shm/"${pids[1]}":*
  line="run $i:"
  if [ -n "$hold" ]; then  # whose lock the victim held: its own region's or another rank's
    region=$(grep -o "in /dev/shm/[0-9]*" "$d/gdbvictim" | head -1 | grep -o "[0-9]*$")
    if [ -z "$region" ]; then line+=" (no shm lock caught)"
    elif [ "$region" = "${pids[1]}" ]; then line+=" (held its own lock)"
    else line+=" (held the lock of pid $region)"; fi
  fi
  if [ -n "$stacks_after" ]; then
    sleep "$stacks_after"
    for r in 0 2; do
      if kill -0 "${pids[$r]}" 2>/dev/null && ! ps -o stat= -p "${pids[$r]}" | grep -q Z; then
        gdb -p "${pids[$r]}" -batch -ex 'thread apply all bt' >"$d/gdbslow$r" 2>&1
        line+=" (rank$r still running after ${stacks_after} s: gdbslow$r)"
      fi
    done
  fi
  for r in 0 2; do
    pid=${pids[$r]}
    deadline=$(echo "$killed + 4 * $timeout" | bc)
    while kill -0 "$pid" 2>/dev/null && [ -z "$(ps -o stat= -p "$pid" | grep Z)" ] &&
          (( $(echo "$(date +%s.%N) < $deadline" | bc) )); do sleep 0.02; done
    if kill -0 "$pid" 2>/dev/null && [ -z "$(ps -o stat= -p "$pid" | grep Z)" ]; then
      gdb -p "$pid" -batch -ex 'thread apply all bt' >"$d/gdb$r" 2>&1
      kill -9 "$pid"; wait "$pid" 2>/dev/null
      hangs=$((hangs + 1))
      line+=" rank$r=HANG(gdb$r)"
    else
      wait "$pid"; st=$?
      # its error is the last thing it wrote: stderr's modification time
      took=$(echo "$(stat -c %.9Y "$d/err$r") - $killed" | bc)
      src=$(classify "$d/err$r")
      sources[$src]=$(( ${sources[$src]:-0} + 1 ))
      clean=$((clean + 1))
      line+=" rank$r=exit$st,$(printf '%.2f' "$took")s,$src"
      grep -q "progress thread is stuck" "$d/err$r" && line+="(progress thread stuck)"
    fi
  done
  echo "$line"
done
echo "transport $transport, algorithm $algorithm, $runs runs: $hangs survivors hung, $clean exited;" \
     "sources: $(for k in "${!sources[@]}"; do printf '%s=%s ' "$k" "${sources[$k]}"; done)(logs: $out)"
