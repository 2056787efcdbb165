#!/usr/bin/env bash
# gossamer-config --check rejects settings that no rank could run with,
# naming the file, the line and the key (each once passed the check and
# failed on every rank after the job started, with an internal check's text).
#   config_rules.sh GOSSAMER_CONFIG
set -euo pipefail
tool="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
failures=0
n=0
# the expected line and key | the YAML, lines separated by ';'
while IFS='|' read -r line key yaml; do
  n=$((n + 1))
  file="$dir/case$n.yaml"
  tr ';' '\n' <<<"$yaml" >"$file"
  if out="$("$tool" --check "$file" 2>&1)"; then
    echo "FAIL: accepted: $yaml"
    failures=$((failures + 1))
  elif ! grep -qF "$file:$line: key '$key'" <<<"$out" || grep -q "check failed" <<<"$out"; then
    echo "FAIL: expected '$file:$line: key '$key'' (and no internal check) in: $out"
    failures=$((failures + 1))
  else
    echo "ok: $out"
  fi
done <<'CASES'
2|security.secret_key|world_size: 2;security:;  enabled: true
3|transport.kind|world_size: 2;transport:;  kind: socket;  timeout_seconds: 10;security: {enabled: true, secret_key: k, public_keys: p}
6|algorithm.async_wait_seconds|world_size: 2;transport: {kind: inproc, timeout_seconds: 10};algorithm:;  name: sgp;  mode: async;  async_wait_seconds: 3600
4|algorithm.mode|world_size: 2;algorithm:;  name: crossover_sgd;  mode: async;checkpoint: {every_steps: 1, dir: ck}
4|faults.partition|world_size: 2;faults:;  enabled: true;  partition: "0|5"
3|membership.suspect_seconds|membership:;  heartbeat_seconds: 5;  suspect_seconds: 1
3|membership.partition|membership:;  rejoin: false;  partition: majority
3|membership.suspect_seconds|membership:;  partition: majority;  suspect_seconds: 20
4|transport.local|world_size: 2;transport:;  kind: composite;  local: foo
4|transport.local|world_size: 2;transport:;  kind: composite;  local: inproc
4|transport.local_scope|world_size: 2;transport:;  kind: composite;  local_scope: island
3|training.straggler_delay_seconds|world_size: 2;training:;  straggler_delay_seconds: 1.0e300
5|algorithm.noloco_gamma|world_size: 2;algorithm:;  name: diloco;  outer: noloco;  noloco_gamma: 2.5;  outer_momentum: 0
CASES
[ "$failures" -eq 0 ]
