#!/usr/bin/env bash
# gossamer-sim's Crossover-SGD run (fair roulette, 4 segments, 64 ranks, rank
# r starting at r) and gossamer-topology's prediction for that start
# (--from-ramp: the topology's mixing matrices applied to the run's sampled
# elements) agree on the consensus distance after every one of 12 steps,
# within 5%.
#   sim_follows_mixing.sh GOSSAMER_SIM GOSSAMER_TOPOLOGY SOURCE_DIR
set -euo pipefail
sim="$1" topology="$2" src="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$sim" "$src/examples/configs/quickstart-crossover.yaml" --world-size 64 --steps 12 --step-seconds 0.05 \
  --set run.metrics=false --json "$tmp/sim.json" >/dev/null
"$topology" --world-size 64 --steps 12 --segments 4 --seed 42 --topology fair_roulette --from-ramp >"$tmp/ramp.txt"
/usr/bin/python3 - "$tmp/sim.json" "$tmp/ramp.txt" <<'PY'
import json
import sys
sim = json.load(open(sys.argv[1]))["consensus_distance"]
ramp = [float(f[2]) for f in (l.split() for l in open(sys.argv[2])) if len(f) == 3 and f[1].isdigit()]
assert len(sim) == len(ramp) == 12, (len(sim), len(ramp))
worst = max(abs(s / r - 1) for s, r in zip(sim, ramp))
for k, (s, r) in enumerate(zip(sim, ramp), 1):
    print(f"step {k:2d}: simulated {s:10.5g}  predicted {r:10.5g}  ratio {s / r:.4f}")
print(f"largest difference {worst:.2%}")
sys.exit(0 if worst <= 0.05 else 1)
PY
