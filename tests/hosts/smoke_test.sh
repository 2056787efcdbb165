#!/usr/bin/env bash
# Suite smoke test of the test hosts: a 4-rank Crossover-SGD job on 4
# namespace hosts in two islands (tests/hosts/smoke.yaml), one epoch on 6,000
# images. Checks that every rank finished and learnt, that traffic crossed
# the islands (and the link statistics say so), that --initcwnd sets the
# hosts' routes, and that no namespace of the run is left. Exits 77 (skipped)
# where namespaces cannot be made. Every step is bounded (ctest's TIMEOUT is
# 180 s): hosts.py ends its COMMAND's process group and removes the
# namespaces on SIGTERM (timeout(1)) and on its own --timeout.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for tool in jq ip timeout; do
  command -v "$tool" >/dev/null || { echo "hosts: skipped: no $tool"; exit 77; }
done
# The bounds below add up to 175 s at most (the job itself takes seconds).
# The ranks are bounded by hosts.sh --timeout (75 s, then SIGKILL 10 s on);
# the outer timeout also covers making and removing the namespaces.
timeout -k 10 100 "$root/scripts/hosts.sh" --spec "$root/tests/hosts/smoke.yaml" --timeout 75 \
  --set training.epochs=1 --set data.train_limit=6000 --set data.test_limit=2000 \
  --summary-json "$out/summary.json" --link-stats "$out/links.json" >"$out/log" 2>&1
status=$?
cat "$out/log"
[ "$status" = 77 ] && exit 77
case "$status" in 124 | 137) echo "FAIL: scripts/hosts.sh still running after 100 s: killed"; exit 1 ;; esac
[ "$status" = 0 ] || { echo "FAIL: scripts/hosts.sh exited with $status"; exit 1; }
fail=0
check() { if ! jq -e "$1" "$out/summary.json" >/dev/null; then echo "FAIL: $2"; fail=1; fi; }
check '.world_size == 4 and (.survivors | length) == 4' "all 4 ranks survive"
check '.test_accuracy > 0.6' "the average model learns (test accuracy above 60%)"
check '.transport_stats.bytes_received > 1000000' "rank 0 received model segments"
links() { if ! jq -e "$1" "$out/links.json" >/dev/null; then echo "FAIL: link stats: $2"; fail=1; fi; }
links '.between_islands_bytes > 1000000 and .between_islands_bytes == (.into_island_bytes | add)' \
  "models crossed between the islands, counted per island"
links '(.island_link_drops | length) == 2 and (.host_link_drops | length) == 4' "drops by island and by host"
links '(.tcp_retransmitted_segments | length) == 4 and (.tcp_timeouts | length) == 4' "TCP counters by host"
links '[.island_link_drops[], .host_link_drops[], .tcp_retransmitted_segments[], .tcp_timeouts[]]
       | all(type == "number" and . >= 0)' "counters are counts"
grep -q "10.231.0.1 10.231.0.2 10.231.1.1 10.231.1.2" "$out/log" || { echo "FAIL: hosts not in two islands"; fail=1; }
# --initcwnd: every route of every host starts TCP's windows at that many segments; out of range is refused.
timeout -k 5 30 /usr/bin/python3 "$root/tests/hosts/hosts.py" run "$root/tests/hosts/smoke.yaml" --initcwnd 40 \
  --timeout 15 -- bash -c \
  'jq length <<<"$GOSSAMER_HOSTS"; for ns in $(jq -r ".[].namespace" <<<"$GOSSAMER_HOSTS"); do ip -n "$ns" route show; done' \
  >"$out/routes" 2>"$out/routes.err"
status=$?
hosts=$(head -1 "$out/routes")
routes=$(tail -n +2 "$out/routes" | grep -c .)
widened=$(grep -c "initcwnd 40 initrwnd 40" "$out/routes")
# Two routes per host: its island's subnet and its default route.
[ "$status" = 0 ] && [ -n "$hosts" ] && [ "$routes" = $((2 * hosts)) ] && [ "$widened" = "$routes" ] ||
  { cat "$out/routes" "$out/routes.err"; echo "FAIL: --initcwnd 40 (exit $status) on $widened of $routes routes of $hosts hosts"; fail=1; }
timeout -k 5 15 /usr/bin/python3 "$root/tests/hosts/hosts.py" run "$root/tests/hosts/smoke.yaml" --initcwnd 0 -- true \
  2>"$out/refused"
[ $? = 2 ] && grep -q "initcwnd 0" "$out/refused" || { echo "FAIL: --initcwnd 0 was not refused"; fail=1; }
# Only this test's namespaces: each hosts.py run names its own prefix
# (gsm<pid>-), so a concurrent run (another clone's) is neither counted nor touched.
mapfile -t prefixes < <(cat "$out/log" "$out/routes.err" | sed -n 's/^hosts: namespaces \(gsm[0-9]*-\)\*$/\1/p' | sort -u)
[ "${#prefixes[@]}" = 2 ] || { echo "FAIL: expected the namespace prefixes of 2 runs, got: ${prefixes[*]:-none}"; fail=1; }
left=0
while read -r ns _; do
  for p in "${prefixes[@]}"; do [[ "$ns" == "$p"* ]] && left=$((left + 1)); done
done < <(timeout 10 ip netns list)
[ "$left" = 0 ] || { echo "FAIL: $left namespace(s) of this test (${prefixes[*]}) left behind"; fail=1; }
exit "$fail"
