#!/usr/bin/env bash
# Allreduce benchmark: our algorithms (bench/allreduce.cpp) over our native
# socket transport and zmq, each over tcp and ipc, Open MPI's MPI_Allreduce (bench/mpi_allreduce.c) with its default
# transports (shared memory) and with --mca btl self,tcp, and torch.distributed's
# gloo backend (bench/gloo_allreduce.py, when /usr/bin/python3 has torch), as N
# processes on this machine, each with its default settings. Float32 sum; time
# per call = median over repetitions of the slowest rank, after warm-up; algbw
# and busbw as nccl-tests define them (GB/s).
# For each world size and each size the runs are interleaved (ours over every
# transport, MPI tcp, MPI shared memory); gloo runs once per round and world
# size, every size in one job, after them. So a change in machine load hits all
# alike; with --rounds R the whole sequence is repeated R times and each
# measurement reported is the one with the median time over the rounds.
# Prints, per world size, one block per implementation in the columns of
# nccl-tests and the OSU benchmarks (size, count, type, redop, time, algbw,
# busbw, #wrong: every run checks its sums, a wrong one fails it, so a row
# printed has 0) and the ratios against Open MPI and gloo; writes one JSON row
# per measurement (impl: gossamer, openmpi or gloo; algorithm, transport,
# world_size, bytes, count, seconds, algbw, busbw, wrong, rounds) to
# results/bench-allreduce.json. See docs/collectives.md, "Performance against
# Open MPI and gloo".
#
#   scripts/bench-allreduce.sh            # 2, 4, 8 processes; 4 B .. 256 MiB (x4); 3 rounds; ~25 min with libfabric, ~9 without
#   scripts/bench-allreduce.sh --quick    # 4 processes; 4 KiB, 1 MiB, 64 MiB; 3 rounds; socket and zmq
#                                         # transports only (unless --transports), no gloo (unless
#                                         # --gloo); under a minute; writes results/bench-allreduce-quick.json
#   scripts/bench-allreduce.sh --auto-check
#       every algorithm and auto, 2, 4, 8 processes, 4 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB, no MPI, 3 rounds
#       (~13 min on 2 cores): the cost model (calibrated once per launch and transport) predicts each time, and
#       auto's pick is checked against the fastest measured (PASS within 10%; algorithms that send
#       the same messages, gossamer::sameAllreduceSchedule, are one candidate timed by the median
#       of their pooled repetitions; also counted: auto's own median, its choice made inside every
#       call, against the fastest); writes results/bench-allreduce-auto.json unless --json says
#       otherwise, and exits with status 3 when a cell's pick is beyond 10% of the fastest.
# Options: --world-sizes 2,4,8  --sizes 4096,1048576  --algorithms ring[,recursive_doubling,auto,...]
#          --transports socket-tcp,socket-ipc,zmq-tcp,zmq-ipc[,libfabric-tcp,libfabric-shm]
#              (default: those four, and libfabric's two when the build has libfabric, except with --quick)
#          --rounds R  --budget SECONDS (timed calls per measurement, ~)  --reps MAX  --min-reps MIN  --no-mpi
#          --gloo / --no-gloo (default: gloo rows unless --quick or --auto-check)  --json PATH
#          --bind core|none: core (default) binds rank r to the (r mod C)-th of the C CPUs allowed, ours
#              (LaunchOptions::binding) and MPI's alike (--map-by core --bind-to core:overload-allowed,
#              unless GOSSAMER_MPIRUN_ARGS maps or binds); none lets the OS place them
# Environment: GOSSAMER_MPIRUN_ARGS (extra mpirun arguments).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

world_sizes="2,4,8"
sizes=""
algorithms="ring"
transports=""
budget="1.0"
reps="200"
min_reps="5"
min_reps_set=0
use_mpi=1
use_gloo=""
json="results/bench-allreduce.json"
quick=0
rounds=3
auto_check=0
json_set=0
budget_set=0
bind=core
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; world_sizes="4"; sizes="4096,1048576,67108864"; budget="0.3"; rounds=3
      [ "$json_set" = 1 ] || json="results/bench-allreduce-quick.json" ;;
    --rounds) rounds="$2"; shift ;;
    --world-sizes) world_sizes="$2"; shift ;;
    --sizes) sizes="$2"; shift ;;
    --algorithms|--algorithm) algorithms="$2"; shift ;;
    --transports) transports="$2"; shift ;;
    --budget) budget="$2"; budget_set=1; shift ;;
    --reps) reps="$2"; shift ;;
    --min-reps) min_reps="$2"; min_reps_set=1; shift ;;
    --no-mpi) use_mpi=0 ;;
    --gloo) use_gloo=1 ;;
    --no-gloo) use_gloo=0 ;;
    --json) json="$2"; json_set=1; shift ;;
    --auto-check) auto_check=1 ;;
    --bind)
      bind="${2:?--bind takes core or none}"; shift
      case "$bind" in core|none) ;; *) echo "bench-allreduce: --bind takes core or none, not '$bind'" >&2; exit 2 ;; esac ;;
    -h|--help) sed -n '2,/^[^#]/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bench-allreduce: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$auto_check" = 1 ]; then
  # Every algorithm and auto (later options may still narrow world sizes, sizes, rounds).
  algorithms="ring,recursive_doubling,rabenseifner,torus2d,hierarchical,tga2d,hips,auto"
  [ -n "$sizes" ] || sizes="4,4096,65536,1048576,16777216"
  [ "$quick" = 1 ] || [ "$budget_set" = 1 ] || budget="0.3"
  # Ranking algorithms whose times differ by a few % takes more than 5 calls
  # at 16 MiB and 8 processes (60 ms each) on a loaded 2-core machine.
  [ "$min_reps_set" = 1 ] || min_reps=12
  use_mpi=0
  use_gloo=0
  [ "$json_set" = 1 ] || json="results/bench-allreduce-auto.json"
fi
[ -n "$use_gloo" ] || { [ "$quick" = 1 ] && use_gloo=0 || use_gloo=1; }
if [ -z "$sizes" ]; then  # 4 B .. 256 MiB, powers of 4
  sizes=""
  for ((b = 4; b <= 268435456; b *= 4)); do sizes+="${sizes:+,}$b"; done
fi

source scripts/deps.sh
GOSSAMER_PACKAGES+=(python3)
[ "$use_mpi" = 0 ] || GOSSAMER_PACKAGES+=(openmpi-bin libopenmpi-dev)
gossamer_install_deps
build="${GOSSAMER_BUILD_DIR:-$root/build}"
gossamer_build --target gossamer-bench-allreduce
# libfabric tcp and shm next to zmq tcp and ipc, when the build has libfabric
# (not with --quick: they would take it from about 35 s to 95 s here).
if [ -z "$transports" ]; then
  transports="socket-tcp,socket-ipc,zmq-tcp,zmq-ipc"
  if [ "$quick" = 0 ] && "$build/bench/allreduce" --help 2>/dev/null | grep -q libfabric-shm; then
    transports+=",libfabric-tcp,libfabric-shm"
  fi
fi
if [ "$use_mpi" = 1 ]; then
  if command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1; then
    # build/ may have been configured before Open MPI was installed: configure
    # again so that find_package(MPI) sees it.
    if ! grep -qs 'gossamer-bench-mpi-allreduce' "$build/bench/Makefile" "$build/build.ninja"; then
      cmake -S "$root" -B "$build" >/dev/null
    fi
    gossamer_build --target gossamer-bench-mpi-allreduce
  else
    echo "bench-allreduce: Open MPI not found (openmpi-bin libopenmpi-dev): running ours only" >&2
    use_mpi=0
  fi
fi
python=/usr/bin/python3
[ -x "$python" ] || python=python3
if [ "$use_gloo" = 1 ] && ! "$python" -c 'import torch.distributed' 2>/dev/null; then
  echo "bench-allreduce: torch not importable by $python (python3-torch): gloo rows skipped" >&2
  use_gloo=0
fi

mpirun_args=(--oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && mpirun_args+=(--allow-run-as-root)
# shellcheck disable=SC2206
mpirun_args+=(${GOSSAMER_MPIRUN_ARGS:-})
# The same placement as ours: rank r on the (r mod C)-th core, or wherever the
# OS puts it; unless the user's own arguments already map or bind.
if [[ " ${GOSSAMER_MPIRUN_ARGS:-} " == *" --bind-to "* || " ${GOSSAMER_MPIRUN_ARGS:-} " == *" --map-by "* ]]; then
  :
elif [ "$bind" = core ]; then
  mpirun_args+=(--map-by core --bind-to core:overload-allowed)
else
  mpirun_args+=(--bind-to none)
fi
export GOSSAMER_BENCH_BIND="$bind"  # for report(): MPI's rows carry it too

tmp="$(mktemp -d /tmp/bench-allreduce.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

# report MODE ARGS...: progress line for one size (files), or the final tables
# and JSON ("final" OUT FILES...). Standard library only.
report() {
  "$python" - "$@" <<'PY'
import json, os, sys

def load(paths):
    out = []
    for p in paths:
        text = open(p).read()
        try:
            data = json.loads(text)
            out += data if isinstance(data, list) else [data]
        except ValueError:  # JSON lines (mpi_allreduce), maybe among other output
            out += [json.loads(l) for l in text.splitlines() if l.startswith("{")]
    for r in out:
        r.setdefault("binding", os.environ.get("GOSSAMER_BENCH_BIND", "none"))
    return out

def size(b):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return "%g %s" % (b / f, unit)
    return "%d B" % b

def dur(s):
    if s < 1e-3:
        return "%.1f us" % (s * 1e6)
    if s < 1:
        return "%.2f ms" % (s * 1e3)
    return "%.3f s" % s

def key(r):
    if r["impl"] == "openmpi":
        return "mpi/" + r["transport"]
    if r["impl"] == "gloo":
        return "gloo/" + r["transport"]
    return r["algorithm"] + "/" + r["transport"]

# Which MPI run each of ours is compared with: tcp with MPI's tcp BTL, ipc and
# shm (libfabric's shared memory) with MPI's default (shared memory).
PEER = {"tcp": "mpi/tcp", "ipc": "mpi/sm", "shm": "mpi/sm"}

def peer_of(k):
    return PEER.get(k.split("/")[1].split("-")[-1])

def order(k):
    a, t = k.split("/")
    return (a in ("mpi", "gloo"), a, {"tcp": 0, "ipc": 1, "sm": 1}.get(t.split("-")[-1], 2), t)

mode, args = sys.argv[1], sys.argv[2:]
if mode == "progress":
    rs = load(args)
    rs.sort(key=lambda r: order(key(r)))
    print("  n=%d %-8s " % (rs[0]["world_size"], size(rs[0]["bytes"]))
          + "  ".join("%s %s (%.3f GB/s)" % (key(r), dur(r["seconds"]), r["busbw"]) for r in rs), flush=True)
    sys.exit(0)

if mode == "autocheck":
    # auto check: per (world size, transport, size) the median over
    # rounds of every algorithm's time. Algorithms that send the same
    # messages (the auto rows' same_schedule, from sameAllreduceSchedule) are
    # one candidate, timed by the median of all their repetitions over all
    # rounds, pooled. Each round's pick: its candidate's time / the fastest
    # candidate's; the median of these ratios decides.
    import statistics
    from collections import Counter
    out, rs = args[0], load(args[1:])
    tol = 1.10
    cell = {}
    for r in rs:
        cell.setdefault((r["world_size"], r["transport"], r["bytes"]), {}).setdefault(r["algorithm"], []).append(r)
    algs = ["ring", "recursive_doubling", "rabenseifner", "torus2d", "hierarchical", "tga2d", "hips", "auto"]
    short = {"ring": "ring", "recursive_doubling": "rec_dbl", "rabenseifner": "rabens", "torus2d": "torus2d",
             "hierarchical": "hier", "tga2d": "tga2d", "hips": "hips", "auto": "auto"}
    rounds = max(len(v) for c in cell.values() for v in c.values())
    print("\n== auto check: median over %d round(s) of the time per call, measured/predicted by the" % rounds)
    print("   cost model calibrated at the start of each launch; pick = chooseAllreduce under that model;")
    print("   algorithms that send the same messages (sameAllreduceSchedule; a=b) are one candidate, timed by the")
    print("   median of their repetitions pooled over the rounds; ratio = the pick's candidate's time / the fastest")
    print("   candidate's (the median over the rounds' picks); PASS if <= %.2f" % tol)
    def pair(m, p):  # "measured/predicted unit", 3 significant digits
        for unit, f in (("ms", 1e-3), ("us", 1e-6)):
            if m >= f or unit == "us":
                return ("%.3g" % (m / f)) + ("/%.3g" % (p / f) if p is not None else "") + unit
    def label(names):
        return "=".join(short.get(a, a) for a in names)
    print("%2s %-10s %-8s" % ("n", "tr", "size") + "".join("%16s" % short[a] for a in algs)
          + "  %-22s %-22s %5s" % ("fastest", "pick", "ratio"))
    rows, npass, nall, old_pass, own_pass = [], 0, 0, 0, 0
    for (n, t, b) in sorted(cell):
        c = cell[(n, t, b)]
        # The median round (the lower middle one at an even count), so that a
        # row's seconds and its other fields (bandwidths, spread) are one round's.
        med = {a: statistics.median_low(r["seconds"] for r in c[a]) for a in c}
        pred = {a: statistics.median(r["predicted_seconds"] for r in c[a]) for a in c
                if all("predicted_seconds" in r for r in c[a])}
        samples = {a: [x for r in c[a] for x in r.get("samples_seconds", [r["seconds"]])] for a in c}
        for a in c:  # the round with the median time stands for the measurement
            g = sorted(c[a], key=lambda r: r["seconds"])
            m = dict(g[(len(g) - 1) // 2])
            m.pop("samples_seconds", None)
            m["rounds"] = len(g)
            m["round_seconds"] = [r["seconds"] for r in c[a]]  # each round's median, in round order
            m["seconds"] = med[a]
            if a in pred:
                m["predicted_seconds"] = pred[a]
            rows.append(m)
        line = "%2d %-10s %-8s" % (n, t, size(b)) + "".join(
            "%16s" % (pair(med[a], pred[a]) if a in pred else pair(med[a], None) if a in med else "-")
            for a in algs)
        others = [a for a in c if a != "auto"]
        if "auto" in c and others:
            groups = c["auto"][0].get("same_schedule", [[a] for a in others])
            groups = [[a for a in g if a in c] for g in groups]
            groups = [g for g in groups if g]
            cand = {tuple(g): statistics.median([x for a in g for x in samples[a]]) for g in groups}
            fastest = min(cand, key=cand.get)
            def pick_seconds(p):
                for g in cand:
                    if p in g:
                        return cand[g], g
                return statistics.median(samples["auto"]), ("auto",)
            picks = Counter(r.get("auto_pick", "?") for r in c["auto"])
            judged = sorted((pick_seconds(p)[0] / cand[fastest], p)
                            for r in c["auto"] for p in [r.get("auto_pick", "?")])
            ratio, pick = judged[len(judged) // 2]  # the upper median for an even count
            ok = ratio <= tol
            npass += ok
            nall += 1
            # The earlier rule, for comparison: the pick's own median against
            # the lowest median of any algorithm (identical schedules apart).
            meds = {a: med[a] for a in others}
            old = sorted(meds.get(r.get("auto_pick"), med["auto"]) / min(meds.values()) for r in c["auto"])
            old_ratio = old[len(old) // 2]
            old_pass += old_ratio <= tol
            # What a user of auto gets: auto's own time (its choice made
            # inside every call), pooled over the rounds like the candidates'.
            own_ratio = statistics.median(samples["auto"]) / cand[fastest]
            own_pass += own_ratio <= tol
            line += "  %-22s %-22s %5.2f %s (old rule %.2f, auto's own %.2f)" % (
                label(fastest), label(pick_seconds(pick)[1]), ratio, "PASS" if ok else "FAIL", old_ratio, own_ratio)
            if len(picks) > 1:
                line += " (picks: " + ", ".join("%s x%d" % (short.get(p, p), k) for p, k in picks.items()) + ")"
            rows[-len(c) + list(c).index("auto")]["auto_check"] = {
                "fastest": list(fastest), "fastest_seconds": cand[fastest], "pick": pick, "picks": dict(picks),
                "pick_candidate": list(pick_seconds(pick)[1]), "pick_seconds": pick_seconds(pick)[0],
                "candidates": [{"algorithms": list(g), "seconds": v} for g, v in cand.items()],
                "ratio": ratio, "tolerance": tol, "pass": ok, "old_rule_ratio": old_ratio,
                "auto_own_ratio": own_ratio}
        print(line)
    models = [(r["world_size"], r["transport"], r["cost_model"]) for r in rs if "cost_model" in r]
    seen = set()
    for n, t, m in models:
        if (n, t) in seen:
            continue
        seen.add((n, t))
        print("   model n=%d %-10s (one round): alpha %.1f us, beta %.3f ns/B, gamma %.3f ns/B, contention %.2f, "
              "calibrated in %.1f s" % (n, t, m["alpha_seconds"] * 1e6, m["beta_seconds_per_byte"] * 1e9,
                                        m["gamma_seconds_per_byte"] * 1e9, m["contention"],
                                        m["calibration_seconds"]))
    rows.sort(key=lambda r: (r["world_size"], r["transport"], r["bytes"], algs.index(r["algorithm"])
                             if r["algorithm"] in algs else 99))
    with open(out, "w") as f:
        json.dump(rows, f, indent=2)
        f.write("\n")
    print("auto check: %d of %d (world size, transport, size) within %d%% of the fastest" % (npass, nall, round((tol - 1) * 100)))
    print("   (old rule, each algorithm its own candidate, the pick's median / the lowest median: %d of %d)"
          % (old_pass, nall))
    print("   (auto's own pooled median, choice included / the fastest candidate's: %d of %d within %d%%)"
          % (own_pass, nall, round((tol - 1) * 100)))
    print("wrote %s (%d measurements)" % (out, len(rows)))
    if npass < nall:
        print("auto check: FAIL in %d cell(s): exit status 3" % (nall - npass))
        sys.exit(3)
    sys.exit(0)

out, rs = args[0], load(args[1:])
# Several rounds: keep, per measurement, the round with the median time.
groups = {}
for r in rs:
    groups.setdefault((r["impl"], r["algorithm"], r["transport"], r["world_size"], r["bytes"]), []).append(r)
rs = []
for g in groups.values():
    g.sort(key=lambda r: r["seconds"])
    m = dict(g[(len(g) - 1) // 2])
    m["rounds"] = len(g)
    rs.append(m)
for r in rs:
    r["count"] = r["bytes"] // 4  # float32 elements
    r["wrong"] = 0  # every implementation's run fails on a wrong sum
rs.sort(key=lambda r: (r["world_size"], r["bytes"], r["impl"] != "gossamer", r["algorithm"], r["transport"]))
with open(out, "w") as f:
    json.dump(rs, f, indent=2)
    f.write("\n")
for n in sorted({r["world_size"] for r in rs}):
    at = {(r["bytes"], key(r)): r for r in rs if r["world_size"] == n}
    cols = sorted({k for _, k in at}, key=order)
    print("\n== %d processes, float32 sum in place; time = median over repetitions of the slowest rank's, the"
          " median of %d round(s)" % (n, max(r["rounds"] for r in at.values())))
    for k in cols:
        print("\n-- %s\n%10s %12s %6s %6s %12s %12s %12s %7s" % (
            k, "size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"))
        for b in sorted(b for b, kk in at if kk == k):
            r = at[(b, k)]
            print("%10d %12d %6s %6s %12.1f %12.3f %12.3f %7d" % (
                b, r["count"], "float", "sum", r["seconds"] * 1e6, r["algbw"], r["busbw"], r["wrong"]))
    ours = [k for k in cols if not k.startswith(("mpi/", "gloo/"))]
    ratios = [(a, peer_of(a)) for a in ours if peer_of(a) in cols]
    ratios += [(a, "gloo/tcp") for a in ours if a.endswith("tcp") and "gloo/tcp" in cols]
    if not ratios:
        continue
    labels = [a + " vs " + b for a, b in ratios]
    print("\n-- ratios: their time / ours (1.00x: as fast, above: ours faster)")
    print("%-9s" % "size" + "".join("%*s" % (max(12, len(l) + 2), l) for l in labels))
    for b in sorted({b for b, _ in at}):
        line = "%-9s" % size(b)
        for l, (a, m) in zip(labels, ratios):
            ra, rm = at.get((b, a)), at.get((b, m))
            line += "%*s" % (max(12, len(l) + 2), "%.2fx" % (rm["seconds"] / ra["seconds"]) if ra and rm else "-")
        print(line)
print("\nwrote %s (%d measurements)" % (out, len(rs)))
PY
}

# measure ROUND N BYTES: ours (every protocol and algorithm), then MPI over
# tcp, then MPI over shared memory; one progress line.
measure() {
  local round=$1 n=$2 b=$3 f t step=()
  f="$tmp/ours-$round-$n-$b.json"
  # Default settings: auto without a calibrated cost model (its size thresholds).
  "$build/bench/allreduce" --world-size "$n" --sizes "$b" --transports "$transports" --algorithm "$algorithms" \
    --reps "$reps" --min-reps "$min_reps" --budget "$budget" --bind "$bind" --no-calibration --json "$f" --quiet
  step+=("$f")
  if [ "$use_mpi" = 1 ]; then
    for t in tcp sm; do
      f="$tmp/mpi-$round-$t-$n-$b.jsonl"
      local btl=()
      [ "$t" = tcp ] && btl=(--mca pml ob1 --mca btl "self,tcp")
      mpirun "${mpirun_args[@]}" "${btl[@]}" -np "$n" "$build/bench/mpi_allreduce" --sizes "$b" \
        --reps "$reps" --budget "$budget" --transport "$t" >"$f"
      if ! grep -q '^{' "$f"; then
        echo "bench-allreduce: mpi_allreduce ($t, $n processes, $b bytes) printed no result" >&2
        exit 1
      fi
      step+=("$f")
    done
  fi
  report progress "${step[@]}"
  files+=("${step[@]}")
}

IFS=, read -r -a ns <<<"$world_sizes"
IFS=, read -r -a byte_sizes <<<"$sizes"
files=()
start=$(date +%s)
if [ "$auto_check" = 1 ]; then
  # One launch per (round, world size) with every size: each launch calibrates
  # the cost model once per transport, then measures all algorithms.
  for ((round = 1; round <= rounds; ++round)); do
    for n in "${ns[@]}"; do
      f="$tmp/auto-$round-$n.json"
      echo "== round $round/$rounds, $n processes: $algorithms over $transports (ranks bound: $bind)"
      "$build/bench/allreduce" --world-size "$n" --sizes "$sizes" --transports "$transports" \
        --algorithm "$algorithms" --reps "$reps" --min-reps "$min_reps" --budget "$budget" --bind "$bind" --json "$f" --quiet
      files+=("$f")
    done
  done
  mkdir -p "$(dirname "$json")"
  status=0
  report autocheck "$json" "${files[@]}" || status=$?
  echo "== took $(( $(date +%s) - start )) s"
  exit "$status"
fi
for ((round = 1; round <= rounds; ++round)); do
  for n in "${ns[@]}"; do
    echo "== round $round/$rounds, $n processes: $algorithms over $transports$(
      [ "$use_mpi" = 1 ] && echo "; MPI_Allreduce over tcp and shared memory")$(
      [ "$use_gloo" = 1 ] && echo "; gloo"); ranks bound: $bind"
    for b in "${byte_sizes[@]}"; do
      measure "$round" "$n" "$b"
    done
    if [ "$use_gloo" = 1 ]; then
      f="$tmp/gloo-$round-$n.jsonl"
      "$python" bench/gloo_allreduce.py --world-size "$n" --sizes "$sizes" --reps "$reps" --min-reps "$min_reps" \
        --budget "$budget" --bind "$bind" >"$f"
      echo "  gloo, $n processes: $(grep -c '^{' "$f") sizes"
      files+=("$f")
    fi
  done
done
mkdir -p "$(dirname "$json")"
report final "$json" "${files[@]}"
echo "== took $(( $(date +%s) - start )) s$([ "$quick" = 1 ] && echo " (--quick)")"
