#!/usr/bin/env bash
# Runs a gossamer-train job across test hosts: network namespaces on this
# machine, grouped in islands whose links are shaped with tc tbf
# (tests/hosts/hosts.py). The spec is a job config: its world_size is the
# number of hosts and its network: section their islands (network.islands,
# one rank per host), the rates inside and between islands (inside_gbps,
# between_gbps) and the delay between them (between_delay_ms); its other
# sections are ignored (--config gives the job). One rank per host, or
# --ranks-per-host K (ranks h*K .. h*K+K-1 on host h); rank 0's host serves
# the TCP rendezvous; every rank binds its transport to its host's
# address (transport.host: auto: the address facing the rendezvous). The
# job's network: section is the spec's (each host's rank standing for its K
# ranks), and when the spec has a delay between islands the fault injector
# adds it (faults.island_delay: tc cannot without netem). --set after that
# overrides. The namespaces are removed when the job ends, fails or is
# interrupted. Needs root; exits 77 (skipped) where namespaces cannot be made.
#
#   scripts/hosts.sh                          # quickstart (Crossover-SGD) on two islands of 4
#   scripts/hosts.sh --spec tests/hosts/smoke.yaml --set training.epochs=1
# Options: --spec FILE (default tests/hosts/two-islands.yaml)
#          --config FILE (default examples/configs/quickstart-crossover.yaml)
#          --set KEY=VALUE (repeatable, passed to every rank)
#          --summary-json FILE (rank 0's summary; default results/hosts.json)
#          --timeout SECONDS (bound on the whole job; default 900)
#          --link-stats FILE (what the links saw, JSON: bytes between islands, tbf drops, TCP retransmissions)
#          --ranks-per-host K (default 1)
#          --queue-ms MS (each tbf's queue, milliseconds at its rate; default 100)
#          --initcwnd N (TCP connections start with a window of N segments; default the kernel's, 10)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${GOSSAMER_BUILD_DIR:-$root/build}"

spec="tests/hosts/two-islands.yaml"
config="examples/configs/quickstart-crossover.yaml"
summary="results/hosts.json"
limit=900
linkstats=()
sets=()
inside=0
per=1
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) spec="$2"; shift ;;
    --config) config="$2"; shift ;;
    --set) sets+=(--set "$2"); shift ;;
    --summary-json) summary="$2"; shift ;;
    --timeout) limit="$2"; shift ;;
    --link-stats) linkstats+=(--stats "$2"); shift ;;
    --queue-ms) linkstats+=(--queue-ms "$2"); shift ;;
    --initcwnd) linkstats+=(--initcwnd "$2"); shift ;;
    --ranks-per-host) per="$2"; shift ;;
    --inside) inside=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;p}' "$0"; exit 0 ;;
    *) echo "hosts: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if ! [[ "$per" =~ ^[1-9][0-9]*$ ]]; then
  echo "hosts: --ranks-per-host must be a positive integer, got '$per'" >&2
  exit 2
fi
if [ "$inside" = 0 ]; then
  if [ ! -x "$build/apps/gossamer-train" ]; then
    echo "hosts: $build/apps/gossamer-train is not built (cmake --build build)" >&2
    exit 2
  fi
  mkdir -p "$(dirname "$summary")"
  exec /usr/bin/python3 tests/hosts/hosts.py run --timeout "$((limit + 60))" "$spec" "${linkstats[@]}" -- \
    "$0" --inside --spec "$spec" --config "$config" --summary-json "$summary" --timeout "$limit" \
    --ranks-per-host "$per" "${sets[@]}"
fi

# Inside hosts.py run: GOSSAMER_HOSTS lists the hosts.
hosts=$(jq length <<<"$GOSSAMER_HOSTS")
n=$((hosts * per))
first=$(jq -r '.[0].address' <<<"$GOSSAMER_HOSTS")
port=$((29400 + $$ % 500))
echo "== $n ranks on $hosts hosts ($(jq -r '[.[] | .address] | join(" ")' <<<"$GOSSAMER_HOSTS")), rendezvous tcp://$first:$port"
# The spec's islands list one rank per host (host h = spec rank h): each
# host stands for its K ranks. Empty islands (one island) stay empty.
net=$(jq -c --argjson k "$per" '.islands |= [.[] | [.[] as $h | range($h * $k; $h * $k + $k)]]' \
  <<<"$GOSSAMER_HOSTS_NETWORK")
netsets=(--set "network.islands=$(jq -c .islands <<<"$net")"
         --set "network.inside_gbps=$(jq .inside_gbps <<<"$net")"
         --set "network.between_gbps=$(jq .between_gbps <<<"$net")"
         --set "network.between_delay_ms=$(jq .between_delay_ms <<<"$net")")
if [ "$(jq '.between_delay_ms > 0' <<<"$net")" = true ]; then
  netsets+=(--set faults.enabled=true --set faults.island_delay=true)
fi
echo "== network: $(jq -c . <<<"$net")"
logs=$(mktemp -d)
pids=()
for ((r = 0; r < n; ++r)); do
  ns=$(jq -r ".[$((r / per))].namespace" <<<"$GOSSAMER_HOSTS")
  extra=()
  [ "$r" = 0 ] && extra=(--summary-json "$summary")
  timeout --foreground --kill-after=10 "$limit" ip netns exec "$ns" "$build/apps/gossamer-train" --config "$config" \
    --rank "$r" --rendezvous "tcp://$first:$port" --set "world_size=$n" --set transport.host=auto \
    "${netsets[@]}" "${sets[@]}" "${extra[@]}" >"$logs/out$r" 2>"$logs/err$r" &
  pids+=($!)
done
status=0
for ((r = 0; r < n; ++r)); do
  if ! wait "${pids[$r]}"; then
    echo "hosts: rank $r failed; its stderr:" >&2
    tail -n 20 "$logs/err$r" >&2
    status=1
  fi
done
cat "$logs/out0"
rm -rf "$logs"
[ "$status" = 0 ] && echo "== rank 0's summary: $summary"
exit "$status"
