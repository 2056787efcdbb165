#!/usr/bin/env bash
# gossamer-admm briefly: 4 processes on the SpamAssassin data (scripts/spam-data.sh;
# skipped with 77 when it has not been made) until f_rerr <= 1e-3, then checks
# the summary: converged, a curve ending at or below 1e-3, and test accuracy
# within 0.5 point of the central model's.
#   run_admm.sh GOSSAMER_ADMM SOURCE_DIR
set -euo pipefail
exe="$1"
src="$2"
# shellcheck source=support/spam_data.sh
source "$(dirname "${BASH_SOURCE[0]}")/support/spam_data.sh" "$src"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# What the ranks leave in TMPDIR when killed (ZeroMQ's ipc:// directories)
# goes with the test's own directory.
export TMPDIR="$work"
# Bounded within ctest's TIMEOUT (300 s): timeout(1) signals the run's
# process group (the program and the rank processes it starts), SIGKILL 10 s later.
timeout -k 10 240 "$exe" --config "$src/examples/configs/sparse/admm-spam.yaml" --summary-json "$work/summary.json" \
  --set world_size=4 --set admm.max_iterations=60 --set collectives.allreduce=tga2d \
  --set "admm.train=$data/spam-train.libsvm" --set "admm.test=$data/spam-test.libsvm" || {
  status=$?
  echo "gossamer-admm exited with $status$([ $status = 124 ] && echo ' (still running after 240 s)')"
  exit 1
}
/usr/bin/python3 - "$work/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["world_size"] == 4 and s["allreduce_algorithm"] == "tga2d", s
assert s["converged"] and s["iterations_to_1e-3"] == s["iterations"] == len(s["curve"]), s
assert s["curve"][-1]["f_rerr"] <= 1e-3 < s["curve"][0]["f_rerr"], s["curve"]
assert abs(s["test_accuracy"] - s["central_test_accuracy"]) <= 0.005, s
assert s["update_seconds_per_iteration"] > 0 and s["sync_wait_seconds_per_iteration"] > 0, s
print("gossamer-admm: converged in %d iterations, test accuracy %.2f%% (central %.2f%%)"
      % (s["iterations"], 100 * s["test_accuracy"], 100 * s["central_test_accuracy"]))
PY
