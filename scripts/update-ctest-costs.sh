#!/usr/bin/env bash
# Writes tests/schedule/costs.txt, the seconds each ctest case took, from the
# cost data of a build whose suite has run (scripts/test.sh, or ctest in the
# build directory), so that ctest starts the longest cases first in any build
# directory (tests/schedule/CMakeLists.txt).
#   scripts/update-ctest-costs.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-${GOSSAMER_BUILD_DIR:-$root/build}}"
data="$build/Testing/Temporary/CTestCostData.txt"
[ -s "$data" ] || { echo "$data is missing or empty: run the suite in $build first" >&2; exit 2; }
# Each line is "<name> <runs> <mean seconds>"; the failed cases follow "---".
# Cases ctest could not match (names with spaces: "<first word> 0 <n>") are left out.
awk '/^---$/ { exit } $(NF-1) > 0 { print }' "$data" > "$root/tests/schedule/costs.txt"
echo "tests/schedule/costs.txt: $(wc -l < "$root/tests/schedule/costs.txt") cases from $data"
