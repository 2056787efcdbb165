#!/usr/bin/env bash
# Suite smoke test of the test hosts: a 4-rank Crossover-SGD job on 4
# namespace hosts in two islands (tests/hosts/smoke.yaml), one epoch on 6,000
# images. Checks that every rank finished and learnt, that traffic crossed
# the islands (and the link statistics say so), that --initcwnd sets the
# hosts' routes, and that no namespace of the run is left. Exits 77 (skipped)
# where namespaces cannot be made.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$root/scripts/hosts.sh" --spec "$root/tests/hosts/smoke.yaml" --timeout 120 \
  --set training.epochs=1 --set data.train_limit=6000 --set data.test_limit=2000 \
  --summary-json "$out/summary.json" --link-stats "$out/links.json" >"$out/log" 2>&1
status=$?
cat "$out/log"
[ "$status" = 77 ] && exit 77
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
/usr/bin/python3 "$root/tests/hosts/hosts.py" run "$root/tests/hosts/smoke.yaml" --initcwnd 40 -- bash -c \
  'jq length <<<"$GOSSAMER_HOSTS"; for ns in $(jq -r ".[].namespace" <<<"$GOSSAMER_HOSTS"); do ip -n "$ns" route show; done' \
  >"$out/routes" 2>&1
hosts=$(head -1 "$out/routes")
routes=$(tail -n +2 "$out/routes" | grep -c .)
widened=$(grep -c "initcwnd 40 initrwnd 40" "$out/routes")
# Two routes per host: its island's subnet and its default route.
[ "$routes" = $((2 * hosts)) ] && [ "$widened" = "$routes" ] ||
  { cat "$out/routes"; echo "FAIL: --initcwnd 40 on $widened of $routes routes of $hosts hosts"; fail=1; }
/usr/bin/python3 "$root/tests/hosts/hosts.py" run "$root/tests/hosts/smoke.yaml" --initcwnd 0 -- true 2>"$out/refused"
[ $? = 2 ] && grep -q "initcwnd 0" "$out/refused" || { echo "FAIL: --initcwnd 0 was not refused"; fail=1; }
left=$(ip netns list | grep -c '^gsm' || true)
[ "$left" = 0 ] || { echo "FAIL: $left namespace(s) left behind"; fail=1; }
exit "$fail"
