#!/usr/bin/env bash
# Writes tests/ctest-costs.txt, the seconds each ctest case took, from the
# cost data of a build whose suite has run (scripts/test.sh, or ctest in the
# build directory). scripts/test.sh gives it to a fresh build directory, so
# that ctest starts the longest cases first instead of last.
#   scripts/update-ctest-costs.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-${GOSSAMER_BUILD_DIR:-$root/build}}"
data="$build/Testing/Temporary/CTestCostData.txt"
[ -s "$data" ] || { echo "$data is missing or empty: run the suite in $build first" >&2; exit 2; }
# Each line is "<name> <runs> <mean seconds>"; the failed cases follow "---".
awk '/^---$/ { exit } { print }' "$data" > "$root/tests/ctest-costs.txt"
echo "tests/ctest-costs.txt: $(wc -l < "$root/tests/ctest-costs.txt") cases from $data"
