#!/usr/bin/env bash
# Runs scripts/repeat-tests.sh over every test case of the multi-process suite
# whose name starts with "with membership on" (the kill -9, SIGSTOP, partition
# and rejoin cases of the membership service), listed by the suite itself.
# Other options go to repeat-tests.sh; the JSON goes to
# results/repeat-tests-membership.json unless --out says otherwise.
#
#   scripts/repeat-membership-tests.sh --runs 20 --load
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exe="${GOSSAMER_BUILD_DIR:-$root/build}/tests/gossamer_multiproc_tests"
[ -x "$exe" ] || { echo "$exe is not built" >&2; exit 2; }
cases=()
while IFS= read -r name; do
  cases+=(--case "$name")
done < <("$exe" --list-test-names-only | grep '^with membership on')
[ ${#cases[@]} -gt 0 ] || { echo "no test case of $exe starts with \"with membership on\"" >&2; exit 2; }
exec "$root/scripts/repeat-tests.sh" --out "$root/results/repeat-tests-membership.json" "$@" "${cases[@]}"
