#!/usr/bin/env bash
# gossamer-train's progress output: under a pseudo-terminal (script(1)) the
# progress rank draws a bar redrawn in place (\r, the bar's [#...] and
# steps/s, ETA); into a file it prints plain lines (no \r, no escape codes)
# and the final "done:" line, and the JSON summary is a file, not stdout.
# Usage: progress_output.sh GOSSAMER_TRAIN CONFIG
set -euo pipefail
train="$1"
config="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--config "$config" --set training.epochs=2 --set data.train_limit=12000 --set data.test_limit=500
        --progress-seconds 0.05)
# Each run takes a second or two; three of at most 90 s (and 5 s to end)
# fit in ctest's TIMEOUT of 300 s.
limit=90
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

# On a terminal. script -e returns the command's status; -f flushes as it goes.
printf -v cmd '%q ' "$train" "${common[@]}" --set "run.dir=$work/tty-run"
timeout -k 5 "$limit" script -qefc "$cmd" /dev/null >"$work/tty.out" 2>&1 </dev/null || {
  echo "gossamer-train under a pty failed:"; cat -v "$work/tty.out"; exit 1; }
check "grep -q \$'\\r' '$work/tty.out'" "no carriage return on a terminal"
check "grep -qE 'epoch [12]/2 \\[#*\\.*\\] [0-9]+/[0-9]+ steps' '$work/tty.out'" "no bar on a terminal"
check "grep -q 'steps/s' '$work/tty.out' && grep -q 'ETA ' '$work/tty.out'" "the bar lacks steps/s or ETA"
check "grep -q 'done: ' '$work/tty.out'" "no final line on a terminal"

# Into a file.
timeout -k 5 "$limit" "$train" "${common[@]}" --set "run.dir=$work/file-run" --summary-json "$work/summary.json" \
  >"$work/file.out" 2>"$work/file.err" || { echo "gossamer-train into a file failed:"; cat "$work/file.err"; exit 1; }
check "! grep -q \$'\\r' '$work/file.out'" "a carriage return in a file"
check "! grep -q \$'\\x1b' '$work/file.out'" "an escape code in a file"
check "grep -qE '^progress: step [0-9]+/[0-9]+ [(]epoch [12] of 2[)]  [0-9.]+ steps/s  loss [0-9.]+  ETA [0-9]+ s$' '$work/file.out'" \
  "no plain progress line in a file"
# Only the epoch results lines start with "epoch N/M" (what logs are searched for).
check "[ \"\$(grep -c '^epoch [12]/2' '$work/file.out')\" = 2 ]" "lines other than the results start with epoch N/M"
check "grep -qE '^epoch 2/2  loss ' '$work/file.out'" "no epoch line in a file"
check "tail -n 1 '$work/file.out' | grep -q '^done: .* summary: '" "the last line is not the final line"
check "! grep -q '^{' '$work/file.out'" "JSON on stdout"
check "jq -e '.epochs == 2 and (.history | length) == 2' '$work/summary.json' >/dev/null" "--summary-json"
check "cmp -s '$work/summary.json' '$work/file-run/summary.json'" "the run directory's summary.json differs"

# --progress off: no step progress, epoch lines and the final line stay.
timeout -k 5 "$limit" "$train" "${common[@]}" --set "run.dir=$work/off-run" --progress off >"$work/off.out" 2>&1 || {
  echo "gossamer-train --progress off failed:"; cat "$work/off.out"; exit 1; }
check "! grep -q ' steps/s ' '$work/off.out'" "step progress with --progress off"
check "grep -q '^epoch 2/2  loss ' '$work/off.out' && grep -q '^done: ' '$work/off.out'" "--progress off lost lines"

if [ "$fail" != 0 ]; then
  echo "--- terminal:"; cat -v "$work/tty.out" | head -c 3000; echo
  echo "--- file:"; cat "$work/file.out"
  exit 1
fi
echo "progress: a bar on a terminal, plain lines into a file, the summary in files"
