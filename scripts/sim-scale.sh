#!/usr/bin/env bash
# Every training algorithm's step simulated at scale (gossamer-sim, the
# simgrid transport): the example configs of AllReduce-SGD, Crossover-SGD,
# SGP, hierarchical groups, DiLoCo and A2SGD (gossip), each at the world
# sizes given, in islands of 64 ranks (fewer ranks: one island), 10 Gbit/s
# and 20 us inside an island, 1 Gbit/s and 20 ms between islands, 50 ms of
# compute per step, 20 steps, the model of the config (about 100k float32).
# Prints a table and writes results/sim-scale.json, one row per run:
# algorithm, config, world_size, islands, platform, simulated seconds per
# step, bytes sent and between islands, consensus distance after the last
# step, wall seconds of the simulation.
#   scripts/sim-scale.sh [--world-sizes 64,256] [--steps 20] [--configs a.yaml,b.yaml]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
gossamer_install_deps
gossamer_build --target gossamer-sim
build="${GOSSAMER_BUILD_DIR:-$root/build}"

sizes="64,256"
steps=20
configs="quickstart-allreduce,quickstart-crossover,sgp,hierarchical,quickstart-diloco,a2sgd-gossip"
while [ $# -gt 0 ]; do
  case "$1" in
    --world-sizes) sizes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    *) echo "sim-scale.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

mkdir -p results
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rows=()
IFS=, read -r -a size_list <<<"$sizes"
IFS=, read -r -a config_list <<<"$configs"
for n in "${size_list[@]}"; do
  islands=$(( n >= 128 ? n / 64 : 1 ))
  for c in "${config_list[@]}"; do
    out="$tmp/$c-$n.json"
    "$build/apps/gossamer-sim" "examples/configs/$c.yaml" --world-size "$n" --islands "$islands" \
      --steps "$steps" --step-seconds 0.05 --inside-latency-us 20 \
      --set network.inside_gbps=10 --set network.between_gbps=1 --set network.between_delay_ms=20 \
      --json "$out" | tail -n 1
    rows+=("$(jq -c --arg config "$c" '. + {config: $config}' "$out")")
  done
done
printf '%s\n' "${rows[@]}" | jq -s '.' >results/sim-scale.json
echo "wrote results/sim-scale.json"
