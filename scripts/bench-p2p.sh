#!/usr/bin/env bash
# Point-to-point benchmark (bench/p2p.cpp): ping-pong latency and streaming
# bandwidth between two processes on this machine, 8 B to 64 MiB, for
# libfabric tcp (tcp;ofi_rxm on 127.0.0.1), libfabric shm, zmq tcp (127.0.0.1)
# and zmq ipc, side by side. Within a round, every size runs each transport in
# turn (interleaved, so a change in machine load hits all alike); --rounds R
# repeats the whole sequence and each number reported is the median over the
# rounds. Prints one table (latency = half the median round trip, in us;
# bandwidth in GB/s = 1e9 bytes/s) with the ratios libfabric / zmq, and writes
# results/bench-p2p.json: one row per (transport, bytes) with latency_us,
# bandwidth_gbps (GB/s), rtt_us and the per-round values. See docs/libfabric.md.
#
#   scripts/bench-p2p.sh            # 13 sizes, 3 rounds, about 3 minutes
#   scripts/bench-p2p.sh --quick    # 8 B, 64 KiB, 4 MiB; 3 rounds; under a minute
# Options: --sizes 8,4096  --transports libfabric-shm,zmq-ipc  --rounds R
#          --budget SECONDS (timed repetitions per measurement, ~)  --json PATH
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

sizes=""
transports=""
rounds=3
budget="0.2"
json="results/bench-p2p.json"
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; sizes="8,65536,4194304"; budget="0.2" ;;
    --sizes) sizes="$2"; shift ;;
    --transports) transports="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --budget) budget="$2"; shift ;;
    --json) json="$2"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench-p2p: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

source scripts/deps.sh
GOSSAMER_PACKAGES+=(python3)
gossamer_install_deps
build="${GOSSAMER_BUILD_DIR:-$root/build}"
gossamer_build --target gossamer-bench-p2p
if [ -z "$transports" ]; then  # libfabric only when this build has it
  transports="zmq-tcp,zmq-ipc"
  if "$build/bench/p2p" --help 2>/dev/null | grep -q libfabric-shm; then
    transports="libfabric-tcp,libfabric-shm,$transports"
  fi
fi
python=/usr/bin/python3
[ -x "$python" ] || python=python3

tmp="$(mktemp -d /tmp/bench-p2p.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

size_args=()
[ -n "$sizes" ] && size_args=(--sizes "$sizes")
files=()
start=$(date +%s)
for ((round = 1; round <= rounds; ++round)); do
  echo "== round $round/$rounds: $transports"
  f="$tmp/round-$round.json"
  "$build/bench/p2p" --transports "$transports" "${size_args[@]}" --budget "$budget" --json "$f" --quiet
  files+=("$f")
done

mkdir -p "$(dirname "$json")"
"$python" - "$json" "$transports" "${files[@]}" <<'PY'
import json, statistics, sys

out, order, paths = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
rows = [r for p in paths for r in json.load(open(p))]

def size(b):
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return "%g %s" % (b / f, unit)
    return "%d B" % b

groups = {}
for r in rows:
    groups.setdefault((r["transport"], r["bytes"]), []).append(r)
result = []
for (t, b), g in groups.items():
    result.append({
        "transport": t, "bytes": b,
        "latency_us": statistics.median(r["latency_us"] for r in g),
        "bandwidth_gbps": statistics.median(r["bandwidth_gbps"] for r in g),
        "rtt_us": statistics.median(r["rtt_us"] for r in g),
        "rounds": len(g),
        "latency_us_by_round": [r["latency_us"] for r in g],
        "bandwidth_gbps_by_round": [r["bandwidth_gbps"] for r in g],
    })
result.sort(key=lambda r: (r["bytes"], order.index(r["transport"]) if r["transport"] in order else 99))
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")

at = {(r["transport"], r["bytes"]): r for r in result}
cols = [t for t in order if any(k[0] == t for k in at)]
pairs = [(a, b) for a, b in (("libfabric-tcp", "zmq-tcp"), ("libfabric-shm", "zmq-ipc")) if a in cols and b in cols]
print("\n== latency (us, one way = median round trip / 2) and bandwidth (GB/s), median of %d rounds"
      % max(r["rounds"] for r in result))
print("   ratios: zmq latency / libfabric latency, libfabric bandwidth / zmq bandwidth (above 1: libfabric better)")
w = max(len(c) for c in cols) + 6
head = "%-9s" % "size" + "".join("%*s" % (w, "lat " + c) for c in cols) + "".join("%*s" % (w, "bw " + c) for c in cols)
for a, b in pairs:
    head += "%12s%12s" % ("lat x " + a.split("-")[1], "bw x " + a.split("-")[1])
print(head)
for b in sorted({k[1] for k in at}):
    line = "%-9s" % size(b)
    line += "".join("%*s" % (w, "%.2f" % at[(c, b)]["latency_us"] if (c, b) in at else "-") for c in cols)
    line += "".join("%*s" % (w, "%.3f" % at[(c, b)]["bandwidth_gbps"] if (c, b) in at else "-") for c in cols)
    for x, y in pairs:
        rx, ry = at.get((x, b)), at.get((y, b))
        line += "%12s" % ("%.2fx" % (ry["latency_us"] / rx["latency_us"]) if rx and ry else "-")
        line += "%12s" % ("%.2fx" % (rx["bandwidth_gbps"] / ry["bandwidth_gbps"]) if rx and ry else "-")
    print(line)
print("\nwrote %s (%d rows)" % (out, len(result)))
PY
echo "== took $(( $(date +%s) - start )) s$([ "$quick" = 1 ] && echo " (--quick)")"
