#!/usr/bin/env bash
# gossamer-sim's gossip runs (fair roulette, 4 segments, 64 ranks, rank r
# starting at r, no gradient) against gossamer-topology's prediction for that
# start (--from-ramp: the topology's mixing matrices applied to the run's
# sampled elements), within 5% after every one of 12 steps:
#   Crossover-SGD sync:    step k is the analysis's round k;
#   Crossover-SGD overlap: step k finishes round k - 1 (the start at step 1);
#   A2SGD, sync_period 3:  the models move only at its model exchange, so
#                          step k is round floor(k / 3) (the start before).
# scripts/sim_scale.py's FOLLOWS_RAMP predicts time to agreement from these.
#   sim_follows_mixing.sh GOSSAMER_SIM GOSSAMER_TOPOLOGY SOURCE_DIR
set -euo pipefail
sim="$1" topology="$2" src="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Each program runs for about a second; each is bounded so that all four
# fit in ctest's TIMEOUT of 120 s.
run() {  # NAME CONFIG --set ...
  local name="$1" config="$2"
  shift 2
  timeout -k 5 25 "$sim" "$src/examples/configs/$config.yaml" --world-size 64 --steps 12 --step-seconds 0.05 \
    --set run.metrics=false "$@" --json "$tmp/$name.json" >/dev/null || {
    local status=$?
    echo "gossamer-sim $name exited with $status$([ $status = 124 ] && echo ' (still running after 25 s)')"
    exit 1
  }
}
run sync quickstart-crossover --set algorithm.mode=sync
run overlap quickstart-crossover --set algorithm.mode=overlap
run a2sgd a2sgd-gossip --set compression.sync_period=3
timeout -k 5 15 "$topology" --world-size 64 --steps 12 --segments 4 --seed 42 --topology fair_roulette --from-ramp >"$tmp/ramp.txt"
/usr/bin/python3 - "$tmp" "$src" <<'PY'
import json
import os
import sys
tmp = sys.argv[1]
sys.path.insert(0, os.path.join(sys.argv[2], "scripts"))
from sim_jobs import start_distance  # noqa: E402
ramp = [float(f[2]) for f in (l.split() for l in open(os.path.join(tmp, "ramp.txt")))
        if len(f) == 3 and f[1].isdigit()]
assert len(ramp) == 12, len(ramp)
start = start_distance(64)  # ranks 0..63 at 0..63
worst = 0.0
for name, delay, period in (("sync", 0, 1), ("overlap", 1, 1), ("a2sgd", 0, 3)):
    sim = json.load(open(os.path.join(tmp, name + ".json")))["consensus_distance"]
    assert len(sim) == 12, (name, len(sim))
    for step, s in enumerate(sim, 1):
        rounds = (step - delay) // period
        want = ramp[rounds - 1] if rounds >= 1 else start
        worst = max(worst, abs(s / want - 1))
        print(f"{name:8} step {step:2d}: simulated {s:10.5g}  predicted {want:10.5g} (round {rounds:2d})  "
              f"ratio {s / want:.4f}")
print(f"largest difference {worst:.2%}")
sys.exit(0 if worst <= 0.05 else 1)
PY
