#!/usr/bin/env bash
# Runs test cases of the multi-process suite many times, optionally with the
# machine loaded, and counts how often each passes: the check that the
# kill -9 tests hold up under load (docs/operations.md, "When a peer dies").
#
#   scripts/repeat-tests.sh --runs 20 --load \
#     --case 'without the membership service, killing one peer makes the others exit with a clear error: crossover_sgd' \
#     --case 'with membership on, the survivors of a kill -9 go on and report the lost rank: crossover_sgd, zmq'
#
# Options: --runs N (20)  --case NAME (repeatable; a Catch2 test name, commas
#          escaped for you)  --load (one busy process per core for the whole
#          run, niced to 0 like the tests)  --out FILE (results/repeat-tests.json)
# One line per run and case (pass/fail, seconds), then totals; the JSON has
# the same rows. A failed run's output is kept in
# results/repeat-tests/run<R>-case<C>.log (C counts the --case options from 1).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GOSSAMER_BUILD_DIR:-$root/build}"
exe="$build/tests/gossamer_multiproc_tests"
runs=20
load=0
out="$root/results/repeat-tests.json"
cases=()
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --case) cases+=("$2"); shift ;;
    --load) load=1 ;;
    --out) out="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ ${#cases[@]} -gt 0 ] || { echo "give at least one --case" >&2; exit 2; }
[ -x "$exe" ] || { echo "$exe is not built" >&2; exit 2; }
mkdir -p "$root/results/repeat-tests"

busy=()
stop_load() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done; busy=(); }
trap stop_load EXIT
if [ "$load" = 1 ]; then
  for _ in $(seq "$(nproc)"); do
    ( while :; do :; done ) &
    busy+=($!)
  done
fi

rows=()
declare -A passed
for r in $(seq "$runs"); do
  for i in "${!cases[@]}"; do
    c="${cases[$i]}"
    start=$(date +%s.%N)
    log="$root/results/repeat-tests/run$r-case$((i + 1)).log"
    # Catch2 reads ',' in a test name as a separator: escape it.
    if timeout 900 "$exe" "${c//,/\\,}" >"$log" 2>&1; then ok=true; else ok=false; fi
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    printf '%3d  %-5s %7.1f s  %s\n' "$r" "$ok" "$secs" "$c"
    [ "$ok" = true ] && rm -f "$log" && passed[$c]=$(( ${passed[$c]:-0} + 1 ))
    rows+=("{\"run\": $r, \"case\": $(printf '%s' "$c" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'), \"passed\": $ok, \"seconds\": $secs}")
  done
done
stop_load
echo
for c in "${cases[@]}"; do printf '%2d of %d passed  %s\n' "${passed[$c]:-0}" "$runs" "$c"; done
{
  printf '{"command": %s, "date": "%s", "load": %s, "runs": %d, "rows": [\n' \
    "$(printf '%s ' "scripts/repeat-tests.sh" "${args[@]}" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')" \
    "$(date '+%Y-%m-%d %H:%M:%S')" "$([ "$load" = 1 ] && echo true || echo false)" "$runs"
  for i in "${!rows[@]}"; do
    printf '  %s%s\n' "${rows[$i]}" "$([ "$i" -lt $(( ${#rows[@]} - 1 )) ] && echo ,)"
  done
  echo ']}'
} >"$out"
echo "wrote $out"
