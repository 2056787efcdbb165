#!/usr/bin/env bash
# Trains one config briefly under gossamer-train's own launcher, under Open
# MPI's mpirun and under torchrun (--no_python), and checks that the three
# runs are the same run: every epoch's loss, consensus distance and
# accuracies equal to the last bit. Who starts the ranks must not change what
# is learned; under mpirun and torchrun the ranks find each other through the
# launchers' variables (gossamer/launch_env.hpp).
# Usage: compare_launchers.sh GOSSAMER_TRAIN CONFIG.yaml
set -euo pipefail
train="$1"
config="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--config "$config" --set training.epochs=2 --set data.train_limit=4000 --set data.test_limit=1000)
if [ -n "${GOSSAMER_FASHION_MNIST:-}" ]; then common+=(--set "data.path=$GOSSAMER_FASHION_MNIST"); fi
n=4
run() {
  local name="$1"
  shift
  timeout 240 "$@" >"$work/$name.out" 2>&1 || {
    echo "gossamer-train failed under $name:"
    cat "$work/$name.out"
    exit 1
  }
}
run self "$train" "${common[@]}" --set world_size=$n --summary-json "$work/self.json"
# Rank 0 writes the summary; the others get the same flag and write nothing.
run mpirun mpirun --allow-run-as-root --oversubscribe -n $n "$train" "${common[@]}" --summary-json "$work/mpirun.json"
port=$((20000 + RANDOM % 20000))
run torchrun /usr/bin/python3 -m torch.distributed.run --nproc_per_node $n --redirects 1 --tee 1 \
  --master_addr 127.0.0.1 --master_port $port --no_python "$train" "${common[@]}" --summary-json "$work/torchrun.json"
fields='[.world_size, [.history[] | [.train_loss, .consensus_distance, .test_accuracy, .test_accuracy_rank0]]]'
self="$(jq -c "$fields" "$work/self.json")"
for l in mpirun torchrun; do
  other="$(jq -c "$fields" "$work/$l.json")"
  if [ "$self" != "$other" ]; then
    echo "the run under $l differs from gossamer-train's own:"
    echo "  self:  $self"
    echo "  $l: $other"
    exit 1
  fi
done
echo "own launcher, mpirun and torchrun: the same run in every epoch: $self"
