#!/usr/bin/env bash
# Runs one libFuzzer target for a while on a copy of its seed corpus, or (0
# seconds) runs each input of the corpus once:
#   run_fuzzer.sh TARGET SECONDS WORKDIR SEEDDIR CRASHDIR
# New inputs go to WORKDIR (emptied first), never into SEEDDIR; a crash input
# is written to CRASHDIR. Exit status: the fuzzer's (0 when it ran clean).
set -euo pipefail
target="$1" seconds="$2" work="$3" seeds="$4" crashes="$5"
rm -rf "$work"
mkdir -p "$work" "$crashes"
if [ "$seconds" -eq 0 ]; then
  [ -n "$(ls -A "$seeds")" ] || { echo "no seed inputs in $seeds"; exit 1; }
  exec "$target" -runs=0 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" "$seeds"
fi
exec "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$crashes/" "$work" "$seeds"
